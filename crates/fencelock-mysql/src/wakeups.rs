//! Waiting for a release, and for a queued waiter's turn. While a key has waiters in this
//! process, one task (the key's *watcher*) keeps a session blocked in `GET_LOCK` on the server,
//! which wakes it the moment the lock is let go; the watcher then wakes the waiters that do not
//! queue (every one of them) and, of the queued waiters, only the first live one of the key's
//! queue, which the server names (DESIGN 5.4, *Fair hand-off*). While the lock is free but a
//! read phase lives (readers hold no session to wait on), the watcher's session looks at the
//! key's readers every [`READERS_POLL`] on the server instead, until the last one is gone;
//! while it is another process's waiter's turn, it looks as often at whether that waiter took
//! the lock (then it waits in `GET_LOCK` again) or lost its place. The watcher's wait does not
//! depend on how long any one waiter waits, so a release is not missed while a waiter is
//! between two waits.
//!
//! A queued waiter's place lapses [`PLACE_TTL`] after it was last kept. One task per process
//! (the *place keeper*, [`keep_places`]) keeps the places of every waiter of the process that
//! waits for its turn with one statement every [`KEEP_EVERY`], so N waiters on a key cost the
//! server two statements a second, not 2N tries; a waiter itself tries again only when woken,
//! or every [`KEPT_TURN`] to mend a wake-up lost all the same. While the keeper's rounds fail
//! every waiter tries every [`TURN_REFRESH`], which keeps its place as before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use fencelock_core::{LockKey, OwnerId, Result};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::codec::{micros, owner_bytes, owner_from};
use crate::database::MySqlDatabase;
use crate::error::{protocol, timed};
use crate::session::Holder;

/// Above this many keys the map drops the entries nobody waits on any more.
const PRUNE_ABOVE: usize = 1024;

/// The longest single wait of a watcher on the server; it waits again while waiters remain.
const WATCH_BOUND: Duration = Duration::from_secs(1);

/// How often a watcher's session looks, on the server, whether a live read phase has ended,
/// or whether another process's waiter took the lock whose turn it is.
const READERS_POLL: Duration = Duration::from_millis(10);

/// How long a queued waiter sleeps at most before it tries again while the place keeper's
/// rounds fail: its try keeps its place (a place lapses after [`PLACE_TTL`] unless kept).
pub(crate) const TURN_REFRESH: Duration = Duration::from_millis(500);

/// How often the place keeper keeps the places of the process's waiting waiters.
const KEEP_EVERY: Duration = TURN_REFRESH;

/// How long a waiter whose place the keeper keeps sleeps at most between tries: the key's
/// watcher wakes it when its turn comes, so this only mends a wake-up that was lost.
pub(crate) const KEPT_TURN: Duration = Duration::from_secs(10);

/// The most places one round of the keeper sends in one statement; the statement's size is
/// rounded up to a power of two (the last place repeated), so a connection prepares a few
/// shapes of it at most.
const KEEP_BATCH: usize = 256;

/// How long a queued waiter's place outlives its last try on the server's clock: a waiter that
/// vanished (its process died between tries) keeps a free lock from the waiters behind it this
/// long at most, and they find out at their next try.
pub(crate) const PLACE_TTL: Duration = Duration::from_secs(2);

/// Whom a release (or the end of a watcher's wait) lets try, as the server said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// The first live waiter of the key's queue: it alone of the queued waiters.
    Waiter(OwnerId),
    /// Nobody is queued on the server (or the server did not say): every queued waiter of
    /// the key in this process, whose places lapsed or who try for the first time.
    Anyone,
}

impl Next {
    /// The head column of `release_v3`, `wait_v5` and `leave_v1`.
    pub(crate) fn from_head(head: Option<&[u8]>) -> Result<Self> {
        Ok(match head {
            Some(bytes) => Next::Waiter(owner_from(bytes)?),
            None => Next::Anyone,
        })
    }
}

/// A queued waiter of this process: its key and its wake-up, from its first wait to its grant
/// or its leave.
#[derive(Debug)]
struct Turn {
    name: String,
    /// The key, as the queue table holds it.
    key: Vec<u8>,
    notify: Arc<Notify>,
    /// When it last waited: a waiter whose request vanished without leaving is forgotten
    /// once the map is large and its place has long lapsed.
    touched: Instant,
    /// Whether it waits for its turn now: the keeper keeps only these places, so a waiter of
    /// the raw trait that queued and never came back (in a process that lives on) keeps its
    /// place no longer than [`PLACE_TTL`].
    parked: bool,
}

