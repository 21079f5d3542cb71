//! One shared `LISTEN` per database; each release wakes one waiter of its key, and a lock
//! handed to a queued waiter (or kept free for the head of its queue) wakes that waiter
//! only.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use fencelock_core::{LockKey, OwnerId, Result};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::error::timed;

/// The waiters of this process: one queue per key being waited for, and the queued waiters
/// of a fair backend, each by its waiter id.
#[derive(Default)]
struct Registry {
    keys: HashMap<Arc<str>, Arc<Notify>>,
    queued: HashMap<OwnerId, Queued>,
}

/// A queued waiter: its key and its wake-up (a release handed it the lock, or told
/// it its turn at a free lock).
struct Queued {
    key: Arc<str>,
    notify: Arc<Notify>,
    /// When its last try registered it.
    touched: Instant,
    /// When the holder its last refused try saw runs out, if one held the lock.
    holder_until: Option<Instant>,
    /// Whether the process's place keeper keeps its place, and with which backend's
    /// statement, so it need not try to keep it.
    kept: Option<Kept>,
    /// Whether its last refused try found the lock free but kept for another waiter (the
    /// head, which may have vanished): it tries again within [`TURN_REFRESH`].
    behind_free: bool,
    /// Whether it is waiting for its turn now: the keeper keeps only the places of waiters
    /// that wait, so a waiter of the raw trait that queued and never came back (in a process
    /// that lives on) keeps its place no longer than its place ttl.
    parked: bool,
}

/// Whose statement keeps a waiter's place: the lease backend's (a place ttl of 2 s) or the
/// advisory backend's, with the waiter's own place ttl (its ttl, within 1 s and 2 s: a place
/// ttl shorter than twice the keeper's interval is kept by the waiter's tries instead).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Kept {
    Lease,
    Advisory { place_ttl: Duration },
}

impl Kept {
    /// How long the keeper keeps the place from each round.
    pub(crate) fn place_ttl(self) -> Duration {
        match self {
            Kept::Lease => crate::lease_table::PLACE_TTL,
            Kept::Advisory { place_ttl } => place_ttl,
        }
    }
}

/// One kept place, as the keeper sends it: its key, its waiter in 32 hex digits, and whose
/// statement keeps it.
#[derive(Debug, Clone)]
pub(crate) struct KeptPlace {
    pub(crate) key: String,
    pub(crate) waiter: String,
    pub(crate) kept: Kept,
}

/// One round of the place keeper: the kept places of this process; answers the waiters
/// (hex) that should try now.
pub(crate) type KeepPlaces = Arc<
    dyn Fn(Vec<KeptPlace>) -> Pin<Box<dyn Future<Output = Result<Vec<String>>> + Send>>
        + Send
        + Sync,
>;

/// How long a kept waiter sleeps at most between tries while the keeper works: its place
/// is kept for it, and the keeper wakes it when its try has something to do.
const KEPT_TURN: Duration = Duration::from_secs(10);

/// How long a queued waiter stays registered without trying: far past the place ttl (2 s)
/// after which the server forgets its place anyway.
const FORGET_AFTER: Duration = Duration::from_secs(30);

type Queues = Mutex<Registry>;

fn lock(queues: &Queues) -> MutexGuard<'_, Registry> {
    // Every critical section leaves the maps valid, so a poisoned lock is still consistent.
    queues.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A waiter's id in 32 hex digits.
fn waiter_id(hex: &str) -> Option<OwnerId> {
    if hex.len() != 32 {
        return None;
    }
    u128::from_str_radix(hex, 16).ok().map(OwnerId::from_u128)
}

/// The payload of a hand-off names the waiter: a tab, then its id in 32 hex digits
/// (`fencelock_handed_payload`, migration 14). No key holds a control character, so no
/// key's payload starts with a tab.
fn handed_to(payload: &str) -> Option<OwnerId> {
    waiter_id(payload.strip_prefix('\t')?)
}

/// The payload that tells the first place of a key's queue its turn (a free lock it may try,
/// `fencelock_turn_payload`, migration 16): a vertical tab, the waiter's id in 32 hex digits,
/// then the key. No key holds a control character, so no key's payload starts with one.
fn turn_of(payload: &str) -> Option<(OwnerId, &str)> {
    let rest = payload.strip_prefix('\u{b}')?;
    let (hex, key) = (rest.get(..32)?, rest.get(32..)?);
    Some((waiter_id(hex)?, key))
}

