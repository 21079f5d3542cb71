//! Instruments for the guard: the memory backend as the server, with what travels between it
//! and the guard delayed, lost or counted. Not a stand-in for a real server: the memory
//! backend decides who holds the lock.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{
    Capabilities, Error, FencingToken, Lease, LockBackend, LockGuard, LockInfo, LockKey,
    LostReason, Result,
};
use fencelock_memory::MemoryLockBackend;
use tokio::time::{Instant, sleep};

/// The memory backend as the server, with a delay on the way back for each extend reply (taken
/// in call order; none once the list is empty) and on the way to the server for each release.
/// An extend is processed by the server the moment it is called; only its reply is late.
///
/// `lose_extend_replies` makes the next extends fail as a dropped connection would after the
/// request left: the server processes the request after the given delay (zero: at once),
/// while the caller gets [`Error::Unavailable`] at once.
#[derive(Debug, Default)]
pub(crate) struct Delayed {
    pub(crate) server: MemoryLockBackend,
    extend_reply_delays: Mutex<VecDeque<Duration>>,
    lost_extend_replies: Mutex<VecDeque<Duration>>,
    release_delay: Mutex<Duration>,
    pub(crate) extends: AtomicUsize,
    pub(crate) extend_times: Mutex<Vec<Instant>>,
    pub(crate) releases: AtomicUsize,
    /// Reports every lease lost, as a backend that watches its sessions would.
    pub(crate) session_ended: tokio::sync::Notify,
}

impl Delayed {
    pub(crate) fn delay_extend_replies(&self, delays: impl IntoIterator<Item = Duration>) {
        self.extend_reply_delays.lock().unwrap().extend(delays);
    }

    pub(crate) fn lose_extend_replies(&self, processed_after: impl IntoIterator<Item = Duration>) {
        self.lost_extend_replies
            .lock()
            .unwrap()
            .extend(processed_after);
    }

    pub(crate) fn delay_releases(&self, delay: Duration) {
        *self.release_delay.lock().unwrap() = delay;
    }

    pub(crate) async fn holder_is(&self, guard: &LockGuard) -> bool {
        let info = self.server.inspect(&guard.lease().key).await.unwrap();
        info.holder == Some(guard.fence())
    }
}

#[async_trait]
impl LockBackend for Delayed {
    fn name(&self) -> &'static str {
        "delayed"
    }
    fn capabilities(&self) -> Capabilities {
        self.server.capabilities()
    }
    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        self.server.try_acquire(key, ttl).await
    }
    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.extends.fetch_add(1, Ordering::SeqCst);
        self.extend_times.lock().unwrap().push(Instant::now());
        let lost_reply = self.lost_extend_replies.lock().unwrap().pop_front();
        if let Some(processed_after) = lost_reply {
            let (server, lease) = (self.server.clone(), lease.clone());
            tokio::spawn(async move {
                sleep(processed_after).await;
                let _ = server.extend(&lease, ttl).await;
            });
            tokio::task::yield_now().await;
            return Err(Error::Unavailable {
                backend: "delayed",
                message: "connection reset after the request was sent".into(),
                source: None,
            });
        }
        let reply = self.server.extend(lease, ttl).await;
        let delay = self.extend_reply_delays.lock().unwrap().pop_front();
        if let Some(delay) = delay {
            sleep(delay).await;
        }
        reply
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        let delay = *self.release_delay.lock().unwrap();
        sleep(delay).await;
        self.releases.fetch_add(1, Ordering::SeqCst);
        self.server.release(lease).await
    }
    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        self.server.inspect(key).await
    }
    async fn watch_lost(&self, _lease: &Lease) -> LostReason {
        self.session_ended.notified().await;
        LostReason::SessionEnded
    }
    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        self.server.advance_token(key, floor).await
    }
}
