//! A set of locks in one step on one server (DESIGN 4.2): `Locker::lock_all` of free keys is
//! one script call, every key or none, each with its own counter's token; a set never takes
//! part of itself, never overtakes a held key or a read phase, and falls back to the ordered
//! form when refused.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{FencingToken, LockBackend, LockKey, Locker, OwnerId};
use fencelock_redis::servers::RedisServer;
use fencelock_redis::{RedisConfig, RedisLockBackend};

mod stats;
use stats::{admin, script_calls};
use tokio::time::sleep;

const TTL: Duration = Duration::from_secs(30);

async fn connect(server: &RedisServer) -> RedisLockBackend {
    RedisConfig::new(server.url())
        .prefix("sets")
        .connect()
        .await
        .expect("connect")
}

fn keys(names: &[&str]) -> Vec<LockKey> {
    names
        .iter()
        .map(|name| LockKey::new(*name).unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_of_free_keys_is_one_script_call() {
    let server = RedisServer::spawn();
    let backend = connect(&server).await;
    assert!(backend.capabilities().atomic_sets);
    let locker = Locker::new(backend);
    let mut admin = admin(&server).await;
    // Load the scripts first, so that a cold script cache does not add an EVAL.
    let warm = locker
        .lock_all(["warm-a", "warm-b"])
        .watchdog(false)
        .await
        .unwrap();
    assert!(warm.release().await.unwrap());
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query_async(&mut admin)
        .await
        .unwrap();

    let set = locker
        .lock_all(["c", "a", "b"])
        .watchdog(false)
        .await
        .unwrap();
    assert_eq!(
        script_calls(&mut admin).await,
        1,
        "three free keys taken key by key would be three acquire scripts"
    );
    let held: Vec<String> = set.keys().map(|key| key.to_string()).collect();
    assert_eq!(held, ["a", "b", "c"]);
    assert!(set.is_held());
    assert!(set.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_member_takes_its_own_counters_next_token() {
    let server = RedisServer::spawn();
    let backend = Arc::new(connect(&server).await);
    backend
        .advance_token(&LockKey::new("x").unwrap(), FencingToken::new(100).unwrap())
        .await
        .unwrap();
    let set = backend
        .try_acquire_all(&keys(&["x", "y"]), TTL)
        .await
        .unwrap()
        .expect("both keys are free");
    assert_eq!(set.len(), 2);
    assert_eq!(set[0].key.as_str(), "x");
    assert_eq!(set[0].token.get(), 101);
    assert_eq!(set[1].key.as_str(), "y");
    assert_eq!(set[1].token.get(), 1);
    for lease in &set {
        let info = backend.inspect(&lease.key).await.unwrap();
        assert_eq!(info.holder.map(|holder| holder.token), Some(lease.token));
    }
    for lease in &set {
        assert!(backend.release(lease).await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_with_one_key_taken_takes_nothing() {
    let server = RedisServer::spawn();
    let backend = Arc::new(connect(&server).await);
    let [a, b, c] = <[LockKey; 3]>::try_from(keys(&["a", "b", "c"])).unwrap();
    // b held exclusively.
    let holder = backend.try_acquire(&b, TTL).await.unwrap().unwrap();
    assert!(
        backend
            .try_acquire_all(&[a.clone(), b.clone(), c.clone()], TTL)
            .await
            .unwrap()
            .is_none()
    );
    for free in [&a, &c] {
        let info = backend.inspect(free).await.unwrap();
        assert!(info.holder.is_none(), "{free} was taken by a refused set");
        assert_eq!(
            info.last_token, None,
            "{free}'s counter moved for a refused set"
        );
    }
    assert!(backend.release(&holder).await.unwrap());

    // c in a read phase.
    let reader = OwnerId::random();
    let phase = backend
        .try_acquire_shared(&c, reader, TTL)
        .await
        .unwrap()
        .unwrap();
    assert!(
        backend
            .try_acquire_all(&[a.clone(), b.clone(), c.clone()], TTL)
            .await
            .unwrap()
            .is_none()
    );
    assert!(backend.inspect(&a).await.unwrap().holder.is_none());
    assert!(backend.release_shared(&phase, reader).await.unwrap());

    // All free now: granted.
    let set = backend
        .try_acquire_all(&[a, b, c], TTL)
        .await
        .unwrap()
        .expect("all free");
    for lease in &set {
        assert!(backend.release(lease).await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_set_waits_in_order_and_gets_every_key() {
    let server = RedisServer::spawn();
    let backend: Arc<dyn LockBackend> = Arc::new(connect(&server).await);
    let other = Locker::new(backend.clone());
    let held = other.lock("b").await.unwrap();
    let locker = Locker::new(backend.clone());
    let waiting = tokio::spawn(async move {
        locker
            .lock_all(["a", "b", "c"])
            .wait(Duration::from_secs(20))
            .await
    });
    sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the set was granted while b was held"
    );
    assert!(held.release().await.unwrap());
    let set = tokio::time::timeout(Duration::from_secs(20), waiting)
        .await
        .expect("the set came once b was released")
        .unwrap()
        .unwrap();
    for key in ["a", "b", "c"] {
        let info = backend.inspect(&LockKey::new(key).unwrap()).await.unwrap();
        let member = set.member(key).unwrap();
        assert_eq!(info.holder.map(|h| h.token), Some(member.fence().token));
    }
    assert!(set.release().await.unwrap());
}