/// Release notifications of one schema. The listening task ends when this is dropped.
///
/// A hand-off to a queued waiter (a payload naming it) wakes that waiter only. A key's payload
/// (a release that handed to nobody) wakes the key's queued waiters, whose server-side queue
/// decides which one is granted, and **one** other waiter of its key in this process (the one
/// that waited longest): only one of them can take the lock, and waking all of them would send
/// every one to the server for a try that fails. If the woken waiter gives up without taking
/// the lock, the others still wake at their own deadline; when the listening connection is
/// lost, every waiter wakes, since a release or a hand-off may have been missed.
pub(crate) struct Wakeups {
    queues: Arc<Queues>,
    task: JoinHandle<()>,
    keeper: JoinHandle<()>,
    /// Whether the keeper's last round succeeded: while it fails, kept waiters try every
    /// [`TURN_REFRESH`] as the others do.
    keeping: Arc<AtomicBool>,
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        self.task.abort();
        self.keeper.abort();
    }
}

impl Wakeups {
    /// Opens a dedicated connection, `LISTEN`s on `channel` and forwards each payload (a key),
    /// and starts the place keeper, which runs `keep` every [`KEEP_EVERY`].
    pub(crate) async fn start(
        backend: &'static str,
        options: PgConnectOptions,
        channel: &str,
        timeout: Duration,
        keep: KeepPlaces,
    ) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(timeout)
            .connect_lazy_with(options);
        let mut listener = timed(backend, timeout, PgListener::connect_with(&pool)).await?;
        timed(backend, timeout, listener.listen(channel)).await?;
        let queues = Arc::new(Queues::default());
        let task = tokio::spawn(forward(listener, queues.clone()));
        let keeping = Arc::new(AtomicBool::new(true));
        let keeper = tokio::spawn(keep_places(Arc::downgrade(&queues), keep, keeping.clone()));
        Ok(Wakeups {
            queues,
            task,
            keeper,
            keeping,
        })
    }

    /// Registers queued waiter `waiter` of `key` before a try (again: it stays registered, and
    /// forgets its last try's reading until this try is refused), so a hand-off to it, or a
    /// release of its key that hands to nobody, wakes it from now on.
    /// Returns whether it was not registered before (its first try, as far as this process
    /// knows).
    /// `kept`: whether the place keeper keeps its place, and how.
    pub(crate) fn enqueue(&self, key: &LockKey, waiter: OwnerId, kept: Option<Kept>) -> bool {
        let now = Instant::now();
        let mut registry = lock(&self.queues);
        if let Some(queued) = registry.queued.get_mut(&waiter) {
            queued.touched = now;
            return false;
        }
        // A waiter that stopped trying without leaving (a caller of the raw trait that never
        // came back) is forgotten once it is far past its place ttl; one that comes back is
        // registered again by its next try.
        registry
            .queued
            .retain(|_, queued| now.duration_since(queued.touched) < FORGET_AFTER);
        registry.queued.insert(
            waiter,
            Queued {
                key: Arc::from(key.as_str()),
                notify: Arc::new(Notify::new()),
                touched: now,
                holder_until: None,
                kept,
                behind_free: false,
                parked: false,
            },
        );
        true
    }

    /// Records a refused try of queued waiter `waiter`: when the holder that refused it runs
    /// out (`None`: the lock is free but kept for another waiter), so its wait ends by then.
    pub(crate) fn refused(&self, waiter: OwnerId, holder_until: Option<Instant>) {
        if let Some(queued) = lock(&self.queues).queued.get_mut(&waiter) {
            queued.holder_until = holder_until;
            queued.behind_free = holder_until.is_none();
        }
    }

    /// Forgets queued waiter `waiter` (granted, or gone).
    pub(crate) fn dequeue(&self, waiter: OwnerId) {
        lock(&self.queues).queued.remove(&waiter);
    }

    /// Waits until queued waiter `waiter` is woken, or `max`, or [`TURN_REFRESH`] (a kept
    /// waiter while the keeper works and the lock was held at its last try: [`KEPT_TURN`]).
    /// A waiter not registered returns at once.
    pub(crate) async fn turn(&self, waiter: OwnerId, max: Duration) {
        let (notify, holder_until, refresh) = match lock(&self.queues).queued.get_mut(&waiter) {
            Some(queued) => {
                queued.parked = true;
                let kept = queued.kept.is_some()
                    && !queued.behind_free
                    && self.keeping.load(Ordering::Relaxed);
                let refresh = if kept { KEPT_TURN } else { TURN_REFRESH };
                (queued.notify.clone(), queued.holder_until, refresh)
            }
            None => return,
        };
        // Unparked however the wait ends, its future dropped included.
        let _parked = Parked {
            queues: &self.queues,
            waiter,
        };
        let now = Instant::now();
        let mut until = now + max.min(refresh);
        if let Some(holder_until) = holder_until {
            // Just past the holder's end, so the next try finds it expired.
            until = until.min(holder_until.max(now) + Duration::from_millis(1));
        }
        // A wake-up sent before this wait is kept as the `Notify`'s permit.
        let _ = tokio::time::timeout_at(until, notify.notified()).await;
    }

    /// A waiter for the next release of `key`, registered from now on.
    pub(crate) fn subscribe(&self, key: &LockKey) -> Waiter {
        let notify = lock(&self.queues)
            .keys
            .entry(Arc::from(key.as_str()))
            .or_default()
            .clone();
        Waiter {
            queues: self.queues.clone(),
            key: Arc::from(key.as_str()),
            notify,
        }
    }
}

