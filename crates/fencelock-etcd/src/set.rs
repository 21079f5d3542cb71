//! A set of keys granted in one step: one transaction that holds every key's grant, each
//! under the same compares and with the same writes as a single grant that does not queue
//! (`grant.rs`, `InLine::Alone`), so that etcd commits all of them at one revision or none.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};
use fencelock_core::{Error, Lease, LockKey, OwnerId, Result, valid_until};
use futures_util::future::join_all;
use tokio::time::Instant;

use crate::backend::{EtcdLockBackend, GRANT_ATTEMPTS};
use crate::error::{BACKEND, is_lease_not_found, protocol};
use crate::grant::{first_under_prefix, ranges};
use crate::keys::{counter_value, holder_value};
use crate::leases::{LeaseSlot, Made};
use crate::reply::{Applied, applied, counter_seen};
use crate::seen::{CounterSeen, HeldBy};

/// etcd's default limit of operations in one list of a transaction (`--max-txn-ops`): the
/// compares, the *then* branch and the *else* branch are each checked against it.
pub(crate) const MAX_TXN_OPS: usize = 128;

/// Compares per key (lock absent, no reader, the counter as seen, no place) and reads per
/// key in the *else* branch (the same four): the longest lists of a set's transaction.
const OPS_PER_KEY: usize = 4;

/// The most keys one set's transaction holds within etcd's default limit: 32.
pub const MAX_SET_KEYS: usize = MAX_TXN_OPS / OPS_PER_KEY;

/// What [`Error::Unsupported`] names for a set too large for one transaction.
pub(crate) const LARGE_SET: &str = "a set of more than 32 keys in one step (etcd's default \
     limit of 128 operations per transaction; the keys are taken one at a time instead)";

/// What etcd answers a transaction with more operations than its `--max-txn-ops`.
const TOO_MANY_OPS: &str = "too many operations in txn request";

/// A lease in hand for one member, and whether it needs a keep-alive beside the grant.
type Slot = (LeaseSlot, bool);

/// What one set transaction did.
enum SetGrant {
    Granted(Vec<Lease>),
    /// Some key held, in a read phase, or queued for: nothing was written.
    Refused,
    /// Every key free and nobody queued, but some counter moved since this process saw it:
    /// the reply's counters are recorded, the transaction goes again.
    CounterMoved(Vec<Slot>),
    /// A lease of the transaction is gone: the set needs fresh ones.
    LeaseGone,
}

impl EtcdLockBackend {
    /// [`try_acquire_all`](fencelock_core::LockBackend::try_acquire_all): `keys` at least
    /// two, distinct and sorted (checked), at most [`MAX_SET_KEYS`]; a larger set is
    /// [`Error::Unsupported`], which the caller answers with the ordered form.
    pub(crate) async fn grant_set(
        &self,
        keys: &[LockKey],
        ttl: Duration,
    ) -> Result<Option<Vec<Lease>>> {
        if keys.len() < 2 {
            return Err(Error::config(format!(
                "a set in one step takes at least two keys, not {}",
                keys.len()
            )));
        }
        if let Some(pair) = keys.windows(2).find(|pair| pair[0] >= pair[1]) {
            return Err(Error::InvalidKey {
                key: pair[1].as_str().to_owned(),
                reason: "a set in one step takes distinct keys, sorted",
            });
        }
        if keys.len() > MAX_SET_KEYS {
            return Err(Error::unsupported(BACKEND, LARGE_SET));
        }
        let secs = self.leases.secs_for(ttl);
        let owner = OwnerId::random();
        let mut slots = self.set_leases(keys.len(), ttl, secs).await?;
        for _ in 0..GRANT_ATTEMPTS {
            let counters: Vec<CounterSeen> =
                keys.iter().map(|key| self.seen.counter(key)).collect();
            match self.set_once(keys, owner, slots, &counters, ttl).await? {
                SetGrant::Granted(leases) => {
                    tracing::debug!(keys = keys.len(), "a set granted in one step");
                    return Ok(Some(leases));
                }
                SetGrant::Refused => return Ok(None),
                SetGrant::CounterMoved(kept) => {
                    slots = kept
                        .into_iter()
                        .map(|(slot, _)| (slot, slot.alive_from.elapsed() > ttl / 10))
                        .collect();
                }
                SetGrant::LeaseGone => slots = self.fresh_leases(keys.len(), secs).await?,
            }
        }
        self.spares(slots);
        Ok(None)
    }

