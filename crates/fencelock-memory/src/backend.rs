//! `MemoryLockBackend`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{
    Capabilities, Error, Fence, FencingToken, Lease, LockBackend, LockInfo, LockKey, LockKinds,
    LostReason, OwnerId, QueueEntry, QueueRole, ReadPhase, Result, TimeAuthority, TokenGuarantee,
    WakeUp, valid_until, validate_floor, validate_ttl,
};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::BACKEND;
use crate::queue::{HANDOFF_TTL, Queue, TURN_REFRESH};
use crate::shards::Shards;

/// The longest ttl the memory backend accepts: one year.
const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

#[derive(Debug, Default)]
struct Entry {
    holder: Option<Holder>,
    /// The read phase: readers that overlap share its token and owner.
    readers: Option<Readers>,
    last_token: u64,
    /// Wakes the requests that wait for any release ([`LockBackend::wait_for_release`]).
    released: Arc<Notify>,
    /// The queued requests, granted in arrival order.
    queue: Queue,
}

#[derive(Debug)]
struct Readers {
    fence: Fence,
    /// Each reader's own deadline.
    expiries: HashMap<OwnerId, Instant>,
}

impl Readers {
    /// The latest deadline of a reader still live at `now`.
    fn live_until(&self, now: Instant) -> Option<Instant> {
        self.expiries.values().copied().filter(|t| *t > now).max()
    }
}

#[derive(Debug, Clone, Copy)]
struct Holder {
    owner: OwnerId,
    token: FencingToken,
    expires_at: Instant,
}

impl Entry {
    /// The holder whose lease has not expired at `now`.
    fn live_holder(&self, now: Instant) -> Option<Holder> {
        self.holder.filter(|h| h.expires_at > now)
    }

    /// The read phase if a reader of it is still live at `now`, with its latest deadline.
    fn live_readers(&self, now: Instant) -> Option<(&Readers, Instant)> {
        let readers = self.readers.as_ref()?;
        readers.live_until(now).map(|until| (readers, until))
    }

    /// When the key stops being held by anyone (a writer or the last reader), if it is held.
    fn held_until(&self, now: Instant) -> Option<Instant> {
        let writer = self.live_holder(now).map(|h| h.expires_at);
        let readers = self.live_readers(now).map(|(_, until)| until);
        writer.max(readers)
    }

    /// Whether a try that does not queue must leave the key alone at `now`: it is held, or a
    /// live queued waiter comes first.
    fn blocked(&self, now: Instant) -> bool {
        self.held_until(now).is_some() || self.queue.head(now).is_some()
    }

    /// Grants a free lock to the first live queued waiter, for the shorter of its ttl and
    /// [`HANDOFF_TTL`], and wakes that waiter alone: the step a try of that waiter would take,
    /// taken for it. A counter with no token left grants nothing and wakes the waiter, whose
    /// own try then reports it.
    fn hand_off(&mut self, now: Instant) {
        if self.held_until(now).is_some() {
            return;
        }
        let Some(place) = self.queue.pop_head(now) else {
            return;
        };
        if self
            .grant(place.waiter, place.ttl.min(HANDOFF_TTL), now)
            .is_err()
        {
            place.turn.notify_one();
            self.queue.put_back(place);
            return;
        }
        place.turn.notify_one();
    }

    /// Makes `owner` the holder for `ttl` from `now` with the key's next token, ending any read
    /// phase: the one way a lock is granted (a try, a set, a hand-off).
    fn grant(&mut self, owner: OwnerId, ttl: Duration, now: Instant) -> Result<FencingToken> {
        let token = self.next_token()?;
        self.readers = None;
        self.holder = Some(Holder {
            owner,
            token,
            expires_at: now + ttl,
        });
        Ok(token)
    }

    /// The next token, recorded as the last one.
    fn next_token(&mut self) -> Result<FencingToken> {
        let token = self.peek_token()?;
        self.last_token = token.get();
        Ok(token)
    }

    /// The token [`next_token`](Self::next_token) would draw, drawing nothing.
    fn peek_token(&self) -> Result<FencingToken> {
        let next = self.last_token.checked_add(1).ok_or_else(exhausted)?;
        FencingToken::new(next).ok_or_else(exhausted)
    }
}

