//! The history checker: is each key's history of storage operations linearizable with respect
//! to the fenced register of DESIGN section 2?
//!
//! The model is one register per key holding the last admitted fence and a value. A fenced read
//! or write with fence `f` is admitted iff `f` is newer by the fence rule (`f.token >
//! last.token`, or the same token and owner); admitted, it advances the fence (a write also
//! sets the value) and a read returns the value. Refused, it changes nothing and reports the
//! register's fence as `current`. A peek returns the value and changes nothing. An operation
//! without an answer may have taken effect (as admitted) or not at all, at any time after its
//! invoke.
//!
//! The search is Wing and Gong's, with Lowe's memoisation as in Porcupine: walk the calls in
//! time order, linearise any call whose model step matches its answer, backtrack when a return
//! is reached before its call was linearised, and never revisit a (linearised set, register)
//! pair. Histories are checked per key (a register's linearisability is compositional). Each
//! key's search is capped at a number of distinct states; past it the verdict is
//! [`Linearizability::Unknown`], never a hang.
//!
//! Sound for a history recorded by chaos: every operation's recorded interval encloses its
//! effect on the storage (invoke stamped before the call, completion after the answer, one
//! monotonic clock for every process), so the real linearisation point lies in the recorded
//! interval. Widening intervals only adds orders to try, so a rejection cannot come from the
//! recording: it means no order of the operations consistent with real time obeys the rule.

use std::collections::{HashMap, HashSet};
use std::fmt;

use fencelock::Fence;

use crate::history::{OpKind, OpOutcome, Operation};

/// The states (distinct linearised set and register pairs) a key's search may visit before it
/// gives up with [`Linearizability::Unknown`]; about 100 bytes each.
pub const DEFAULT_STATE_BUDGET: usize = 1_000_000;

/// The history checker's verdict on a run.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Linearizability {
    /// Every key's history has an order that obeys the fence rule.
    Linearizable {
        /// Keys checked.
        keys: usize,
        /// Operations checked.
        operations: usize,
        /// States the searches visited.
        states: usize,
    },
    /// No order of one key's operations consistent with real time obeys the fence rule.
    NotLinearizable {
        /// The key.
        key: String,
        /// Operations on the key.
        operations: usize,
        /// Where the longest order found gets stuck, in words.
        explanation: String,
    },
    /// A key's search visited its budget of states without an answer.
    Unknown {
        /// The key.
        key: String,
        /// The budget.
        states: usize,
    },
}

impl Default for Linearizability {
    fn default() -> Self {
        Linearizability::Linearizable {
            keys: 0,
            operations: 0,
            states: 0,
        }
    }
}

impl Linearizability {
    /// Whether the history was shown not to be linearizable.
    pub fn is_violation(&self) -> bool {
        matches!(self, Linearizability::NotLinearizable { .. })
    }

    /// `linearizable`, `not-linearizable` or `unknown`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Linearizability::Linearizable { .. } => "linearizable",
            Linearizability::NotLinearizable { .. } => "not-linearizable",
            Linearizability::Unknown { .. } => "unknown",
        }
    }
}

impl fmt::Display for Linearizability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Linearizability::Linearizable {
                operations, states, ..
            } => write!(f, "linearizable ({operations} ops, {states} states)"),
            Linearizability::NotLinearizable {
                key, explanation, ..
            } => write!(f, "NOT linearizable on {key}: {explanation}"),
            Linearizability::Unknown { key, states } => write!(
                f,
                "unknown: search budget exceeded ({states} states) on {key}"
            ),
        }
    }
}

