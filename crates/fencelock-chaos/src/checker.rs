//! The checker: reads one run's history and the storage's final value, and finds lost updates
//! and fences that went back. It uses no clock: the order of admitted operations is recovered
//! from the counter values themselves (a write of `v` read `v - 1`, a read returning `x` sits
//! between the writes of `x` and `x + 1`).

use std::collections::{BTreeMap, HashMap, HashSet};

use fencelock::{Fence, FencingToken, OwnerId};

use crate::config::Mode;
use crate::events::{Event, Outcome};

/// Violations kept in full; past this only the count grows.
const KEPT: usize = 20;

/// What one run did, and what the checker found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Verdict {
    /// Grants (lock cycles started).
    pub cycles: u64,
    /// Fenced reads the storage admitted.
    pub reads_admitted: u64,
    /// Fenced reads the storage refused as stale.
    pub reads_stale: u64,
    /// Fenced reads without a definite answer.
    pub reads_unknown: u64,
    /// Writes the storage admitted.
    pub writes_admitted: u64,
    /// Writes the storage refused as stale.
    pub writes_stale: u64,
    /// Writes without a definite answer (time-out, cut connection, worker stopped).
    pub writes_unknown: u64,
    /// `advance_token` calls after a stale fresh grant.
    pub heals: u64,
    /// Backend errors reported by workers (not checked, only counted).
    pub errors: u64,
    /// The counter's final value (a semaphore's: the sum of its slots' counters).
    pub final_value: u64,
    /// Admitted increments that the final value does not contain.
    pub lost_updates: u64,
    /// Number of safety violations.
    pub violations: u64,
    /// The first few violations, in words.
    pub examples: Vec<String>,
}

impl Verdict {
    /// Adds `other`'s counts and examples: the verdicts of several counters (a semaphore's
    /// slots) make one. Final values add up too.
    pub(crate) fn merge(&mut self, other: &Verdict) {
        self.cycles += other.cycles;
        self.reads_admitted += other.reads_admitted;
        self.reads_stale += other.reads_stale;
        self.reads_unknown += other.reads_unknown;
        self.writes_admitted += other.writes_admitted;
        self.writes_stale += other.writes_stale;
        self.writes_unknown += other.writes_unknown;
        self.heals += other.heals;
        self.errors += other.errors;
        self.final_value += other.final_value;
        self.lost_updates += other.lost_updates;
        self.violations += other.violations;
        let room = KEPT.saturating_sub(self.examples.len());
        self.examples
            .extend(other.examples.iter().take(room).cloned());
    }

    fn violation(&mut self, what: String) {
        self.violations += 1;
        if self.examples.len() < KEPT {
            self.examples.push(what);
        }
    }
}

/// The operations one run admitted.
#[derive(Debug, Default)]
pub(crate) struct History {
    verdict: Verdict,
    /// Admitted writes by value (more than one = lost update).
    writes: BTreeMap<u64, Vec<Fence>>,
    /// Values some write tried to write, whatever its outcome.
    attempted: HashSet<u64>,
    /// Admitted fenced reads: (value returned, fence).
    reads: Vec<(u64, Fence)>,
}

impl History {
    /// Records one event of any worker.
    pub(crate) fn record(&mut self, event: &Event) {
        let v = &mut self.verdict;
        match event {
            Event::Acquired { .. } => v.cycles += 1,
            Event::Read { fence, outcome } => match outcome {
                Outcome::Admitted(value) => {
                    v.reads_admitted += 1;
                    self.reads.push((value.unwrap_or(0), *fence));
                }
                Outcome::Stale { .. } => v.reads_stale += 1,
                Outcome::Unknown { .. } => v.reads_unknown += 1,
            },
            Event::Ready
            | Event::ReadBegin { .. }
            | Event::PeekBegin
            | Event::Peek { .. }
            | Event::Released { .. } => {}
            Event::WriteBegin { value, .. } => {
                self.attempted.insert(*value);
            }
            Event::Write {
                fence,
                value,
                outcome,
            } => match outcome {
                Outcome::Admitted(()) => {
                    v.writes_admitted += 1;
                    self.writes.entry(*value).or_default().push(*fence);
                }
                Outcome::Stale { .. } => v.writes_stale += 1,
                Outcome::Unknown { .. } => v.writes_unknown += 1,
            },
            Event::Healed { .. } => v.heals += 1,
            Event::Error { .. } => v.errors += 1,
        }
    }