async fn forward(mut listener: PgListener, queues: Arc<Queues>) {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => deliver(&queues, notification.payload()),
            Ok(None) => {
                // The connection was lost; the next call reconnects and listens again.
                wake_everyone(&queues);
            }
            Err(error) => {
                tracing::debug!(%error, "release listener cannot reconnect yet");
                wake_everyone(&queues);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Wakes the waiters a payload names. Each `notify_one` is stored as a permit when nobody is
/// parked yet, so a waiter between registering and parking still sees it.
fn deliver(queues: &Queues, payload: &str) {
    if payload.starts_with('\n') {
        // The grant a hand-off tells (migration 15), never read: any role that may connect
        // can NOTIFY, so a grant is only ever taken from a try's answer. The waiter's name
        // follows, and wakes it; its next try takes the lock handed to it up.
        return;
    }
    let registry = lock(queues);
    if let Some((waiter, key)) = turn_of(payload) {
        // A free lock kept for the head of its queue (advisory backend): that waiter's turn,
        // in whichever process it waits, and one waiter of this process that holds no place
        // (a reader, a request that waits without queueing), which the queue does not hold
        // back. The other queued waiters of the key sleep on: the queue would refuse them.
        registry.hand(waiter);
        if let Some(queue) = registry.keys.get(key) {
            queue.notify_one();
        }
        return;
    }
    if let Some(waiter) = handed_to(payload) {
        // Only the waiter the lock was handed to, in whichever process it waits.
        registry.hand(waiter);
        return;
    }
    if let Some(queue) = registry.keys.get(payload) {
        queue.notify_one();
    }
    // A release that handed to nobody (no live place when it ran), a read phase's end, a
    // transaction's claim ending, a waiter leaving a free lock: the key's queued waiters try,
    // and the first of the server's queue is granted.
    for queued in registry.queued.values() {
        if *queued.key == *payload {
            queued.notify.notify_one();
        }
    }
}

impl Registry {
    /// Tells queued waiter `waiter`, if it waits in this process, that the lock was handed to
    /// it or that its turn came: a hint, which its next try checks with the server.
    fn hand(&self, waiter: OwnerId) {
        if let Some(queued) = self.queued.get(&waiter) {
            queued.notify.notify_one();
        }
    }
}

/// How often the keeper keeps the process's places.
const KEEP_EVERY: Duration = TURN_REFRESH;

/// The place keeper: every [`KEEP_EVERY`], one statement keeps the live places of every kept
/// waiter of this process and names the waiters whose try has something to do, which it
/// wakes. A failed round wakes every kept waiter (their tries keep their places) and has
/// them try every [`TURN_REFRESH`] until a round succeeds. It ends with its `Wakeups`.
async fn keep_places(queues: Weak<Queues>, keep: KeepPlaces, keeping: Arc<AtomicBool>) {
    let mut tick = tokio::time::interval(KEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(queues) = queues.upgrade() else {
            return;
        };
        let places: Vec<KeptPlace> = lock(&queues)
            .queued
            .iter()
            .filter(|(_, queued)| queued.parked)
            .filter_map(|(waiter, queued)| {
                queued.kept.map(|kept| KeptPlace {
                    key: queued.key.to_string(),
                    waiter: waiter.to_string(),
                    kept,
                })
            })
            .collect();
        if places.is_empty() {
            continue;
        }
        match keep(places).await {
            Ok(woken) => {
                keeping.store(true, Ordering::Relaxed);
                let registry = lock(&queues);
                for waiter in woken.iter().filter_map(|hex| waiter_id(hex)) {
                    registry.hand(waiter);
                }
            }
            Err(error) => {
                tracing::debug!(%error, "keeping the queued places failed; waiters try");
                keeping.store(false, Ordering::Relaxed);
                for queued in lock(&queues).queued.values().filter(|q| q.kept.is_some()) {
                    queued.notify.notify_one();
                }
            }
        }
    }
}

/// Marks a waiter as no longer waiting for its turn when dropped.
struct Parked<'a> {
    queues: &'a Queues,
    waiter: OwnerId,
}

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        if let Some(queued) = lock(self.queues).queued.get_mut(&self.waiter) {
            queued.parked = false;
        }
    }
}

fn wake_everyone(queues: &Queues) {
    let registry = lock(queues);
    for queue in registry.keys.values() {
        queue.notify_waiters();
    }
    // A hand-off may have been missed: queued waiters try again (their try finds a lock
    // handed to them).
    for queued in registry.queued.values() {
        queued.notify.notify_one();
    }
}

