//! Bad input against the real server: wrong credentials, a missing database, an unreachable
//! port, settings the server cannot carry, tokens SQL cannot store, and keys longer than
//! `GET_LOCK` takes (hashed, never truncated into a collision).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::{Error, Fence, FencedStorage, FencingToken, LockBackend, LockKey, OwnerId};
use fencelock_mysql::{MySqlConfig, lock_name, sqlx};

/// The test server's URL with its password replaced by `password`.
fn with_password(password: &str) -> String {
    let mut url = url::Url::parse(&common::url()).unwrap();
    url.set_password(Some(password)).unwrap();
    url.into()
}

#[tokio::test]
async fn a_wrong_password_is_invalid_config_that_never_shows_it() {
    let secret = "not-the-password-7f3a";
    let config = MySqlConfig::from_url(&with_password(secret)).unwrap();
    match config.connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("Access denied"), "{message}");
            assert!(!message.contains(secret), "the password leaked: {message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    for shown in [config.to_string(), format!("{config:?}")] {
        assert!(!shown.contains(secret), "{shown}");
    }
}

#[tokio::test]
async fn a_missing_database_is_invalid_config_naming_it() {
    let mut url = url::Url::parse(&common::url()).unwrap();
    url.set_path("fencelock_no_such_database_9c1d");
    let config = MySqlConfig::from_url(url.as_str()).unwrap();
    match config.connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(
                message.contains("fencelock_no_such_database_9c1d"),
                "{message}"
            );
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

/// A refused connection fails at once, naming the server and the cause (not only that a pool
/// timed out after trying again for the whole operation time-out).
#[tokio::test]
async fn an_unreachable_server_is_unavailable_and_retryable() {
    let config = MySqlConfig::from_url(&common::url())
        .unwrap()
        .with_hosts(&[fencelock_core::HostPort::new("127.0.0.1", 1)])
        .unwrap()
        .operation_timeout(Duration::from_secs(5));
    let started = std::time::Instant::now();
    match config.connect().await {
        Err(error @ Error::Unavailable { .. }) => {
            assert!(error.is_retryable());
            let said = error.to_string();
            assert!(
                said.contains("127.0.0.1:1") && said.contains("refused"),
                "{said}"
            );
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(4));
}

#[tokio::test]
async fn settings_the_server_cannot_carry_are_refused_before_anything_is_created() {
    let packet: i64 = {
        let mut admin = common::admin().await;
        sqlx::query_scalar("SELECT CAST(@@max_allowed_packet AS SIGNED)")
            .fetch_one(&mut admin)
            .await
            .unwrap()
    };
    let config = common::config("big").max_value_len(usize::try_from(packet).unwrap());
    match config.connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("max_allowed_packet"), "{message}")
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let bad_prefix = common::config("x").prefix("Robert'); DROP TABLE x; --");
    assert!(matches!(
        bad_prefix.connect().await,
        Err(Error::InvalidConfig { .. })
    ));
    let mut admin = common::admin().await;
    let created: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.TABLES \
         WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME LIKE ?",
    )
    .bind(format!("{}%", config.prefix_name()))
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!(created, 0, "a refused config created tables");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_above_i64_max_are_refused_and_change_nothing() {
    let (db, _cleanup) = common::database("huge").await;
    let backend = db.lock_backend();
    let storage = db.storage();
    let key = LockKey::new(format!("huge/{}", OwnerId::random())).unwrap();
    let huge = FencingToken::new(i64::MAX as u64 + 1).unwrap();
    for outcome in [
        backend.advance_token(&key, huge).await.map(drop),
        storage
            .write(&key, Fence::new(huge, OwnerId::random()), b"x")
            .await,
        storage
            .read(&key, Fence::new(huge, OwnerId::random()))
            .await
            .map(drop),
    ] {
        match outcome {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(message.contains("9223372036854775808"), "{message}")
            }
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }
    assert_eq!(backend.inspect(&key).await.unwrap().last_token, None);
    assert_eq!(storage.peek(&key).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_longer_than_get_lock_takes_are_hashed_not_truncated() {
    let (db, _cleanup) = common::database("long").await;
    let backend = db.lock_backend();
    let tag = OwnerId::random().to_string();
    // Two keys that share their first 200 characters (more than GET_LOCK takes on MySQL or
    // MariaDB): truncated, they would be one lock.
    let shared = format!("{tag}{}", "x".repeat(200 - tag.len()));
    let a = LockKey::new(format!("{shared}-a")).unwrap();
    let b = LockKey::new(format!("{shared}-b")).unwrap();
    let lease_a = backend
        .try_acquire(&a, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("first long key refused");
    let lease_b = backend
        .try_acquire(&b, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("two long keys sharing a prefix collided");

    let mut admin = common::admin().await;
    for (key, lease) in [(&a, &lease_a), (&b, &lease_b)] {
        let name = lock_name(key);
        assert!(name.starts_with("fencelock#") && name.len() == 58, "{name}");
        let holder = common::holder_of(&mut admin, &name).await;
        assert!(holder.is_some(), "the hashed name of {key:?} is not locked");
        assert_eq!(
            backend.inspect(key).await.unwrap().holder,
            Some(lease.fence())
        );
    }
    for truncated in [&shared[..64], &shared[..192]] {
        assert_eq!(
            common::holder_of(&mut admin, truncated).await,
            None,
            "a truncated name is locked"
        );
    }

    // A key spelled like another key's hashed name is hashed too, so it is a lock of its own.
    let lookalike = LockKey::new(lock_name(&a)).unwrap();
    let lease_c = backend
        .try_acquire(&lookalike, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("a key spelled like a hashed name collided with it");
    assert_ne!(lock_name(&lookalike), lock_name(&a));
    for lease in [lease_a, lease_b, lease_c] {
        assert!(backend.release(&lease).await.unwrap());
    }
}

/// A Redis or PostgreSQL port at a MySQL URL is named as not a MySQL server, with what
/// answered there, before the operation time-out (those servers wait for the client to speak,
/// so a plain connect only ever times out).
#[tokio::test]
async fn a_redis_or_postgres_port_is_not_a_mysql_server() {
    for (port, what) in [(6379, "Redis"), (5432, "PostgreSQL")] {
        let config = MySqlConfig::from_url(&common::url())
            .unwrap()
            .with_hosts(&[fencelock_core::HostPort::new("127.0.0.1", port)])
            .unwrap()
            .operation_timeout(Duration::from_secs(60));
        match config.connect().await {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(message.contains("not a MySQL"), "{message}");
                assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}");
                assert!(message.contains(what), "{message}");
            }
            other => panic!(
                "expected InvalidConfig for the {what} port {port} (is {what} running there?), \
                 got {other:?}"
            ),
        }
    }
}