/// An in-process [`LockBackend`]. Clones share the same locks.
///
/// Tokens come from one counter per key that is never removed, so they strictly increase for
/// the life of the backend; they do not survive the process ([`TokenGuarantee::None`]).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fencelock_core::Result<()> {
/// use std::time::Duration;
/// use fencelock_core::{LockBackend, LockKey};
/// use fencelock_memory::MemoryLockBackend;
///
/// let backend = MemoryLockBackend::new();
/// let key = LockKey::new("cache/warm")?;
/// let lease = backend.try_acquire(&key, Duration::from_secs(5)).await?.expect("free");
/// assert!(backend.try_acquire(&key, Duration::from_secs(5)).await?.is_none(), "held");
/// assert!(backend.release(&lease).await?);
/// let next = backend.try_acquire(&key, Duration::from_secs(5)).await?.expect("free again");
/// assert!(next.token > lease.token);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct MemoryLockBackend {
    entries: Arc<Shards<Entry>>,
    closed: Arc<AtomicBool>,
}

impl Default for MemoryLockBackend {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryLockBackend {
    /// An empty backend.
    pub fn new() -> Self {
        MemoryLockBackend {
            entries: Arc::new(Shards::new()),
            closed: Arc::new(AtomicBool::new(false)),
        }
    }

    /// Closes the backend for every clone: later calls fail with [`Error::Unavailable`], as a
    /// networked backend's would after its server went away, so held guards see their leases
    /// lost. Locks held at that moment are never released.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for shard in self.entries.all() {
            for entry in shard.values() {
                entry.released.notify_waiters();
                entry.queue.wake_all();
            }
        }
    }

    /// Sleeps until the lock is handed to `waiter` or may be free for its try, at most `max`
    /// and [`TURN_REFRESH`] (so its next try keeps its place). The handed grant, with the
    /// time it was read, when the lock is `waiter`'s.
    async fn wait_turn(
        &self,
        key: &LockKey,
        waiter: OwnerId,
        max: Duration,
    ) -> Result<Option<(Holder, Instant)>> {
        self.open()?;
        let handed = |shard: &crate::shards::Guard<'_, Entry>, now: Instant| {
            shard
                .get(key)
                .and_then(|entry| entry.live_holder(now))
                .filter(|h| h.owner == waiter)
        };
        let started = Instant::now();
        let (turn, until) = {
            let shard = self.entries.lock(key);
            if let Some(holder) = handed(&shard, started) {
                return Ok(Some((holder, started)));
            }
            let Some(entry) = shard.get(key) else {
                return Ok(None);
            };
            // Not queued (its place lapsed, or it never tried): the next try queues it.
            let Some((turn, lapses_at)) = entry.queue.turn_of(waiter, started) else {
                return Ok(None);
            };
            let free_at = match entry.held_until(started) {
                Some(until) => until,
                // Free, and first: the next try takes it.
                None if entry
                    .queue
                    .head(started)
                    .is_some_and(|h| h.waiter == waiter) =>
                {
                    return Ok(None);
                }
                // Free, kept for the head: it lapses if that waiter vanished.
                None => entry
                    .queue
                    .head(started)
                    .map_or(started, |head| head.lapses_at),
            };
            let until = [free_at, lapses_at, started + TURN_REFRESH]
                .into_iter()
                .chain(started.checked_add(max))
                .min()
                .unwrap_or(started);
            (turn, until)
        };
        tokio::select! {
            _ = turn.notified() => {}
            _ = tokio::time::sleep_until(until) => {}
        }
        self.open()?;
        let now = Instant::now();
        let shard = self.entries.lock(key);
        Ok(handed(&shard, now).map(|holder| (holder, now)))
    }

    fn open(&self) -> Result<()> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(Error::Unavailable {
                backend: BACKEND,
                message: "the backend was closed".into(),
                source: None,
            });
        }
        Ok(())
    }
}

/// A grant of `token` to `owner` made at `now` for `ttl`.
fn lease(key: &LockKey, owner: OwnerId, token: FencingToken, ttl: Duration, now: Instant) -> Lease {
    Lease {
        key: key.clone(),
        owner,
        token,
        ttl,
        valid_until: valid_until(now, ttl),
    }
}

