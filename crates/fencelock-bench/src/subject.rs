//! What a run compares, as traits a backend outside this crate implements too: a
//! [`Subject`] takes and releases locks, a [`Baseline`] is the raw code a user would write
//! without fencelock, a [`RawTryLock`] makes a subject of a bare try-lock, an [`Op`] is one
//! prepared operation, and a [`Cleanup`] removes what a run left on a server.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{Backoff, LockKey};
use tokio::time::Instant;

use crate::error::{BenchError, Result};

/// The ttl of every lease a scenario takes, the fenced lock's and the raw baselines' alike:
/// long enough that nothing expires during a run.
pub const TTL: Duration = Duration::from_secs(30);

/// One operation of a latency scenario, prepared (a writer holds its lease, ...).
#[async_trait]
pub trait Op: Send + Sync {
    /// Runs the operation once. `Some(latency)` when it measures itself (hand-off: release
    /// start to grant), `None` to be timed from outside.
    async fn once(&self) -> Result<Option<Duration>>;

    /// Undoes the preparation (releases a held lease, ...).
    async fn finish(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// Something that takes and releases locks: the fenced lock, a raw baseline, or a peer.
#[async_trait]
pub trait Subject: Send + Sync + fmt::Debug + 'static {
    /// How the subject shows in a report (`fencelock pg-lease`, `raw SET NX PX + DEL`, ...).
    fn label(&self) -> String;

    /// Takes the free lock on `key` without waiting and releases it. A lock found held is an
    /// error: every subject gets keys of its own.
    async fn acquire_release(&self, key: &LockKey) -> Result<()>;

    /// Waits up to `wait` for the lock on `key`, then releases it: one operation of the
    /// contended scenarios.
    async fn lock_release(&self, key: &LockKey, wait: Duration) -> Result<()>;
}

/// The raw baseline for one server: what a user would write against it without fencelock.
/// Every ratio of a report is counted against it.
///
/// A baseline is a [`Subject`] (usually through [`RawTryLock`]) with, in addition, the
/// server's cheapest request and a plain, unfenced write.
#[async_trait]
pub trait Baseline: Subject {
    /// The label of [`round_trip`](Self::round_trip) (`raw PING`, `raw SELECT 1`).
    fn round_trip_label(&self) -> String;

    /// The label of the plain writes of [`writer`](Self::writer) (`raw SET`, `raw UPDATE`).
    fn write_label(&self) -> String;

    /// The cheapest request the server answers (`PING`, `SELECT 1`): one round trip.
    async fn round_trip(&self) -> Result<()>;

    /// Plain, unfenced writes of `resource`, about 64 bytes each.
    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>>;

    /// Removes what the baseline created on the server (a table, the keys it wrote).
    /// [`Suite::close`](crate::Suite::close) calls it once, after the run.
    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

/// A bare try-lock, as a user calls it: take the lock if free and release it at once.
///
/// Every `RawTryLock` is a [`Subject`]: acquire+release is one try (a held lock is an
/// error), and waiting is the polling loop a user writes around it, pausing with fencelock's
/// own default [`Backoff`] so that the comparison is about the lock, not the retry policy.
#[async_trait]
pub trait RawTryLock: Send + Sync + fmt::Debug + 'static {
    /// What the subject is called in reports (`raw SET NX PX + DEL`).
    const LABEL: &'static str;

    /// `true` when the lock on `key` was free, taken and released; `false` when it was held.
    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool>;
}

#[async_trait]
impl<T: RawTryLock> Subject for T {
    fn label(&self) -> String {
        T::LABEL.into()
    }

    async fn acquire_release(&self, key: &LockKey) -> Result<()> {
        if self.try_lock_unlock(key).await? {
            Ok(())
        } else {
            Err(BenchError::Run(format!(
                "the raw lock on {key} is held by someone else"
            )))
        }
    }

    async fn lock_release(&self, key: &LockKey, wait: Duration) -> Result<()> {
        poll(key, wait, || self.try_lock_unlock(key)).await
    }
}

/// Retries `try_lock` (true when granted and released) until it succeeds or `wait` is spent,
/// pausing with fencelock's own default backoff.
async fn poll<F, Fut>(key: &LockKey, wait: Duration, mut try_lock: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let deadline = Instant::now() + wait;
    let backoff = Backoff::default();
    let mut attempt = 0;
    loop {
        if try_lock().await? {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(BenchError::Run(format!(
                "{key} not obtained within {wait:?}"
            )));
        }
        tokio::time::sleep(backoff.pause(attempt).min(deadline - now)).await;
        attempt += 1;
    }
}

/// Removes what the fenced lock left on its servers for the keys of one run: locks, token
/// counters, stored data.
///
/// Every key a run uses starts with the run's [`Suite::key_prefix`](crate::Suite::key_prefix),
/// which no other run shares, so deleting their token counters is safe even though a
/// backend never deletes one by itself: nobody holds, and nobody will ever lock, a key of a
/// finished run again.
#[async_trait]
pub trait Cleanup: Send + Sync + fmt::Debug + 'static {
    /// Deletes every lock, token counter and stored value whose key or resource starts with
    /// `key_prefix`. Called once by [`Suite::close`](crate::Suite::close), after every lease
    /// of the run was released.
    async fn clean(&self, key_prefix: &str) -> Result<()>;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Held for its first `busy` tries.
    #[derive(Debug)]
    struct BusyAtFirst {
        busy: u32,
        tries: AtomicU32,
    }

    #[async_trait]
    impl RawTryLock for BusyAtFirst {
        const LABEL: &'static str = "busy at first";

        async fn try_lock_unlock(&self, _key: &LockKey) -> Result<bool> {
            Ok(self.tries.fetch_add(1, Ordering::Relaxed) >= self.busy)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_raw_try_lock_is_polled_until_free_or_out_of_time() {
        let key = LockKey::new("k").unwrap();
        let lock = BusyAtFirst {
            busy: 3,
            tries: AtomicU32::new(0),
        };
        assert_eq!(lock.label(), "busy at first");
        assert!(matches!(
            lock.acquire_release(&key).await,
            Err(BenchError::Run(_))
        ));
        lock.lock_release(&key, Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(lock.tries.load(Ordering::Relaxed), 4);

        let never = BusyAtFirst {
            busy: u32::MAX,
            tries: AtomicU32::new(0),
        };
        let err = never
            .lock_release(&key, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("not obtained"), "{err}");
    }
}