/// The waiters of one key in this process. Waiters hold it (`Arc`) while they wait; the map and
/// the watcher only refer to it (`Weak`), so it goes away with the last waiter.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    pub(crate) notify: Notify,
    /// Whether a watcher runs for this key.
    watching: AtomicBool,
}

impl Watch {
    /// Claims the key's watcher; `false` if one runs already.
    pub(crate) fn claim(&self) -> bool {
        !self.watching.swap(true, Ordering::AcqRel)
    }

    /// Ends the watcher.
    fn finished(&self) {
        self.watching.store(false, Ordering::Release);
    }
}

/// The keys waited on in this process, by lock name, and the queued waiters.
#[derive(Debug, Default)]
pub(crate) struct Wakeups {
    keys: Mutex<HashMap<String, Weak<Watch>>>,
    turns: Mutex<HashMap<OwnerId, Turn>>,
    /// Whether the place keeper was started (it runs as long as this lives).
    keeper: AtomicBool,
    /// Whether the keeper's last round failed: kept waiters then try every [`TURN_REFRESH`].
    failing: AtomicBool,
}

impl Wakeups {
    fn keys(&self) -> MutexGuard<'_, HashMap<String, Weak<Watch>>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The watch of `name`, created if nobody waits on it yet.
    pub(crate) fn watch(&self, name: &str) -> Arc<Watch> {
        let mut keys = self.keys();
        if let Some(watch) = keys.get(name).and_then(Weak::upgrade) {
            return watch;
        }
        if keys.len() > PRUNE_ABOVE {
            keys.retain(|_, watch| watch.strong_count() > 0);
        }
        let watch = Arc::new(Watch::default());
        keys.insert(name.to_owned(), Arc::downgrade(&watch));
        watch
    }

