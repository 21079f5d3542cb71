//! `EtcdLockBackend`: a lock key on a lease per grant, created by one transaction that also
//! bumps the key's token counter.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse,
};
use fencelock_core::{
    Capabilities, Error, FencingToken, Lease, LockBackend, LockInfo, LockKey, LockKinds,
    LostReason, OwnerId, QueueEntry, QueueRole, ReadPhase, Result, TimeAuthority, TokenGuarantee,
    WakeUp, async_trait, valid_until, validate_floor, validate_ttl,
};
use futures_util::future::try_join_all;
use tokio::time::Instant;
use tracing::Instrument;

use crate::cluster::Shared;
use crate::error::{BACKEND, is_lease_not_found, protocol};
use crate::grant::{Grant, InLine, first_under_prefix};
use crate::keys::{counter_value, holder_value, parse_counter, parse_holder};
use crate::leases::{Held, LeaseSlot, Leases};
use crate::queue::Queue;
use crate::reply::{Applied, applied, counter_seen, lost_reason, ranges, reads};
use crate::seen::{CounterSeen, HeldBy, Seen};
use crate::waiters::Waiters;

/// The longest ttl accepted: 30 days (etcd itself allows far longer leases).
pub const MAX_TTL: Duration = Duration::from_secs(30 * 24 * 3600);

/// Transactions one `try_acquire` sends at most while the lock is free but the counter keeps
/// moving (other clients granting and releasing in between); then it reports the lock as
/// taken, and the caller's wait goes on.
pub(crate) const GRANT_ATTEMPTS: usize = 4;

/// The lock backend on an etcd cluster.
///
/// # How it works
///
/// - **Grant**: one transaction: *if* the lock key `<prefix>/lock/<key>` does not exist
///   (`create_revision == 0`) *and* the counter `<prefix>/token/<key>` is at the revision
///   this process last saw, *then* put the lock key (value `<owner>:<token>`, attached to a
///   lease of the ttl rounded up to whole seconds) and put the counter to `token` (its last
///   value + 1); *else* read both. When only the counter moved, the reply carries its new
///   value and the transaction is sent again; so a grant takes one round trip when this
///   process saw the counter last, two otherwise. The lease is a spare (see below), refreshed
///   by a keep-alive sent beside the transaction when its last refresh is older than a tenth
///   of the ttl, or a fresh `LeaseGrant` first. `valid_until` counts from the lease's last
///   confirmed refresh.
/// - **Tokens**: every change to the counter is a compare-and-set on its `mod_revision`, so
///   each grant writes exactly the value it read + 1; the counter is never deleted and only
///   [`advance_token`](LockBackend::advance_token) raises it otherwise. Tokens per key
///   therefore strictly increase for as long as the cluster's data lives, through lease
///   expiry, releases, restarts and leader changes (etcd commits every write on a quorum).
/// - **Expiry** is etcd's: the cluster revokes an expired lease and deletes its lock key, on
///   the leader's clock. A paused client's lock is freed without it.
/// - **Extend**: a keep-alive of the grant's lease, with a read of the lock key alongside
///   that confirms it still carries this grant; a ttl of another whole number of seconds
///   moves the lock to a new lease in a transaction that compares the lock key's value. It
///   never re-creates a lock: a key that is gone or carries another grant is `LeaseLost`.
/// - **Release**: a transaction that deletes the lock key only if its value is still this
///   grant's (and its create revision, when this process made the grant): never a blind
///   delete, so a late retry cannot free a newer holder.
/// - **Leases are reused**: a lease whose lock was released, or that was never attached,
///   serves the next grant of the same ttl (see the crate docs for why that is safe).
/// - **Fair waiting**: a request of [`Locker`](fencelock_core::Locker) that waits keeps a
///   place in the key's queue (a key on a short lease of its own, ordered by create
///   revision), is granted only when no place is older, in the grant's one transaction
///   (which also deletes the place), and watches only the place just ahead of it (at the
///   head, the lock key): a release is followed by one grant. A holder that knows the waiter
///   behind it (read by its grant, or by its last look as a waiter) hands the lock over in its
///   release: one transaction puts the waiter's grant on the waiter's place lease, so a lock
///   passes down the queue in one write. A try that does not queue is refused while places
///   exist.
/// - **A set in one step** ([`try_acquire_all`](LockBackend::try_acquire_all)): one
///   transaction whose compares are every member's single-grant compares (lock key absent, no
///   reader key, no queued place, the counter at the revision seen) and whose *then* branch
///   is every member's grant (its lock key on a lease of its own, its counter + 1): every key
///   or none, at one revision. A set of more than [`MAX_SET_KEYS`](crate::MAX_SET_KEYS) keys
///   would pass etcd's default limit of 128 operations per transaction and is
///   [`Error::Unsupported`], so the locker takes it one key at a time.
/// - **Waiting outside the queue** watches the lock key for its deletion from the revision at
///   which it was seen held, so a release (or expiry) in between is not missed; each deletion
///   wakes one waiter of this backend, the others try again at their next pause.
///
/// etcd grants leases in whole seconds and no shorter than 1.5 election timeouts:
/// [`Capabilities::min_ttl`] is that minimum, measured at connect, and a ttl is rounded up to
/// whole seconds on the server (the local `valid_until` still counts the ttl asked for).
#[derive(Debug, Clone)]
pub struct EtcdLockBackend {
    pub(crate) shared: Arc<Shared>,
    pub(crate) leases: Arc<Leases>,
    pub(crate) seen: Arc<Seen>,
    waiters: Arc<Waiters>,
    pub(crate) queue: Arc<Queue>,
}

