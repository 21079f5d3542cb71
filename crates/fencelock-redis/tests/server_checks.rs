//! What connecting finds out about a server and says when it fails: a server that may evict
//! keys is refused unless the user opted out; an unreachable server, a service that is not
//! Redis and refused credentials are named, with the cause, in one line.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, OwnerId, TokenGuarantee};
use fencelock_redis::servers::{RedisServer, RedisServerOptions};
use fencelock_redis::{RedisConfig, RedlockConfig, redis};
use fencelock_servers::port::free_port;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const PASSWORD: &str = "s3cr3t-pw";

fn key(name: &str) -> LockKey {
    LockKey::new(format!("checks/{name}/{}", OwnerId::random())).unwrap()
}

/// A spawned server set up as `redis-server --maxmemory 3mb --maxmemory-policy <policy>`.
async fn evicting(policy: &str) -> RedisServer {
    let server = RedisServer::spawn();
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    for (name, value) in [("maxmemory", "3mb"), ("maxmemory-policy", policy)] {
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg(name)
            .arg(value)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    server
}

fn assert_refuses_eviction(
    result: Result<(), Error>,
    server: &RedisServer,
    policy: &str,
) -> String {
    match result {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(
                message.contains(&format!("127.0.0.1:{}", server.port())),
                "{message}"
            );
            assert!(
                message.contains(&format!("maxmemory-policy {policy}")),
                "{message}"
            );
            assert!(message.contains("maxmemory-policy noeviction"), "{message}");
            assert!(message.contains("allow_eviction"), "{message}");
            message
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

/// Tokens and fences on a server that may evict keys are refused, unless the user opted out;
/// the opt-out shows in `Capabilities` as tokens that do not persist.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_server_is_refused_unless_allowed() {
    for policy in [
        "allkeys-lru",
        "volatile-lru",
        "allkeys-random",
        "volatile-ttl",
    ] {
        let server = evicting(policy).await;
        let config = RedisConfig::from_url(&server.url()).unwrap();
        assert_refuses_eviction(config.connect().await.map(drop), &server, policy);
        assert_refuses_eviction(config.connect_storage().await.map(drop), &server, policy);
    }

    let server = evicting("allkeys-lru").await;
    for config in [
        RedisConfig::from_url(&server.url())
            .unwrap()
            .allow_eviction(true),
        RedisConfig::from_url(&format!("{}?allow_eviction=true", server.url())).unwrap(),
    ] {
        assert!(config.to_url().ends_with("?allow_eviction=true"));
        let backend = config.connect().await.unwrap();
        assert_eq!(
            backend.capabilities().tokens,
            TokenGuarantee::DurableIfServerPersists {
                server_persists: Some(false)
            }
        );
        let key = key("allowed");
        let lease = backend
            .try_acquire(&key, Duration::from_secs(10))
            .await
            .unwrap()
            .unwrap();
        let storage = config.connect_storage().await.unwrap();
        storage.write(&key, lease.fence(), b"v").await.unwrap();
    }

    // A server that does not evict is served as before.
    let plain = RedisServer::spawn();
    let backend = RedisConfig::from_url(&plain.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    assert_eq!(
        backend.capabilities().tokens,
        TokenGuarantee::DurableIfServerPersists {
            server_persists: Some(false)
        },
        "no AOF: not persisted"
    );
    let persistent = RedisServer::spawn_with(RedisServerOptions::persistent());
    let backend = RedisConfig::from_url(&persistent.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    assert_eq!(
        backend.capabilities().tokens,
        TokenGuarantee::DurableIfServerPersists {
            server_persists: Some(true)
        }
    );
}

/// Every Redlock node and the storage node are held to the same rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evicting_redlock_node_or_storage_is_refused_unless_allowed() {
    let good = [RedisServer::spawn(), RedisServer::spawn()];
    let bad = evicting("allkeys-lru").await;
    let hosts = format!(
        "127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
        good[0].port(),
        bad.port(),
        good[1].port()
    );
    // Two good nodes make a quorum, yet the evicting one is refused by name.
    let config = RedlockConfig::from_url(&format!("redlock://{hosts}")).unwrap();
    assert_refuses_eviction(config.connect().await.map(drop), &bad, "allkeys-lru");

    for config in [
        config.clone().allow_eviction(true),
        RedlockConfig::from_url(&format!("redlock://{hosts}?allow_eviction=true")).unwrap(),
    ] {
        assert_eq!(RedlockConfig::from_url(&config.to_url()).unwrap(), config);
        let redlock = config.connect().await.unwrap();
        assert_eq!(
            redlock.capabilities().tokens,
            TokenGuarantee::DurableIfServerPersists {
                server_persists: Some(false)
            }
        );
        let key = key("redlock-allowed");
        let lease = redlock
            .try_acquire(&key, Duration::from_secs(10))
            .await
            .unwrap()
            .unwrap();
        assert!(redlock.release(&lease).await.unwrap());
    }

    // Good lock nodes, evicting storage node: the lock works, storage operations are refused
    // naming the storage node, until eviction is allowed.
    let storage_url = url_encode(&format!("redis://127.0.0.1:{}", bad.port()));
    let hosts = format!("127.0.0.1:{},127.0.0.1:{}", good[0].port(), good[1].port());
    let config =
        RedlockConfig::from_url(&format!("redlock://{hosts}?storage={storage_url}")).unwrap();
    let redlock = config.connect().await.unwrap();
    let storage = config.connect_storage().await.unwrap();
    let key = key("evicting-storage");
    let lease = redlock
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .unwrap();
    let refused = storage.write(&key, lease.fence(), b"v").await;
    let message = assert_refuses_eviction(refused, &bad, "allkeys-lru");
    assert!(message.contains("redlock storage node"), "{message}");
    let storage = config.allow_eviction(true).connect_storage().await.unwrap();
    storage.write(&key, lease.fence(), b"v").await.unwrap();
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'.' | b'_' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// A TCP service that answers every connection like an HTTP server that did not understand.
async fn http_service() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = socket.read(&mut buf).await;
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\n\
                          Connection: close\r\n\r\nBad Request",
                    )
                    .await;
            });
        }
    });
    port
}