/// Checks every key of `operations` against the fenced register, each key's search capped at
/// `budget` states.
pub fn check(operations: &[Operation], budget: usize) -> Linearizability {
    let mut by_key: HashMap<&str, Vec<&Operation>> = HashMap::new();
    for op in operations {
        by_key.entry(op.key.as_str()).or_default().push(op);
    }
    let mut keys: Vec<_> = by_key.into_iter().collect();
    keys.sort_by(|a, b| a.0.cmp(b.0));
    let (mut states, mut unknown) = (0, None);
    for (key, ops) in &keys {
        match search(ops, budget) {
            Search::Linearizable { states: s } => states += s,
            Search::Stuck(explanation) => {
                return Linearizability::NotLinearizable {
                    key: (*key).to_owned(),
                    operations: ops.len(),
                    explanation,
                };
            }
            Search::OverBudget => {
                unknown.get_or_insert_with(|| Linearizability::Unknown {
                    key: (*key).to_owned(),
                    states: budget,
                });
            }
        }
    }
    unknown.unwrap_or(Linearizability::Linearizable {
        keys: keys.len(),
        operations: operations.len(),
        states,
    })
}

/// The model's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Register {
    fence: Option<Fence>,
    value: Option<u64>,
}

/// The fence rule of DESIGN section 2.
fn admits(last: Option<Fence>, f: Fence) -> bool {
    match last {
        None => true,
        Some(last) => f.token > last.token || (f.token == last.token && f.owner == last.owner),
    }
}

/// The states `op` may leave `s` in given its answer: none (the answer is impossible here),
/// one, or two for an operation without an answer (taken effect, or not).
fn step(s: Register, op: &Operation) -> [Option<Register>; 2] {
    let refused = |f: Fence, current: Fence| !admits(s.fence, f) && s.fence == Some(current);
    match (op.kind, op.outcome, op.fence) {
        (OpKind::Peek, OpOutcome::Ok, _) => [(s.value == op.value).then_some(s), None],
        (OpKind::Peek, OpOutcome::Unknown, _) => [Some(s), None],
        (OpKind::Read | OpKind::Write, OpOutcome::Stale { current }, Some(f)) => {
            [refused(f, current).then_some(s), None]
        }
        (kind, outcome, Some(f)) if admits(s.fence, f) => {
            let after = Register {
                fence: Some(f),
                value: if kind == OpKind::Write {
                    op.value
                } else {
                    s.value
                },
            };
            match outcome {
                OpOutcome::Ok if kind == OpKind::Read && s.value != op.value => [None, None],
                OpOutcome::Ok => [Some(after), None],
                _ if after == s => [Some(s), None],
                _ => [Some(after), Some(s)],
            }
        }
        // Refused by the rule yet answered as admitted: impossible. Without an answer it
        // changed nothing.
        (_, OpOutcome::Unknown, Some(_)) => [Some(s), None],
        _ => [None, None],
    }
}

enum Search {
    Linearizable { states: usize },
    Stuck(String),
    OverBudget,
}

/// Call and return entries of every operation, in time order, as a list that linearised
/// operations are lifted out of and put back into (dancing links).
struct Entries {
    /// For each entry: its operation and whether it is the call.
    entry: Vec<(usize, bool)>,
    /// For each call entry, its return entry.
    matching: Vec<usize>,
    /// `next[head]` is the first entry; the head is the last index.
    next: Vec<Option<usize>>,
    prev: Vec<usize>,
    head: usize,
}

impl Entries {
    fn new(ops: &[&Operation]) -> Self {
        // Calls sort before returns at equal times: more operations overlap, never fewer.
        let mut order: Vec<(u64, bool, usize)> = Vec::with_capacity(ops.len() * 2);
        for (i, op) in ops.iter().enumerate() {
            order.push((op.invoke_ns, false, i));
            order.push((op.complete_ns.unwrap_or(u64::MAX), true, i));
        }
        order.sort_unstable();
        let n = order.len();
        let mut entry = Vec::with_capacity(n);
        let mut call_of = vec![0; ops.len()];
        let mut matching = vec![0; n];
        for (index, &(_, is_return, op)) in order.iter().enumerate() {
            entry.push((op, !is_return));
            if is_return {
                matching[call_of[op]] = index;
            } else {
                call_of[op] = index;
            }
        }
        let head = n;
        let next = (0..=n)
            .map(|i| {
                if i == head {
                    (n > 0).then_some(0)
                } else {
                    (i + 1 < n).then_some(i + 1)
                }
            })
            .collect();
        let prev = (0..=n)
            .map(|i| if i == 0 { head } else { i.saturating_sub(1) })
            .collect();
        Entries {
            entry,
            matching,
            next,
            prev,
            head,
        }
    }

