//! `EtcdStorage`: the fence rule of DESIGN section 2 in one etcd transaction per operation.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use etcd_client::{Compare, CompareOp, KeyValue, Txn, TxnOp, TxnOpResponse, TxnResponse};
use fencelock_core::{
    Error, Fence, FenceRule, FencedStorage, LockKey, Result, Snapshot, async_trait, validate_value,
};

use crate::cluster::Shared;
use crate::error::{BACKEND, protocol};
use crate::keys::{fence_floor, fence_value, parse_fence};

/// Fenced storage on an etcd cluster: per resource a fence record
/// (`<prefix>/fence/<resource>`, never deleted) and a value (`<prefix>/data/<resource>`).
///
/// # One transaction per operation
///
/// An operation is one transaction that compares the stored fence record and, only if the
/// compare holds, records the fence and reads or writes the value, at one revision:
///
/// - *newer*: `fence < <token, 20 digits>` (the fixed-width encoding makes the byte-wise
///   compare one of tokens) *then* put the fence and do the operation;
/// - *first*: the fence record does not exist (`create_revision == 0`) *then* the same;
/// - *same*: the fence record is exactly the presented one *then* do the operation (default
///   rule only; [`FenceRule::Strict`] refuses an equal token).
///
/// etcd joins compares by AND only and a transaction may not carry the value three times
/// (etcd's request limit), so the storage sends the one case the last state it saw predicts
/// (a holder's first operation: *newer*; its next ones: *same*). When the compare fails, the
/// same transaction returns the stored fence instead: if the rule refuses the presented fence
/// against it, the operation is [`Error::Stale`] (fences only advance, so it stays refused);
/// otherwise the fence moved or the guess was wrong, and the transaction of the case it shows
/// is sent. Why it is safe: every write of value or fence happens inside a transaction whose
/// compare proved the rule against the fence stored at that very revision, and a refused
/// operation writes nothing. Reads (`read`) record the fence the same way;
/// [`peek`](FencedStorage::peek) reads both keys at one revision without fencing.
#[derive(Debug, Clone)]
pub struct EtcdStorage {
    shared: Arc<Shared>,
    rule: FenceRule,
    /// The fence record of each resource as last seen (`None`: no record).
    seen: Arc<Mutex<HashMap<LockKey, Option<Fence>>>>,
}

/// Resources remembered at once; past that the table starts over (a forgotten resource
/// costs at most one more round trip).
const REMEMBERED_RESOURCES: usize = 65_536;

/// Transactions one operation sends at most (the fence moving under it each time).
const ATTEMPTS: usize = 8;

/// What the transaction does once the fence is admitted.
#[derive(Clone, Copy)]
enum Operation<'a> {
    Read,
    Write(&'a [u8]),
}

/// Which case of the rule a transaction checks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Case {
    Newer,
    First,
    Same,
}

impl EtcdStorage {
    pub(crate) fn new(shared: Arc<Shared>, rule: FenceRule) -> Self {
        EtcdStorage {
            shared,
            rule,
            seen: Arc::default(),
        }
    }

    /// The same storage applying `rule`.
    pub fn with_rule(mut self, rule: FenceRule) -> Self {
        self.rule = rule;
        self
    }

    /// The rule it applies.
    pub fn rule(&self) -> FenceRule {
        self.rule
    }

    fn seen(&self) -> MutexGuard<'_, HashMap<LockKey, Option<Fence>>> {
        self.seen.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn remember(&self, resource: &LockKey, fence: Option<Fence>) {
        let mut seen = self.seen();
        if seen.len() >= REMEMBERED_RESOURCES && !seen.contains_key(resource) {
            seen.clear();
        }
        seen.insert(resource.clone(), fence);
    }

    /// The case to try for `presented` against a stored fence `stored` (`None`: no record);
    /// `None` when the rule refuses it.
    fn case(&self, stored: Option<Fence>, presented: Fence) -> Option<Case> {
        match stored {
            None => Some(Case::First),
            Some(stored) if !self.rule.admits(Some(stored), presented) => None,
            Some(stored) if stored == presented => Some(Case::Same),
            Some(_) => Some(Case::Newer),
        }
    }