/// The longest a queued waiter of either fair backend sleeps between tries, well inside its
/// place ttl (2 s on the lease backend; on the advisory backend the waiter's `refused` bound
/// keeps it within a quarter of its own).
pub(crate) const TURN_REFRESH: Duration = Duration::from_millis(500);

/// Sleeps until queued waiter `waiter` of `key` is woken (a release handed it the lock, told
/// it its turn, or freed the key handing to nobody), or [`TURN_REFRESH`] or `max` passed,
/// whichever is first; without notifications (behind a transaction pooler) it just sleeps
/// that long.
pub(crate) async fn turn(
    db: &crate::PgDatabase,
    backend: &'static str,
    key: &LockKey,
    waiter: OwnerId,
    max: Duration,
) -> Result<()> {
    let wakeups = match db.protocol().await? {
        crate::exec::Protocol::Simple => None,
        _ => db.wakeups(backend).await.ok(),
    };
    let Some(wakeups) = wakeups else {
        tokio::time::sleep(max.min(TURN_REFRESH)).await;
        return Ok(());
    };
    let span = tracing::debug_span!("fencelock.pg.wait_for_turn", backend, key = %key);
    tracing::Instrument::instrument(wakeups.turn(waiter, max), span).await;
    Ok(())
}

/// A waiter for `key`'s release notifications, or `None` when no listener can be started (for
/// example behind a transaction-mode pooler): the caller then sleeps instead.
pub(crate) async fn subscribe(
    db: &crate::PgDatabase,
    backend: &'static str,
    key: &LockKey,
) -> Option<Waiter> {
    match db.wakeups(backend).await {
        Ok(wakeups) => Some(wakeups.subscribe(key)),
        Err(error) => {
            tracing::debug!(%error, "no release notifications; waiting by the deadline");
            None
        }
    }
}

/// One waiter's place in its key's queue.
pub(crate) struct Waiter {
    queues: Arc<Queues>,
    key: Arc<str>,
    notify: Arc<Notify>,
}

impl Waiter {
    /// Returns when the key may have been released, or after `max`.
    pub(crate) async fn released(&mut self, max: Duration) {
        // A `Notified` dropped after it was picked by `notify_one` passes the wake-up on to the
        // next waiter, so a timed-out wait loses no release.
        let _ = tokio::time::timeout(max, self.notify.notified()).await;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let mut queues = lock(&self.queues);
        // The map's reference and ours: nobody else waits for this key, so forget the queue.
        if Arc::strong_count(&self.notify) == 2 {
            queues.keys.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WAITER: &str = "000102030405060708090a0b0c0d0e0f";

    /// Whether `notify` holds a wake-up (its permit), taking it.
    async fn woken(notify: &Notify) -> bool {
        tokio::time::timeout(Duration::ZERO, notify.notified())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_hand_off_names_its_waiter_and_a_told_grant_wakes_nobody() {
        let waiter = OwnerId::from_u128(0x0001_0203_0405_0607_0809_0a0b_0c0d_0e0f);
        assert_eq!(handed_to(&format!("\t{WAITER}")), Some(waiter));
        let queues = Queues::default();
        let notify = Arc::new(Notify::new());
        lock(&queues).queued.insert(
            waiter,
            Queued {
                key: Arc::from("k"),
                notify: notify.clone(),
                touched: Instant::now(),
                holder_until: None,
                kept: None,
                behind_free: false,
                parked: false,
            },
        );
        deliver(
            &queues,
            &format!("\n{WAITER} 999999 1700000000123456 60000000"),
        );
        assert!(!woken(&notify).await, "a told grant woke its waiter");
        deliver(&queues, &format!("\t{WAITER}"));
        assert!(woken(&notify).await, "a hand-off did not wake its waiter");
    }

    #[test]
    fn a_turn_payload_names_the_waiter_and_the_key() {
        let waiter = OwnerId::from_u128(0x0001_0203_0405_0607_0809_0a0b_0c0d_0e0f);
        assert_eq!(
            turn_of(&format!("\u{b}{WAITER}jobs/nightly")),
            Some((waiter, "jobs/nightly"))
        );
        for bad in [
            format!("\t{WAITER}jobs"),
            format!("{WAITER}jobs"),
            format!("\u{b}{}", &WAITER[1..]),
            format!("\u{b}{}zjobs", &WAITER[1..]),
            // Byte 32 inside a character: no panic, no waiter.
            format!("\u{b}a{}", "\u{e9}".repeat(20)),
        ] {
            assert_eq!(turn_of(&bad), None, "{bad:?}");
        }
        // Neither a hand-off nor a key's payload reads as a turn.
        assert_eq!(turn_of(&format!("\t{WAITER}")), None);
        assert_eq!(turn_of("jobs/nightly"), None);
    }
}