/// Nothing listening: the error names the server and the cause.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_named_with_the_cause() {
    let port = free_port().unwrap();
    let config = RedisConfig::from_url(&format!("redis://:{PASSWORD}@127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(1))
        .call_timeout(Duration::from_secs(1));
    for result in [
        config.connect().await.map(drop),
        config.connect_storage().await.map(drop),
    ] {
        match result {
            Err(e @ Error::Unavailable { .. }) => {
                let shown = e.to_string();
                assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
                assert!(shown.to_lowercase().contains("refused"), "{shown}");
                assert!(!shown.contains(PASSWORD), "{shown}");
                assert!(e.is_retryable());
            }
            other => panic!("expected Unavailable, got {other:?}"),
        }
    }
}

/// A service that is not Redis: "not a Redis server", in one line, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_that_is_not_redis_is_named_as_such() {
    let port = http_service().await;
    let config = RedisConfig::from_url(&format!("redis://127.0.0.1:{port}"))
        .unwrap()
        .call_timeout(Duration::from_secs(2));
    for result in [
        config.connect().await.map(drop),
        config.connect_storage().await.map(drop),
    ] {
        match result {
            Err(e @ Error::InvalidConfig { .. }) => {
                let shown = e.to_string();
                assert!(shown.contains("not a Redis server"), "{shown}");
                assert!(shown.contains(&format!("127.0.0.1:{port}")), "{shown}");
                assert!(!shown.contains('\n'), "more than one line: {shown}");
            }
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }
    // The same as a Redlock node: the error names the node, in one line.
    let good = [RedisServer::spawn(), RedisServer::spawn()];
    let config = RedlockConfig::from_url(&format!(
        "redlock://127.0.0.1:{},127.0.0.1:{port},127.0.0.1:{}",
        good[0].port(),
        good[1].port()
    ))
    .unwrap();
    match config.connect().await {
        Err(e @ Error::InvalidConfig { .. }) => {
            let shown = e.to_string();
            assert!(shown.contains("not a Redis server"), "{shown}");
            assert!(shown.contains(&format!("node 127.0.0.1:{port}")), "{shown}");
            assert!(!shown.contains('\n'), "more than one line: {shown}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

/// A password sent to a server that has none, or a wrong one: what the server said, never
/// the password.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_credentials_report_what_the_server_said() {
    let open = RedisServer::spawn();
    let config =
        RedisConfig::from_url(&format!("redis://:{PASSWORD}@127.0.0.1:{}", open.port())).unwrap();
    match config.connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(
                message.contains("without any password configured"),
                "{message}"
            );
            assert!(
                message.contains(&format!("127.0.0.1:{}", open.port())),
                "{message}"
            );
            assert!(!message.contains(PASSWORD), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let locked = RedisServer::spawn_with(RedisServerOptions {
        password: Some("the-right-one".into()),
        ..RedisServerOptions::default()
    });
    let config =
        RedisConfig::from_url(&format!("redis://:{PASSWORD}@127.0.0.1:{}", locked.port())).unwrap();
    match config.connect_storage().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("WRONGPASS"), "{message}");
            assert!(!message.contains(PASSWORD), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

/// A database number the server does not have (it has 16 by default) is a configuration
/// error naming the server, not a retryable failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_the_server_lacks_is_invalid_config() {
    let server = RedisServer::spawn();
    let config = RedisConfig::from_url(&format!("redis://127.0.0.1:{}/16", server.port())).unwrap();
    match config.connect().await {
        Err(error @ Error::InvalidConfig { .. }) => {
            assert!(!error.is_retryable());
            let said = error.to_string();
            assert!(
                said.contains(&format!("127.0.0.1:{}", server.port()))
                    && said.contains("database")
                    && said.contains("out of range"),
                "{said}"
            );
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}