    fn unlink(&mut self, x: usize) {
        let (p, n) = (self.prev[x], self.next[x]);
        self.next[p] = n;
        if let Some(n) = n {
            self.prev[n] = p;
        }
    }

    fn relink(&mut self, x: usize) {
        let (p, n) = (self.prev[x], self.next[x]);
        self.next[p] = Some(x);
        if let Some(n) = n {
            self.prev[n] = x;
        }
    }

    fn lift(&mut self, call: usize) {
        self.unlink(call);
        self.unlink(self.matching[call]);
    }

    fn unlift(&mut self, call: usize) {
        self.relink(self.matching[call]);
        self.relink(call);
    }
}

/// The linearised operations, as a bit set, with a compact key for the memo: the first
/// operation not linearised, then the linearised ones after it (a short list, since the search
/// goes roughly in invoke order).
struct Linearized(Vec<u64>);

impl Linearized {
    fn set(&mut self, i: usize, on: bool) {
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        if on {
            self.0[word] |= bit;
        } else {
            self.0[word] &= !bit;
        }
    }

    fn key(&self) -> Box<[u32]> {
        let low = self
            .0
            .iter()
            .position(|w| *w != u64::MAX)
            .unwrap_or(self.0.len());
        let first_unset = low * 64 + self.0.get(low).map_or(0, |w| w.trailing_ones() as usize);
        let mut key = vec![u32::try_from(first_unset).unwrap_or(u32::MAX)];
        for (w, &word) in self.0.iter().enumerate().skip(low) {
            let mut bits = word;
            while bits != 0 {
                let i = w * 64 + bits.trailing_zeros() as usize;
                bits &= bits - 1;
                if i > first_unset {
                    key.push(u32::try_from(i).unwrap_or(u32::MAX));
                }
            }
        }
        key.into_boxed_slice()
    }
}

struct Frame {
    call: usize,
    before: Register,
    alternative: usize,
}

/// Where the search got furthest before backtracking.
struct Furthest {
    linearized: usize,
    state: Register,
    blocked: usize,
}

fn search(ops: &[&Operation], budget: usize) -> Search {
    let mut ops = ops.to_vec();
    ops.sort_by_key(|op| op.invoke_ns);
    let mut list = Entries::new(&ops);
    let mut linearized = Linearized(vec![0; ops.len().div_ceil(64)]);
    let mut seen: HashSet<(Box<[u32]>, Register)> = HashSet::new();
    let mut stack: Vec<Frame> = Vec::new();
    let mut state = Register {
        fence: None,
        value: None,
    };
    let mut furthest: Option<Furthest> = None;
    let mut cursor = list.next[list.head];
    let mut first_alternative = 0;
    while list.next[list.head].is_some() {
        match cursor {
            Some(e) if list.entry[e].1 => {
                let op = list.entry[e].0;
                let mut moved = false;
                for (k, after) in step(state, ops[op])
                    .into_iter()
                    .enumerate()
                    .skip(first_alternative)
                {
                    let Some(after) = after else { continue };
                    linearized.set(op, true);
                    if seen.insert((linearized.key(), after)) {
                        if seen.len() > budget {
                            return Search::OverBudget;
                        }
                        stack.push(Frame {
                            call: e,
                            before: state,
                            alternative: k,
                        });
                        state = after;
                        list.lift(e);
                        cursor = list.next[list.head];
                        moved = true;
                        break;
                    }
                    linearized.set(op, false);
                }
                first_alternative = 0;
                if !moved {
                    cursor = list.next[e];
                }
            }
            reached => {
                // A return whose call is not linearised: undo the last choice.
                if let Some(e) = reached
                    && furthest.as_ref().is_none_or(|f| stack.len() > f.linearized)
                {
                    furthest = Some(Furthest {
                        linearized: stack.len(),
                        state,
                        blocked: list.entry[e].0,
                    });
                }
                let Some(frame) = stack.pop() else {
                    return Search::Stuck(explain(&ops, furthest.as_ref()));
                };
                linearized.set(list.entry[frame.call].0, false);
                state = frame.before;
                list.unlift(frame.call);
                cursor = Some(frame.call);
                first_alternative = frame.alternative + 1;
            }
        }
    }
    Search::Linearizable { states: seen.len() }
}

