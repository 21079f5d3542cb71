//! The grant: one transaction that creates the lock key on a lease and bumps the key's token
//! counter, with the lease it uses, and says where the grant stands in the key's queue.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse, TxnResponse,
};
use fencelock_core::{Error, Lease, LockKey, OwnerId, Result, valid_until};
use tokio::time::Instant;

use crate::backend::EtcdLockBackend;
use crate::error::{BACKEND, is_lease_not_found, protocol};
use crate::handoff::{Handed, behind_of, handed_to};
use crate::keys::{counter_value, holder_value};
use crate::leases::{LeaseSlot, Made};
use crate::reply::{Applied, applied, counter_seen};
use crate::seen::{CounterSeen, HeldBy, Successor};

/// Where a grant stands with respect to the key's queue of waiters (see `queue.rs`).
#[derive(Debug, Clone, Copy)]
pub(crate) enum InLine<'a> {
    /// A try that does not queue: granted only while no waiter is queued.
    Alone,
    /// A queued waiter's first try: granted only while no waiter is queued; refused, it puts
    /// its `place` on the place lease `lease` in the same transaction, at the back.
    Enter { place: &'a [u8], lease: i64 },
    /// A queued waiter at its `place`, created at revision `created`: granted only while that
    /// place still exists with that create revision and no place was created before it. The
    /// grant deletes the place (which wakes the waiter behind) and reads the place behind
    /// (whom its release hands the lock to). Refused, it sees whether the release of the
    /// holder before handed the lock to `waiter`.
    At {
        place: &'a [u8],
        created: i64,
        waiter: OwnerId,
    },
}

/// What one grant transaction did.
pub(crate) enum Grant {
    Granted(Lease),
    /// Held by another grant or a read phase, or (for a try that does not stand at the head)
    /// waited for by a queue; the lease went back to the spares.
    Refused(Refusal),
    /// The lock is free and the grant's turn, but the counter moved (read again now); the
    /// lease went back to the spares.
    CounterMoved,
    /// A lease of the transaction is gone (expired): the grant needs fresh ones.
    LeaseGone,
}

/// What a refused grant saw, at `revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) revision: i64,
    /// Who holds the lock, if anyone.
    pub(crate) held: Option<HeldBy>,
    /// The create revision of the waiter's place (`Enter`: the place just put), if it exists.
    pub(crate) place: Option<i64>,
    /// The place closest ahead of the waiter (`Alone`: any place), if any.
    pub(crate) ahead: Option<Vec<u8>>,
    /// Whether that place is known to be the only one ahead (the head): the waiter is next.
    pub(crate) next_in_line: bool,
    /// The place just behind the waiter's, if one was read.
    pub(crate) behind: Option<Successor>,
    /// The grant the previous holder's release handed to this waiter, if the lock key carries
    /// one.
    pub(crate) handed: Option<Handed>,
}

