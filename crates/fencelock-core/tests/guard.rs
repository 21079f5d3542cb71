//! `LockGuard` against instrumented backends on paused Tokio time: renewals whose replies
//! arrive out of order, releases that are slow, very short ttls.
//!
//! The instruments wrap the memory backend, which plays the server: it decides who holds the
//! lock, and the instrument only delays or counts what travels between it and the guard.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fencelock_core::{Error, LockBackend, LockGuard, Locker, LostReason, MIN_TTL};
use tokio::time::{Instant, sleep, timeout};

use support::Delayed;

/// A manual extend and a watchdog renewal in flight together, the server processing the manual
/// one first and its reply arriving last: the guard must never claim a lease the server no
/// longer has.
#[tokio::test(start_paused = true)]
async fn out_of_order_extend_replies_never_outlive_the_server_lease() {
    let backend = Arc::new(Delayed::default());
    let locker = Locker::new(backend.clone());
    let guard = Arc::new(
        locker
            .lock("race")
            .ttl(Duration::from_millis(600))
            .await
            .unwrap(),
    );
    let started = Instant::now();
    sleep(Duration::from_millis(100)).await;
    // The manual extend reaches the server at once; its reply takes 500 ms. The watchdog's
    // renewal, due at about 200 ms, gets its reply at once.
    backend.delay_extend_replies([Duration::from_millis(500)]);
    let manual = tokio::spawn({
        let guard = guard.clone();
        async move { guard.extend(Duration::from_secs(10)).await }
    });
    let end = started + Duration::from_secs(12);
    while Instant::now() < end {
        if guard.is_held() {
            assert!(
                backend.holder_is(&guard).await,
                "is_held() at {:?} after the grant, but the server's lock is gone",
                started.elapsed()
            );
        }
        sleep(Duration::from_millis(50)).await;
    }
    manual.await.unwrap().unwrap();
}

/// Replies to two renewals in flight at once would be stored in the order they arrive; the
/// guard sends one renewal at a time, so the second request waits for the first reply.
#[tokio::test(start_paused = true)]
async fn renewals_of_one_guard_are_sent_one_at_a_time() {
    let backend = Arc::new(Delayed::default());
    let locker = Locker::new(backend.clone());
    let guard = Arc::new(
        locker
            .lock("serial")
            .ttl(Duration::from_secs(30))
            .watchdog(false)
            .await
            .unwrap(),
    );
    backend.delay_extend_replies([Duration::from_secs(1), Duration::ZERO]);
    let slow = tokio::spawn({
        let guard = guard.clone();
        async move { guard.extend(Duration::from_secs(5)).await }
    });
    sleep(Duration::from_millis(10)).await;
    assert_eq!(backend.extends.load(Ordering::SeqCst), 1);
    let fast = tokio::spawn({
        let guard = guard.clone();
        async move { guard.extend(Duration::from_secs(60)).await }
    });
    sleep(Duration::from_millis(500)).await;
    assert_eq!(
        backend.extends.load(Ordering::SeqCst),
        1,
        "a second renewal was sent before the first one's reply"
    );
    slow.await.unwrap().unwrap();
    fast.await.unwrap().unwrap();
    assert_eq!(guard.lease().ttl, Duration::from_secs(60));
    sleep(Duration::from_secs(50)).await;
    assert!(guard.is_held());
    assert!(backend.holder_is(&guard).await);
}

/// Asserts, every 50 ms until `end`, that the guard claims the lock only while the server
/// gives it to the guard.
async fn never_held_without_the_server(backend: &Delayed, guard: &LockGuard, end: Instant) {
    let started = Instant::now();
    while Instant::now() < end {
        if guard.is_held() {
            assert!(
                backend.holder_is(guard).await,
                "is_held() {:?} into the check, but the server's lock is gone",
                started.elapsed()
            );
        }
        sleep(Duration::from_millis(50)).await;
    }
}

/// A shorter renewal the server processed but whose reply was lost: the guard cannot know
/// whether it took effect, so its deadline moves no later than that renewal's.
#[tokio::test(start_paused = true)]
async fn a_lost_reply_to_a_shorter_renewal_caps_the_deadline() {
    let backend = Arc::new(Delayed::default());
    let locker = Locker::new(backend.clone());
    let guard = locker
        .lock("lost-reply")
        .ttl(Duration::from_secs(30))
        .watchdog(false)
        .await
        .unwrap();
    backend.lose_extend_replies([Duration::ZERO]);
    assert!(matches!(
        guard.extend(Duration::from_secs(1)).await,
        Err(Error::Unavailable { .. })
    ));
    never_held_without_the_server(&backend, &guard, Instant::now() + Duration::from_secs(40)).await;
    assert!(!guard.is_held());
}

/// A shorter renewal left without a reply reaches the server after a longer, confirmed one:
/// the server keeps the shorter expiry, and so must the guard.
#[tokio::test(start_paused = true)]
async fn a_late_shorter_renewal_after_a_confirmed_longer_one_caps_the_deadline() {
    let backend = Arc::new(Delayed::default());
    let locker = Locker::new(backend.clone());
    let guard = locker
        .lock("late-renewal")
        .ttl(Duration::from_secs(30))
        .await
        .unwrap();
    // Processed 2 s from now, after the confirmed 60 s renewal below.
    backend.lose_extend_replies([Duration::from_secs(2)]);
    assert!(guard.extend(Duration::from_secs(1)).await.is_err());
    guard.extend(Duration::from_secs(60)).await.unwrap();
    never_held_without_the_server(&backend, &guard, Instant::now() + Duration::from_secs(90)).await;
    // The watchdog keeps renewing, within the shorter ttl: the lock is still ours.
    assert!(guard.is_held());
    assert!(backend.holder_is(&guard).await);
}

