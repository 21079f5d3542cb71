//! Backend-specific behaviour on a real server: unusual keys, prompt wake-ups, inspection.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{FencedStorage, LockBackend, LockKey, Locker, OwnerId};
use fencelock_redis::servers::RedisServer;
use fencelock_redis::{RedisConfig, RedisLockBackend};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);

async fn connect(server: &RedisServer) -> RedisLockBackend {
    RedisConfig::new(server.url())
        .prefix("behaviour")
        .connect()
        .await
        .expect("connect")
}

/// Keys with braces, quotes, spaces, Unicode and the full 512 bytes: lock, fence, inspect,
/// release, and the key names in Redis share one hash tag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unusual_keys_round_trip() {
    let server = RedisServer::spawn();
    let backend = connect(&server).await;
    let storage = backend.storage();
    let long = "k".repeat(LockKey::MAX_LEN - 3) + "}{}";
    let keys = [
        "{braces}",
        "}leading-close",
        "a{b}c}d{",
        "%7D-looks-encoded",
        "\"double\" and 'single' quotes",
        "  spaces   inside ",
        "unicodé ✓ 鍵 🔒",
        long.as_str(),
    ];
    let mut tokens = Vec::new();
    for raw in keys {
        let key = LockKey::new(raw).unwrap();
        let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
        assert!(
            backend.try_acquire(&key, TTL).await.unwrap().is_none(),
            "{raw:?}"
        );
        let info = backend.inspect(&key).await.unwrap();
        assert_eq!(info.key, key);
        assert_eq!(info.holder, Some(lease.fence()), "{raw:?}");
        assert_eq!(info.last_token, Some(lease.token));
        assert!(info.remaining.is_some_and(|r| r <= TTL));
        storage
            .write(&key, lease.fence(), raw.as_bytes())
            .await
            .unwrap();
        assert_eq!(
            storage.read(&key, lease.fence()).await.unwrap().as_deref(),
            Some(raw.as_bytes())
        );
        assert!(backend.release(&lease).await.unwrap(), "{raw:?}");
        tokens.push(lease.token.get());
    }
    // Every key is its own lock: each got the first token of its own counter.
    assert!(tokens.iter().all(|&t| t == 1), "{tokens:?}");

    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let names: Vec<String> = redis::cmd("KEYS")
        .arg("behaviour:*")
        .query_async(&mut raw)
        .await
        .unwrap();
    // A counter and a data hash per key, locks released.
    assert_eq!(names.len(), keys.len() * 2, "{names:?}");
    for name in &names {
        let tag_start = name.find('{').unwrap() + 1;
        let tag_len = name[tag_start..].find('}').unwrap();
        let tag = &name[tag_start..tag_start + tag_len];
        assert!(!tag.is_empty());
        assert!(
            name.ends_with(&format!("{{{tag}}}:token"))
                || name.ends_with(&format!("{{{tag}}}:data")),
            "hash tag of {name:?} is not the whole key"
        );
    }
}

/// A release wakes a waiter at once, long before the holder's ttl runs out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_wakes_waiters_promptly() {
    let server = RedisServer::spawn();
    let backend = Arc::new(connect(&server).await);
    let key = LockKey::new(format!("wake/{}", OwnerId::random())).unwrap();
    let holder = backend.try_acquire(&key, TTL).await.unwrap().unwrap();

    let waiters: Vec<_> = (0..3)
        .map(|_| {
            let backend = Arc::clone(&backend);
            let key = key.clone();
            tokio::spawn(async move {
                backend.wait_for_release(&key, TTL).await.unwrap();
                Instant::now()
            })
        })
        .collect();
    let locker = Locker::new(backend.clone());
    let contender = tokio::spawn({
        let key = key.clone();
        async move {
            let guard = locker.lock(key.as_str()).ttl(TTL).wait(TTL).await.unwrap();
            let token = guard.token();
            guard.release().await.unwrap();
            (Instant::now(), token)
        }
    });
    // Let everyone subscribe and settle into waiting.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let released_at = Instant::now();
    assert!(backend.release(&holder).await.unwrap());
    for waiter in waiters {
        let woke = waiter.await.unwrap();
        assert!(
            woke - released_at < Duration::from_secs(5),
            "waiter woke {:?} after the release",
            woke - released_at
        );
    }
    let (acquired_at, token) = contender.await.unwrap();
    assert!(token > holder.token);
    assert!(
        acquired_at - released_at < Duration::from_secs(5),
        "contender got the lock {:?} after the release",
        acquired_at - released_at
    );
}

/// A waiter on a free key returns at once; on a key held with a short ttl, by its expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waits_are_bounded_by_freedom_and_expiry() {
    let server = RedisServer::spawn();
    let backend = connect(&server).await;
    let key = LockKey::new(format!("bounded/{}", OwnerId::random())).unwrap();

    let started = Instant::now();
    backend.wait_for_release(&key, TTL).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));

    let _lease = backend
        .try_acquire(&key, Duration::from_millis(500))
        .await
        .unwrap()
        .unwrap();
    let started = Instant::now();
    backend.wait_for_release(&key, TTL).await.unwrap();
    let waited = started.elapsed();
    assert!(waited < Duration::from_secs(6), "waited {waited:?}");
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_some());

    // And `max` bounds a wait on a long lease.
    let other = LockKey::new(format!("bounded/{}", OwnerId::random())).unwrap();
    let _held = backend.try_acquire(&other, TTL).await.unwrap().unwrap();
    let started = Instant::now();
    backend
        .wait_for_release(&other, Duration::from_millis(300))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// Many waits in sequence on many keys reuse one subscriber connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_share_one_subscriber_connection() {
    let server = RedisServer::spawn();
    let backend = connect(&server).await;
    for i in 0..20 {
        let key = LockKey::new(format!("shared/{i}")).unwrap();
        let _lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
        backend
            .wait_for_release(&key, Duration::from_millis(20))
            .await
            .unwrap();
    }
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut raw)
        .await
        .unwrap();
    let subscribers = clients
        .lines()
        .filter(|l| l.contains("cmd=subscribe") || l.contains("cmd=unsubscribe"))
        .count();
    assert_eq!(subscribers, 1, "{clients}");
}