    /// One lease per member, each as a single grant takes it (`lease_for`): spares first,
    /// the rest granted side by side.
    async fn set_leases(&self, n: usize, ttl: Duration, secs: i64) -> Result<Vec<Slot>> {
        let mut slots = Vec::with_capacity(n);
        while slots.len() < n {
            let Some(spare) = self.leases.take_spare(secs) else {
                break;
            };
            slots.push((spare, spare.alive_from.elapsed() > ttl / 10));
        }
        match self.fresh_leases(n - slots.len(), secs).await {
            Ok(fresh) => {
                slots.extend(fresh);
                Ok(slots)
            }
            Err(e) => {
                for (slot, _) in slots {
                    self.leases.put_spare(slot);
                }
                Err(e)
            }
        }
    }

    /// `n` new leases of `secs` seconds, granted side by side; on an error those granted go
    /// to the spares.
    async fn fresh_leases(&self, n: usize, secs: i64) -> Result<Vec<Slot>> {
        let granted = join_all((0..n).map(|_| self.leases.grant(secs))).await;
        let mut fresh = Vec::with_capacity(n);
        let mut failed = None;
        for lease in granted {
            match lease {
                Ok(lease) => fresh.push((lease, false)),
                Err(e) => failed = Some(e),
            }
        }
        match failed {
            None => Ok(fresh),
            Some(e) => {
                for (slot, _) in fresh {
                    self.leases.put_spare(slot);
                }
                Err(e)
            }
        }
    }

