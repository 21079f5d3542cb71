//! The history of one run as operations with their invoke and complete times, the leases the
//! workers held and the faults the nemesis injected, all on one clock; and its export as JSON
//! lines for other checkers.
//!
//! Times are nanoseconds since the run's origin (taken before its workers start) on the
//! machine's monotonic clock. A worker stamps an operation's invoke before its call and its
//! completion after the answer, so the interval encloses the call's effect on the storage. An
//! operation without an answer (time-out, cut connection, a worker stopped before it could
//! report) has no completion: its effect, if any, may land at any time after its invoke.
//!
//! One JSON object per line, per operation, in invoke order:
//!
//! ```text
//! {"run":"fenced","key":"chaos/…/counter","process":3,"f":"write","token":41,
//!  "owner":"…32 hex…","value":17,"outcome":"ok","current_token":null,"current_owner":null,
//!  "invoke_ns":1203000,"complete_ns":1420000}
//! ```
//!
//! `f` is `read` (fenced read), `write` (fenced write) or `peek` (unfenced read, no fence);
//! `process` is the worker's index, or `"final"` for the coordinator's read of the counter
//! after the run; `value` is the value written, or the value a read returned (`null`: no value
//! yet); `outcome` is `ok`, `stale` (refused: the storage was at `current_*`) or `unknown`
//! (`complete_ns` is then `null`). [`read_jsonl`] reads such lines back, for
//! [`linearizability::check`](crate::linearizability::check) or any other use.

use std::io::{self, Write};

use fencelock::{Fence, FencingToken, OwnerId};
use serde_json::{Value, json};

use crate::config::{FaultKind, Mode};
use crate::error::{ChaosError, Result};
use crate::events::{Event, Outcome, Stamped};

/// What an operation did to the storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// A fenced read: admitted, it advances the storage's fence.
    Read,
    /// A fenced write.
    Write,
    /// An unfenced read (`peek`): changes nothing.
    Peek,
}

impl OpKind {
    /// `read`, `write` or `peek`.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Read => "read",
            OpKind::Write => "write",
            OpKind::Peek => "peek",
        }
    }
}

/// How an operation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpOutcome {
    /// Admitted (a peek is always admitted).
    Ok,
    /// Refused as stale: the storage said it was at `current`.
    Stale {
        /// The fence the storage reported as its newest.
        current: Fence,
    },
    /// No answer: it may or may not have taken effect.
    Unknown,
}

impl OpOutcome {
    /// `ok`, `stale` or `unknown`.
    pub fn name(self) -> &'static str {
        match self {
            OpOutcome::Ok => "ok",
            OpOutcome::Stale { .. } => "stale",
            OpOutcome::Unknown => "unknown",
        }
    }
}

/// One storage operation.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Operation {
    /// The worker that made it; `None` for the coordinator's final read.
    pub process: Option<usize>,
    /// The resource.
    pub key: String,
    /// Read, write or peek.
    pub kind: OpKind,
    /// The fence it carried (`None` for a peek).
    pub fence: Option<Fence>,
    /// A write's value; the value an admitted read or peek returned (`None`: no value yet).
    pub value: Option<u64>,
    /// How it ended.
    pub outcome: OpOutcome,
    /// When it was invoked, in nanoseconds since the run's origin.
    pub invoke_ns: u64,
    /// When its answer came; `None` when none did.
    pub complete_ns: Option<u64>,
}

impl Operation {
    /// How long the call took; `None` without an answer.
    pub fn latency_ns(&self) -> Option<u64> {
        self.complete_ns.map(|c| c.saturating_sub(self.invoke_ns))
    }
}

/// A lease a worker held: from its grant to its release (or the end of the run).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct LeaseSpan {
    /// The worker.
    pub worker: usize,
    /// The grant's fence.
    pub fence: Fence,
    /// When the grant was reported.
    pub start_ns: u64,
    /// When the release was reported; `None` if the run ended first.
    pub end_ns: Option<u64>,
}

