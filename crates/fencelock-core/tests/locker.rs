//! `Locker` and `LockGuard` on paused Tokio time, over the memory backend: long spans of time
//! pass instantly and exactly, so the watchdog, the wait budget and the lost signal are checked
//! without real sleeps.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{
    Capabilities, Error, FencingToken, Lease, LockBackend, LockInfo, LockKey, Locker, LostReason,
    Result, Semaphore,
};
use fencelock_memory::MemoryLockBackend;
use tokio::time::{Instant, sleep};

/// The memory backend without its wake-ups (so waiting falls back to backoff), counting tries.
#[derive(Debug, Default)]
struct Polling {
    inner: MemoryLockBackend,
    tries: AtomicUsize,
}

#[async_trait]
impl LockBackend for Polling {
    fn name(&self) -> &'static str {
        "polling"
    }
    /// Not fair: it forwards no queue, so its waiters back off between tries.
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().with_fair(false)
    }
    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        self.tries.fetch_add(1, Ordering::SeqCst);
        self.inner.try_acquire(key, ttl).await
    }
    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.inner.extend(lease, ttl).await
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }
    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        self.inner.inspect(key).await
    }
    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        self.inner.advance_token(key, floor).await
    }
}

#[tokio::test(start_paused = true)]
async fn watchdog_keeps_a_lease_for_an_hour() {
    let backend = Arc::new(MemoryLockBackend::new());
    let locker = Locker::new(backend.clone());
    let guard = locker
        .lock("hour")
        .ttl(Duration::from_secs(3))
        .await
        .unwrap();
    let token = guard.token();
    sleep(Duration::from_secs(3600)).await;
    assert!(guard.is_held());
    assert_eq!(guard.token(), token, "renewal changed the token");
    let info = backend
        .inspect(&LockKey::new("hour").unwrap())
        .await
        .unwrap();
    assert_eq!(info.holder, Some(guard.fence()));
    assert!(guard.release().await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn without_watchdog_lost_fires_at_valid_until() {
    let locker = Locker::new(Arc::new(MemoryLockBackend::new()));
    let guard = locker
        .lock("deadline")
        .ttl(Duration::from_secs(10))
        .watchdog(false)
        .await
        .unwrap();
    let valid_until = guard.lease().valid_until;
    assert_eq!(guard.lost().await, LostReason::DeadlinePassed);
    assert!(Instant::now() >= valid_until);
    assert!(Instant::now() < valid_until + Duration::from_millis(10));
}

#[tokio::test(start_paused = true)]
async fn manual_extend_moves_the_deadline_both_ways() {
    let locker = Locker::new(Arc::new(MemoryLockBackend::new()));
    let guard = locker
        .lock("manual")
        .ttl(Duration::from_secs(10))
        .watchdog(false)
        .await
        .unwrap();
    guard.extend(Duration::from_secs(60)).await.unwrap();
    sleep(Duration::from_secs(30)).await;
    assert!(guard.is_held(), "extend did not move the deadline forward");
    guard.extend(Duration::from_secs(1)).await.unwrap();
    let started = Instant::now();
    guard.lost().await;
    assert!(
        started.elapsed() <= Duration::from_secs(1),
        "a shorter extend was ignored"
    );
}

#[tokio::test(start_paused = true)]
async fn lost_fires_by_the_deadline_when_renewals_fail() {
    let backend = MemoryLockBackend::new();
    let locker = Locker::new(Arc::new(backend.clone()));
    let guard = locker
        .lock("closing")
        .ttl(Duration::from_secs(9))
        .await
        .unwrap();
    sleep(Duration::from_secs(1)).await;
    backend.close();
    let valid_until = guard.lease().valid_until;
    assert_eq!(guard.lost().await, LostReason::DeadlinePassed);
    assert!(
        Instant::now() <= valid_until,
        "lost fired after the deadline"
    );
    assert!(!guard.is_held());
}

#[tokio::test(start_paused = true)]
async fn takeover_is_reported_as_superseded() {
    let backend = Arc::new(MemoryLockBackend::new());
    let locker = Locker::new(backend.clone());
    let guard = locker
        .lock("takeover")
        .ttl(Duration::from_secs(1))
        .watchdog(false)
        .await
        .unwrap();
    sleep(Duration::from_secs(2)).await;
    let key = LockKey::new("takeover").unwrap();
    let other = backend
        .try_acquire(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    match guard.extend(Duration::from_secs(1)).await {
        Err(Error::LeaseLost { reason, .. }) => assert_eq!(reason, LostReason::Superseded),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    assert!(!guard.release().await.unwrap());
    assert!(backend.release(&other).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn waiting_backs_off_and_respects_the_budget() {
    let backend = Arc::new(Polling::default());
    let key = LockKey::new("budget").unwrap();
    let held = backend
        .try_acquire(&key, Duration::from_secs(3600))
        .await
        .unwrap()
        .unwrap();
    let locker = Locker::new(backend.clone());
    let started = Instant::now();
    let budget = Duration::from_secs(10);
    match locker.lock("budget").wait(budget).await {
        Err(Error::Timeout { waited, .. }) => assert_eq!(waited, budget),
        other => panic!("expected Timeout, got {other:?}"),
    }
    assert_eq!(started.elapsed(), budget, "waited past the budget");
    let tries = backend.tries.load(Ordering::SeqCst) - 1;
    // Backoff caps grow to 500 ms with full jitter: on average 250 ms a pause, so about 40
    // tries in 10 s; far fewer than a busy loop, far more than a single retry.
    assert!((10..=2_000).contains(&tries), "{tries} tries in 10 s");
    assert!(backend.release(&held).await.unwrap());
}

#[tokio::test(start_paused = true)]
async fn waiter_wakes_on_release_not_on_backoff() {
    let backend = Arc::new(MemoryLockBackend::new());
    let key = LockKey::new("wake").unwrap();
    let held = backend
        .try_acquire(&key, Duration::from_secs(3600))
        .await
        .unwrap()
        .unwrap();
    let locker = Locker::new(backend.clone());
    let waiter = tokio::spawn(
        locker
            .lock("wake")
            .wait(Duration::from_secs(600))
            .into_future(),
    );
    sleep(Duration::from_secs(100)).await;
    let released_at = Instant::now();
    assert!(backend.release(&held).await.unwrap());
    let guard = waiter.await.unwrap().unwrap();
    assert_eq!(
        Instant::now(),
        released_at,
        "the waiter slept past the release"
    );
    guard.release().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn dropped_guard_releases_in_the_background() {
    let backend = Arc::new(MemoryLockBackend::new());
    let locker = Locker::new(backend.clone());
    let guard = locker
        .lock("drop")
        .ttl(Duration::from_secs(3600))
        .await
        .unwrap();
    let lost = guard.lost();
    drop(guard);
    assert_eq!(lost.await, LostReason::Released);
    tokio::task::yield_now().await;
    let key = LockKey::new("drop").unwrap();
    assert_eq!(backend.inspect(&key).await.unwrap().holder, None);
}

/// `wait(Duration::MAX)` and `wait_forever()` wait without a bound, and get the lock when it
/// is released.
#[tokio::test(start_paused = true)]
async fn unbounded_waits_last_until_the_release() {
    let backend = Arc::new(MemoryLockBackend::new());
    let locker = Locker::new(backend.clone());
    for (name, request) in [
        ("wait(MAX)", locker.lock("unbounded").wait(Duration::MAX)),
        ("wait_forever()", locker.lock("unbounded").wait_forever()),
    ] {
        let key = LockKey::new("unbounded").unwrap();
        let held = backend
            .try_acquire(&key, Duration::from_secs(24 * 3600))
            .await
            .unwrap()
            .unwrap();
        let waiter = tokio::spawn(request.into_future());
        sleep(Duration::from_secs(3600)).await;
        assert!(!waiter.is_finished(), "{name} ended before the release");
        assert!(backend.release(&held).await.unwrap());
        let guard = waiter.await.unwrap().unwrap();
        assert!(guard.is_held(), "{name}");
        guard.release().await.unwrap();
    }
}

/// A locker takes a backend by value, in an `Arc`, or as an `Arc<dyn LockBackend>` (which it
/// keeps as it is) or a `Box<dyn LockBackend>`.
#[tokio::test(start_paused = true)]
async fn a_locker_takes_any_backend() {
    let memory = MemoryLockBackend::new();
    let dynamic: Arc<dyn LockBackend> = Arc::new(memory.clone());
    let boxed: Box<dyn LockBackend> = Box::new(memory.clone());
    let lockers = [
        Locker::new(memory.clone()),
        Locker::new(Arc::new(memory.clone())),
        Locker::new(dynamic.clone()),
        Locker::new(boxed),
    ];
    assert!(Arc::ptr_eq(lockers[2].backend(), &dynamic));
    let mut last = None;
    for locker in &lockers {
        let guard = locker.lock("any-backend").await.unwrap();
        assert!(
            last < Some(guard.token()),
            "the lockers do not share the backend"
        );
        last = Some(guard.token());
        guard.release().await.unwrap();
    }
}

/// A semaphore's waiter listens to 16 of its slots at most and finds a permit freed in any
/// other slot with its next try, after a backoff pause (500 ms at most). The semaphore's
/// wrapper once passed on a fair backend's `fair`, without its queue: its requests then slept
/// on the watched slots for their whole wait, and missed a permit freed elsewhere. Eight
/// rounds of 64 slots: a request that sleeps on its watched slots alone finds all eight
/// permits in time with a chance of 1 in 4^8.
#[tokio::test(start_paused = true)]
async fn a_permit_freed_in_an_unwatched_slot_is_found_within_a_backoff_pause() {
    let locker = Locker::new(MemoryLockBackend::new());
    let semaphore = Semaphore::new(&locker, "many-slots", 64).unwrap();
    let ttl = Duration::from_secs(3600);
    let mut held = Vec::new();
    for _ in 0..semaphore.permits() {
        held.push(
            semaphore
                .acquire()
                .ttl(ttl)
                .wait(Duration::ZERO)
                .await
                .unwrap(),
        );
    }
    for _ in 0..8 {
        let waiter = tokio::spawn({
            let semaphore = semaphore.clone();
            async move {
                semaphore
                    .acquire()
                    .ttl(ttl)
                    .wait(Duration::from_secs(60))
                    .await
            }
        });
        sleep(Duration::from_millis(100)).await;
        let freed = held.remove(0);
        let released_at = Instant::now();
        assert!(freed.release().await.unwrap());
        let permit = waiter.await.unwrap().unwrap();
        let waited = released_at.elapsed();
        assert!(
            waited <= Duration::from_millis(600),
            "a freed permit was found {waited:?} after its release"
        );
        held.push(permit);
    }
}