fn explain(ops: &[&Operation], furthest: Option<&Furthest>) -> String {
    let Some(f) = furthest else {
        return "no operation can come first".into();
    };
    let value = f
        .state
        .value
        .map_or("no value".into(), |v| format!("value {v}"));
    let fence = f
        .state
        .fence
        .map_or("no fence".into(), |x| format!("fence {x}"));
    format!(
        "{} cannot be placed: the longest order found linearises {} operations and leaves \
         the register at {fence} with {value}",
        describe(ops[f.blocked]),
        f.linearized
    )
}

/// One operation in words.
pub(crate) fn describe(op: &Operation) -> String {
    let who = op
        .process
        .map_or("the final read".into(), |w| format!("worker {w}"));
    let fence = op
        .fence
        .map(|f| format!(" with fence {f}"))
        .unwrap_or_default();
    let value = |v: Option<u64>| v.map_or("no value".into(), |v| v.to_string());
    let what = match (op.kind, op.outcome) {
        (OpKind::Write, _) => format!("write of {}{fence}", value(op.value)),
        (kind, OpOutcome::Ok) => format!("{} returning {}{fence}", kind.name(), value(op.value)),
        (kind, _) => format!("{}{fence}", kind.name()),
    };
    let answer = match op.outcome {
        OpOutcome::Ok => "admitted".into(),
        OpOutcome::Stale { current } => format!("refused (storage at {current})"),
        OpOutcome::Unknown => "without an answer".into(),
    };
    let ms = |ns: u64| ns as f64 / 1e6;
    let during = match op.complete_ns {
        Some(c) => format!("{:.3}-{:.3} ms", ms(op.invoke_ns), ms(c)),
        None => format!("from {:.3} ms", ms(op.invoke_ns)),
    };
    format!("{who}'s {what}, {answer}, {during}")
}

#[cfg(test)]
mod tests {
    use fencelock::{FencingToken, OwnerId};

    use super::*;

    fn fence(token: u64) -> Fence {
        Fence::new(
            FencingToken::new(token).unwrap(),
            OwnerId::from_u128(u128::from(token) * 7 + 1),
        )
    }

    fn op(
        kind: OpKind,
        token: u64,
        value: Option<u64>,
        outcome: OpOutcome,
        t: (u64, u64),
    ) -> Operation {
        Operation {
            process: Some(usize::try_from(token).unwrap()),
            key: "k".into(),
            kind,
            fence: (token > 0).then(|| fence(token)),
            value,
            outcome,
            invoke_ns: t.0,
            complete_ns: (t.1 > 0).then_some(t.1),
        }
    }

    fn write(token: u64, value: u64, t: (u64, u64)) -> Operation {
        op(OpKind::Write, token, Some(value), OpOutcome::Ok, t)
    }

    fn read(token: u64, value: Option<u64>, t: (u64, u64)) -> Operation {
        op(OpKind::Read, token, value, OpOutcome::Ok, t)
    }

    fn peek(value: Option<u64>, t: (u64, u64)) -> Operation {
        op(OpKind::Peek, 0, value, OpOutcome::Ok, t)
    }

    fn stale(kind: OpKind, token: u64, current: u64, t: (u64, u64)) -> Operation {
        let value = (kind == OpKind::Write).then_some(99);
        op(
            kind,
            token,
            value,
            OpOutcome::Stale {
                current: fence(current),
            },
            t,
        )
    }