/// A fault the nemesis injected, from start to heal.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FaultSpan {
    /// The kind.
    pub kind: FaultKind,
    /// The worker stopped, for a pause; `None` for faults on the servers.
    pub worker: Option<usize>,
    /// What was done, in a few words.
    pub label: String,
    /// When it started.
    pub start_ns: u64,
    /// When it was healed.
    pub end_ns: u64,
}

/// Everything one run did, on one time line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunHistory {
    /// Worker processes.
    pub workers: usize,
    /// When the faults started (the workers were all connected).
    pub faults_from_ns: u64,
    /// When the run ended (the final read answered).
    pub end_ns: u64,
    /// Storage operations, in invoke order.
    pub operations: Vec<Operation>,
    /// Leases held, in grant order.
    pub leases: Vec<LeaseSpan>,
    /// Faults injected, in start order.
    pub faults: Vec<FaultSpan>,
}

impl RunHistory {
    /// Writes the operations as JSON lines (see the module docs), `run` naming the run.
    pub fn write_jsonl(&self, mode: Mode, out: &mut dyn Write) -> io::Result<()> {
        for op in &self.operations {
            let current = match op.outcome {
                OpOutcome::Stale { current } => Some(current),
                OpOutcome::Ok | OpOutcome::Unknown => None,
            };
            let line = json!({
                "run": mode.name(),
                "key": op.key,
                "process": match op.process {
                    Some(worker) => json!(worker),
                    None => json!("final"),
                },
                "f": op.kind.name(),
                "token": op.fence.map(|f| f.token.get()),
                "owner": op.fence.map(|f| f.owner.to_string()),
                "value": op.value,
                "outcome": op.outcome.name(),
                "current_token": current.map(|f| f.token.get()),
                "current_owner": current.map(|f| f.owner.to_string()),
                "invoke_ns": op.invoke_ns,
                "complete_ns": op.complete_ns,
            });
            writeln!(out, "{line}")?;
        }
        Ok(())
    }
}

/// Reads operations back from JSON lines in the format [`RunHistory::write_jsonl`] writes
/// (the `run` field is not needed: keys tell runs apart). The error names the line.
pub fn read_jsonl(text: &str) -> Result<Vec<Operation>> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(i, line)| {
            serde_json::from_str::<Value>(line)
                .map_err(|e| e.to_string())
                .and_then(|v| operation(&v))
                .map_err(|e| ChaosError::config(format!("history line {}: {e}", i + 1)))
        })
        .collect()
}

fn fence_of(v: &Value, token: &str, owner: &str) -> std::result::Result<Option<Fence>, String> {
    match (&v[token], &v[owner]) {
        (Value::Null, Value::Null) => Ok(None),
        (t, o) => {
            let token = t
                .as_u64()
                .and_then(FencingToken::new)
                .ok_or_else(|| format!("{token} is not a token: {t}"))?;
            let owner: OwnerId = o
                .as_str()
                .and_then(|o| o.parse().ok())
                .ok_or_else(|| format!("{owner} is not an owner: {o}"))?;
            Ok(Some(Fence::new(token, owner)))
        }
    }
}

fn operation(v: &Value) -> std::result::Result<Operation, String> {
    let number = |field: &str| {
        v[field]
            .as_u64()
            .ok_or_else(|| format!("{field} is not a number: {}", v[field]))
    };
    let kind = match v["f"].as_str() {
        Some("read") => OpKind::Read,
        Some("write") => OpKind::Write,
        Some("peek") => OpKind::Peek,
        _ => return Err(format!("f is not read, write or peek: {}", v["f"])),
    };
    let outcome = match v["outcome"].as_str() {
        Some("ok") => OpOutcome::Ok,
        Some("unknown") => OpOutcome::Unknown,
        Some("stale") => OpOutcome::Stale {
            current: fence_of(v, "current_token", "current_owner")?
                .ok_or("a stale operation without current_token")?,
        },
        _ => {
            return Err(format!(
                "outcome is not ok, stale or unknown: {}",
                v["outcome"]
            ));
        }
    };
    let process = match &v["process"] {
        Value::String(s) if s == "final" => None,
        p => Some(
            p.as_u64()
                .and_then(|p| usize::try_from(p).ok())
                .ok_or_else(|| format!("process is not a worker or \"final\": {p}"))?,
        ),
    };
    let value = match &v["value"] {
        Value::Null => None,
        _ => Some(number("value")?),
    };
    let complete_ns = match &v["complete_ns"] {
        Value::Null => None,
        _ => Some(number("complete_ns")?),
    };
    Ok(Operation {
        process,
        key: v["key"].as_str().ok_or("key is not a string")?.to_owned(),
        kind,
        fence: fence_of(v, "token", "owner")?,
        value,
        outcome,
        invoke_ns: number("invoke_ns")?,
        complete_ns,
    })
}

