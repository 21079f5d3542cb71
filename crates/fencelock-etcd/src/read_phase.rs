//! Shared (reader) locks: one reader key per reader, on the reader's own lease, each carrying
//! the read phase's fence.
//!
//! A read phase lives exactly while at least one key under `<prefix>/read/<n>:<key>/` exists.
//! - **Starting a phase** is one transaction: *if* the lock key does not exist, no reader key
//!   exists and the counter is at the revision last seen, *then* bump the counter (the one
//!   exclusive grants use) and put this reader's key with the value `<owner>:<token>` of a
//!   freshly drawn phase owner and the new token.
//! - **Joining** is one transaction: *if* the lock key does not exist and the reader key seen
//!   (any reader of the live phase) still exists with the create revision seen, *then* put
//!   this reader's key with that key's value, the phase's fence.
//! - An **exclusive grant** compares that no reader key exists (see `grant.rs`), so a writer
//!   and a phase never overlap on the server; readers end on their own leases, so the phase
//!   ends with its last reader, and the next reader starts a new phase with a new token.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, KeyValue, PutOptions, Txn, TxnOp};
use fencelock_core::{
    Error, Fence, Lease, LockKey, LostReason, OwnerId, ReadPhase, Result, valid_until,
};
use tokio::time::Instant;

use crate::backend::EtcdLockBackend;
use crate::error::is_lease_not_found;
use crate::grant::first_under_prefix;
use crate::keys::{counter_value, holder_value, parse_holder};
use crate::leases::{LeaseSlot, Made};
use crate::reply::{Applied, counter_seen, lost_reason, reads};
use crate::seen::{CounterSeen, HeldBy};

/// Transactions one `try_acquire_shared` sends at most while the phase or the counter keeps
/// moving under it; then it reports the lock as taken and the caller's wait goes on.
const JOIN_ATTEMPTS: usize = 4;

/// What one reader transaction saw when its compare failed.
struct Seen {
    lock: Option<KeyValue>,
    counter: CounterSeen,
    reader: Option<KeyValue>,
}

impl EtcdLockBackend {
    /// [`LockBackend::try_acquire_shared`](fencelock_core::LockBackend::try_acquire_shared).
    pub(crate) async fn join_read_phase(
        &self,
        key: &LockKey,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        let secs = self.leases.secs_for(ttl);
        let lease = self.lease_refreshed(ttl, secs, "granting a reader").await?;
        // Start as if no phase lived; the failed compare's reads say what to do next.
        let mut member: Option<KeyValue> = None;
        for _ in 0..JOIN_ATTEMPTS {
            let attempt = match &member {
                None => self.start_phase(key, reader, (lease, ttl)).await,
                Some(kv) => self.join_phase(key, reader, (lease, ttl), kv).await,
            };
            let seen = match attempt {
                Ok(Ok(granted)) => return Ok(Some(granted)),
                Ok(Err(seen)) => seen,
                Err(e) => {
                    // The outcome is unknown: a reader key may exist on this lease. Revoking
                    // the lease deletes it.
                    self.leases.revoke_in_background(lease.id);
                    return Err(e);
                }
            };
            self.seen.set_counter(key, seen.counter);
            if let Some(lock) = seen.lock {
                self.seen
                    .set_held_at(key, lock.mod_revision(), HeldBy::Writer);
                self.leases.put_spare(lease);
                return Ok(None);
            }
            member = seen.reader;
        }
        self.leases.put_spare(lease);
        Ok(None)
    }

    /// One transaction starting a new phase with this reader.
    async fn start_phase(
        &self,
        key: &LockKey,
        reader: OwnerId,
        (lease, ttl): (LeaseSlot, Duration),
    ) -> Result<std::result::Result<Lease, Seen>> {
        let counter = self.seen.counter(key);
        let token = counter.next_token(key)?;
        let fence = Fence::new(token, OwnerId::random());
        let keys = &self.shared.keys;
        let counter_key = keys.counter(key);
        let txn = Txn::new()
            .when([
                Compare::create_revision(keys.lock(key), CompareOp::Equal, 0),
                Compare::version(keys.readers(key), CompareOp::Equal, 0).with_prefix(),
                Compare::mod_revision(counter_key.clone(), CompareOp::Equal, counter.mod_revision),
            ])
            .and_then([
                TxnOp::put(counter_key, counter_value(token), None),
                TxnOp::put(
                    keys.reader(key, reader),
                    holder_value(fence.owner, fence.token),
                    Some(PutOptions::new().with_lease(lease.id)),
                ),
            ])
            .or_else(self.phase_reads(key));
        let Applied { response, revision } = self.txn("granting a reader", txn).await?;
        if !response.succeeded() {
            return self.seen_from(&response, "granting a reader").map(Err);
        }
        self.seen.wrote(key, token.get(), revision);
        Ok(Ok(self.granted(key, reader, (fence, ttl), lease, revision)))
    }