impl EtcdLockBackend {
    /// One grant transaction with `lease` and the counter as last seen, standing `in_line`;
    /// `refresh`: keep the lease alive beside the transaction (a spare last refreshed a while
    /// ago).
    pub(crate) async fn grant_once(
        &self,
        key: &LockKey,
        owner: OwnerId,
        (lease, refresh): (LeaseSlot, bool),
        counter: CounterSeen,
        ttl: Duration,
        in_line: InLine<'_>,
    ) -> Result<Grant> {
        let token = counter.next_token(key)?;
        let (lock, counter_key) = (self.shared.keys.lock(key), self.shared.keys.counter(key));
        let (readers, queue) = (self.shared.keys.readers(key), self.shared.keys.queue(key));
        let mut compares = vec![
            Compare::create_revision(lock.clone(), CompareOp::Equal, 0),
            // No reader key: a range compare on `version` treats an empty range as 0.
            Compare::version(readers.clone(), CompareOp::Equal, 0).with_prefix(),
            Compare::mod_revision(counter_key.clone(), CompareOp::Equal, counter.mod_revision),
        ];
        let mut then = vec![
            TxnOp::put(
                lock.clone(),
                holder_value(owner, token),
                Some(PutOptions::new().with_lease(lease.id)),
            ),
            TxnOp::put(counter_key.clone(), counter_value(token), None),
        ];
        let mut otherwise = Vec::new();
        match in_line {
            InLine::Alone | InLine::Enter { .. } => {
                // No place: a range compare on `version` treats an empty range as 0.
                compares.push(Compare::version(queue.clone(), CompareOp::Equal, 0).with_prefix());
            }
            InLine::At { place, created, .. } => {
                compares.push(Compare::create_revision(place, CompareOp::Equal, created));
                // Every place of the queue (this one included) created at or after it: a
                // range compare holds for every key in the range.
                compares.push(
                    Compare::create_revision(queue.clone(), CompareOp::Greater, created - 1)
                        .with_prefix(),
                );
                then.extend([
                    TxnOp::delete(place, None),
                    TxnOp::get(queue.clone(), Some(behind_of(created))),
                ]);
            }
        }
        if let InLine::Enter { place, lease } = in_line {
            otherwise.push(TxnOp::put(
                place,
                Vec::new(),
                Some(PutOptions::new().with_lease(lease)),
            ));
        }
        otherwise.extend([
            TxnOp::get(lock, None),
            TxnOp::get(counter_key, None),
            TxnOp::get(readers, Some(first_under_prefix())),
        ]);
        match in_line {
            InLine::Alone => otherwise.push(TxnOp::get(
                queue,
                Some(first_under_prefix().with_keys_only()),
            )),
            InLine::Enter { place, .. } => otherwise.extend([
                TxnOp::get(place, Some(GetOptions::new().with_keys_only())),
                // The newest two places: this one (just put) and the one before it.
                TxnOp::get(
                    queue,
                    Some(
                        GetOptions::new()
                            .with_prefix()
                            .with_keys_only()
                            .with_sort(SortTarget::Create, SortOrder::Descend)
                            .with_limit(2),
                    ),
                ),
            ]),
            InLine::At { place, created, .. } => otherwise.extend([
                TxnOp::get(place, Some(GetOptions::new().with_keys_only())),
                TxnOp::get(queue.clone(), Some(ahead_of(created))),
                TxnOp::get(queue, Some(behind_of(created))),
            ]),
        }
        let txn = Txn::new().when(compares).and_then(then).or_else(otherwise);
        let sent = Instant::now();
        let (reply, refreshed) = if refresh {
            // The spare's keep-alive travels beside the transaction: one round trip.
            let (reply, refreshed) = tokio::join!(
                self.shared.call_raw_txn("granting", txn),
                self.leases.keep_alive(lease.id)
            );
            (reply?, Some(refreshed))
        } else {
            (self.shared.call_raw_txn("granting", txn).await?, None)
        };
        let response = match reply {
            Ok(response) => response,
            Err(e) if is_lease_not_found(&e) => return Ok(Grant::LeaseGone),
            Err(e) => {
                // The outcome is unknown: the lock may exist on this lease. Revoking the
                // lease deletes it.
                self.leases.revoke_in_background(lease.id);
                return Err(self.shared.error(e, "granting"));
            }
        };
        let Applied { response, revision } = applied(response, "granting")?;
        let alive_from = match refreshed {
            None => lease.alive_from,
            Some(Ok(Ok(()))) => sent,
            // The keep-alive's fate is unknown: the lease lives from its last refresh.
            Some(Ok(Err(ref e))) if !is_lease_not_found(e) => lease.alive_from,
            Some(Err(_)) => lease.alive_from,
            Some(Ok(Err(_))) => {
                if response.succeeded() {
                    // The transaction found the lease, the keep-alive did not: it expired
                    // in between and the lock goes with it.
                    return Err(Error::Unavailable {
                        backend: BACKEND,
                        message: format!(
                            "the lease of the grant of {key:?} expired while granting"
                        ),
                        source: None,
                    });
                }
                return Ok(Grant::LeaseGone);
            }
        };
        let lease = LeaseSlot {
            alive_from,
            ..lease
        };
        if response.succeeded() {
            self.seen.wrote(key, token.get(), revision);
            // An `At` grant read the waiter behind it: its release hands the lock over.
            let next = match in_line {
                InLine::At { .. } => ranges(&response)?
                    .into_iter()
                    .next()
                    .and_then(|behind| behind.first().and_then(|kv| self.successor_of(key, kv))),
                InLine::Alone | InLine::Enter { .. } => None,
            };
            self.leases
                .track(key, owner, lease, Made::at(revision), next);
            return Ok(Grant::Granted(Lease {
                key: key.clone(),
                owner,
                token,
                ttl,
                valid_until: valid_until(alive_from, ttl),
            }));
        }
        // The compare failed: the lease carries nothing and serves a later grant.
        self.leases.put_spare(lease);
        let mut ranges = ranges(&response)?.into_iter();
        let mut next = || ranges.next().ok_or_else(|| protocol("granting"));
        let (lock_kv, counter_kv, reader_kv) = (next()?, next()?, next()?);
        let handed = match in_line {
            InLine::At { waiter, .. } => lock_kv.first().and_then(|kv| handed_to(kv, waiter)),
            InLine::Alone | InLine::Enter { .. } => None,
        };
        self.seen
            .set_counter(key, counter_seen(counter_kv.first())?);
        let held = match (lock_kv.is_empty(), reader_kv.is_empty()) {
            (false, _) => Some(HeldBy::Writer),
            (true, false) => Some(HeldBy::Readers),
            (true, true) => None,
        };
        let (place, ahead, next_in_line) = match in_line {
            InLine::Alone => (None, next()?.first().map(|kv| kv.key().to_vec()), false),
            InLine::Enter { .. } | InLine::At { .. } => {
                let place = next()?.first().map(KeyValue::create_revision);
                let before: Vec<KeyValue> = match place {
                    Some(created) => next()?
                        .into_iter()
                        .filter(|kv| kv.create_revision() < created)
                        .collect(),
                    None => Vec::new(),
                };
                // `At` reads the two places before it; `Enter` only the newest two, itself
                // among them.
                let next_in_line = matches!(in_line, InLine::At { .. }) && before.len() == 1;
                (
                    place,
                    before.first().map(|kv| kv.key().to_vec()),
                    next_in_line,
                )
            }
        };
        let behind = match in_line {
            InLine::At { .. } => next()?.first().and_then(|kv| self.successor_of(key, kv)),
            InLine::Alone | InLine::Enter { .. } => None,
        };
        match held {
            Some(by) => self.seen.set_held_at(key, revision, by),
            None if ahead.is_some() => self.seen.set_held_at(key, revision, HeldBy::Queue),
            None => {}
        }
        let turn = held.is_none() && ahead.is_none();
        match in_line {
            InLine::Alone if turn => Ok(Grant::CounterMoved),
            InLine::At { .. } if turn && place.is_some() => Ok(Grant::CounterMoved),
            _ => Ok(Grant::Refused(Refusal {
                revision,
                held,
                place,
                ahead,
                next_in_line,
                behind,
                handed,
            })),
        }
    }

