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
//! between two waits; a queued waiter also tries again every [`TURN_REFRESH`], which keeps its
//! place and mends any wake-up lost all the same.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use fencelock_core::{LockKey, OwnerId, Result};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::codec::{owner_bytes, owner_from};
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

/// How long a queued waiter sleeps at most before it tries again, which keeps its place
/// (a place lapses after [`PLACE_TTL`] without a try).
pub(crate) const TURN_REFRESH: Duration = Duration::from_millis(500);

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
    notify: Arc<Notify>,
    /// When it last waited: a waiter whose request vanished without leaving is forgotten
    /// once the map is large and its place has long lapsed.
    touched: Instant,
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

    /// The wake-up of queued `waiter` of `name`, registered (until [`forget`](Self::forget))
    /// if it has none yet. A wake-up sent while the waiter is not waiting is kept for its next
    /// wait.
    pub(crate) fn turn(&self, name: &str, waiter: OwnerId) -> Arc<Notify> {
        let now = Instant::now();
        let mut turns = self.turns();
        if turns.len() > PRUNE_ABOVE {
            turns.retain(|_, turn| now.duration_since(turn.touched) < PLACE_TTL * 4);
        }
        let turn = turns.entry(waiter).or_insert_with(|| Turn {
            name: name.to_owned(),
            notify: Arc::new(Notify::new()),
            touched: now,
        });
        turn.touched = now;
        turn.notify.clone()
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
    let next = match watch_until_free(&db, &wakeups, &key, &name, &watch).await {
        Ok(next) => next,
        Err(error) => {
            tracing::debug!(%error, key = %key, "waiting for a release failed");
            Some(Next::Anyone)
        }
    };
    if let Some(watch) = watch.upgrade() {
        watch.finished();
    }
    if let (Some(next), Some(wakeups)) = (next, wakeups.upgrade()) {
        wakeups.released(&name, next);
    }
}

/// Whom to wake once the key may be free, or `None` when no waiter is left.
async fn watch_until_free(
    db: &MySqlDatabase,
    wakeups: &Weak<Wakeups>,
    key: &LockKey,
    name: &str,
    watch: &Weak<Watch>,
) -> Result<Option<Next>> {
    let waited_on = || watch.upgrade().is_some_and(|w| Arc::strong_count(&w) > 1);
    let conn = db.session(db.operation_timeout()).await?;
    // Closed, not pooled, if a wait fails or times out with its statement still running.
    let mut holder = Holder::new(conn);
    // The other process's waiter whose turn it is: not woken here, only waited for.
    let mut skip: Option<OwnerId> = None;
    let mut next = None;
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
                        break;
                    }
                }
                skip = Some(waiter);
            }
            Next::Anyone => {
                // Nobody queued on the server: every waiter here tries, and one that is
                // refused starts a watcher again.
                next = Some(Next::Anyone);
                break;
            }
        }
    }
    holder.give_back();
    Ok(next)
}