impl EtcdLockBackend {
    /// The time left on `kv`'s lease by the cluster's count, in whole seconds rounded down
    /// (zero: under a second); `None` once it expired (the cluster is deleting the key).
    pub(crate) async fn time_left(&self, kv: &KeyValue) -> Result<Option<Duration>> {
        let id = kv.lease();
        let ttl = self
            .shared
            .call("inspecting a lease", || {
                let mut leases = self.shared.client.lease_client();
                async move { leases.time_to_live(id, None).await }
            })
            .await?
            .ttl();
        Ok(u64::try_from(ttl).ok().map(Duration::from_secs))
    }

    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        EtcdLockBackend {
            leases: Arc::new(Leases::new(shared.clone())),
            seen: Arc::new(Seen::default()),
            waiters: Arc::new(Waiters::new(shared.clone())),
            queue: Arc::new(Queue::new(shared.clone())),
            shared,
        }
    }

    /// One transaction, its reply checked for a header.
    pub(crate) async fn txn(&self, what: &str, txn: Txn) -> Result<Applied> {
        let response = self.shared.txn(what, txn).await?;
        applied(response, what)
    }

    /// Moves the lock of `lease` to a lease of `secs` seconds (a spare, else a new one), if it
    /// still carries this grant. The old lease carries nothing any more: it is revoked, or,
    /// when it is the lease of `tracked` (the grant as this process recorded it) and this is
    /// the grant's only renewal in flight, it goes back to a pool as after a release (a handed
    /// grant's place lease, taken up for its ttl).
    async fn reattach(
        &self,
        lease: &Lease,
        ttl: Duration,
        secs: i64,
        old: Option<i64>,
        tracked: Option<&Held>,
    ) -> Result<Lease> {
        let fresh = self.lease_refreshed(ttl, secs, "extending").await?;
        let lock = self.shared.keys.lock(&lease.key);
        let ours = holder_value(lease.owner, lease.token);
        let txn = Txn::new()
            .when([Compare::value(lock.clone(), CompareOp::Equal, ours.clone())])
            .and_then([TxnOp::put(
                lock.clone(),
                ours,
                Some(PutOptions::new().with_lease(fresh.id).with_prev_key()),
            )])
            .or_else([TxnOp::get(lock, None)]);
        // On an error the lock may have moved to `fresh`: it is left to expire.
        let Applied { response, .. } = self.txn("extending", txn).await?;
        if !response.succeeded() {
            self.leases.put_spare(fresh);
            let [lock_kv] = reads(&response, "extending")?;
            return Err(Error::lease_lost(&lease.key, lost_reason(lock_kv.as_ref())));
        }
        let previous = match response.op_responses().first() {
            Some(TxnOpResponse::Put(put)) => put.prev_key().map(KeyValue::lease),
            _ => None,
        };
        let create_revision = match response.op_responses().first() {
            Some(TxnOpResponse::Put(put)) => put.prev_key().map_or(0, KeyValue::create_revision),
            _ => 0,
        };
        self.leases
            .moved(&lease.key, lease.owner, fresh, create_revision);
        // After `moved`, a renewal that starts uses `fresh`; one that started before is
        // counted, so a sole renewal means nobody can refresh the old lease any more.
        let reusable = tracked.filter(|held| {
            previous == Some(held.lease.id) && self.leases.sole_renewal(&lease.key, lease.owner)
        });
        let mut gone: Vec<i64> = previous.into_iter().chain(old).collect();
        gone.dedup();
        for id in gone {
            match reusable {
                Some(held) if held.lease.id == id => self.after_release(held.clone(), true),
                _ if id != 0 && id != fresh.id => self.leases.revoke_in_background(id),
                _ => {}
            }
        }
        Ok(Lease {
            ttl,
            valid_until: valid_until(fresh.alive_from, ttl),
            ..lease.clone()
        })
    }

    /// After a release: the lease of `held` goes back to a pool when `reusable`, else it is
    /// revoked. A handed grant's lease is a place lease: it goes back to the queue's pool,
    /// where the next waiter to enter takes it, so waiters that hand the lock down the queue
    /// need no new lease per turn; any other goes to the grants' spares.
    fn after_release(&self, held: Held, reusable: bool) {
        if reusable && held.made.on_place_lease {
            self.queue.spare_place_lease(held.lease);
        } else {
            self.leases.after_release(held, reusable);
        }
    }

    /// Reads the lock key (linearizable).
    async fn read_lock(&self, key: &LockKey) -> Result<Option<KeyValue>> {
        let mut response = self
            .shared
            .get("reading the lock", &self.shared.keys.lock(key))
            .await?;
        Ok(response.take_kvs().into_iter().next())
    }
}

