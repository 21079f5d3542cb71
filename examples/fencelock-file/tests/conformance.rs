//! The shared conformance suite on the file backend, a fresh temporary directory per property.
//! The outage renames the directory away, as an unmounted or deleted directory would vanish:
//! every later call is `Unavailable`, and nothing re-creates it behind the test's back. The
//! reopen hook opens the same directory again, for the durability property.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_conformance::Setup;
use fencelock_core::{FencedStorage, LockBackend, LockKey};
use fencelock_file::{FileLockBackend, FileStorage};

async fn setup() -> Setup {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("locks");
    let backend = FileLockBackend::open(&dir).await.unwrap();
    let storage = FileStorage::open(&dir).await.unwrap();
    let gone = temp.path().join("gone");
    let reopened = dir.clone();
    Setup::new(
        Arc::new(backend),
        Arc::new(storage),
        Box::new(move || {
            let (dir, gone) = (dir.clone(), gone.clone());
            Box::pin(async move { std::fs::rename(&dir, &gone).unwrap() })
        }),
    )
    // A new opening of the same directory, as a restarted process makes.
    .with_reopen(Box::new(move || {
        let dir = reopened.clone();
        Box::pin(async move {
            let backend: Arc<dyn LockBackend> =
                Arc::new(FileLockBackend::open(&dir).await.unwrap());
            backend
        })
    }))
    .keep(temp)
}

mod lockdir {
    fencelock_conformance::conformance_suite!(super::setup());
}

/// What the suite cannot see from one backend value: tokens survive reopening the directory,
/// and two backends on one directory (as two processes would open it) exclude each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_locks_are_shared_through_the_directory() {
    let temp = tempfile::tempdir().unwrap();
    let key = LockKey::new("shared/key").unwrap();
    let ttl = Duration::from_secs(30);
    let first = FileLockBackend::open(temp.path()).await.unwrap();
    let lease = first.try_acquire(&key, ttl).await.unwrap().unwrap();
    let second = FileLockBackend::open(temp.path()).await.unwrap();
    assert!(
        second.try_acquire(&key, ttl).await.unwrap().is_none(),
        "a second opening of the directory got a held lock"
    );
    assert_eq!(
        second.inspect(&key).await.unwrap().holder,
        Some(lease.fence())
    );
    assert!(
        second.release(&lease).await.unwrap(),
        "release through the other opening"
    );
    drop((first, second));
    let reopened = FileLockBackend::open(temp.path()).await.unwrap();
    let next = reopened.try_acquire(&key, ttl).await.unwrap().unwrap();
    assert!(
        next.token > lease.token,
        "the counter did not survive reopening"
    );
    let storage = FileStorage::open(temp.path()).await.unwrap();
    storage.write(&key, next.fence(), b"v").await.unwrap();
    let again = FileStorage::open(temp.path()).await.unwrap();
    let snapshot = again.peek(&key).await.unwrap().unwrap();
    assert_eq!(
        snapshot.fence,
        next.fence(),
        "the fence did not survive reopening"
    );
    assert!(matches!(
        again.write(&key, lease.fence(), b"stale").await,
        Err(fencelock_core::Error::Stale { .. })
    ));
}

/// Concurrent grants from many openings of one directory never share a token and never
/// overlap: the file lock serialises the read-modify-writes of separate openings.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_openings_hand_out_distinct_increasing_tokens() {
    let temp = tempfile::tempdir().unwrap();
    let key = LockKey::new("contended").unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let backend = FileLockBackend::open(temp.path()).await.unwrap();
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            let mut tokens = Vec::new();
            while tokens.len() < 20 {
                if let Some(lease) = backend
                    .try_acquire(&key, Duration::from_secs(30))
                    .await
                    .unwrap()
                {
                    tokens.push(lease.token.get());
                    assert!(backend.release(&lease).await.unwrap());
                }
                tokio::task::yield_now().await;
            }
            tokens
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        let tokens = task.await.unwrap();
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
        all.extend(tokens);
    }
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), 80, "a token was handed out twice");
}