    fn turns(&self) -> MutexGuard<'_, HashMap<OwnerId, Turn>> {
        self.turns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The wake-up of queued `waiter` of `key` (lock name `name`), registered (until
    /// [`forget`](Self::forget)) if it has none yet. A wake-up sent while the waiter is not
    /// waiting is kept for its next wait.
    pub(crate) fn turn(&self, key: &LockKey, name: &str, waiter: OwnerId) -> Arc<Notify> {
        let now = Instant::now();
        let mut turns = self.turns();
        if turns.len() > PRUNE_ABOVE {
            turns.retain(|_, turn| {
                turn.parked || now.duration_since(turn.touched) < KEPT_TURN + PLACE_TTL * 4
            });
        }
        let turn = turns.entry(waiter).or_insert_with(|| Turn {
            name: name.to_owned(),
            key: key.as_str().as_bytes().to_vec(),
            notify: Arc::new(Notify::new()),
            touched: now,
            parked: false,
        });
        turn.touched = now;
        turn.notify.clone()
    }

    /// Marks queued `waiter` as waiting for its turn until the guard is dropped (however
    /// the wait ends, its future dropped included), and answers how long it may sleep at
    /// most: [`KEPT_TURN`] while the keeper keeps its place, [`TURN_REFRESH`] while the
    /// keeper fails.
    pub(crate) fn park(self: &Arc<Self>, waiter: OwnerId) -> (Parked, Duration) {
        if let Some(turn) = self.turns().get_mut(&waiter) {
            turn.parked = true;
        }
        let parked = Parked {
            wakeups: Arc::downgrade(self),
            waiter,
        };
        let sleep = if self.failing.load(Ordering::Relaxed) {
            TURN_REFRESH
        } else {
            KEPT_TURN
        };
        (parked, sleep)
    }

    /// Claims the place keeper's start; `false` once it was started.
    pub(crate) fn claim_keeper(&self) -> bool {
        !self.keeper.swap(true, Ordering::AcqRel)
    }

    /// The places the keeper keeps: each waiting waiter's key and id.
    fn parked_places(&self) -> Vec<(Vec<u8>, [u8; 16])> {
        self.turns()
            .iter()
            .filter(|(_, turn)| turn.parked)
            .map(|(waiter, turn)| (turn.key.clone(), owner_bytes(*waiter)))
            .collect()
    }

    /// Wakes every waiting waiter: the keeper failed, so their own tries keep their places.
    fn wake_parked(&self) {
        for turn in self.turns().values().filter(|turn| turn.parked) {
            turn.notify.notify_one();
        }
    }

    /// Forgets queued `waiter`: it was granted or left the queue.
    pub(crate) fn forget(&self, waiter: OwnerId) {
        self.turns().remove(&waiter);
    }

    /// Whether `waiter` is a queued waiter of `name` in this process.
    fn is_ours(&self, name: &str, waiter: OwnerId) -> bool {
        self.turns()
            .get(&waiter)
            .is_some_and(|turn| turn.name == name)
    }

    /// Whether a queued waiter of `name` other than `waiter` is registered in this process.
    fn others_queued(&self, name: &str, waiter: OwnerId) -> bool {
        self.turns()
            .iter()
            .any(|(other, turn)| *other != waiter && turn.name == name)
    }

    /// Wakes the queued waiters of `name` that `next` lets try.
    pub(crate) fn wake_turn(&self, name: &str, next: Next) {
        let turns = self.turns();
        match next {
            Next::Waiter(waiter) => {
                if let Some(turn) = turns.get(&waiter).filter(|turn| turn.name == name) {
                    turn.notify.notify_one();
                }
            }
            Next::Anyone => {
                for turn in turns.values().filter(|turn| turn.name == name) {
                    turn.notify.notify_one();
                }
            }
        }
    }

    /// Wakes this process's waiters of `name` that do not queue, every one of them.
    fn wake_unqueued(&self, name: &str) {
        let watch = self.keys().get(name).and_then(Weak::upgrade);
        if let Some(watch) = watch {
            watch.notify.notify_waiters();
        }
    }

    /// Wakes this process's waiters of `name`: a lock it held was let go, and `next` is whose
    /// turn it is among the queued ones.
    pub(crate) fn released(&self, name: &str, next: Next) {
        self.wake_unqueued(name);
        self.wake_turn(name, next);
    }
}

/// A queued waiter waiting for its turn; unparked when dropped.
pub(crate) struct Parked {
    wakeups: Weak<Wakeups>,
    waiter: OwnerId,
}

impl Drop for Parked {
    fn drop(&mut self) {
        if let Some(wakeups) = self.wakeups.upgrade()
            && let Some(turn) = wakeups.turns().get_mut(&self.waiter)
        {
            turn.parked = false;
        }
    }
}

/// The place keeper of one process's backend (DESIGN 5.4, *One refresh per process*): every
/// [`KEEP_EVERY`], one statement per [`KEEP_BATCH`] places moves the lapse time of the live
/// places of the waiters that wait for their turn a place ttl ahead. It never revives a
/// lapsed place, grants nothing and wakes nobody while it succeeds (the keys' watchers do);
/// a failed round wakes every waiting waiter, whose tries then keep their places every
/// [`TURN_REFRESH`] until a round succeeds. It ends with the backend's `Wakeups`.
pub(crate) async fn keep_places(db: MySqlDatabase, wakeups: Weak<Wakeups>) {
    let mut tick = tokio::time::interval(KEEP_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(places) = wakeups.upgrade().map(|w| w.parked_places()) else {
            return;
        };
        let mut outcome = Ok(());
        for batch in places.chunks(KEEP_BATCH) {
            outcome = keep_batch(&db, batch).await;
            if outcome.is_err() {
                break;
            }
        }
        let Some(wakeups) = wakeups.upgrade() else {
            return;
        };
        match outcome {
            Ok(()) => wakeups.failing.store(false, Ordering::Relaxed),
            Err(error) => {
                tracing::debug!(%error, "keeping the queued places failed; waiters try");
                wakeups.failing.store(true, Ordering::Relaxed);
                wakeups.wake_parked();
            }
        }
    }
}

/// One statement of the keeper for `batch` (not empty, at most [`KEEP_BATCH`] places).
async fn keep_batch(db: &MySqlDatabase, batch: &[(Vec<u8>, [u8; 16])]) -> Result<()> {
    let Some(last) = batch.last() else {
        return Ok(());
    };
    let size = batch.len().next_power_of_two();
    let sql = db.sql().keep_places(size);
    let mut query = sqlx::query(&sql).bind(micros(PLACE_TTL));
    for (key, waiter) in batch.iter().chain(std::iter::repeat(last)).take(size) {
        query = query.bind(key.as_slice()).bind(&waiter[..]);
    }
    timed(db.operation_timeout(), query.execute(db.pool())).await?;
    Ok(())
}

/// The watcher of one key: blocks in `GET_LOCK` on a session of its own (see `sql/wait.sql`)
/// (or looks at its live readers) for as long as the key has waiters in this process. Each
/// time the lock may be free it wakes the waiters that do not queue and, when the first queued
/// waiter is this process's, that one; then it watches that waiter's turn (or another
/// process's waiter's) until the lock was taken and let go again, or the queue's head changed.
/// It stops when no waiter is left, when it woke the last queued waiter of this process, or
/// when nobody is queued on the server any more (then every waiter of the key tries, and one
/// that is refused starts a watcher again).
pub(crate) async fn watch_key(
    db: MySqlDatabase,
    wakeups: Weak<Wakeups>,
    key: LockKey,
    name: String,
    watch: Weak<Watch>,
) {
    loop {
        let watched = match watch_until_free(&db, &wakeups, &key, &name, &watch).await {
            Ok(watched) => watched,
            Err(error) => {
                tracing::debug!(%error, key = %key, "waiting for a release failed");
                Watched::Free(Next::Anyone)
            }
        };
        if let Some(watch) = watch.upgrade() {
            watch.finished();
        }
        let Some(wakeups) = wakeups.upgrade() else {
            return;
        };
        match watched {
            Watched::Free(next) => wakeups.released(&name, next),
            // A waiter that queued while this watcher was stopping found it running and
            // started none: the watcher goes on for it, or it would sleep until its own
            // next try.
            Watched::Woke(woken)
                if wakeups.others_queued(&name, woken)
                    && watch.upgrade().is_some_and(|watch| watch.claim()) =>
            {
                continue;
            }
            Watched::Woke(_) | Watched::Unwatched => {}
        }
        return;
    }
}

/// How a watcher's watch ended.
enum Watched {
    /// The key may be free: whom to wake.
    Free(Next),
    /// The watcher woke this waiter, the last queued one of the key in this process.
    Woke(OwnerId),
    /// No waiter of the key is left in this process.
    Unwatched,
}

/// Watches until the key may be free, or no waiter is left.
async fn watch_until_free(
    db: &MySqlDatabase,
    wakeups: &Weak<Wakeups>,
    key: &LockKey,
    name: &str,
    watch: &Weak<Watch>,
) -> Result<Watched> {
    let waited_on = || watch.upgrade().is_some_and(|w| Arc::strong_count(&w) > 1);
    let conn = db.session(db.operation_timeout()).await?;
    // Closed, not pooled, if a wait fails or times out with its statement still running.
    let mut holder = Holder::new(conn);
    // The other process's waiter whose turn it is: not woken here, only waited for.
    let mut skip: Option<OwnerId> = None;
    let mut watched = Watched::Unwatched;
    while waited_on() {
        let rows: Vec<(i64, Option<Vec<u8>>)> = timed(
            WATCH_BOUND + db.operation_timeout(),
            sqlx::query_as(&db.sql().wait)
                .bind(key.as_str().as_bytes())
                .bind(name)
                .bind(WATCH_BOUND.as_secs_f64())
                .bind(READERS_POLL.as_secs_f64())
                .bind(skip.map(|waiter| owner_bytes(waiter).to_vec()))
                .fetch_all(holder.conn()?),
        )
        .await?;
        let [(outcome, head)] = rows.as_slice() else {
            return Err(protocol(format!("wait answered {rows:?}")));
        };
        if *outcome == 0 {
            continue;
        }
        let Some(wakeups) = wakeups.upgrade() else {
            break;
        };
        // Readers and waiters that do not queue may try now.
        wakeups.wake_unqueued(name);
        match Next::from_head(head.as_deref())? {
            Next::Waiter(waiter) => {
                // Its turn: woken if it is this process's, and watched either way until it
                // took the lock and let go (then the next one is woken), left, or lost its
                // place, for as long as this process has waiters of the key.
                if wakeups.is_ours(name, waiter) {
                    wakeups.wake_turn(name, Next::Waiter(waiter));
                    if !wakeups.others_queued(name, waiter) {
                        // Nobody here waits behind it: a waiter that queues later starts a
                        // watcher of its own, and the session goes back to the pool now.
                        watched = Watched::Woke(waiter);
                        break;
                    }
                }
                skip = Some(waiter);
            }
            Next::Anyone => {
                // Nobody queued on the server: every waiter here tries, and one that is
                // refused starts a watcher again.
                watched = Watched::Free(Next::Anyone);
                break;
            }
        }
    }
    holder.give_back();
    Ok(watched)
}