/// An operation invoked and not answered yet.
#[derive(Debug, Clone)]
struct Pending {
    /// The index of its resource.
    key: usize,
    kind: OpKind,
    fence: Option<Fence>,
    value: Option<u64>,
    invoke_ns: u64,
}

/// The coordinator's read of counter `.0` after a run: the value, and when it was invoked and
/// answered (monotonic nanoseconds).
pub(crate) type FinalRead = (usize, Option<u64>, u64, u64);

/// Builds a [`RunHistory`] from the workers' stamped events as they arrive.
#[derive(Debug)]
pub(crate) struct Recorder {
    origin: u64,
    /// The resources, by the index a grant names.
    keys: Vec<String>,
    /// The resource of each worker's current grant.
    current: Vec<usize>,
    pending: Vec<Option<Pending>>,
    open_leases: Vec<Option<(Fence, u64)>>,
    history: RunHistory,
}

impl Recorder {
    /// A recorder for `workers` workers operating on `keys` (each grant names the one its
    /// operations are on), with times counted from `origin` (monotonic nanoseconds).
    pub(crate) fn new(origin: u64, keys: Vec<String>, workers: usize) -> Self {
        Recorder {
            origin,
            keys,
            current: vec![0; workers],
            pending: vec![None; workers],
            open_leases: vec![None; workers],
            history: RunHistory {
                workers,
                ..RunHistory::default()
            },
        }
    }

    /// `at` (monotonic nanoseconds) since the origin.
    pub(crate) fn since_origin(&self, at: u64) -> u64 {
        at.saturating_sub(self.origin)
    }

    /// Records one event of worker `worker`.
    pub(crate) fn record(&mut self, worker: usize, stamped: &Stamped) {
        if worker >= self.pending.len() {
            return;
        }
        let at = self.since_origin(stamped.at);
        match &stamped.event {
            Event::ReadBegin { fence } => self.begin(worker, OpKind::Read, Some(*fence), None, at),
            Event::PeekBegin => self.begin(worker, OpKind::Peek, None, None, at),
            Event::WriteBegin { fence, value } => {
                self.begin(worker, OpKind::Write, Some(*fence), Some(*value), at);
            }
            Event::Read { outcome, .. } => {
                let (value, outcome) = match outcome {
                    Outcome::Admitted(value) => (*value, OpOutcome::Ok),
                    Outcome::Stale { current } => (None, OpOutcome::Stale { current: *current }),
                    Outcome::Unknown { .. } => (None, OpOutcome::Unknown),
                };
                self.complete(worker, OpKind::Read, value, outcome, at);
            }
            Event::Peek { value } => self.complete(worker, OpKind::Peek, *value, OpOutcome::Ok, at),
            Event::Write { value, outcome, .. } => {
                let outcome = match outcome {
                    Outcome::Admitted(()) => OpOutcome::Ok,
                    Outcome::Stale { current } => OpOutcome::Stale { current: *current },
                    Outcome::Unknown { .. } => OpOutcome::Unknown,
                };
                self.complete(worker, OpKind::Write, Some(*value), outcome, at);
            }
            Event::Acquired { fence, resource } => {
                self.current[worker] = (*resource).min(self.keys.len().saturating_sub(1));
                self.close_lease(worker, None);
                self.open_leases[worker] = Some((*fence, at));
            }
            Event::Released { .. } => self.close_lease(worker, Some(at)),
            Event::Ready | Event::Healed { .. } | Event::Error { .. } => {}
        }
    }

