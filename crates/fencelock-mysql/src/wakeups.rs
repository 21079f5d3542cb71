//! Waiting for a release. While a key has waiters in this process, one task (the key's
//! *watcher*) keeps a session blocked in `GET_LOCK` on the server, which wakes it the moment the
//! lock is let go; the watcher then wakes every waiter of the key, which try again. While the
//! lock is free but a read phase lives (readers hold no session to wait on), the watcher's
//! session looks at the key's readers every [`READERS_POLL`] on the server instead, until the
//! last one is gone. The watcher's wait does not depend on how long any one waiter waits, so a
//! release is not missed while a waiter is between two waits.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use fencelock_core::{LockKey, Result};
use tokio::sync::Notify;

use crate::database::MySqlDatabase;
use crate::error::{protocol, timed};
use crate::session::Holder;

/// Above this many keys the map drops the entries nobody waits on any more.
const PRUNE_ABOVE: usize = 1024;

/// The longest single wait of a watcher on the server; it waits again while waiters remain.
const WATCH_BOUND: Duration = Duration::from_secs(1);

/// How often a watcher's session looks, on the server, whether a live read phase has ended.
const READERS_POLL: Duration = Duration::from_millis(10);

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

    /// Ends the watcher and wakes every waiter of the key.
    fn finished(&self) {
        self.watching.store(false, Ordering::Release);
        self.notify.notify_waiters();
    }
}

/// The keys waited on in this process, by lock name.
#[derive(Debug, Default)]
pub(crate) struct Wakeups {
    keys: Mutex<HashMap<String, Weak<Watch>>>,
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

    /// Wakes this process's waiters of `name`: a lock it held was let go.
    pub(crate) fn released(&self, name: &str) {
        let watch = self.keys().get(name).and_then(Weak::upgrade);
        if let Some(watch) = watch {
            watch.notify.notify_waiters();
        }
    }
}

/// The watcher of one key: blocks in `GET_LOCK` on a session of its own (see `sql/wait.sql`)
/// (or looks at its live readers) for as long as the key has waiters, waking them whenever the
/// wait ends; stops when the lock is let go or free of readers, or its holder's lease has run
/// out (the waiters try then, and one that is refused starts a watcher again), or when no
/// waiter is left.
pub(crate) async fn watch_key(db: MySqlDatabase, key: LockKey, name: String, watch: Weak<Watch>) {
    if let Err(error) = watch_until_free(&db, &key, &name, &watch).await {
        tracing::debug!(%error, key = %key, "waiting for a release failed");
    }
    if let Some(watch) = watch.upgrade() {
        watch.finished();
    }
}

async fn watch_until_free(
    db: &MySqlDatabase,
    key: &LockKey,
    name: &str,
    watch: &Weak<Watch>,
) -> Result<()> {
    let waited_on = || watch.upgrade().is_some_and(|w| Arc::strong_count(&w) > 1);
    let conn = timed(db.operation_timeout(), db.sessions().acquire()).await?;
    // Closed, not pooled, if a wait fails or times out with its statement still running.
    let mut holder = Holder::new(conn);
    while waited_on() {
        let rows: Vec<(i64,)> = timed(
            WATCH_BOUND + db.operation_timeout(),
            sqlx::query_as(&db.sql().wait)
                .bind(key.as_str().as_bytes())
                .bind(name)
                .bind(WATCH_BOUND.as_secs_f64())
                .bind(READERS_POLL.as_secs_f64())
                .fetch_all(holder.conn()?),
        )
        .await?;
        match rows.as_slice() {
            [(0,)] => {}
            [(_,)] => break,
            _ => return Err(protocol(format!("wait answered {rows:?}"))),
        }
    }
    holder.give_back();
    Ok(())
}
