//! Bad and unusual input on real etcd: an unreachable cluster, refused credentials, prefixes
//! with odd characters, keys at the length limit, ttls etcd cannot grant as asked.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;
use common::EtcdMembers;

use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, Locker, OwnerId};
use fencelock_etcd::{EtcdConfig, MAX_PREFIX_LEN};
use fencelock_servers::port::free_port;
use tokio::time::{Instant, timeout};

const TTL: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_is_unavailable_naming_it() {
    let (a, b) = (free_port().unwrap(), free_port().unwrap());
    let config = EtcdConfig::from_url(&format!("etcd://127.0.0.1:{a},127.0.0.1:{b}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(2));
    let started = Instant::now();
    match timeout(Duration::from_secs(30), config.connect()).await {
        Ok(Err(Error::Unavailable { message, .. })) => {
            assert!(message.contains(&format!("127.0.0.1:{a}")), "{message}");
            assert!(message.contains(&format!("127.0.0.1:{b}")), "{message}");
        }
        Ok(other) => panic!("expected Unavailable, got {other:?}"),
        Err(_) => panic!("connect to nothing hung"),
    }
    assert!(started.elapsed() < Duration::from_secs(30));
}

/// Credentials sent to a cluster without authentication: a configuration error (exit 2 in the
/// command), not a backend failure, and never the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_for_a_cluster_without_users_are_invalid_config() {
    let server = common::spawn(1).await;
    let url = format!("etcd://app:app-secret@127.0.0.1:{}", server.client_port(0));
    match EtcdConfig::from_url(&url).unwrap().connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(
                message.contains("authentication is not enabled"),
                "{message}"
            );
            assert!(!message.contains("app-secret"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_are_invalid_config_without_the_password() {
    let server = common::spawn(1).await;
    let mut admin =
        etcd_client::Client::connect([format!("127.0.0.1:{}", server.client_port(0))], None)
            .await
            .unwrap();
    admin.user_add("root", "r00t-secret", None).await.unwrap();
    admin.user_grant_role("root", "root").await.unwrap();
    admin.user_add("app", "app-secret", None).await.unwrap();
    admin.role_add("locks").await.unwrap();
    admin
        .role_grant_permission(
            "locks",
            etcd_client::Permission::read_write("app/").with_prefix(),
        )
        .await
        .unwrap();
    admin.user_grant_role("app", "locks").await.unwrap();
    admin.auth_enable().await.unwrap();
    let port = server.client_port(0);
    let wrong = format!("etcd://app:wrong-password@127.0.0.1:{port}?prefix=app");
    match EtcdConfig::from_url(&wrong).unwrap().connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("refused the credentials"), "{message}");
            assert!(!message.contains("wrong-password"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    // Right credentials, but keys outside what the user may touch: refused by name too.
    let outside = format!("etcd://app:app-secret@127.0.0.1:{port}?prefix=elsewhere");
    let cluster = EtcdConfig::from_url(&outside)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("k").unwrap();
    match cluster.lock_backend().try_acquire(&key, TTL).await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(!message.contains("app-secret"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    // Right credentials and prefix: locks and storage work.
    let right = format!("etcd://app:app-secret@127.0.0.1:{port}?prefix=app");
    let config = EtcdConfig::from_url(&right).unwrap();
    assert!(!format!("{config:?} {config}").contains("app-secret"));
    let cluster = config.connect().await.unwrap();
    assert!(!format!("{cluster:?}").contains("app-secret"));
    let backend = cluster.lock_backend();
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    cluster
        .storage()
        .write(&key, lease.fence(), b"v")
        .await
        .unwrap();
    assert!(backend.release(&lease).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn odd_prefixes_work_and_keep_their_keys_apart() {
    let server = common::spawn(1).await;
    let base = EtcdConfig::from_url(&server.url()).unwrap();
    let odd = [
        "odd prefix/?&=#%+ ü 🔒",
        "/leading/slash/",
        "{braces}:and\"quotes'",
        "fencelock",
        "fencelock/locks",
    ];
    let long = "p".repeat(MAX_PREFIX_LEN);
    let key = LockKey::new(format!("shared/{}", OwnerId::random())).unwrap();
    let mut grants = Vec::new();
    for prefix in odd.iter().copied().chain([long.as_str()]) {
        let config = base.clone().prefix(prefix);
        // The prefix survives the URL.
        let config = EtcdConfig::from_url(&config.to_url()).unwrap();
        assert_eq!(config.prefix_name(), prefix);
        let cluster = config.connect().await.unwrap();
        let backend = cluster.lock_backend();
        // The same key under every prefix is a different lock.
        let lease = backend
            .try_acquire(&key, TTL)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("prefix {prefix:?} shares a lock with another"));
        cluster
            .storage()
            .write(&key, lease.fence(), prefix.as_bytes())
            .await
            .unwrap();
        let lock_key = format!("{prefix}/lock/{key}");
        let found = cluster
            .client()
            .clone()
            .get(lock_key.as_bytes(), None)
            .await
            .unwrap();
        assert_eq!(found.kvs().len(), 1, "no lock key {lock_key:?}");
        grants.push((cluster, lease, prefix.to_owned()));
    }
    for (cluster, lease, prefix) in grants {
        let snapshot = cluster.storage().peek(&key).await.unwrap().unwrap();
        assert_eq!(
            snapshot.value.as_deref(),
            Some(prefix.as_bytes()),
            "values collided"
        );
        assert!(cluster.lock_backend().release(&lease).await.unwrap());
    }
    // Prefixes that cannot be used are refused before anything is sent.
    for (bad, why) in [
        ("", "is empty"),
        ("nul\0inside", "control character"),
        ("line\nbreak", "control character"),
        // A prefix with a family's name as a part could share keys with another installation.
        ("app2/lock/x", "has the part \"lock\""),
        ("token", "has the part \"token\""),
    ] {
        match base.clone().prefix(bad).connect().await {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(message.contains(why), "{message}")
            }
            other => panic!("prefix {bad:?}: expected InvalidConfig, got {other:?}"),
        }
    }
    let too_long = "p".repeat(MAX_PREFIX_LEN + 1);
    assert!(matches!(
        base.prefix(too_long).connect().await,
        Err(Error::InvalidConfig { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_at_the_length_limit_work_under_the_longest_prefix() {
    let server = common::spawn(1).await;
    let cluster = EtcdConfig::from_url(&server.url())
        .unwrap()
        .prefix("€".repeat(MAX_PREFIX_LEN / 3))
        .connect()
        .await
        .unwrap();
    let backend = cluster.lock_backend();
    let storage = cluster.storage();
    let tag = OwnerId::random().to_string();
    for name in [
        format!("{tag}{}", "k".repeat(LockKey::MAX_LEN - tag.len())),
        format!("{tag}{}", "🔒".repeat((LockKey::MAX_LEN - tag.len()) / 4)),
    ] {
        let key = LockKey::new(&name).unwrap();
        let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
        assert_eq!(
            backend.inspect(&key).await.unwrap().holder,
            Some(lease.fence())
        );
        storage
            .write(&key, lease.fence(), &vec![1u8; 1 << 20])
            .await
            .unwrap();
        assert_eq!(
            storage
                .read(&key, lease.fence())
                .await
                .unwrap()
                .map(|v| v.len()),
            Some(1 << 20)
        );
        let extended = backend
            .extend(&lease, Duration::from_secs(60))
            .await
            .unwrap();
        assert!(backend.release(&extended).await.unwrap());
    }
    let locker = Locker::new(cluster.lock_backend());
    let over = "k".repeat(LockKey::MAX_LEN + 1);
    assert!(matches!(
        locker.lock(&over).await,
        Err(Error::InvalidKey { .. })
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_largest_value_fits_etcds_request_limit() {
    let server = common::spawn(1).await;
    let cluster = common::connect(&server).await;
    let backend = cluster.lock_backend();
    let storage = cluster.storage();
    let key = LockKey::new(format!("{}{}", OwnerId::random(), "k".repeat(480))).unwrap();
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let max = storage.max_value_len();
    assert!(max > 1 << 20);
    let value: Vec<u8> = (0..max).map(|i| (i % 251) as u8).collect();
    storage.write(&key, lease.fence(), &value).await.unwrap();
    assert_eq!(
        storage.read(&key, lease.fence()).await.unwrap().as_deref(),
        Some(&value[..])
    );
    match storage.write(&key, lease.fence(), &vec![0; max + 1]).await {
        Err(Error::ValueTooLarge { size, max: m }) => assert_eq!((size, m), (max + 1, max)),
        other => panic!("expected ValueTooLarge, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttls_are_whole_seconds_no_shorter_than_the_cluster_grants() {
    let server = common::spawn(1).await;
    let cluster = common::connect(&server).await;
    let backend = cluster.lock_backend();
    // The test cluster's election timeout makes its shortest lease one second.
    assert_eq!(cluster.min_lease(), Duration::from_secs(1));
    assert_eq!(backend.capabilities().min_ttl, Duration::from_secs(1));
    let key = LockKey::new(format!("ttl/{}", OwnerId::random())).unwrap();
    match backend.try_acquire(&key, Duration::from_millis(999)).await {
        Err(Error::InvalidTtl { reason, .. }) => assert!(reason.contains("1s"), "{reason}"),
        other => panic!("expected InvalidTtl, got {other:?}"),
    }
    assert_eq!(backend.inspect(&key).await.unwrap().last_token, None);
    // 1.5 s is granted as a 2 s lease: the lock is not free after 1.5 s on the server, but
    // the holder's deadline counts 1.5 s.
    let started = Instant::now();
    let lease = backend
        .try_acquire(&key, Duration::from_millis(1500))
        .await
        .unwrap()
        .unwrap();
    assert!(lease.valid_until <= started + Duration::from_millis(1500));
    let remaining = backend.inspect(&key).await.unwrap().remaining.unwrap();
    assert!(
        remaining <= Duration::from_secs(2) && remaining > Duration::ZERO,
        "{remaining:?}"
    );
    assert!(backend.release(&lease).await.unwrap());
    // A one-second lease has under a second left the moment it is granted (etcd reports 0
    // whole seconds): its holder is still the holder.
    let short = backend
        .try_acquire(&key, Duration::from_secs(1))
        .await
        .unwrap()
        .unwrap();
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(info.holder, Some(short.fence()));
    assert!(info.remaining.unwrap() <= Duration::from_secs(1));
    assert!(backend.release(&short).await.unwrap());
}