    /// The transaction for `case`: the operation if the compare holds, else a read of the
    /// fence record.
    fn transaction(
        &self,
        resource: &LockKey,
        fence: Fence,
        operation: Operation<'_>,
        case: Case,
    ) -> Txn {
        let (fence_key, data_key) = (
            self.shared.keys.fence(resource),
            self.shared.keys.data(resource),
        );
        let compare = match case {
            Case::Newer => {
                Compare::value(fence_key.clone(), CompareOp::Less, fence_floor(fence.token))
            }
            Case::First => Compare::create_revision(fence_key.clone(), CompareOp::Equal, 0),
            Case::Same => Compare::value(fence_key.clone(), CompareOp::Equal, fence_value(fence)),
        };
        let mut ops = Vec::with_capacity(2);
        if case != Case::Same {
            ops.push(TxnOp::put(fence_key.clone(), fence_value(fence), None));
        }
        ops.push(match operation {
            Operation::Read => TxnOp::get(data_key, None),
            Operation::Write(value) => TxnOp::put(data_key, value, None),
        });
        Txn::new()
            .when([compare])
            .and_then(ops)
            .or_else([TxnOp::get(fence_key, None)])
    }

    /// Runs the operation under `fence`; `Ok(value read)` when admitted, `Error::Stale` when
    /// refused.
    async fn apply(
        &self,
        what: &str,
        resource: &LockKey,
        fence: Fence,
        operation: Operation<'_>,
    ) -> Result<Option<Vec<u8>>> {
        let guess = self.seen().get(resource).copied();
        let mut case = match guess {
            Some(stored) => self.case(stored, fence).unwrap_or(Case::Newer),
            // Most resources have a record: a new holder's first operation is *newer*.
            None => Case::Newer,
        };
        for _ in 0..ATTEMPTS {
            let txn = self.transaction(resource, fence, operation, case);
            let response = self.shared.txn(what, txn).await?;
            let mut ops = response.op_responses().into_iter();
            if response.succeeded() {
                self.remember(resource, Some(fence));
                // The admitted branch: [put fence,] put or get data.
                return match ops.next_back() {
                    Some(TxnOpResponse::Get(mut get)) => {
                        Ok(get.take_kvs().into_iter().next().map(value_of))
                    }
                    Some(TxnOpResponse::Put(_)) => Ok(None),
                    _ => Err(protocol(what)),
                };
            }
            let stored = match ops.next() {
                Some(TxnOpResponse::Get(mut get)) => match get.take_kvs().into_iter().next() {
                    Some(kv) => Some(parse_fence(kv.value())?),
                    None => None,
                },
                _ => return Err(protocol(what)),
            };
            self.remember(resource, stored);
            case = match (self.case(stored, fence), stored) {
                (Some(next), _) => next,
                (None, Some(current)) => {
                    return Err(Error::Stale {
                        resource: resource.to_string(),
                        presented: fence,
                        current,
                    });
                }
                (None, None) => return Err(protocol(what)),
            };
        }
        Err(Error::Unavailable {
            backend: BACKEND,
            message: format!(
                "{what} on {resource:?}: the fence moved under {ATTEMPTS} transactions in a row"
            ),
            source: None,
        })
    }
}

fn value_of(kv: KeyValue) -> Vec<u8> {
    kv.into_key_value().1
}

/// The key-values of the range requests of a transaction that ran its success branch.
fn ranges(response: &TxnResponse) -> Vec<Option<KeyValue>> {
    response
        .op_responses()
        .into_iter()
        .map(|op| match op {
            TxnOpResponse::Get(mut get) => get.take_kvs().into_iter().next(),
            _ => None,
        })
        .collect()
}

#[async_trait]
impl FencedStorage for EtcdStorage {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn max_value_len(&self) -> usize {
        self.shared.max_value_len
    }

    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        self.apply("fenced read", resource, fence, Operation::Read)
            .await
    }

    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        validate_value(value, self.shared.max_value_len)?;
        self.apply("fenced write", resource, fence, Operation::Write(value))
            .await
            .map(drop)
    }

    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        let txn = Txn::new().and_then([
            TxnOp::get(self.shared.keys.fence(resource), None),
            TxnOp::get(self.shared.keys.data(resource), None),
        ]);
        let response = self.shared.txn("peek", txn).await?;
        let mut reads = ranges(&response).into_iter();
        let (Some(fence), Some(data)) = (reads.next(), reads.next()) else {
            return Err(protocol("peek"));
        };
        let Some(fence) = fence else {
            return Ok(None);
        };
        Ok(Some(Snapshot {
            value: data.map(value_of),
            fence: parse_fence(fence.value())?,
        }))
    }
}