    fn unknown_write(token: u64, value: u64, invoke: u64) -> Operation {
        op(
            OpKind::Write,
            token,
            Some(value),
            OpOutcome::Unknown,
            (invoke, 0),
        )
    }

    fn verdict(ops: &[Operation]) -> Linearizability {
        check(ops, DEFAULT_STATE_BUDGET)
    }

    #[track_caller]
    fn accepted(ops: &[Operation]) {
        let v = verdict(ops);
        assert!(matches!(v, Linearizability::Linearizable { .. }), "{v}");
    }

    #[track_caller]
    fn rejected(ops: &[Operation]) -> String {
        let v = verdict(ops);
        assert!(v.is_violation(), "{v}");
        v.to_string()
    }

    #[test]
    fn a_sequential_fenced_history_is_linearizable() {
        accepted(&[
            read(1, None, (0, 10)),
            write(1, 1, (20, 30)),
            read(2, Some(1), (40, 50)),
            write(2, 2, (60, 70)),
            stale(OpKind::Write, 1, 2, (80, 90)),
            read(3, Some(2), (100, 110)),
            peek(Some(2), (120, 130)),
        ]);
    }

    #[test]
    fn a_stale_write_admitted_after_a_newer_one_completed_is_rejected() {
        let why = rejected(&[
            read(5, None, (0, 10)),
            write(5, 1, (20, 30)),
            // completed before it began, yet admitted with an older token
            write(3, 2, (40, 50)),
        ]);
        assert!(why.contains("write of 2"), "{why}");
        assert!(why.contains("linearises 2 operations"), "{why}");
    }

    #[test]
    fn a_read_returning_a_value_never_written_is_rejected() {
        let why = rejected(&[write(1, 1, (0, 10)), read(2, Some(42), (20, 30))]);
        assert!(why.contains("read returning 42"), "{why}");
        rejected(&[peek(Some(7), (0, 10))]);
    }

    #[test]
    fn concurrent_overlapping_operations_are_accepted_in_either_order() {
        // Invoked in token order.
        accepted(&[
            write(1, 1, (0, 100)),
            write(2, 2, (50, 150)),
            read(3, Some(2), (200, 210)),
        ]);
        // Token 2 invoked first, token 1 second: only "1 then 2" obeys the rule, and the
        // overlap allows it.
        accepted(&[
            write(2, 2, (0, 100)),
            write(1, 1, (50, 150)),
            read(3, Some(2), (200, 210)),
        ]);
        // A peek overlapping a write sees the old value or the new one.
        for seen in [None, Some(1)] {
            accepted(&[write(1, 1, (0, 100)), peek(seen, (50, 60))]);
        }
        // Without the overlap, the order is real time's.
        rejected(&[write(2, 2, (0, 40)), write(1, 1, (50, 150))]);
        rejected(&[write(1, 1, (0, 100)), peek(None, (150, 160))]);
    }

    #[test]
    fn refusals_must_match_the_register() {
        accepted(&[read(2, None, (0, 10)), stale(OpKind::Read, 1, 2, (20, 30))]);
        // Refused although nothing newer was admitted.
        rejected(&[read(1, None, (0, 10)), stale(OpKind::Write, 2, 1, (20, 30))]);
        // Refused, naming a fence the storage never held.
        rejected(&[read(2, None, (0, 10)), stale(OpKind::Read, 1, 3, (20, 30))]);
        // Equal token, other owner: refused.
        let mut other = read(2, None, (20, 30));
        other.fence = Some(Fence::new(fence(2).token, OwnerId::from_u128(1)));
        other.outcome = OpOutcome::Stale { current: fence(2) };
        accepted(&[read(2, None, (0, 10)), other.clone()]);
        other.outcome = OpOutcome::Ok;
        rejected(&[read(2, None, (0, 10)), other]);
    }