    fn begin(
        &mut self,
        worker: usize,
        kind: OpKind,
        fence: Option<Fence>,
        value: Option<u64>,
        invoke_ns: u64,
    ) {
        // A call begun before and never answered (its answer could not be reported).
        self.abandon(worker);
        self.pending[worker] = Some(Pending {
            key: self.current[worker],
            kind,
            fence,
            value,
            invoke_ns,
        });
    }

    fn complete(
        &mut self,
        worker: usize,
        kind: OpKind,
        value: Option<u64>,
        outcome: OpOutcome,
        at: u64,
    ) {
        let Some(pending) = self.pending[worker].take_if(|p| p.kind == kind) else {
            return;
        };
        let complete_ns = match outcome {
            OpOutcome::Unknown => None,
            OpOutcome::Ok | OpOutcome::Stale { .. } => Some(at),
        };
        let value = match kind {
            OpKind::Write => pending.value,
            OpKind::Read | OpKind::Peek => value,
        };
        self.history.operations.push(Operation {
            process: Some(worker),
            key: self.key(pending.key),
            kind,
            fence: pending.fence,
            value,
            outcome,
            invoke_ns: pending.invoke_ns,
            complete_ns,
        });
    }

    /// Worker `worker`'s pending call, if any, becomes an operation without an answer.
    fn abandon(&mut self, worker: usize) {
        if let Some(p) = self.pending[worker].take() {
            self.history.operations.push(Operation {
                process: Some(worker),
                key: self.key(p.key),
                kind: p.kind,
                fence: p.fence,
                value: p.value,
                outcome: OpOutcome::Unknown,
                invoke_ns: p.invoke_ns,
                complete_ns: None,
            });
        }
    }

    fn key(&self, index: usize) -> String {
        self.keys.get(index).cloned().unwrap_or_default()
    }

    fn close_lease(&mut self, worker: usize, end_ns: Option<u64>) {
        if let Some((fence, start_ns)) = self.open_leases[worker].take() {
            self.history.leases.push(LeaseSpan {
                worker,
                fence,
                start_ns,
                end_ns,
            });
        }
    }

    /// Ends the history: calls still pending have no answer, leases still open end with the
    /// run, `final_reads` (the coordinator's peek of each counter: its index, the value, invoke
    /// and completion) are added, faults are put on the time line.
    pub(crate) fn finish(
        mut self,
        faults_from: u64,
        final_reads: Vec<FinalRead>,
        mut faults: Vec<FaultSpan>,
    ) -> RunHistory {
        for worker in 0..self.pending.len() {
            self.abandon(worker);
            self.close_lease(worker, None);
        }
        let mut end = 0;
        for (index, value, invoked, completed) in final_reads {
            let (invoke_ns, complete_ns) =
                (self.since_origin(invoked), self.since_origin(completed));
            end = end.max(complete_ns);
            self.history.operations.push(Operation {
                process: None,
                key: self.key(index),
                kind: OpKind::Peek,
                fence: None,
                value,
                outcome: OpOutcome::Ok,
                invoke_ns,
                complete_ns: Some(complete_ns),
            });
        }
        for f in &mut faults {
            f.start_ns = self.since_origin(f.start_ns);
            f.end_ns = self.since_origin(f.end_ns);
        }
        faults.sort_by_key(|f| f.start_ns);
        let mut h = self.history;
        h.faults_from_ns = faults_from.saturating_sub(self.origin);
        h.operations.sort_by_key(|op| op.invoke_ns);
        h.leases.sort_by_key(|l| l.start_ns);
        h.end_ns = h
            .operations
            .iter()
            .filter_map(|op| op.complete_ns)
            .chain(h.leases.iter().filter_map(|l| l.end_ns))
            .chain(faults.iter().map(|f| f.end_ns))
            .fold(end, u64::max);
        h.faults = faults;
        h
    }
}

#[cfg(test)]
mod tests {
    use fencelock::{FencingToken, OwnerId};

    use super::*;