    /// One transaction joining the live phase that `member` (a reader key of it) shows.
    async fn join_phase(
        &self,
        key: &LockKey,
        reader: OwnerId,
        (lease, ttl): (LeaseSlot, Duration),
        member: &KeyValue,
    ) -> Result<std::result::Result<Lease, Seen>> {
        let fence = parse_holder(member.value())?;
        let keys = &self.shared.keys;
        let txn = Txn::new()
            .when([
                Compare::create_revision(keys.lock(key), CompareOp::Equal, 0),
                Compare::create_revision(member.key(), CompareOp::Equal, member.create_revision()),
            ])
            .and_then([TxnOp::put(
                keys.reader(key, reader),
                member.value(),
                Some(PutOptions::new().with_lease(lease.id)),
            )])
            .or_else(self.phase_reads(key));
        let Applied { response, revision } = self.txn("joining a read phase", txn).await?;
        if !response.succeeded() {
            return self.seen_from(&response, "joining a read phase").map(Err);
        }
        Ok(Ok(self.granted(key, reader, (fence, ttl), lease, revision)))
    }

    /// Records a granted reader and builds its lease. A reader asking again in the phase it
    /// is in moved its key to `lease`: its previous lease carries nothing any more.
    fn granted(
        &self,
        key: &LockKey,
        reader: OwnerId,
        (fence, ttl): (Fence, Duration),
        lease: LeaseSlot,
        revision: i64,
    ) -> Lease {
        if let Some((previous, _)) = self.leases.forget(key, reader)
            && previous.lease.id != lease.id
        {
            self.leases.revoke_in_background(previous.lease.id);
        }
        self.leases
            .track(key, reader, lease, Made::at(revision), None);
        Lease {
            key: key.clone(),
            owner: fence.owner,
            token: fence.token,
            ttl,
            valid_until: valid_until(lease.alive_from, ttl),
        }
    }

    /// The reads a failed reader transaction returns: the lock key, the counter, one reader.
    fn phase_reads(&self, key: &LockKey) -> [TxnOp; 3] {
        let keys = &self.shared.keys;
        [
            TxnOp::get(keys.lock(key), None),
            TxnOp::get(keys.counter(key), None),
            TxnOp::get(keys.readers(key), Some(first_under_prefix())),
        ]
    }

    fn seen_from(&self, response: &etcd_client::TxnResponse, what: &str) -> Result<Seen> {
        let [lock, counter, reader] = reads(response, what)?;
        Ok(Seen {
            lock,
            counter: counter_seen(counter.as_ref())?,
            reader,
        })
    }

