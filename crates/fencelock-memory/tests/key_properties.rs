//! Property-based: any key text, through the memory backend and storage. Accepted keys come
//! back unchanged from `inspect` and `peek`, distinct keys are distinct locks and distinct
//! resources, and rejected keys are `InvalidKey` before anything is touched.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use fencelock_core::{
    Error, Fence, FencedStorage, FencedStorageExt, FencingToken, LockBackend, LockKey, Locker,
    OwnerId,
};
use fencelock_memory::{MemoryLockBackend, MemoryStorage};
use proptest::prelude::*;

/// Arbitrary Unicode, printable text with the characters key encodings care about, text
/// around the length limit, and text with control characters.
fn key_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z{}%#:/\"' é€😀]{1,12}",
        "[a-z{}]{505,515}",
        "[a-z\\x00-\\x1f\\x7f{}]{0,6}",
    ]
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// 256 cases, or `PROPTEST_CASES`.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok());
    ProptestConfig::with_cases(cases.unwrap_or(256))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn keys_round_trip_and_never_collide(texts in proptest::collection::vec(key_text(), 1..8)) {
        runtime().block_on(async {
            let backend = MemoryLockBackend::new();
            let storage = MemoryStorage::new();
            let ttl = Duration::from_secs(60);
            let accepted: BTreeSet<&str> =
                texts.iter().map(String::as_str).filter(|t| LockKey::new(t).is_ok()).collect();
            let mut leases = Vec::new();
            for text in &accepted {
                let key = LockKey::new(text).unwrap();
                // Distinct keys are distinct locks: every one is free.
                let lease = backend.try_acquire(&key, ttl).await.unwrap().unwrap();
                let info = backend.inspect(&key).await.unwrap();
                assert_eq!(info.key.as_str(), *text);
                assert_eq!(info.holder, Some(lease.fence()));
                storage.write(&key, lease.fence(), text.as_bytes()).await.unwrap();
                leases.push(lease);
            }
            for (text, lease) in accepted.iter().zip(&leases) {
                // Distinct keys are distinct resources: each holds its own value and fence.
                let snapshot = storage.peek_key(text).await.unwrap().unwrap();
                assert_eq!(snapshot.value.as_deref(), Some(text.as_bytes()));
                assert_eq!(snapshot.fence, lease.fence());
                assert!(backend.release(lease).await.unwrap(), "{text:?}");
            }
            let any_fence = Fence::new(FencingToken::MIN, OwnerId::from_u128(0));
            for text in texts.iter().filter(|t| !accepted.contains(t.as_str())) {
                let refused = Locker::new(backend.clone()).lock(text).await;
                assert!(matches!(refused, Err(Error::InvalidKey { .. })), "{text:?}: {refused:?}");
                let refused = storage.read_key(text, any_fence).await;
                assert!(matches!(refused, Err(Error::InvalidKey { .. })), "{text:?}: {refused:?}");
            }
        });
    }
}