    /// One transaction for the whole set with the counters as last seen.
    async fn set_once(
        &self,
        keys: &[LockKey],
        owner: OwnerId,
        slots: Vec<Slot>,
        counters: &[CounterSeen],
        ttl: Duration,
    ) -> Result<SetGrant> {
        let mut tokens = Vec::with_capacity(keys.len());
        for (key, counter) in keys.iter().zip(counters) {
            match counter.next_token(key) {
                Ok(token) => tokens.push(token),
                Err(e) => {
                    self.spares(slots);
                    return Err(e);
                }
            }
        }
        let mut compares = Vec::with_capacity(keys.len() * OPS_PER_KEY);
        let mut then = Vec::with_capacity(keys.len() * 2);
        let mut otherwise = Vec::with_capacity(keys.len() * OPS_PER_KEY);
        for (((key, counter), token), (slot, _)) in
            keys.iter().zip(counters).zip(&tokens).zip(&slots)
        {
            let (lock, counter_key) = (self.shared.keys.lock(key), self.shared.keys.counter(key));
            let (readers, queue) = (self.shared.keys.readers(key), self.shared.keys.queue(key));
            // A single grant's compares, as `grant_once` sends them for a try that does not
            // queue; a range compare on `version` treats an empty range as 0.
            compares.extend([
                Compare::create_revision(lock.clone(), CompareOp::Equal, 0),
                Compare::version(readers.clone(), CompareOp::Equal, 0).with_prefix(),
                Compare::mod_revision(counter_key.clone(), CompareOp::Equal, counter.mod_revision),
                Compare::version(queue.clone(), CompareOp::Equal, 0).with_prefix(),
            ]);
            then.extend([
                TxnOp::put(
                    lock.clone(),
                    holder_value(owner, *token),
                    Some(PutOptions::new().with_lease(slot.id)),
                ),
                TxnOp::put(counter_key.clone(), counter_value(*token), None),
            ]);
            otherwise.extend([
                TxnOp::get(lock, None),
                TxnOp::get(counter_key, None),
                TxnOp::get(readers, Some(first_under_prefix())),
                TxnOp::get(queue, Some(first_under_prefix().with_keys_only())),
            ]);
        }
        let txn = Txn::new().when(compares).and_then(then).or_else(otherwise);
        let sent = Instant::now();
        // The spares' keep-alives travel beside the transaction: one round trip.
        let (reply, refreshed) = tokio::join!(
            self.shared.call_raw_txn("granting a set", txn),
            join_all(slots.iter().map(|(slot, refresh)| async move {
                if *refresh {
                    Some(self.leases.keep_alive(slot.id).await)
                } else {
                    None
                }
            }))
        );
        let response = match reply {
            Ok(Ok(response)) => response,
            Ok(Err(e)) if is_lease_not_found(&e) => {
                // Which lease is gone etcd does not say: none of them is kept.
                self.revoke_all(&slots);
                return Ok(SetGrant::LeaseGone);
            }
            Ok(Err(e)) if e.to_string().contains(TOO_MANY_OPS) => {
                // A cluster with a lower limit than the default refused the set unread.
                self.spares(slots);
                return Err(Error::unsupported(BACKEND, LARGE_SET));
            }
            Ok(Err(e)) => {
                // The outcome is unknown: the locks may exist on these leases. Revoking the
                // leases deletes them.
                self.revoke_all(&slots);
                return Err(self.shared.error(e, "granting a set"));
            }
            Err(e) => {
                self.revoke_all(&slots);
                return Err(e);
            }
        };
        let Applied { response, revision } = applied(response, "granting a set")?;
        let mut lapsed = false;
        let slots: Vec<Slot> = slots
            .into_iter()
            .zip(refreshed)
            .map(|((slot, refresh), refreshed)| {
                let alive_from = match refreshed {
                    None => slot.alive_from,
                    Some(Ok(Ok(()))) => sent,
                    // The keep-alive's fate is unknown: the lease lives from its last refresh.
                    Some(Ok(Err(ref e))) if !is_lease_not_found(e) => slot.alive_from,
                    Some(Err(_)) => slot.alive_from,
                    Some(Ok(Err(_))) => {
                        lapsed = true;
                        slot.alive_from
                    }
                };
                (LeaseSlot { alive_from, ..slot }, refresh)
            })
            .collect();
        if lapsed {
            // The transaction found every lease, a keep-alive did not: that lease expired in
            // between and its member's lock goes with it. The set is not held; revoking the
            // others' leases frees their locks.
            self.revoke_all(&slots);
            if response.succeeded() {
                return Err(Error::Unavailable {
                    backend: BACKEND,
                    message: "a lease of a set expired while granting it".to_owned(),
                    source: None,
                });
            }
            return Ok(SetGrant::LeaseGone);
        }
        if response.succeeded() {
            let mut leases = Vec::with_capacity(keys.len());
            for ((key, token), (slot, _)) in keys.iter().zip(tokens).zip(slots) {
                self.seen.wrote(key, token.get(), revision);
                self.leases
                    .track(key, owner, slot, Made::at(revision), None);
                leases.push(Lease {
                    key: key.clone(),
                    owner,
                    token,
                    ttl,
                    valid_until: valid_until(slot.alive_from, ttl),
                });
            }
            return Ok(SetGrant::Granted(leases));
        }
        // A compare failed: nothing was written. Record what the reply read of each key.
        let reads = match ranges(&response) {
            Ok(reads) if reads.len() == keys.len() * OPS_PER_KEY => reads,
            Ok(_) => {
                self.spares(slots);
                return Err(protocol("granting a set"));
            }
            Err(e) => {
                self.spares(slots);
                return Err(e);
            }
        };
        let mut taken = false;
        for (key, read) in keys.iter().zip(reads.chunks_exact(OPS_PER_KEY)) {
            let [lock_kv, counter_kv, reader_kv, queue_kv] = read else {
                continue;
            };
            match counter_seen(counter_kv.first()) {
                Ok(counter) => self.seen.set_counter(key, counter),
                Err(e) => {
                    self.spares(slots);
                    return Err(e);
                }
            }
            let held = match (
                lock_kv.is_empty(),
                reader_kv.is_empty(),
                queue_kv.is_empty(),
            ) {
                (false, _, _) => Some(HeldBy::Writer),
                (true, false, _) => Some(HeldBy::Readers),
                (true, true, false) => Some(HeldBy::Queue),
                (true, true, true) => None,
            };
            if let Some(by) = held {
                self.seen.set_held_at(key, revision, by);
                taken = true;
            }
        }
        if taken {
            self.spares(slots);
            return Ok(SetGrant::Refused);
        }
        Ok(SetGrant::CounterMoved(slots))
    }

    /// The set's leases, which carry nothing, back to the spares.
    fn spares(&self, slots: Vec<Slot>) {
        for (slot, _) in slots {
            self.leases.put_spare(slot);
        }
    }

    /// Revokes every lease of the set (deleting whatever lock it may carry).
    fn revoke_all(&self, slots: &[Slot]) {
        for (slot, _) in slots {
            self.leases.revoke_in_background(slot.id);
        }
    }
}
