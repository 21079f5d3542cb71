//! Wake-ups for [`LockBackend::wait_for_release`](fencelock_core::LockBackend::wait_for_release):
//! one etcd watch per waited-for lock key (or reader-key prefix, for a writer waiting out a
//! read phase), shared by the waiters of this backend.
//!
//! A waiter knows a revision at which it saw the lock held (the failed grant's). The watch
//! reports the lock key's deletions from a start revision on, including past ones still in
//! etcd's history, so no release after a waiter's revision goes unseen when the watch started
//! at or before it; a waiter older than the watch returns at once (it may have missed one;
//! the caller simply tries again).
//!
//! Each deletion wakes **one** waiter of this process (the first in line): all of them would
//! only race for the lock and all but one find it taken, paying a write each. The others wait
//! for the next deletion or the end of their pause, as the caller's backoff sets it; a woken
//! waiter that loses the lock to another process waits again. A watch stays open a little
//! after its last waiter left, since `Locker` alternates short waits with tries.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use etcd_client::{EventType, WatchFilterType, WatchOptions};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::cluster::Shared;

/// How long a watch stays open after its last waiter returned.
const LINGER: Duration = Duration::from_secs(2);

/// What a watch has seen, and its waiters' queue.
#[derive(Debug, Default)]
struct WatchState {
    /// The revision of the last deletion of the key (0: none yet).
    last_delete: AtomicI64,
    /// The watch ended (its stream broke, or the server cancelled it).
    ended: AtomicBool,
    notify: Notify,
}

/// One open watch on one lock key.
#[derive(Debug)]
struct KeyWatch {
    /// The first revision the watch reports.
    start: i64,
    state: Arc<WatchState>,
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

    /// Waits until `lock_key`, seen held at revision `held_at`, is deleted (this waiter's turn
    /// to be woken), or at most `max`. Returns early when the watch cannot tell; when no
    /// watch can be opened it sleeps for `max`, as a polling backend would. With `prefix`,
    /// `lock_key` is a prefix and the deletion of any key under it counts.
    pub(crate) async fn wait(&self, lock_key: &[u8], prefix: bool, held_at: i64, max: Duration) {
        let deadline = Instant::now().checked_add(max);
        let Some(key_watch) = self.open(lock_key, prefix, held_at) else {
            return;
        };
        let state = key_watch.state.clone();
        let woken = async {
            let notified = state.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if !state.ended.load(Ordering::Acquire) {
                notified.await;
            }
            // Ended: a deletion it saw last (or a cancelled watch) says "try again"; a broken
            // stream says nothing.
            !state.ended.load(Ordering::Acquire)
                || state.last_delete.load(Ordering::Acquire) > held_at
        };
        let outcome = match deadline {
            Some(deadline) => tokio::time::timeout_at(deadline, woken).await.ok(),
            None => Some(woken.await),
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
    fn open(&self, lock_key: &[u8], prefix: bool, held_at: i64) -> Option<Arc<KeyWatch>> {
        let mut watches = self.watches();
        if let Some(open) = watches.get(lock_key).and_then(Weak::upgrade)
            && !open.state.ended.load(Ordering::Acquire)
        {
            return (open.start <= held_at + 1).then_some(open);
        }
        watches.retain(|_, w| w.strong_count() > 0);
        let start = held_at + 1;
        let state = Arc::new(WatchState::default());
        let task = tokio::spawn(run_watch(
            self.shared.clone(),
            lock_key.to_vec(),
            prefix,
            start,
            state.clone(),
        ))
        .abort_handle();
        let key_watch = Arc::new(KeyWatch { start, state, task });
        watches.insert(lock_key.to_vec(), Arc::downgrade(&key_watch));
        Some(key_watch)
    }
}

/// Watches `lock_key` for deletions from revision `start` on, waking one waiter per deletion,
/// until the stream ends or the watch is dropped; then every waiter is woken. A watch the
/// server cancels (its start was compacted away) counts as a deletion, so its waiters try
/// again.
async fn run_watch(
    shared: Arc<Shared>,
    lock_key: Vec<u8>,
    prefix: bool,
    start: i64,
    state: Arc<WatchState>,
) {
    /// Marks the watch ended and wakes every waiter, however the task stops (aborted
    /// included).
    struct End(Arc<WatchState>);
    impl Drop for End {
        fn drop(&mut self) {
            self.0.ended.store(true, Ordering::Release);
            self.0.notify.notify_waiters();
        }
    }
    let _end = End(state.clone());
    let mut client = shared.client.watch_client();
    let mut options = WatchOptions::new()
        .with_start_revision(start)
        .with_filters([WatchFilterType::NoPut]);
    if prefix {
        options = options.with_prefix();
    }
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
            state.last_delete.store(i64::MAX, Ordering::Release);
            return;
        }
        for event in response.events() {
            if event.event_type() == EventType::Delete {
                let revision = event.kv().map_or(i64::MAX, |kv| kv.mod_revision());
                state.last_delete.fetch_max(revision, Ordering::AcqRel);
                state.notify.notify_one();
            }
        }
    }
}
