//! Waiting for a release: one session per key and process blocks in `GET_LOCK` on the server,
//! which wakes it the moment the lock is let go; the other waiters of that key in this process
//! wait for it (or for a release made by this process) on a `Notify`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Notify;

/// Above this many keys the map drops the entries nobody waits on any more.
const PRUNE_ABOVE: usize = 1024;

/// The waiters of one key in this process.
#[derive(Debug, Default)]
pub(crate) struct Watch {
    pub(crate) notify: Notify,
    /// Whether a session is blocked on the server for this key.
    watching: AtomicBool,
}

impl Watch {
    /// Claims the one server-side wait of this key; `false` if another waiter has it.
    pub(crate) fn claim(&self) -> bool {
        !self.watching.swap(true, Ordering::AcqRel)
    }

    /// Ends the server-side wait and wakes every waiter of the key.
    pub(crate) fn finished(&self) {
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

/// The server-side wait's bound in seconds, as `GET_LOCK` takes it.
pub(crate) fn seconds(wait: Duration) -> f64 {
    wait.as_secs_f64()
}