    fn fence(token: u64) -> Fence {
        Fence::new(FencingToken::new(token).unwrap(), OwnerId::from_u128(7))
    }

    fn at(at: u64, event: Event) -> Stamped {
        Stamped { at, event }
    }

    #[test]
    fn operations_are_on_the_counter_their_grant_names() {
        let mut r = Recorder::new(0, vec!["slot/0".into(), "slot/1".into()], 2);
        for (worker, resource) in [(0, 1), (1, 0)] {
            let grant = Event::Acquired {
                fence: fence(1),
                resource,
            };
            r.record(worker, &at(10, grant));
            r.record(worker, &at(20, Event::ReadBegin { fence: fence(1) }));
        }
        let h = r.finish(0, vec![(1, Some(4), 30, 40)], Vec::new());
        let keys: Vec<(Option<usize>, &str)> = h
            .operations
            .iter()
            .map(|op| (op.process, op.key.as_str()))
            .collect();
        assert_eq!(
            keys,
            [(Some(0), "slot/1"), (Some(1), "slot/0"), (None, "slot/1")]
        );
    }

    #[test]
    fn begin_and_answer_make_one_operation_and_unanswered_calls_stay_open() {
        let mut r = Recorder::new(1000, vec!["k".into()], 2);
        r.record(
            0,
            &at(
                1100,
                Event::Acquired {
                    fence: fence(1),
                    resource: 0,
                },
            ),
        );
        r.record(0, &at(1200, Event::ReadBegin { fence: fence(1) }));
        r.record(
            0,
            &at(
                1300,
                Event::Read {
                    fence: fence(1),
                    outcome: Outcome::Admitted(None),
                },
            ),
        );
        r.record(
            0,
            &at(
                1400,
                Event::WriteBegin {
                    fence: fence(1),
                    value: 1,
                },
            ),
        );
        r.record(1, &at(1450, Event::ReadBegin { fence: fence(2) }));
        r.record(
            1,
            &at(
                1500,
                Event::Read {
                    fence: fence(2),
                    outcome: Outcome::Stale { current: fence(3) },
                },
            ),
        );
        let h = r.finish(1050, vec![(0, Some(1), 2000, 2100)], Vec::new());
        assert_eq!(h.operations.len(), 4, "{:?}", h.operations);
        let read = &h.operations[0];
        assert_eq!(
            (read.kind, read.invoke_ns, read.complete_ns),
            (OpKind::Read, 200, Some(300))
        );
        assert_eq!(read.outcome, OpOutcome::Ok);
        let write = &h.operations[1];
        assert_eq!(
            (write.kind, write.value, write.complete_ns),
            (OpKind::Write, Some(1), None)
        );
        assert_eq!(write.outcome, OpOutcome::Unknown);
        assert_eq!(h.operations[2].process, Some(1));
        assert_eq!(
            h.operations[2].outcome,
            OpOutcome::Stale { current: fence(3) }
        );
        let last = &h.operations[3];
        assert_eq!(
            (last.process, last.kind, last.value),
            (None, OpKind::Peek, Some(1))
        );
        assert_eq!(h.leases.len(), 1);
        assert_eq!((h.leases[0].start_ns, h.leases[0].end_ns), (100, None));
        assert_eq!((h.faults_from_ns, h.end_ns), (50, 1100));

        let mut out = Vec::new();
        h.write_jsonl(Mode::Fenced, &mut out).unwrap();
        let lines: Vec<serde_json::Value> = String::from_utf8(out.clone())
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 4);
        assert_eq!(lines[0]["f"], "read");
        assert_eq!(lines[0]["value"], serde_json::Value::Null);
        assert_eq!(lines[1]["complete_ns"], serde_json::Value::Null);
        assert_eq!(lines[1]["token"], 1);
        assert_eq!(lines[3]["process"], "final");
        let text = String::from_utf8(out).unwrap();
        assert_eq!(read_jsonl(&text).unwrap(), h.operations);
        let err = read_jsonl("\n{\"f\": \"scan\"}").unwrap_err();
        assert!(
            err.to_string().starts_with("history line 2: f is not"),
            "{err}"
        );
    }
}
