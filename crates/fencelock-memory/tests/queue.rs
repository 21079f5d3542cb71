//! The memory backend's fair queue (DESIGN 4.0.1, 5.1): a release hands the lock to the first
//! live waiter and wakes that waiter alone; a waiter that vanished holds a handed lock for the
//! hand-off ttl at most. Paused tokio time, so the bounds are exact, whatever the load.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock_conformance::{CountingTries, queue_refused};
use fencelock_core::{LockBackend, LockKey, Locker, OwnerId, QueueRole};
use fencelock_memory::MemoryLockBackend;
use tokio::time::{Instant, sleep};

const TTL: Duration = Duration::from_secs(30);

fn key(name: &str) -> LockKey {
    LockKey::new(name).unwrap()
}

/// Eight waiters queued one after the other behind a holder are granted in arrival order,
/// and each release wakes only the next one: every waiter tries once, is refused and queued,
/// and is then handed the lock. Without the queue, each release woke every waiter and the
/// first one polled won: the order came out as 0, 3, 1, 5, 4, 2, 7, 6, and the waiters had
/// sent 35 tries before the first release.
#[tokio::test(start_paused = true)]
async fn a_release_hands_the_lock_to_the_next_waiter_alone() {
    let backend = Arc::new(CountingTries::new(MemoryLockBackend::new()));
    let key = key("queue/hand-down");
    let held = backend
        .inner()
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .unwrap();
    let locker = Locker::new(backend.clone());
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for place in 0..8 {
        let (locker, key, order) = (locker.clone(), key.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = locker
                .lock(key.as_str())
                .ttl(TTL)
                .wait(Duration::from_secs(60))
                .await
                .unwrap();
            order.lock().unwrap().push((place, guard.token()));
            sleep(Duration::from_millis(1)).await;
            assert!(guard.release().await.unwrap());
        }));
        sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(backend.tries(), 8, "each waiter queued once");
    let queue = backend.inner().inspect_queue(&key).await.unwrap().unwrap();
    let roles: Vec<_> = queue.iter().map(|entry| entry.role).collect();
    assert_eq!(roles[0], QueueRole::Holder);
    assert_eq!(roles[1..], [QueueRole::Waiting; 8]);

    assert!(backend.inner().release(&held).await.unwrap());
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let order = order.lock().unwrap().clone();
    let places: Vec<_> = order.iter().map(|(place, _)| *place).collect();
    assert_eq!(
        places,
        (0..8).collect::<Vec<_>>(),
        "granted out of arrival order"
    );
    assert!(
        order.windows(2).all(|pair| pair[0].1 < pair[1].1),
        "tokens do not increase along the queue: {order:?}"
    );
    let tries = backend.tries();
    assert!(
        tries <= 8,
        "{tries} tries for 8 grants handed down the queue"
    );
}

/// A waiter that queued and then vanished (it never tries again, and never leaves) is handed
/// the lock at the release, and keeps it for the hand-off ttl (2 s) at most: the next waiter
/// is granted then, with a later token, and a plain try never overtakes the queue.
#[tokio::test(start_paused = true)]
async fn a_lock_handed_to_a_vanished_waiter_lapses_after_the_hand_off_ttl() {
    let backend = Arc::new(MemoryLockBackend::new());
    let key = key("queue/vanished");
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let vanished = OwnerId::random();
    queue_refused(&*backend, &key, TTL, &[vanished]).await;
    let locker = Locker::new(backend.clone());
    let next = tokio::spawn({
        let locker = locker.clone();
        let key = key.clone();
        async move {
            locker
                .lock(key.as_str())
                .ttl(TTL)
                .wait(Duration::from_secs(60))
                .await
                .unwrap()
        }
    });
    sleep(Duration::from_millis(100)).await;
    let released_at = Instant::now();
    assert!(backend.release(&held).await.unwrap());

    let handed = backend.inspect(&key).await.unwrap().holder.unwrap();
    assert_eq!(
        handed.owner, vanished,
        "the release did not hand the lock over"
    );
    assert!(handed.token > held.token);
    assert!(
        backend.try_acquire(&key, TTL).await.unwrap().is_none(),
        "a plain try took a lock handed to a queued waiter"
    );

    let guard = next.await.unwrap();
    let waited = released_at.elapsed();
    assert!(
        waited <= Duration::from_secs(2) + Duration::from_millis(600),
        "the next waiter waited {waited:?} behind a vanished one"
    );
    assert!(guard.token() > handed.token);
    assert!(guard.release().await.unwrap());
}

/// A waiter that leaves the queue after the lock was handed to it (its request timed out or
/// was cancelled before taking it up) hands it on to the waiter behind it at once.
#[tokio::test(start_paused = true)]
async fn leaving_with_a_handed_lock_hands_it_on() {
    let backend = MemoryLockBackend::new();
    let key = key("queue/leave");
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let (first, second) = (OwnerId::random(), OwnerId::random());
    queue_refused(&backend, &key, TTL, &[first, second]).await;
    assert!(backend.release(&held).await.unwrap());
    assert_eq!(
        backend.inspect(&key).await.unwrap().holder.unwrap().owner,
        first
    );
    backend.leave_queue(&key, first).await.unwrap();
    let handed = backend
        .wait_for_grant(&key, second, TTL, Duration::ZERO)
        .await
        .unwrap()
        .expect("the lock was not handed on to the second waiter");
    assert_eq!(handed.owner, second);
    // Its next try takes the grant up, renewed for its whole ttl.
    let taken = backend
        .try_acquire_queued(&key, TTL, second)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(taken.token, handed.token);
    assert!(taken.remaining() > TTL / 2);
    assert!(backend.release(&taken).await.unwrap());
}

/// A lock whose holder's time ran out is kept for the queue's live head: a plain try is
/// refused until that waiter's place lapses (2 s without a try), then granted.
#[tokio::test(start_paused = true)]
async fn a_free_lock_is_kept_for_the_head_until_its_place_lapses() {
    let backend = MemoryLockBackend::new();
    let key = key("queue/kept");
    let short = Duration::from_millis(100);
    backend.try_acquire(&key, short).await.unwrap().unwrap();
    let head = OwnerId::random();
    queue_refused(&backend, &key, TTL, &[head]).await;
    sleep(short * 2).await;
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_none());
    sleep(Duration::from_secs(2)).await;
    let lease = backend.try_acquire(&key, TTL).await.unwrap();
    assert!(lease.is_some(), "a lapsed place still kept the lock");
}