/// A release cut short by its caller still ends the guard: `lost()` fires, `is_held()` is
/// false, and the lock is released in the background.
#[tokio::test(start_paused = true)]
async fn cancelled_release_still_fires_lost_and_releases() {
    let backend = Arc::new(Delayed::default());
    let locker = Locker::new(backend.clone());
    let guard = locker
        .lock("slow-release")
        .ttl(Duration::from_secs(3600))
        .await
        .unwrap();
    let key = guard.lease().key;
    let lost = guard.lost();
    let child = guard.lost_token();
    backend.delay_releases(Duration::from_secs(1));
    assert!(
        timeout(Duration::from_millis(10), guard.release())
            .await
            .is_err(),
        "the slow release finished within 10 ms"
    );
    let reason = timeout(Duration::from_millis(1), lost)
        .await
        .expect("lost() did not fire after a cancelled release");
    assert_eq!(reason, LostReason::Released);
    assert!(child.is_cancelled(), "the lost token was not cancelled");
    sleep(Duration::from_secs(2)).await;
    assert_eq!(
        backend.server.inspect(&key).await.unwrap().holder,
        None,
        "the cancelled release was not finished in the background"
    );
}

/// Every accepted ttl, down to the minimum, gives a lease that is valid when granted and a
/// watchdog that pauses between renewals (about a third of the lease's validity) and keeps the
/// lock.
#[tokio::test(start_paused = true)]
async fn the_shortest_accepted_ttl_gives_a_valid_lease_and_a_watchdog_that_pauses() {
    for ttl in [
        MIN_TTL,
        MIN_TTL + Duration::from_micros(500),
        Duration::from_millis(15),
        Duration::from_millis(50),
    ] {
        let backend = Arc::new(Delayed::default());
        let locker = Locker::new(backend.clone());
        let guard = locker.lock("short").ttl(ttl).await.unwrap();
        assert!(guard.is_held(), "ttl {ttl:?}: not valid when granted");
        let window = guard.lease().remaining();
        assert!(
            window >= ttl / 2,
            "ttl {ttl:?}: only {window:?} of validity"
        );
        sleep(Duration::from_secs(1)).await;
        assert!(guard.is_held(), "ttl {ttl:?}: the watchdog lost the lock");
        assert!(backend.holder_is(&guard).await);
        let times = backend.extend_times.lock().unwrap().clone();
        let pauses: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
        let shortest = pauses.iter().min().copied().unwrap();
        assert!(
            shortest >= window / 4,
            "ttl {ttl:?}: renewals {shortest:?} apart, for {window:?} of validity"
        );
        assert!(
            times.len() as u32 <= Duration::from_secs(1).div_duration_f64(window / 3) as u32 + 2,
            "ttl {ttl:?}: {} renewals in 1 s",
            times.len()
        );
        guard.release().await.unwrap();
    }
}

/// A loss the backend reports between renewals (its session ended) fires `lost()` at once,
/// with the watchdog off and the deadline an hour away.
#[tokio::test(start_paused = true)]
async fn a_loss_the_backend_reports_fires_lost_without_a_renewal() {
    let backend = Arc::new(Delayed::default());
    let locker = Locker::new(backend.clone());
    let guard = locker
        .lock("watched")
        .ttl(Duration::from_secs(3600))
        .watchdog(false)
        .await
        .unwrap();
    let lost = guard.lost();
    sleep(Duration::from_secs(1)).await;
    assert!(guard.is_held());
    backend.session_ended.notify_waiters();
    let reason = timeout(Duration::from_millis(1), lost)
        .await
        .expect("lost() did not fire when the backend reported the loss");
    assert_eq!(reason, LostReason::SessionEnded);
    assert!(!guard.is_held());
    assert_eq!(backend.extends.load(Ordering::SeqCst), 0);
}

/// A composite lock's release sends every member's release at once: with each release taking
/// 100 ms to reach the server, four members are released in about 100 ms, not 400 ms one
/// after the other. Every member is released, and the set reports that all were held.
#[tokio::test(start_paused = true)]
async fn a_composite_release_sends_its_members_releases_together() {
    let backend = Arc::new(Delayed::default());
    let locker = Locker::new(backend.clone());
    let set = locker
        .lock_all(["a", "b", "c", "d"])
        .watchdog(false)
        .await
        .unwrap();
    backend.delay_releases(Duration::from_millis(100));
    let started = Instant::now();
    assert!(set.release().await.unwrap());
    let took = started.elapsed();
    assert_eq!(backend.releases.load(Ordering::SeqCst), 4);
    assert!(
        took < Duration::from_millis(150),
        "four releases of 100 ms each took {took:?}: sent one after the other"
    );
    for key in ["a", "b", "c", "d"] {
        let info = backend
            .inspect(&fencelock_core::LockKey::new(key).unwrap())
            .await
            .unwrap();
        assert_eq!(info.holder, None, "{key} is still held after the release");
    }
}
