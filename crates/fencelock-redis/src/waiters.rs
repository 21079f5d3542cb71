//! Wake-ups for [`LockBackend::wait_for_release`](fencelock_core::LockBackend::wait_for_release):
//! one shared pub/sub connection per backend, one `Notify` per watched channel.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use fencelock_core::{LockKey, Result};
use futures_util::StreamExt;
use redis::aio::{PubSubSink, PubSubStream};
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::connection::Connection;

/// The subscriber connection and the waiters per channel.
///
/// Every waiter registers its channel, arms its `Notify`, then subscribes (idempotent on the
/// server, confirmed before returning), and only then asks the server whether the lock is
/// still held, so a release between the check and the wait still wakes it. All `SUBSCRIBE` /
/// `UNSUBSCRIBE` commands go through one mutex and re-check the registrations under it, so a
/// late unsubscribe never removes a channel a new waiter depends on.
pub(crate) struct Waiters {
    conn: Connection,
    channels: Mutex<HashMap<String, Channel>>,
    subscriber: tokio::sync::Mutex<Option<Subscriber>>,
    generation: AtomicU64,
}

impl std::fmt::Debug for Waiters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Waiters").finish_non_exhaustive()
    }
}

struct Channel {
    waiters: usize,
    notify: Arc<Notify>,
}

struct Subscriber {
    generation: u64,
    sink: PubSubSink,
    reader: AbortOnDrop,
}

/// Ends the reader task (and with it the pub/sub connection) when the subscriber goes.
struct AbortOnDrop(Option<tokio::task::AbortHandle>);

impl AbortOnDrop {
    /// Lets the task run to its end.
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(handle) = self.0.take() {
            handle.abort();
        }
    }
}

/// One waiter's interest in a channel; dropping it unregisters, and the last one out
/// unsubscribes in the background.
struct Registration {
    waiters: Arc<Waiters>,
    channel: String,
    notify: Arc<Notify>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        let idle = {
            let mut channels = self
                .waiters
                .channels
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            match channels.get_mut(&self.channel) {
                Some(entry) if entry.waiters > 1 => {
                    entry.waiters -= 1;
                    false
                }
                Some(_) => {
                    channels.remove(&self.channel);
                    true
                }
                None => false,
            }
        };
        if idle && let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let waiters = Arc::clone(&self.waiters);
            let channel = std::mem::take(&mut self.channel);
            runtime.spawn(async move { waiters.unsubscribe_if_idle(&channel).await });
        }
    }
}

impl Waiters {
    pub(crate) fn new(conn: Connection) -> Self {
        Waiters {
            conn,
            channels: Mutex::new(HashMap::new()),
            subscriber: tokio::sync::Mutex::new(None),
            generation: AtomicU64::new(0),
        }
    }

    /// Waits until the lock on `key` may have been released, at most `max`. Returns early
    /// when the lock is free, when a release is published, when the holder's ttl runs out,
    /// and spuriously when the subscriber connection drops.
    pub(crate) async fn wait(self: &Arc<Self>, key: &LockKey, max: Duration) -> Result<()> {
        let deadline = Instant::now().checked_add(max);
        let wait = self.wait_inner(key, deadline);
        match deadline {
            Some(deadline) => match tokio::time::timeout_at(deadline, wait).await {
                Ok(result) => result,
                Err(_) => Ok(()),
            },
            None => wait.await,
        }
    }

