//! The watchdogs of one locker's guards run in one task per runtime: many held locks do not
//! cost a task each, and every one of them is still renewed and still reports its loss.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fencelock_core::{LockBackend, Locker, LostReason};
use fencelock_memory::MemoryLockBackend;
use tokio::runtime::Handle;
use tokio::time::{sleep, timeout};

const HELD: usize = 256;

fn alive_tasks() -> usize {
    Handle::current().metrics().num_alive_tasks()
}

#[tokio::test(start_paused = true)]
async fn many_held_locks_share_one_renewal_task_and_all_stay_renewed() {
    let backend = MemoryLockBackend::new();
    let locker = Locker::new(backend.clone());
    let before = alive_tasks();
    let mut guards = Vec::new();
    for i in 0..HELD {
        let guard = locker
            .lock(format!("many/{i}"))
            .ttl(Duration::from_millis(300))
            .await
            .unwrap();
        guards.push(guard);
    }
    let tasks = alive_tasks() - before;
    assert!(
        tasks <= 2,
        "{HELD} held locks of one locker run {tasks} tasks; their watchdogs should share one"
    );
    // Ten ttls later every lease is still held: each watchdog renewed it.
    sleep(Duration::from_secs(3)).await;
    for guard in &guards {
        assert!(guard.is_held(), "{} was not renewed", guard.lease().key);
        let info = backend.inspect(&guard.lease().key).await.unwrap();
        assert_eq!(
            info.holder.map(|fence| fence.token),
            Some(guard.token()),
            "{}",
            guard.lease().key
        );
    }
    // One lock taken from under its guard: only that guard reports the loss.
    let victim = &guards[HELD / 2];
    backend.release(&victim.lease()).await.unwrap();
    let reason = timeout(Duration::from_secs(1), victim.lost())
        .await
        .unwrap();
    assert!(
        !matches!(reason, LostReason::Released),
        "the watchdog found the lock gone, it was not released by its guard: {reason:?}"
    );
    assert_eq!(
        guards.iter().filter(|guard| guard.is_held()).count(),
        HELD - 1
    );
    for guard in guards {
        guard.release().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn guards_outlive_their_locker_and_are_still_renewed() {
    let backend = MemoryLockBackend::new();
    let locker = Locker::new(backend.clone());
    let guard = locker
        .lock("outlives")
        .ttl(Duration::from_millis(300))
        .await
        .unwrap();
    drop(locker);
    sleep(Duration::from_secs(2)).await;
    assert!(
        guard.is_held(),
        "the guard's lease lapsed once its locker was dropped"
    );
    assert!(guard.release().await.unwrap());
}

fn paused_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap()
}

#[test]
fn each_runtime_gets_its_own_driver() {
    let backend = MemoryLockBackend::new();
    let locker = Locker::new(backend.clone());
    // A guard on runtime A starts the locker's driver there.
    let first = paused_runtime();
    let on_first = first.block_on(async {
        locker
            .lock("runtime/a")
            .ttl(Duration::from_millis(300))
            .await
            .unwrap()
    });
    // A guard on runtime B, then A ends. Had B's watchdog been handed to A's driver, it would
    // have ended with A and B's lease would lapse unrenewed.
    let second = paused_runtime();
    let on_second = second.block_on(async {
        locker
            .lock("runtime/b")
            .ttl(Duration::from_millis(300))
            .await
            .unwrap()
    });
    drop(first);
    drop(on_first);
    second.block_on(async {
        sleep(Duration::from_secs(2)).await;
        assert!(
            on_second.is_held(),
            "the guard on the runtime still running was not renewed"
        );
        assert!(on_second.release().await.unwrap());
    });
}