#[async_trait]
impl LockBackend for EtcdLockBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(
            TokenGuarantee::Durable,
            TimeAuthority::Server,
            WakeUp::Notify,
            MAX_TTL,
        )
        .with_min_ttl(Duration::from_secs(
            self.shared.min_lease_secs.unsigned_abs(),
        ))
        // Leases are kept in etcd's store and restored (with a fresh ttl) after a restart.
        .with_locks_survive_restart(true)
        .with_kinds(LockKinds::GENERIC.with_shared())
        .with_fair(true)
        // One transaction grants a set of up to `MAX_SET_KEYS` keys (`set.rs`).
        .with_atomic_sets(true)
    }

    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        let span = tracing::debug_span!("try_acquire", backend = BACKEND, key = %key, ?ttl);
        async {
            let secs = self.leases.secs_for(ttl);
            let owner = OwnerId::random();
            let mut lease = self.lease_for(ttl, secs).await?;
            for _ in 0..GRANT_ATTEMPTS {
                let counter = self.seen.counter(key);
                match self
                    .grant_once(key, owner, lease, counter, ttl, InLine::Alone)
                    .await?
                {
                    Grant::Granted(granted) => {
                        tracing::debug!(token = granted.token.get(), "granted");
                        return Ok(Some(granted));
                    }
                    Grant::Refused(_) => return Ok(None),
                    Grant::CounterMoved => lease = self.lease_for(ttl, secs).await?,
                    Grant::LeaseGone => lease = (self.leases.grant(secs).await?, false),
                }
            }
            Ok(None)
        }
        .instrument(span)
        .await
    }

    async fn try_acquire_all(&self, keys: &[LockKey], ttl: Duration) -> Result<Option<Vec<Lease>>> {
        validate_ttl(ttl, &self.capabilities())?;
        let span = tracing::debug_span!(
            "try_acquire_all",
            backend = BACKEND,
            keys = keys.len(),
            ?ttl
        );
        self.grant_set(keys, ttl).instrument(span).await
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        validate_ttl(ttl, &self.capabilities())?;
        let secs = self.leases.secs_for(ttl);
        let Some(held) = self.leases.begin_renewal(&lease.key, lease.owner) else {
            // Not granted here, or already released: never touch a lease that may carry
            // another grant now; move the lock if it is still ours.
            return self.reattach(lease, ttl, secs, None, None).await;
        };
        let result = async {
            if held.lease.secs != secs {
                return self
                    .reattach(lease, ttl, secs, Some(held.lease.id), Some(&held))
                    .await
                    .map(|l| (l, None));
            }
            let sent = Instant::now();
            let (refreshed, current) = tokio::join!(
                self.leases.keep_alive(held.lease.id),
                self.read_lock(&lease.key)
            );
            let current = current?;
            let ours = holder_value(lease.owner, lease.token);
            match current {
                Some(kv) if kv.value() == ours.as_slice() && kv.lease() == held.lease.id => {}
                Some(kv) if kv.value() == ours.as_slice() => {
                    // Ours, on another lease (moved by a renewal whose answer was lost).
                    return self
                        .reattach(lease, ttl, secs, Some(kv.lease()), None)
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
                Err(e) => return Err(self.shared.error(e, "extending")),
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
        match result {
            Ok((extended, renewed)) => {
                self.leases.end_renewal(&lease.key, lease.owner, renewed);
                Ok(extended)
            }
            Err(e) => {
                self.leases.end_renewal(&lease.key, lease.owner, None);
                Err(e)
            }
        }
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let forgotten = self.leases.forget(&lease.key, lease.owner);
        if let Some((held, no_renewal)) = &forgotten
            && let Some(next) = &held.next
            && held.made.granted_at > 0
        {
            // The counter as this grant wrote it: while the grant holds, nobody else grants,
            // so a later write of it (`advance_token`) is the only way the compare fails.
            let counter = CounterSeen {
                last: lease.token.get(),
                mod_revision: held.made.granted_at,
            };
            let released = self
                .release_handing_off(lease, held.made.create_revision, next, counter)
                .await?;
            self.after_release(held.clone(), released && *no_renewal);
            return Ok(released);
        }
        let lock = self.shared.keys.lock(&lease.key);
        let mut compares = vec![Compare::value(
            lock.clone(),
            CompareOp::Equal,
            holder_value(lease.owner, lease.token),
        )];
        if let Some((held, _)) = &forgotten {
            compares.push(Compare::create_revision(
                lock.clone(),
                CompareOp::Equal,
                held.made.create_revision,
            ));
        }
        let txn = Txn::new()
            .when(compares)
            .and_then([TxnOp::delete(lock, None)]);
        let Applied { response, .. } = self.txn("releasing", txn).await?;
        let released = response.succeeded();
        if let Some((held, no_renewal)) = forgotten {
            self.after_release(held, released && no_renewal);
        }
        Ok(released)
    }

    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        let (held_at, by) = match self.seen.held_at(key) {
            Some(seen) => seen,
            None => {
                let response = self
                    .shared
                    .get("reading the lock", &self.shared.keys.lock(key))
                    .await?;
                if response.kvs().is_empty() {
                    return Ok(());
                }
                let revision = response
                    .header()
                    .map(|h| h.revision())
                    .ok_or_else(|| protocol("reading the lock"))?;
                self.seen.set_held_at(key, revision, HeldBy::Writer);
                (revision, HeldBy::Writer)
            }
        };
        match by {
            HeldBy::Writer => {
                self.waiters
                    .wait(&self.shared.keys.lock(key), false, held_at, max)
                    .await;
            }
            HeldBy::Readers => {
                self.waiters
                    .wait(&self.shared.keys.readers(key), true, held_at, max)
                    .await;
            }
            HeldBy::Queue => {
                self.waiters
                    .wait(&self.shared.keys.queue(key), true, held_at, max)
                    .await;
            }
        }
        Ok(())
    }

    async fn try_acquire_queued(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: OwnerId,
    ) -> Result<Option<Lease>> {
        self.try_queued(key, ttl, waiter)
            .instrument(tracing::debug_span!("try_acquire_queued", backend = BACKEND, key = %key))
            .await
    }

    async fn wait_for_turn(&self, key: &LockKey, waiter: OwnerId, max: Duration) -> Result<()> {
        self.wait_turn(key, waiter, max).await
    }

    async fn wait_for_grant(
        &self,
        key: &LockKey,
        waiter: OwnerId,
        ttl: Duration,
        max: Duration,
    ) -> Result<Option<Lease>> {
        self.wait_grant(key, waiter, ttl, max).await
    }

    async fn leave_queue(&self, key: &LockKey, waiter: OwnerId) -> Result<()> {
        self.leave(key, waiter).await
    }

    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        let (lock, counter) = (self.shared.keys.lock(key), self.shared.keys.counter(key));
        let readers = self.shared.keys.readers(key);
        let txn = Txn::new().and_then([
            TxnOp::get(lock, None),
            TxnOp::get(counter, None),
            TxnOp::get(readers, Some(first_under_prefix())),
        ]);
        let Applied { response, .. } = self.txn("inspecting", txn).await?;
        let [lock_kv, counter_kv, reader_kv] = reads(&response, "inspecting")?;
        // During a read phase the holder is the phase's fence (every reader key carries it).
        let lock_kv = lock_kv.or(reader_kv);
        let last_token = match &counter_kv {
            Some(kv) => Some(parse_counter(kv.value())?),
            None => None,
        };
        let (holder, remaining) = match lock_kv {
            None => (None, None),
            Some(kv) if kv.lease() == 0 => (Some(parse_holder(kv.value())?), None),
            Some(kv) => match self.time_left(&kv).await? {
                // Expired; the cluster is deleting the key.
                None => (None, None),
                Some(left) => (Some(parse_holder(kv.value())?), Some(left)),
            },
        };
        let mut info = LockInfo::new(key.clone());
        info.holder = holder;
        info.remaining = remaining;
        info.last_token = last_token;
        Ok(info)
    }

    /// One read of the lock key, the read phase's readers and the queue's places (each range
    /// by create revision: a place's is its arrival), then each entry's lease for its time
    /// left. An entry whose lease expired between the two is left out.
    async fn inspect_queue(&self, key: &LockKey) -> Result<Option<Vec<QueueEntry>>> {
        let keys = &self.shared.keys;
        let by_arrival = || {
            GetOptions::new()
                .with_prefix()
                .with_sort(SortTarget::Create, SortOrder::Ascend)
        };
        let txn = Txn::new().and_then([
            TxnOp::get(keys.lock(key), None),
            TxnOp::get(keys.readers(key), Some(by_arrival())),
            TxnOp::get(keys.queue(key), Some(by_arrival())),
        ]);
        let what = "listing the queue";
        let Applied { response, .. } = self.txn(what, txn).await?;
        let [lock, readers, places] = ranges(&response, what)?;
        let mut listed = Vec::with_capacity(lock.len() + readers.len() + places.len());
        let ranked = [
            (lock, QueueRole::Holder),
            (readers, QueueRole::Reader),
            (places, QueueRole::Waiting),
        ];
        for (kvs, role) in &ranked {
            for kv in kvs {
                let (owner, token) = match role {
                    QueueRole::Holder => {
                        let holder = parse_holder(kv.value())?;
                        (Some(holder.owner), Some(holder.token))
                    }
                    // A reader key carries its phase's fence.
                    QueueRole::Reader => (
                        keys.reader_of(key, kv.key()),
                        Some(parse_holder(kv.value())?.token),
                    ),
                    _ => (keys.waiter_of(key, kv.key()), None),
                };
                let owner = owner.ok_or_else(|| protocol(what))?;
                let entry = QueueEntry {
                    owner,
                    role: *role,
                    token,
                    remaining: Duration::ZERO,
                };
                listed.push((kv, entry));
            }
        }
        // Each entry's time left, from its lease: asked all at once, so a long queue costs
        // about one round trip rather than one per entry. A key on no lease keeps no time
        // (shown as none left); a lease gone since the listing drops its entry.
        let left = try_join_all(listed.iter().map(|(kv, _)| async move {
            match kv.lease() {
                0 => Ok(Some(Duration::ZERO)),
                _ => self.time_left(kv).await,
            }
        }))
        .await?;
        let entries = listed
            .into_iter()
            .zip(left)
            .filter_map(|((_, entry), left)| {
                Some(QueueEntry {
                    remaining: left?,
                    ..entry
                })
            })
            .collect();
        Ok(Some(entries))
    }

    async fn try_acquire_shared(
        &self,
        key: &LockKey,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        self.join_read_phase(key, reader, ttl)
            .instrument(tracing::debug_span!("try_acquire_shared", backend = BACKEND, key = %key))
            .await
    }

    async fn extend_shared(&self, lease: &Lease, reader: OwnerId, ttl: Duration) -> Result<Lease> {
        validate_ttl(ttl, &self.capabilities())?;
        self.renew_reader(lease, reader, ttl).await
    }

    async fn release_shared(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
        self.release_reader(lease, reader).await
    }

    async fn inspect_shared(&self, key: &LockKey) -> Result<Option<ReadPhase>> {
        self.read_phase(key).await
    }

    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        validate_floor(floor, crate::seen::LAST_TOKEN, "an etcd counter")?;
        let counter_key = self.shared.keys.counter(key);
        let mut response = self.shared.get("advancing the token", &counter_key).await?;
        let mut current = counter_seen(response.take_kvs().first())?;
        loop {
            if current.last >= floor.get() {
                self.seen.set_counter(key, current);
                return FencingToken::new(current.last)
                    .ok_or_else(|| protocol("advancing the token"));
            }
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    counter_key.clone(),
                    CompareOp::Equal,
                    current.mod_revision,
                )])
                .and_then([TxnOp::put(counter_key.clone(), counter_value(floor), None)])
                .or_else([TxnOp::get(counter_key.clone(), None)]);
            let Applied { response, revision } = self.txn("advancing the token", txn).await?;
            if response.succeeded() {
                self.seen.wrote(key, floor.get(), revision);
                return Ok(floor);
            }
            let [counter_kv] = reads(&response, "advancing the token")?;
            current = counter_seen(counter_kv.as_ref())?;
        }
    }
}
