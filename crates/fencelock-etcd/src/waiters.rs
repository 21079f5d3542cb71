//! Wake-ups for [`LockBackend::wait_for_release`](fencelock_core::LockBackend::wait_for_release):
//! one etcd watch per waited-for lock key, shared by the waiters of this backend.
//!
//! A waiter knows a revision at which it saw the lock held (the failed grant's). The watch
//! reports the lock key's deletions from a start revision on, including past ones still in
//! etcd's history, so a waiter whose revision is at or after the watch's start misses no
//! release: it returns when a deletion after its revision was seen. A waiter older than the
//! watch returns at once (it may have missed one; the caller simply tries again). A watch
//! stays open a little after its last waiter left, since `Locker` alternates short waits with
//! tries.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use etcd_client::{EventType, WatchFilterType, WatchOptions};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::cluster::Shared;

/// How long a watch stays open after its last waiter returned.
const LINGER: Duration = Duration::from_secs(2);

/// What a watch has seen.
#[derive(Debug, Clone, Copy, Default)]
struct Seen {
    /// The revision of the last deletion of the key (0: none yet).
    last_delete: i64,
}

/// One open watch on one lock key.
#[derive(Debug)]
struct KeyWatch {
    /// The first revision the watch reports.
    start: i64,
    seen: watch::Receiver<Seen>,
    task: tokio::task::AbortHandle,
}

impl Drop for KeyWatch {
    fn drop(&mut self) {
        // Ends the watch stream; the server cancels the watch.
        self.task.abort();
    }
}

/// The open watches of one backend.
#[derive(Debug)]
pub(crate) struct Waiters {
    shared: Arc<Shared>,
    watches: Mutex<HashMap<Vec<u8>, Weak<KeyWatch>>>,
}

impl Waiters {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Waiters {
            shared,
            watches: Mutex::new(HashMap::new()),
        }
    }

    fn watches(&self) -> MutexGuard<'_, HashMap<Vec<u8>, Weak<KeyWatch>>> {
        self.watches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Waits until `lock_key`, seen held at revision `held_at`, is deleted, or at most `max`.
    /// Returns early (spuriously) when the watch cannot tell; when no watch can be opened it
    /// sleeps for `max`, as a polling backend would.
    pub(crate) async fn wait(&self, lock_key: &[u8], held_at: i64, max: Duration) {
        let deadline = Instant::now().checked_add(max);
        let Some(key_watch) = self.open(lock_key, held_at) else {
            return;
        };
        let mut seen = key_watch.seen.clone();
        let released = async {
            loop {
                if seen.borrow_and_update().last_delete > held_at {
                    return true;
                }
                if seen.changed().await.is_err() {
                    // The watch ended: a deletion it saw last, or a broken stream.
                    return seen.borrow().last_delete > held_at;
                }
            }
        };
        let outcome = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, released).await.ok(),
            None => Some(released.await),
        };
        if outcome == Some(false) {
            // No watch to rely on: wait like a poller would.
            match deadline {
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                None => tokio::time::sleep(LINGER).await,
            }
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                tokio::time::sleep(LINGER).await;
                drop(key_watch);
            });
        }
    }

    /// The open watch on `lock_key` that covers revision `held_at`, opening one if needed.
    /// `None` when the open watch started after `held_at` (a deletion may have been missed).
    fn open(&self, lock_key: &[u8], held_at: i64) -> Option<Arc<KeyWatch>> {
        let mut watches = self.watches();
        if let Some(open) = watches.get(lock_key).and_then(Weak::upgrade) {
            let alive = open.seen.has_changed().is_ok();
            if alive || open.seen.borrow().last_delete > held_at {
                return (open.start <= held_at + 1).then_some(open);
            }
        }
        watches.retain(|_, w| w.strong_count() > 0);
        let start = held_at + 1;
        let (sender, seen) = watch::channel(Seen::default());
        let task = tokio::spawn(run_watch(
            self.shared.clone(),
            lock_key.to_vec(),
            start,
            sender,
        ))
        .abort_handle();
        let key_watch = Arc::new(KeyWatch { start, seen, task });
        watches.insert(lock_key.to_vec(), Arc::downgrade(&key_watch));
        Some(key_watch)
    }
}

/// Watches `lock_key` for deletions from revision `start` on, reporting each on `sender`,
/// until the stream ends or the watch is dropped. A watch the server cancels (its start was
/// compacted away) reports a deletion, so its waiters try again.
async fn run_watch(
    shared: Arc<Shared>,
    lock_key: Vec<u8>,
    start: i64,
    sender: watch::Sender<Seen>,
) {
    let mut client = shared.client.watch_client();
    let options = WatchOptions::new()
        .with_start_revision(start)
        .with_filters([WatchFilterType::NoPut]);
    let Ok(Ok(mut stream)) = tokio::time::timeout(
        shared.operation_timeout,
        client.watch(lock_key, Some(options)),
    )
    .await
    else {
        return;
    };
    while let Ok(Some(response)) = stream.message().await {
        if response.canceled() {
            sender.send_modify(|seen| seen.last_delete = i64::MAX);
            return;
        }
        for event in response.events() {
            if event.event_type() == EventType::Delete {
                let revision = event.kv().map_or(i64::MAX, |kv| kv.mod_revision());
                sender.send_modify(|seen| seen.last_delete = seen.last_delete.max(revision));
            }
        }
    }
}
