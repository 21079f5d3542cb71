//! One shared `LISTEN` per database; each release wakes one waiter of its key.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use fencelock_core::{LockKey, Result};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::error::timed;

/// The waiters of this process, one queue per key being waited for.
type Queues = Mutex<HashMap<Arc<str>, Arc<Notify>>>;

fn lock(queues: &Queues) -> MutexGuard<'_, HashMap<Arc<str>, Arc<Notify>>> {
    // Every critical section leaves the map valid, so a poisoned lock is still consistent.
    queues.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Release notifications of one schema. The listening task ends when this is dropped.
///
/// A release wakes **one** waiter of its key in this process (the one that waited longest):
/// only one of them can take the lock, and waking all of them would send every one to the
/// server for a try that fails. If the woken waiter gives up without taking the lock, the others
/// still wake at their own deadline; when the listening connection is lost, every waiter wakes,
/// since a release may have been missed.
pub(crate) struct Wakeups {
    queues: Arc<Queues>,
    task: JoinHandle<()>,
}

impl Drop for Wakeups {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Wakeups {
    /// Opens a dedicated connection, `LISTEN`s on `channel` and forwards each payload (a key).
    pub(crate) async fn start(
        backend: &'static str,
        options: PgConnectOptions,
        channel: &str,
        timeout: Duration,
    ) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(1)
            .acquire_timeout(timeout)
            .connect_lazy_with(options);
        let mut listener = timed(backend, timeout, PgListener::connect_with(&pool)).await?;
        timed(backend, timeout, listener.listen(channel)).await?;
        let queues = Arc::new(Queues::default());
        let task = tokio::spawn(forward(listener, queues.clone()));
        Ok(Wakeups { queues, task })
    }

    /// A waiter for the next release of `key`, registered from now on.
    pub(crate) fn subscribe(&self, key: &LockKey) -> Waiter {
        let notify = lock(&self.queues)
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
            Ok(Some(notification)) => {
                if let Some(queue) = lock(&queues).get(notification.payload()) {
                    // Stored as a permit when nobody is parked yet, so a waiter between
                    // subscribing and parking still sees it.
                    queue.notify_one();
                }
            }
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

fn wake_everyone(queues: &Queues) {
    for queue in lock(queues).values() {
        queue.notify_waiters();
    }
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
            queues.remove(&self.key);
        }
    }
}
