//! A set in one step on the memory backend (DESIGN 4.2, 5.1): every key or none, under the
//! locks of all the keys' shards at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fencelock_core::{Error, FencingToken, LockBackend, LockKey};
use fencelock_memory::MemoryLockBackend;

const TTL: Duration = Duration::from_secs(30);

fn key(name: &str) -> LockKey {
    LockKey::new(name).unwrap()
}

/// A key whose counter has no token left refuses the whole set with an error, before any
/// key of it is granted: the other key is still free, its counter not drawn.
#[tokio::test]
async fn a_counter_at_its_end_refuses_the_set_and_grants_no_key() {
    let backend = MemoryLockBackend::new();
    let (free, spent) = (key("set/free"), key("set/spent"));
    backend
        .advance_token(&spent, FencingToken::new(u64::MAX - 1).unwrap())
        .await
        .unwrap();
    let last = backend.try_acquire(&spent, TTL).await.unwrap().unwrap();
    assert_eq!(last.token.get(), u64::MAX);
    assert!(backend.release(&last).await.unwrap());

    let refused = backend
        .try_acquire_all(&[free.clone(), spent.clone()], TTL)
        .await;
    assert!(
        matches!(&refused, Err(Error::Backend { message, .. }) if message.contains("exhausted")),
        "{refused:?}"
    );
    assert!(backend.inspect(&free).await.unwrap().holder.is_none());
    let first = backend.try_acquire(&free, TTL).await.unwrap().unwrap();
    assert_eq!(
        first.token,
        FencingToken::MIN,
        "the refused set drew a token"
    );
}

/// The step is called with distinct keys in order; any other list is refused, changing
/// nothing, rather than granting one key twice.
#[tokio::test]
async fn a_set_out_of_order_or_with_a_key_twice_is_refused() {
    let backend = MemoryLockBackend::new();
    let (a, b) = (key("set/a"), key("set/b"));
    for keys in [vec![b.clone(), a.clone()], vec![a.clone(), a.clone()]] {
        let refused = backend.try_acquire_all(&keys, TTL).await;
        assert!(
            matches!(refused, Err(Error::InvalidConfig { .. })),
            "{refused:?}"
        );
    }
    for key in [&a, &b] {
        assert!(backend.inspect(key).await.unwrap().holder.is_none());
    }
}