    /// [`LockBackend::extend_shared`](fencelock_core::LockBackend::extend_shared).
    pub(crate) async fn renew_reader(
        &self,
        lease: &Lease,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Lease> {
        let secs = self.leases.secs_for(ttl);
        let Some(held) = self.leases.begin_renewal(&lease.key, reader) else {
            return self.move_reader(lease, reader, ttl, secs, None).await;
        };
        let reader_key = self.shared.keys.reader(&lease.key, reader);
        let ours = holder_value(lease.owner, lease.token);
        let result = async {
            if held.lease.secs != secs {
                return self
                    .move_reader(lease, reader, ttl, secs, Some(held.lease.id))
                    .await
                    .map(|l| (l, None));
            }
            let sent = Instant::now();
            let (refreshed, current) = tokio::join!(
                self.leases.keep_alive(held.lease.id),
                self.shared.get("renewing a reader", &reader_key)
            );
            let current = current?.take_kvs().into_iter().next();
            match current {
                Some(kv) if kv.value() == ours.as_slice() && kv.lease() == held.lease.id => {}
                Some(kv) if kv.value() == ours.as_slice() => {
                    return self
                        .move_reader(lease, reader, ttl, secs, Some(kv.lease()))
                        .await
                        .map(|l| (l, None));
                }
                other => return Err(Error::lease_lost(&lease.key, lost_reason(other.as_ref()))),
            }
            match refreshed? {
                Ok(()) => {}
                Err(e) if is_lease_not_found(&e) => {
                    return Err(Error::lease_lost(&lease.key, LostReason::NotHeld));
                }
                Err(e) => return Err(self.shared.error(e, "renewing a reader")),
            }
            let renewed = LeaseSlot {
                alive_from: sent,
                ..held.lease
            };
            Ok((
                Lease {
                    ttl,
                    valid_until: valid_until(sent, ttl),
                    ..lease.clone()
                },
                Some(renewed),
            ))
        }
        .await;
        let (outcome, renewed) = match result {
            Ok((extended, renewed)) => (Ok(extended), renewed),
            Err(e) => (Err(e), None),
        };
        self.leases.end_renewal(&lease.key, reader, renewed);
        outcome
    }

    /// Moves `reader`'s key to a new lease of `secs` seconds if it still carries the phase's
    /// fence; never re-creates a reader key that is gone.
    async fn move_reader(
        &self,
        lease: &Lease,
        reader: OwnerId,
        ttl: Duration,
        secs: i64,
        old: Option<i64>,
    ) -> Result<Lease> {
        let fresh = self.leases.grant(secs).await?;
        let reader_key = self.shared.keys.reader(&lease.key, reader);
        let ours = holder_value(lease.owner, lease.token);
        let txn = Txn::new()
            .when([Compare::value(
                reader_key.clone(),
                CompareOp::Equal,
                ours.clone(),
            )])
            .and_then([TxnOp::put(
                reader_key.clone(),
                ours,
                Some(PutOptions::new().with_lease(fresh.id)),
            )])
            .or_else([TxnOp::get(reader_key, None)]);
        let Applied { response, revision } = self.txn("renewing a reader", txn).await?;
        if !response.succeeded() {
            self.leases.put_spare(fresh);
            let [kv] = reads(&response, "renewing a reader")?;
            return Err(Error::lease_lost(&lease.key, lost_reason(kv.as_ref())));
        }
        if let Some(id) = old.filter(|id| *id != 0 && *id != fresh.id) {
            self.leases.revoke_in_background(id);
        }
        self.leases.forget(&lease.key, reader);
        self.leases
            .track(&lease.key, reader, fresh, Made::created_at(revision), None);
        Ok(Lease {
            ttl,
            valid_until: valid_until(fresh.alive_from, ttl),
            ..lease.clone()
        })
    }

    /// [`LockBackend::release_shared`](fencelock_core::LockBackend::release_shared): deletes
    /// the reader's key only if it still carries the phase's fence.
    pub(crate) async fn release_reader(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
        let forgotten = self.leases.forget(&lease.key, reader);
        let reader_key = self.shared.keys.reader(&lease.key, reader);
        let txn = Txn::new()
            .when([Compare::value(
                reader_key.clone(),
                CompareOp::Equal,
                holder_value(lease.owner, lease.token),
            )])
            .and_then([TxnOp::delete(reader_key, None)]);
        let Applied { response, .. } = self.txn("releasing a reader", txn).await?;
        let released = response.succeeded();
        if let Some((held, no_renewal)) = forgotten {
            self.leases.after_release(held, released && no_renewal);
        }
        Ok(released)
    }

    /// [`LockBackend::inspect_shared`](fencelock_core::LockBackend::inspect_shared): the
    /// live phase's fence, its readers, and the longest time left on their leases (etcd
    /// reports whole seconds, rounded down).
    pub(crate) async fn read_phase(&self, key: &LockKey) -> Result<Option<ReadPhase>> {
        let prefix = self.shared.keys.readers(key);
        let mut response = self
            .shared
            .call("inspecting a read phase", || {
                let mut kv = self.shared.client.kv_client();
                let prefix = prefix.clone();
                async move { kv.get(prefix, Some(GetOptions::new().with_prefix())).await }
            })
            .await?;
        let kvs = response.take_kvs();
        let Some(first) = kvs.first() else {
            return Ok(None);
        };
        let fence = parse_holder(first.value())?;
        let mut readers = 0;
        let mut remaining = Duration::ZERO;
        for kv in &kvs {
            if let Some(left) = self.time_left(kv).await? {
                readers += 1;
                remaining = remaining.max(left);
            }
        }
        Ok((readers > 0).then_some(ReadPhase {
            fence,
            readers,
            remaining,
        }))
    }
}