fn exhausted() -> Error {
    Error::Backend {
        backend: BACKEND,
        message: "token counter exhausted".into(),
        source: None,
    }
}

#[async_trait]
impl LockBackend for MemoryLockBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(
            TokenGuarantee::None,
            TimeAuthority::Client,
            WakeUp::Notify,
            MAX_TTL,
        )
        .with_kinds(LockKinds::GENERIC.with_shared())
        .with_atomic_sets(true)
        .with_fair(true)
    }

    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        self.open()?;
        let now = Instant::now();
        self.entries.update(key, |entry| {
            if entry.blocked(now) {
                return Ok(None);
            }
            let owner = OwnerId::random();
            let token = entry.grant(owner, ttl, now)?;
            Ok(Some(lease(key, owner, token, ttl, now)))
        })
    }

    /// Every key or none, under the locks of all their shards at once: nothing else sees a
    /// part of the set granted, and a key held or in a read phase refuses the whole set
    /// before anything is drawn. The set's one owner holds each grant, with a token of the
    /// key's own counter.
    async fn try_acquire_all(&self, keys: &[LockKey], ttl: Duration) -> Result<Option<Vec<Lease>>> {
        validate_ttl(ttl, &self.capabilities())?;
        if keys.windows(2).any(|pair| pair[0] >= pair[1]) {
            return Err(Error::config(
                "the keys of a set granted in one step must be distinct and sorted",
            ));
        }
        self.open()?;
        let now = Instant::now();
        let (mut shards, of_key) = self.entries.lock_many(keys);
        for (key, &shard) in keys.iter().zip(&of_key) {
            let entry = shards[shard].get(key);
            if entry.is_some_and(|entry| entry.blocked(now)) {
                return Ok(None);
            }
            // A counter at its end refuses the set before any key of it is granted.
            if let Some(entry) = entry {
                entry.peek_token()?;
            }
        }
        let owner = OwnerId::random();
        let mut leases = Vec::with_capacity(keys.len());
        for (key, &shard) in keys.iter().zip(&of_key) {
            let entry = shards[shard].entry(key.clone()).or_default();
            let token = entry.grant(owner, ttl, now)?;
            leases.push(lease(key, owner, token, ttl, now));
        }
        Ok(Some(leases))
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        validate_ttl(ttl, &self.capabilities())?;
        self.open()?;
        let now = Instant::now();
        let mut shard = self.entries.lock(&lease.key);
        let holder = shard
            .get_mut(&lease.key)
            .and_then(|entry| entry.holder.as_mut())
            .filter(|h| h.expires_at > now);
        match holder {
            Some(h) if h.owner == lease.owner && h.token == lease.token => {
                h.expires_at = now + ttl;
                Ok(Lease {
                    ttl,
                    valid_until: valid_until(now, ttl),
                    ..lease.clone()
                })
            }
            Some(_) => Err(Error::lease_lost(&lease.key, LostReason::Superseded)),
            None => Err(Error::lease_lost(&lease.key, LostReason::NotHeld)),
        }
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.open()?;
        let now = Instant::now();
        let mut shard = self.entries.lock(&lease.key);
        let Some(entry) = shard.get_mut(&lease.key) else {
            return Ok(false);
        };
        let ours = entry
            .holder
            .is_some_and(|h| h.owner == lease.owner && h.token == lease.token);
        if !ours {
            return Ok(false);
        }
        let was_live = entry.live_holder(now).is_some();
        entry.holder = None;
        entry.hand_off(now);
        entry.released.notify_waiters();
        Ok(was_live)
    }

    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        self.open()?;
        let started = Instant::now();
        let released = self
            .entries
            .lock(key)
            .entry(key.clone())
            .or_default()
            .released
            .clone();
        let notified = released.notified();
        tokio::pin!(notified);
        // Registered before looking at the holder, so a release in between still wakes us.
        notified.as_mut().enable();
        let expires_at = {
            let now = Instant::now();
            let shard = self.entries.lock(key);
            // A free lock kept for a queued waiter stays so until that waiter's place lapses.
            let blocked = shard.get(key).and_then(|e| {
                e.held_until(now)
                    .or_else(|| e.queue.head(now).map(|place| place.lapses_at))
            });
            match blocked {
                Some(until) => until,
                None => return Ok(()),
            }
        };
        let until = started
            .checked_add(max)
            .map_or(expires_at, |t| t.min(expires_at));
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep_until(until) => {}
        }
        Ok(())
    }

    /// Grants only when the lock is free and the queue is empty or headed by `waiter`; a
    /// refused try keeps the waiter's place. A lock handed to `waiter` is taken up here,
    /// renewed for `ttl`.
    async fn try_acquire_queued(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: OwnerId,
    ) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        self.open()?;
        let now = Instant::now();
        self.entries.update(key, |entry| {
            entry.queue.forget_lapsed(now);
            if let Some(holder) = entry.holder.as_mut().filter(|h| h.expires_at > now) {
                if holder.owner != waiter {
                    entry.queue.keep(waiter, ttl, now);
                    return Ok(None);
                }
                // Handed to this waiter by a release: its grant, held for the whole ttl from
                // now.
                holder.expires_at = now + ttl;
                return Ok(Some(lease(key, waiter, holder.token, ttl, now)));
            }
            let first = entry
                .queue
                .head(now)
                .is_none_or(|head| head.waiter == waiter);
            if entry.live_readers(now).is_some() || !first {
                entry.queue.keep(waiter, ttl, now);
                // A free lock whose head has not come for it yet is handed to that head now.
                entry.hand_off(now);
                return Ok(None);
            }
            let token = entry.grant(waiter, ttl, now)?;
            entry.queue.remove(waiter);
            Ok(Some(lease(key, waiter, token, ttl, now)))
        })
    }

    async fn wait_for_turn(&self, key: &LockKey, waiter: OwnerId, max: Duration) -> Result<()> {
        self.wait_turn(key, waiter, max).await.map(|_| ())
    }

    async fn wait_for_grant(
        &self,
        key: &LockKey,
        waiter: OwnerId,
        ttl: Duration,
        max: Duration,
    ) -> Result<Option<Lease>> {
        let Some((holder, now)) = self.wait_turn(key, waiter, max).await? else {
            return Ok(None);
        };
        // Granted for the hand-off ttl, of which this much is left.
        let left = valid_until(now, holder.expires_at - now);
        Ok(Some(Lease {
            valid_until: left,
            ..lease(key, waiter, holder.token, ttl, now)
        }))
    }

    /// Takes `waiter`'s place out of the queue; a lock handed to it is handed on, and a free
    /// lock it headed the queue for goes to the next waiter.
    async fn leave_queue(&self, key: &LockKey, waiter: OwnerId) -> Result<()> {
        self.open()?;
        let now = Instant::now();
        let mut shard = self.entries.lock(key);
        let Some(entry) = shard.get_mut(key) else {
            return Ok(());
        };
        entry.queue.remove(waiter);
        if entry.holder.is_some_and(|h| h.owner == waiter) {
            entry.holder = None;
            entry.released.notify_waiters();
        }
        entry.hand_off(now);
        Ok(())
    }

    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        self.open()?;
        let now = Instant::now();
        let shard = self.entries.lock(key);
        let entry = shard.get(key);
        let holder = entry.and_then(|e| e.live_holder(now));
        let readers = entry.and_then(|e| e.live_readers(now));
        let (holder, remaining) = match (holder, readers) {
            (Some(h), _) => (Some(Fence::new(h.token, h.owner)), Some(h.expires_at - now)),
            (None, Some((readers, until))) => (Some(readers.fence), Some(until - now)),
            (None, None) => (None, None),
        };
        let mut info = LockInfo::new(key.clone());
        info.holder = holder;
        info.remaining = remaining;
        info.last_token = entry.and_then(|e| FencingToken::new(e.last_token));
        Ok(info)
    }

    async fn inspect_queue(&self, key: &LockKey) -> Result<Option<Vec<QueueEntry>>> {
        self.open()?;
        let now = Instant::now();
        let shard = self.entries.lock(key);
        let Some(entry) = shard.get(key) else {
            return Ok(Some(Vec::new()));
        };
        let mut queue = Vec::new();
        if let Some(h) = entry.live_holder(now) {
            queue.push(QueueEntry {
                owner: h.owner,
                role: QueueRole::Holder,
                token: Some(h.token),
                remaining: h.expires_at - now,
            });
        } else if let Some((readers, _)) = entry.live_readers(now) {
            queue.extend(
                readers
                    .expiries
                    .iter()
                    .filter(|(_, until)| **until > now)
                    .map(|(reader, until)| QueueEntry {
                        owner: *reader,
                        role: QueueRole::Reader,
                        token: Some(readers.fence.token),
                        remaining: *until - now,
                    }),
            );
        }
        queue.extend(entry.queue.live(now).map(|place| QueueEntry {
            owner: place.waiter,
            role: QueueRole::Waiting,
            token: None,
            remaining: place.lapses_at - now,
        }));
        Ok(Some(queue))
    }

    async fn try_acquire_shared(
        &self,
        key: &LockKey,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        self.open()?;
        let now = Instant::now();
        self.entries.update(key, |entry| {
            if entry.live_holder(now).is_some() {
                return Ok(None);
            }
            if entry.live_readers(now).is_none() {
                // The first reader of a phase: a new token, a new shared owner.
                let token = entry.next_token()?;
                entry.holder = None;
                entry.readers = Some(Readers {
                    fence: Fence::new(token, OwnerId::random()),
                    expiries: HashMap::new(),
                });
            }
            let Some(readers) = entry.readers.as_mut() else {
                unreachable!("a read phase was found live or started just above");
            };
            readers.expiries.retain(|_, until| *until > now);
            readers.expiries.insert(reader, now + ttl);
            let fence = readers.fence;
            Ok(Some(lease(key, fence.owner, fence.token, ttl, now)))
        })
    }

    async fn extend_shared(&self, lease: &Lease, reader: OwnerId, ttl: Duration) -> Result<Lease> {
        validate_ttl(ttl, &self.capabilities())?;
        self.open()?;
        let now = Instant::now();
        let mut shard = self.entries.lock(&lease.key);
        let readers = shard
            .get_mut(&lease.key)
            .and_then(|entry| entry.readers.as_mut())
            .filter(|r| r.fence == lease.fence());
        let Some(readers) = readers else {
            return Err(Error::lease_lost(&lease.key, LostReason::Superseded));
        };
        match readers.expiries.get_mut(&reader) {
            Some(until) if *until > now => {
                *until = now + ttl;
                Ok(Lease {
                    ttl,
                    valid_until: valid_until(now, ttl),
                    ..lease.clone()
                })
            }
            _ => Err(Error::lease_lost(&lease.key, LostReason::NotHeld)),
        }
    }

    async fn release_shared(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
        self.open()?;
        let now = Instant::now();
        let mut shard = self.entries.lock(&lease.key);
        let Some(entry) = shard.get_mut(&lease.key) else {
            return Ok(false);
        };
        let Some(readers) = entry.readers.as_mut().filter(|r| r.fence == lease.fence()) else {
            return Ok(false);
        };
        let was_live = readers
            .expiries
            .remove(&reader)
            .is_some_and(|until| until > now);
        if readers.live_until(now).is_none() {
            entry.readers = None;
            entry.hand_off(now);
            entry.released.notify_waiters();
        }
        Ok(was_live)
    }

    async fn inspect_shared(&self, key: &LockKey) -> Result<Option<ReadPhase>> {
        self.open()?;
        let now = Instant::now();
        let shard = self.entries.lock(key);
        Ok(shard
            .get(key)
            .and_then(|e| e.live_readers(now))
            .map(|(readers, until)| ReadPhase {
                fence: readers.fence,
                readers: readers.expiries.values().filter(|t| **t > now).count(),
                remaining: until - now,
            }))
    }

    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        validate_floor(floor, u64::MAX, "a memory counter")?;
        self.open()?;
        let mut shard = self.entries.lock(key);
        let entry = shard.entry(key.clone()).or_default();
        entry.last_token = entry.last_token.max(floor.get());
        FencingToken::new(entry.last_token).ok_or_else(exhausted)
    }
}