    #[test]
    fn operations_without_an_answer_may_land_late_or_never() {
        // Landed long after its worker gave up on it.
        accepted(&[
            read(1, None, (0, 10)),
            unknown_write(1, 1, 20),
            read(2, None, (500, 510)),
            peek(None, (520, 530)),
        ]);
        accepted(&[
            read(1, None, (0, 10)),
            unknown_write(1, 1, 20),
            peek(Some(1), (520, 530)),
        ]);
        // Never landed, yet a newer read was refused as if its fence had.
        accepted(&[
            unknown_write(3, 1, 0),
            stale(OpKind::Read, 2, 3, (100, 110)),
        ]);
        // Its value seen before it was invoked.
        rejected(&[peek(Some(1), (0, 10)), unknown_write(1, 1, 20)]);
    }

    #[test]
    fn keys_are_checked_apart_and_the_guilty_key_is_named() {
        let mut other = vec![write(1, 1, (0, 10)), read(2, Some(1), (15, 20))];
        for o in &mut other {
            o.key = "other".into();
        }
        // On one register this would be a stale write; on two keys it is fine.
        let mut ops = vec![read(5, None, (5, 12)), write(5, 7, (13, 14))];
        ops.extend(other.clone());
        accepted(&ops);
        match verdict(&ops) {
            Linearizability::Linearizable {
                keys, operations, ..
            } => {
                assert_eq!((keys, operations), (2, 4));
            }
            v => panic!("{v}"),
        }
        other.push(Operation {
            key: "other".into(),
            ..write(1, 3, (30, 40))
        });
        ops.extend(other);
        match verdict(&ops) {
            Linearizability::NotLinearizable { key, .. } => assert_eq!(key, "other"),
            v => panic!("{v}"),
        }
    }

    #[test]
    fn a_long_run_is_checked_in_about_one_state_per_operation() {
        // 10,000 lock cycles as chaos makes them: read then write under each grant, every
        // tenth holder paused past its lease and refused after the next holder wrote, every
        // fiftieth write without an answer although it landed.
        let mut ops = Vec::new();
        let (mut t, mut value, mut token) = (0u64, 0u64, 0u64);
        let mut paused: Option<(u64, u64)> = None;
        for cycle in 0..10_000u64 {
            token += 1;
            ops.push(read(token, (value > 0).then_some(value), (t, t + 5)));
            if cycle % 10 == 3 {
                paused = Some((token, t + 6));
                t += 10;
                continue;
            }
            value += 1;
            if cycle % 50 == 7 {
                ops.push(unknown_write(token, value, t + 6));
            } else {
                ops.push(write(token, value, (t + 6, t + 9)));
            }
            if let Some((old, since)) = paused.take() {
                ops.push(op(
                    OpKind::Write,
                    old,
                    Some(value),
                    OpOutcome::Stale {
                        current: fence(token),
                    },
                    (since, t + 10),
                ));
            }
            t += 12;
        }
        ops.push(peek(Some(value), (t + 100, t + 110)));
        match verdict(&ops) {
            Linearizability::Linearizable {
                operations, states, ..
            } => {
                assert_eq!(operations, ops.len());
                assert!(
                    states < 2 * operations,
                    "{states} states for {operations} operations"
                );
            }
            v => panic!("{v}"),
        }
    }

    #[test]
    fn a_search_past_its_budget_says_unknown() {
        // Many writes without answers, all overlapping, and a final read nobody wrote: proving
        // it impossible means trying every subset.
        let mut ops: Vec<Operation> = (1..=12).map(|t| unknown_write(t, t, t)).collect();
        ops.push(peek(Some(1000), (100, 110)));
        let v = check(&ops, 500);
        assert_eq!(
            v,
            Linearizability::Unknown {
                key: "k".into(),
                states: 500
            }
        );
        assert!(
            v.to_string().starts_with("unknown: search budget exceeded"),
            "{v}"
        );
        assert!(!v.is_violation());
        // With room enough, the same history is rejected.
        assert!(check(&ops, 10_000_000).is_violation());
    }
}
