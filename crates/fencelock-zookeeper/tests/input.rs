//! Bad input on real ZooKeeper: an unreachable ensemble, a chroot that does not exist, wrong
//! digest credentials, keys at and past the length limit.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::ZkMembers;

use std::time::Duration;

use fencelock_core::{Error, LockBackend, LockKey};
use fencelock_servers::port::free_port;
use fencelock_zookeeper::ZkConfig;
use tokio::time::Instant;

#[tokio::test]
async fn an_unreachable_ensemble_is_unavailable_soon() {
    let url = format!(
        "zookeeper://127.0.0.1:{}?session_timeout=2s",
        free_port().unwrap()
    );
    let started = Instant::now();
    match ZkConfig::from_url(&url).unwrap().connect().await {
        Err(Error::Unavailable { .. }) => {}
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_chroot_and_wrong_credentials_are_invalid_config() {
    let server = common::spawn(1).await;
    let url = format!("{}/no/such/chroot", server.url());
    match ZkConfig::from_url(&url).unwrap().connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("chroot"), "{message}")
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let hosts = server.url().trim_start_matches("zookeeper://").to_owned();
    let prefix = format!("auth-{}", fencelock_core::OwnerId::random());
    let right =
        ZkConfig::from_url(&format!("zookeeper://app:right@{hosts}?prefix={prefix}")).unwrap();
    right.connect().await.unwrap();
    let wrong =
        ZkConfig::from_url(&format!("zookeeper://app:wrong@{hosts}?prefix={prefix}")).unwrap();
    match wrong.connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(!message.contains("wrong"), "the password leaked: {message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_at_the_length_limit_work_and_longer_ones_are_refused() {
    let server = common::spawn(1).await;
    let backend = common::config(&server).connect().await.unwrap();
    for key in [
        "x".repeat(LockKey::MAX_LEN),
        "€".repeat(170),
        "a/../b/./c".into(),
    ] {
        let key = LockKey::new(key).unwrap();
        let lease = backend
            .try_acquire(&key, Duration::from_secs(5))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            backend.inspect(&key).await.unwrap().holder,
            Some(lease.fence())
        );
        assert!(backend.release(&lease).await.unwrap());
    }
    assert!(matches!(
        LockKey::new("x".repeat(LockKey::MAX_LEN + 1)),
        Err(Error::InvalidKey { .. })
    ));
}

/// A ttl above the negotiated session timeout is refused naming the setting that raises it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ttl_past_the_session_names_the_setting_to_raise() {
    let server = common::spawn(1).await;
    let backend = common::config(&server).connect().await.unwrap();
    let key = LockKey::new("long").unwrap();
    let too_long = backend.capabilities().max_ttl + Duration::from_secs(1);
    match backend.try_acquire(&key, too_long).await {
        Err(Error::InvalidTtl { reason, .. }) => {
            assert!(reason.contains("session_timeout"), "{reason}");
        }
        other => panic!("expected InvalidTtl, got {other:?}"),
    }
}

/// A request that names no ttl gets the longest lease the session allows when that is
/// shorter than the default 30 s; before, every such request on a short session was refused
/// as `InvalidTtl`. A ttl the request names is still checked as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_ttl_follows_a_short_session() {
    use fencelock_core::{DEFAULT_TTL, Locker};

    let server = common::spawn(1).await;
    let backend = common::config(&server)
        .session_timeout(Duration::from_secs(4))
        .connect()
        .await
        .unwrap();
    let longest = backend.capabilities().max_ttl;
    assert!(longest < DEFAULT_TTL, "the session is {longest:?}");
    let locker = Locker::new(backend);
    let guard = locker
        .lock("short-session")
        .await
        .expect("a request without a ttl was refused on a short session");
    assert_eq!(guard.lease().ttl, longest);
    guard.release().await.unwrap();
    match locker.lock("short-session").ttl(DEFAULT_TTL).await {
        Err(Error::InvalidTtl { reason, .. }) => {
            assert!(reason.contains("session_timeout"), "{reason}");
        }
        other => panic!("a named ttl past the session was not refused: {other:?}"),
    }
}