    async fn wait_inner(self: &Arc<Self>, key: &LockKey, deadline: Option<Instant>) -> Result<()> {
        let registration = self.register(self.conn.keys.channel(key));
        let notified = registration.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Err(e) = self.subscribe(&registration.channel).await {
            // Without a subscription the holder's ttl still bounds the wait.
            tracing::debug!(error = %e, "release channel subscription failed");
        }
        let mut conn = self.conn.link.clone();
        let pttl: i64 = self
            .conn
            .call(
                "PTTL",
                redis::cmd("PTTL")
                    .arg(self.conn.keys.lock(key))
                    .query_async(&mut conn),
            )
            .await?;
        let until = match pttl {
            // -2: no lock; 0: expiring right now.
            ms if ms == -2 || ms == 0 => return Ok(()),
            ms if ms > 0 => {
                let expiry = Instant::now() + Duration::from_millis(ms.unsigned_abs());
                deadline.map_or(expiry, |d| d.min(expiry))
            }
            // -1: a key without expiry, not written by fencelock; wait for a publish or `max`.
            _ => match deadline {
                Some(d) => d,
                None => {
                    notified.await;
                    return Ok(());
                }
            },
        };
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep_until(until) => {}
        }
        Ok(())
    }

    fn register(self: &Arc<Self>, channel: String) -> Registration {
        let notify = {
            let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
            let entry = channels.entry(channel.clone()).or_insert_with(|| Channel {
                waiters: 0,
                notify: Arc::new(Notify::new()),
            });
            entry.waiters += 1;
            Arc::clone(&entry.notify)
        };
        Registration {
            waiters: Arc::clone(self),
            channel,
            notify,
        }
    }

    /// Subscribes to `channel` on the shared connection, connecting it first if needed.
    async fn subscribe(self: &Arc<Self>, channel: &str) -> Result<()> {
        let mut subscriber = self.subscriber.lock().await;
        if subscriber.is_none() {
            let (sink, stream) = self.conn.pubsub().await?.split();
            let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
            let reader = tokio::spawn(read(Arc::downgrade(self), stream, generation));
            *subscriber = Some(Subscriber {
                generation,
                sink,
                reader: AbortOnDrop(Some(reader.abort_handle())),
            });
        }
        let Some(active) = subscriber.as_mut() else {
            return Ok(());
        };
        let result = self
            .conn
            .call("SUBSCRIBE", active.sink.subscribe(channel))
            .await;
        if result.is_err() {
            // A connection that failed a command is not trusted again.
            *subscriber = None;
        }
        result
    }

    async fn unsubscribe_if_idle(&self, channel: &str) {
        let mut subscriber = self.subscriber.lock().await;
        let watched = self
            .channels
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contains_key(channel);
        if watched {
            return;
        }
        if let Some(active) = subscriber.as_mut() {
            let result = self
                .conn
                .call("UNSUBSCRIBE", active.sink.unsubscribe(channel))
                .await;
            if result.is_err() {
                *subscriber = None;
            }
        }
    }

    fn wake(&self, channel: &str) {
        let channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = channels.get(channel) {
            entry.notify.notify_waiters();
        }
    }

    fn wake_all(&self) {
        let channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        for entry in channels.values() {
            entry.notify.notify_waiters();
        }
    }
}

/// Delivers messages until the connection ends, then forgets the connection (the next waiter
/// opens a new one) and wakes everyone, since their subscriptions are gone.
async fn read(waiters: Weak<Waiters>, mut stream: PubSubStream, generation: u64) {
    while let Some(message) = stream.next().await {
        let Some(waiters) = waiters.upgrade() else {
            return;
        };
        waiters.wake(message.get_channel_name());
    }
    let Some(waiters) = waiters.upgrade() else {
        return;
    };
    {
        let mut subscriber = waiters.subscriber.lock().await;
        if subscriber
            .as_ref()
            .is_some_and(|s| s.generation == generation)
        {
            // Dropping it would abort this very task, so disarm the handle first.
            if let Some(old) = subscriber.take() {
                old.reader.disarm();
            }
        }
    }
    waiters.wake_all();
}

/// How often [`poll_release`] asks whether a lock is still held.
pub(crate) const POLL_INTERVAL: Duration = Duration::from_millis(25);

/// Waits until the lock on `key` may have been released, at most `max`, by asking for the
/// lock's remaining time every [`POLL_INTERVAL`] (and not past the holder's expiry). For a
/// Redis Cluster, where the driver's cluster connection offers no pub/sub connection of the
/// kind [`Waiters`] uses: a release is seen within one interval instead of at once.
pub(crate) async fn poll_release(conn: &Connection, key: &LockKey, max: Duration) -> Result<()> {
    let deadline = Instant::now().checked_add(max);
    let lock = conn.keys.lock(key);
    loop {
        let mut link = conn.link.clone();
        let pttl: i64 = conn
            .call("PTTL", redis::cmd("PTTL").arg(&lock).query_async(&mut link))
            .await?;
        // -2: no lock; 0: expiring right now.
        if pttl == -2 || pttl == 0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut until = now + POLL_INTERVAL;
        if pttl > 0 {
            until = until.min(now + Duration::from_millis(pttl.unsigned_abs()));
        }
        if let Some(deadline) = deadline {
            if now >= deadline {
                return Ok(());
            }
            until = until.min(deadline);
        }
        tokio::time::sleep_until(until).await;
    }
}
