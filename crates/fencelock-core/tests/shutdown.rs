//! `Locker::shutdown`: the way to release every lock before the runtime ends, where a guard's
//! drop only spawns a release that a shutting-down runtime never runs.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use fencelock_core::{LockBackend, LockKey, Locker, LostReason};
use fencelock_memory::MemoryLockBackend;
use tokio::runtime::{Builder, Runtime};
use tokio::time::{Instant, sleep};

use support::Delayed;

fn runtime() -> Runtime {
    Builder::new_current_thread().enable_time().build().unwrap()
}

fn holder_of(backend: &MemoryLockBackend, key: &str) -> Option<fencelock_core::Fence> {
    let key = LockKey::new(key).unwrap();
    runtime().block_on(backend.inspect(&key)).unwrap().holder
}

/// What a program's `main` does: take locks, and end. Dropped guards alone leave their locks
/// to the ttl; `shutdown().await` as the last line releases them all.
#[test]
fn shutdown_releases_what_drop_at_the_end_of_main_leaves_held() {
    let backend = MemoryLockBackend::new();

    runtime().block_on(async {
        let locker = Locker::new(Arc::new(backend.clone()));
        let _guard = locker.lock("main/dropped").await.unwrap();
    });
    assert!(
        holder_of(&backend, "main/dropped").is_some(),
        "the release spawned by the drop ran after all (then this test no longer shows why \
         shutdown exists)"
    );

    runtime().block_on(async {
        let locker = Locker::new(Arc::new(backend.clone()));
        let _a = locker.lock("main/a").await.unwrap();
        let _b = locker.clone().lock("main/b").await.unwrap();
        let c = locker.lock("main/c").await.unwrap();
        drop(c);
        assert_eq!(locker.shutdown().await.unwrap(), 2);
        assert_eq!(locker.live_guards(), 0);
    });
    for key in ["main/a", "main/b", "main/c"] {
        assert_eq!(holder_of(&backend, key), None, "{key} is still held");
    }
}

/// Guards released by `shutdown` report it, and neither their own release nor their drop
/// releases a second time.
#[tokio::test(start_paused = true)]
async fn shutdown_ends_live_guards_once() {
    let backend = Arc::new(Delayed::default());
    let locker = Locker::new(backend.clone());
    let first = locker.lock("once/1").await.unwrap();
    let second = locker.lock("once/2").await.unwrap();
    let lost = first.lost();
    assert_eq!(locker.shutdown().await.unwrap(), 2);
    assert_eq!(lost.await, LostReason::Released);
    assert!(!first.is_held());
    assert!(!first.release().await.unwrap());
    drop(second);
    sleep(Duration::from_secs(1)).await;
    assert_eq!(backend.releases.load(Ordering::SeqCst), 2);
    // The watchdogs stopped with their guards.
    let extends = backend.extends.load(Ordering::SeqCst);
    sleep(Duration::from_secs(120)).await;
    assert_eq!(backend.extends.load(Ordering::SeqCst), extends);
}

/// A guard dropped just before `shutdown` is still releasing in the background: `shutdown`
/// waits for that release too.
#[tokio::test(start_paused = true)]
async fn shutdown_waits_for_releases_that_drops_started() {
    let backend = Arc::new(Delayed::default());
    let locker = Locker::new(backend.clone());
    let guard = locker.lock("dropped-late").await.unwrap();
    let key = guard.lease().key;
    backend.delay_releases(Duration::from_secs(5));
    drop(guard);
    let started = Instant::now();
    assert_eq!(locker.shutdown().await.unwrap(), 0);
    assert!(started.elapsed() >= Duration::from_secs(5));
    assert_eq!(backend.server.inspect(&key).await.unwrap().holder, None);
}

/// Released and dropped guards leave the locker's list, so a long-lived locker does not grow.
#[tokio::test(start_paused = true)]
async fn finished_guards_leave_the_list() {
    let locker = Locker::new(Arc::new(MemoryLockBackend::new()));
    for round in 0..100 {
        let guard = locker.lock(format!("cycle/{round}")).await.unwrap();
        if round % 2 == 0 {
            guard.release().await.unwrap();
        } else {
            drop(guard);
        }
    }
    // Let the releases spawned by the drops run.
    sleep(Duration::from_millis(1)).await;
    assert_eq!(locker.live_guards(), 0);
    let held = locker.lock("cycle/held").await.unwrap();
    assert_eq!(locker.live_guards(), 1);
    assert_eq!(locker.shutdown().await.unwrap(), 1);
    assert!(!held.is_held());
}
