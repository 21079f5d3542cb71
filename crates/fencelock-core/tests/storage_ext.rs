//! `FencedStorageExt`: storage operations by key name, checked once before the storage is
//! touched.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use fencelock_core::{Error, FencedStorage, FencedStorageExt, LockKey, Locker};
use fencelock_memory::{MemoryLockBackend, MemoryStorage};

#[tokio::test]
async fn operations_take_any_key_form() {
    let locker = Locker::new(MemoryLockBackend::new());
    let storage: Arc<dyn FencedStorage> = Arc::new(MemoryStorage::new());
    let key = LockKey::new("ledger/1").unwrap();
    let guard = locker.lock(&key).await.unwrap();
    storage
        .write_key("ledger/1", guard.fence(), b"one")
        .await
        .unwrap();
    assert_eq!(
        storage.read_key(&key, guard.fence()).await.unwrap(),
        Some(b"one".to_vec())
    );
    assert_eq!(
        storage.read_key(key.clone(), guard.fence()).await.unwrap(),
        Some(b"one".to_vec())
    );
    let snapshot = storage
        .peek_key(String::from("ledger/1"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(snapshot.fence, guard.fence());
    assert_eq!(storage.peek(&key).await.unwrap(), Some(snapshot));
    guard.release().await.unwrap();
}

#[tokio::test]
async fn a_bad_key_is_refused_before_the_storage_is_touched() {
    let locker = Locker::new(MemoryLockBackend::new());
    let storage = MemoryStorage::new();
    let guard = locker.lock("fine").await.unwrap();
    for bad in ["", "nul\0", "tab\t"] {
        assert!(matches!(
            storage.write_key(bad, guard.fence(), b"x").await,
            Err(Error::InvalidKey { .. })
        ));
        assert!(matches!(
            storage.read_key(bad, guard.fence()).await,
            Err(Error::InvalidKey { .. })
        ));
        assert!(matches!(
            storage.peek_key(bad).await,
            Err(Error::InvalidKey { .. })
        ));
    }
    assert_eq!(storage.peek_key("fine").await.unwrap(), None);
    guard.release().await.unwrap();
}