    /// Whether two admitted writes wrote one value: a lost update, known before the final
    /// value is read.
    pub(crate) fn shown_lost_update(&self) -> bool {
        self.writes.values().any(|fences| fences.len() > 1)
    }

    /// The counts so far (for progress lines).
    pub(crate) fn verdict(&self) -> &Verdict {
        &self.verdict
    }

    /// Writes whose `write-begin` was seen but whose answer never came (the worker was stopped
    /// mid-call) count as unknown.
    pub(crate) fn note_unanswered_writes(&mut self, count: u64) {
        self.verdict.writes_unknown += count;
    }

    /// Checks the history against the final value. Fenced runs are held to every rule;
    /// control runs (unfenced reads, one shared fence) are only measured for lost updates.
    pub(crate) fn check(mut self, final_value: u64, mode: Mode) -> Verdict {
        self.verdict.final_value = final_value;
        let admitted: u64 = self.writes.values().map(|f| f.len() as u64).sum();
        let duplicates: u64 = self
            .writes
            .values()
            .map(|f| f.len().saturating_sub(1) as u64)
            .sum();
        // Each admitted write added one; the final value holds only those that were kept.
        self.verdict.lost_updates = duplicates.max(admitted.saturating_sub(final_value));
        if mode == Mode::Fenced {
            self.check_fences(final_value);
        }
        self.verdict
    }

    fn check_fences(&mut self, final_value: u64) {
        let writes = std::mem::take(&mut self.writes);
        let reads = std::mem::take(&mut self.reads);
        let v = &mut self.verdict;

        for (value, fences) in &writes {
            if fences.len() > 1 {
                v.violation(format!(
                    "lost update: value {value} was written {} times, by {}",
                    fences.len(),
                    list(fences)
                ));
            }
            if *value > final_value {
                v.violation(format!(
                    "lost update: value {value} was written by {} but the final value is {final_value}",
                    fences[0]
                ));
            }
        }
        for value in 1..=final_value {
            if !writes.contains_key(&value) && !self.attempted.contains(&value) {
                v.violation(format!(
                    "value {value} is in the storage's history but no worker wrote it"
                ));
            }
        }

        // Equal tokens must come from one owner: the second owner would have been refused.
        let mut owners: HashMap<FencingToken, OwnerId> = HashMap::new();
        let all = writes
            .values()
            .flatten()
            .copied()
            .chain(reads.iter().map(|(_, f)| *f));
        for fence in all {
            let owner = *owners.entry(fence.token).or_insert(fence.owner);
            if owner != fence.owner {
                v.violation(format!(
                    "two owners admitted with token {}: {owner} and {}",
                    fence.token, fence.owner
                ));
            }
        }

        // By value, admitted writes are in admission order: tokens never go back.
        let ordered: Vec<(u64, Fence)> = writes.iter().map(|(val, f)| (*val, f[0])).collect();
        for pair in ordered.windows(2) {
            let [(a, fa), (b, fb)] = pair else { continue };
            if fb.token < fa.token {
                v.violation(format!(
                    "fence went back: value {b} was written with {fb} after value {a} with {fa}"
                ));
            }
        }

        // A read that returned `x` came after the write of `x` and before the write of `x + 1`.
        for (x, read) in &reads {
            for before in writes.get(x).into_iter().flatten() {
                if read.token < before.token {
                    v.violation(format!(
                        "stale read admitted: {read} read value {x}, written earlier with {before}"
                    ));
                }
            }
            for after in writes.get(&(x + 1)).into_iter().flatten() {
                if after.token < read.token {
                    v.violation(format!(
                        "stale write admitted: value {} written with {after} after {read} had read {x}",
                        x + 1
                    ));
                }
            }
        }
    }
}