    /// A lease of `secs` seconds, alive for its whole ttl from the returned `alive_from`: a
    /// spare refreshed within the last tenth of `ttl`, a stale spare refreshed first, or a new
    /// one (`what` names the operation in errors). For a reader's grant and a lock being moved,
    /// which send no transaction a keep-alive could travel beside.
    pub(crate) async fn lease_refreshed(
        &self,
        ttl: Duration,
        secs: i64,
        what: &str,
    ) -> Result<LeaseSlot> {
        let (spare, refresh) = self.lease_for(ttl, secs).await?;
        if !refresh {
            return Ok(spare);
        }
        let sent = Instant::now();
        match self.leases.keep_alive(spare.id).await? {
            Ok(()) => Ok(LeaseSlot {
                alive_from: sent,
                ..spare
            }),
            Err(e) if is_lease_not_found(&e) => self.leases.grant(secs).await,
            Err(e) => Err(self.shared.error(e, what)),
        }
    }

    /// A lease for a grant of `ttl` (`secs` seconds on the server), and whether it needs a
    /// keep-alive beside the grant: a spare refreshed (granted or kept alive) within the
    /// last tenth of `ttl` is used as it is, and the grant's deadline counts from that
    /// refresh, at most a tenth shorter than asked; an older spare is refreshed; without a
    /// spare, a new lease.
    pub(crate) async fn lease_for(&self, ttl: Duration, secs: i64) -> Result<(LeaseSlot, bool)> {
        match self.leases.take_spare(secs) {
            Some(spare) => Ok((spare, spare.alive_from.elapsed() > ttl / 10)),
            None => Ok((self.leases.grant(secs).await?, false)),
        }
    }
}

/// Reads the first key under a prefix (keys and values), enough to tell whether a read phase
/// lives and what its fence is.
pub(crate) fn first_under_prefix() -> GetOptions {
    GetOptions::new().with_prefix().with_limit(1)
}

/// Reads (under the queue's prefix) the two places created last before revision `created`:
/// the first is the one a waiter whose place was created then waits for, and when it is
/// alone, that waiter is next.
pub(crate) fn ahead_of(created: i64) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_keys_only()
        .with_max_create_revision(created - 1)
        .with_sort(SortTarget::Create, SortOrder::Descend)
        .with_limit(2)
}

/// The key-values read by each range request of the branch a transaction ran, in order;
/// puts and deletes are passed over.
pub(crate) fn ranges(response: &TxnResponse) -> Result<Vec<Vec<KeyValue>>> {
    response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(mut get) => Some(Ok(get.take_kvs())),
            TxnOpResponse::Put(_) | TxnOpResponse::Delete(_) => None,
            TxnOpResponse::Txn(_) => Some(Err(protocol("granting"))),
        })
        .collect()
}
