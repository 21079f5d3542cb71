//! `scope`: work under a lock as one call. The work gets the lock's fences, its output comes
//! back, the lock is released after, and a lease lost first stops the work and says so.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fencelock_core::{Error, FencedStorageExt, Locker, LostReason, RwLocker, scope};
use fencelock_memory::{MemoryLockBackend, MemoryStorage};

const TTL: Duration = Duration::from_secs(30);

#[tokio::test]
async fn the_work_gets_the_fence_and_the_lock_is_released_after() {
    let storage = MemoryStorage::new();
    let locker = Locker::new(MemoryLockBackend::new());
    let written = storage.clone();
    let fence = scope(locker.lock("report").ttl(TTL), |fence| async move {
        written.write_key("report", fence, b"v1").await.unwrap();
        fence
    })
    .await
    .unwrap();
    assert_eq!(
        storage.peek_key("report").await.unwrap().unwrap().fence,
        fence
    );
    // Released: another locker takes it at once, with a greater token.
    let next = Locker::new(locker.backend().clone())
        .lock("report")
        .ttl(TTL)
        .wait(Duration::ZERO)
        .await
        .expect("the scope kept its lock after the work");
    assert!(next.token() > fence.token);
}

#[tokio::test]
async fn a_lost_lease_stops_the_work_and_says_so() {
    let locker = Locker::new(MemoryLockBackend::new());
    let finished = Arc::new(AtomicBool::new(false));
    let done = finished.clone();
    // No watchdog: the lease lapses at its ttl while the work still runs.
    let request = locker
        .lock("slow")
        .ttl(Duration::from_millis(200))
        .watchdog(false);
    let outcome = tokio::time::timeout(
        Duration::from_secs(20),
        scope(request, |_fence| async move {
            tokio::time::sleep(Duration::from_secs(60)).await;
            done.store(true, Ordering::SeqCst);
        }),
    )
    .await
    .expect("the scope did not end when its lease was lost");
    match outcome {
        Err(Error::LeaseLost { key, reason }) => {
            assert_eq!(key, "slow");
            assert_eq!(reason, LostReason::DeadlinePassed);
        }
        other => panic!("expected LeaseLost on slow, got {other:?}"),
    }
    assert!(
        !finished.load(Ordering::SeqCst),
        "the work went on after the loss"
    );
}

#[tokio::test]
async fn a_set_hands_every_member_in_key_order_and_a_reader_its_phase() {
    let locker = Locker::new(MemoryLockBackend::new());
    let fences = scope(
        locker.lock_all(["b", "a", "c"]).ttl(TTL),
        |fences| async move { fences },
    )
    .await
    .unwrap();
    let keys: Vec<&str> = fences.iter().map(|(key, _)| key.as_str()).collect();
    assert_eq!(keys, ["a", "b", "c"]);

    let rw = RwLocker::new(locker.clone());
    let read = scope(rw.read("ledger").ttl(TTL), |fence| async move { fence })
        .await
        .unwrap();
    // The phase ended with the scope: a writer gets in at once, above the phase's token.
    let writer = rw
        .write("ledger")
        .ttl(TTL)
        .wait(Duration::ZERO)
        .await
        .expect("the reader's scope kept its phase");
    assert!(writer.token() > read.token);
}

#[tokio::test]
async fn a_refused_request_runs_no_work() {
    let locker = Locker::new(MemoryLockBackend::new());
    let _held = locker.lock("busy").ttl(TTL).await.unwrap();
    let other = Locker::new(locker.backend().clone());
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let outcome = scope(
        other.lock("busy").ttl(TTL).wait(Duration::ZERO),
        |_| async move {
            flag.store(true, Ordering::SeqCst);
        },
    )
    .await;
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    assert!(!ran.load(Ordering::SeqCst));
}