fn list(fences: &[Fence]) -> String {
    fences
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence(token: u64, owner: u128) -> Fence {
        Fence::new(FencingToken::new(token).unwrap(), OwnerId::from_u128(owner))
    }

    fn read(token: u64, owner: u128, value: u64) -> Event {
        Event::Read {
            fence: fence(token, owner),
            outcome: Outcome::Admitted((value > 0).then_some(value)),
        }
    }

    fn write(token: u64, owner: u128, value: u64) -> Event {
        Event::Write {
            fence: fence(token, owner),
            value,
            outcome: Outcome::Admitted(()),
        }
    }

    fn begin(token: u64, owner: u128, value: u64) -> Event {
        Event::WriteBegin {
            fence: fence(token, owner),
            value,
        }
    }

    fn run(events: &[Event], final_value: u64, mode: Mode) -> Verdict {
        let mut history = History::default();
        for e in events {
            history.record(e);
        }
        history.check(final_value, mode)
    }

    #[test]
    fn a_clean_history_passes() {
        let events = [
            Event::Acquired {
                fence: fence(1, 1),
                resource: 0,
            },
            read(1, 1, 0),
            begin(1, 1, 1),
            write(1, 1, 1),
            // a paused holder whose write was refused
            read(2, 2, 1),
            read(3, 3, 1),
            begin(3, 3, 2),
            write(3, 3, 2),
            Event::Write {
                fence: fence(2, 2),
                value: 2,
                outcome: Outcome::Stale {
                    current: fence(3, 3),
                },
            },
            // an unknown write that was in fact admitted
            read(4, 4, 2),
            begin(4, 4, 3),
            Event::Write {
                fence: fence(4, 4),
                value: 3,
                outcome: Outcome::Unknown {
                    reason: "timed out".into(),
                },
            },
            read(5, 5, 3),
            begin(5, 5, 4),
            write(5, 5, 4),
        ];
        let v = run(&events, 4, Mode::Fenced);
        assert_eq!(v.violations, 0, "{:?}", v.examples);
        assert_eq!(v.lost_updates, 0);
        assert_eq!((v.cycles, v.writes_admitted, v.writes_stale), (1, 3, 1));
        assert_eq!(v.writes_unknown, 1);
    }

    #[test]
    fn the_paused_client_story_without_fences_is_caught() {
        // A (token 1) and B (token 2) both read 0, both writes admitted: one increment lost.
        let events = [
            read(1, 1, 0),
            read(2, 2, 0),
            begin(2, 2, 1),
            write(2, 2, 1),
            begin(1, 1, 1),
            write(1, 1, 1),
        ];
        let v = run(&events, 1, Mode::Fenced);
        assert_eq!(v.lost_updates, 1);
        assert!(v.violations >= 2, "{:?}", v.examples);
        assert!(v.examples.iter().any(|e| e.contains("written 2 times")));
        assert!(
            v.examples
                .iter()
                .any(|e| e.contains("stale write admitted"))
        );
        // The control run is only measured.
        let v = run(&events, 1, Mode::Control);
        assert_eq!((v.lost_updates, v.violations), (1, 0));
    }

    #[test]
    fn fences_going_back_and_shared_tokens_are_violations() {
        let events = [
            read(5, 1, 0),
            begin(5, 1, 1),
            write(5, 1, 1),
            read(3, 2, 1),
            begin(3, 2, 2),
            write(3, 2, 2),
            read(3, 3, 2),
        ];
        let v = run(&events, 2, Mode::Fenced);
        assert!(
            v.examples.iter().any(|e| e.contains("fence went back")),
            "{:?}",
            v.examples
        );
        assert!(
            v.examples.iter().any(|e| e.contains("two owners")),
            "{:?}",
            v.examples
        );
        assert!(
            v.examples.iter().any(|e| e.contains("stale read admitted")),
            "{:?}",
            v.examples
        );
    }

    #[test]
    fn a_final_value_that_lost_or_invented_writes_is_a_violation() {
        let events = [
            read(1, 1, 0),
            begin(1, 1, 1),
            write(1, 1, 1),
            read(2, 2, 1),
            begin(2, 2, 2),
            write(2, 2, 2),
        ];
        let v = run(&events, 1, Mode::Fenced);
        assert_eq!(v.lost_updates, 1);
        assert!(v.examples.iter().any(|e| e.contains("final value is 1")));
        let v = run(&events, 3, Mode::Fenced);
        assert!(v.examples.iter().any(|e| e.contains("no worker wrote it")));
    }
}
