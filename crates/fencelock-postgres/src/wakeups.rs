//! One shared `LISTEN` per database, fanned out to waiters.

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{LockKey, Result};
use sqlx::postgres::{PgConnectOptions, PgListener, PgPoolOptions};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::error::timed;

/// Sent to every waiter when the listening connection was lost: a release may have been missed.
const EVERYONE: &str = "";

/// Release notifications of one schema. The listening task ends when this is dropped.
pub(crate) struct Wakeups {
    sender: broadcast::Sender<Arc<str>>,
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
        let (sender, _) = broadcast::channel(1024);
        let task = tokio::spawn(forward(listener, sender.clone()));
        Ok(Wakeups { sender, task })
    }

    /// A receiver of the releases from now on.
    pub(crate) fn subscribe(&self) -> Waiter {
        Waiter {
            receiver: self.sender.subscribe(),
        }
    }
}

async fn forward(mut listener: PgListener, sender: broadcast::Sender<Arc<str>>) {
    loop {
        match listener.try_recv().await {
            Ok(Some(notification)) => {
                let _ = sender.send(Arc::from(notification.payload()));
            }
            Ok(None) => {
                // The connection was lost; the next call reconnects and listens again.
                let _ = sender.send(Arc::from(EVERYONE));
            }
            Err(error) => {
                tracing::debug!(%error, "release listener cannot reconnect yet");
                let _ = sender.send(Arc::from(EVERYONE));
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// A receiver of `db`'s release notifications, or `None` when no listener can be started
/// (for example behind a transaction-mode pooler): the caller then sleeps instead.
pub(crate) async fn subscribe(db: &crate::PgDatabase, backend: &'static str) -> Option<Waiter> {
    match db.wakeups(backend).await {
        Ok(wakeups) => Some(wakeups.subscribe()),
        Err(error) => {
            tracing::debug!(%error, "no release notifications; waiting by the deadline");
            None
        }
    }
}

/// One waiter's view of the release notifications.
pub(crate) struct Waiter {
    receiver: broadcast::Receiver<Arc<str>>,
}

impl Waiter {
    /// Returns when `key` may have been released, or after `max`.
    pub(crate) async fn released(&mut self, key: &LockKey, max: Duration) {
        let wait = async {
            loop {
                match self.receiver.recv().await {
                    Ok(released) if &*released == key.as_str() || &*released == EVERYONE => {
                        return;
                    }
                    Ok(_) => {}
                    // Missed some notifications: one of them may have been ours.
                    Err(broadcast::error::RecvError::Lagged(_)) => return,
                    Err(broadcast::error::RecvError::Closed) => {
                        tokio::time::sleep(max).await;
                        return;
                    }
                }
            }
        };
        let _ = tokio::time::timeout(max, wait).await;
    }
}
