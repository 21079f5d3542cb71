//! `rediss://` against a real `redis-server` speaking TLS only, with a CA and server
//! certificate made for the test: connect trusting that CA, lock, write fenced, release; and
//! a CA that did not sign the server's certificate is refused at connect, naming the server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockKey, Locker};
use fencelock_redis::RedisConfig;
use fencelock_redis::servers::{RedisServer, RedisTlsFiles, TlsRedis};
use fencelock_testkit::tls::TestCerts;

const TTL: Duration = Duration::from_secs(10);

/// A `redis-server` speaking TLS only with `certs`' server certificate.
fn spawn_tls(certs: &TestCerts) -> TlsRedis {
    TlsRedis::spawn(&RedisTlsFiles {
        cert: certs.server_cert(),
        key: certs.server_key(),
        ca: certs.ca(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_writes_over_tls_with_the_test_ca() {
    let certs = TestCerts::generate();
    let server = spawn_tls(&certs);
    let url = format!(
        "{}?tls_ca={}",
        server.url(),
        certs.ca().to_str().expect("a UTF-8 temp path")
    );
    let config = RedisConfig::from_url(&url).unwrap();
    assert_eq!(RedisConfig::from_url(&config.to_url()).unwrap(), config);
    let backend = config.connect().await.unwrap();
    let storage = backend.storage();
    let locker = Locker::new(backend.clone());
    let key = LockKey::new("tls/account").unwrap();
    let first = locker.lock(key.as_str()).ttl(TTL).await.unwrap();
    storage.write(&key, first.fence(), b"one").await.unwrap();
    let stale = first.fence();
    let stale_token = first.token();
    assert!(first.release().await.unwrap());
    let second = locker.lock(key.as_str()).ttl(TTL).await.unwrap();
    assert!(second.token() > stale_token);
    storage.write(&key, second.fence(), b"two").await.unwrap();
    // The superseded holder's write is refused, over TLS as anywhere.
    match storage.write(&key, stale, b"late").await {
        Err(Error::Stale { .. }) => {}
        other => panic!("expected Stale, got {other:?}"),
    }
    assert_eq!(
        storage.read(&key, second.fence()).await.unwrap().as_deref(),
        Some(&b"two"[..])
    );
    assert!(second.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_refused_naming_the_server() {
    let certs = TestCerts::generate();
    let server = spawn_tls(&certs);
    let wrong = TestCerts::other_ca();
    let config = RedisConfig::from_url(&format!("rediss://:s3cr3t@localhost:{}", server.port()))
        .unwrap()
        .tls_ca(wrong.ca())
        .connect_timeout(Duration::from_secs(5));
    match config.connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(
                message.contains(&format!("localhost:{}", server.port())),
                "{message}"
            );
            assert!(message.contains("not trusted"), "{message}");
            assert!(!message.contains("s3cr3t"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

#[tokio::test]
async fn a_tls_ca_that_is_not_a_certificate_is_refused() {
    let certs = TestCerts::generate();
    let config = RedisConfig::from_url("rediss://localhost:1")
        .unwrap()
        .tls_ca(certs.server_key());
    match config.connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("holds no PEM certificate"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    let missing = RedisConfig::from_url("rediss://localhost:1?tls_ca=/nonexistent/ca.pem")
        .unwrap()
        .connect()
        .await;
    match missing {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("/nonexistent/ca.pem"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

/// A certificate signed by the trusted CA but for another name is reported as such (the
/// name check failed), not with the hint to trust its CA.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_says_the_name_does_not_match() {
    let certs = TestCerts::generate_for_name("elsewhere.fencelock.invalid");
    let server = spawn_tls(&certs);
    let config = RedisConfig::from_url(&format!("rediss://127.0.0.1:{}", server.port()))
        .unwrap()
        .tls_ca(certs.ca());
    match config.connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(
                message.contains(&format!("127.0.0.1:{}", server.port())),
                "{message}"
            );
            assert!(message.contains("not for the host name"), "{message}");
            assert!(!message.contains("trust the CA"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

/// `rediss://` at a plain Redis says the server does not support TLS (it would otherwise
/// wait out the time-out: a plain Redis waits for a newline a handshake never sends), and
/// `redis://` at a TLS-only port says the port speaks TLS (not "connection reset").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_plain_urls_at_the_wrong_kind_of_port_say_so() {
    let plain = RedisServer::spawn();
    let config = RedisConfig::from_url(&format!("rediss://127.0.0.1:{}", plain.port()))
        .unwrap()
        .connect_timeout(Duration::from_secs(60));
    match config.connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(
                message.contains(&format!("127.0.0.1:{}", plain.port())),
                "{message}"
            );
            assert!(message.contains("does not support TLS"), "{message}");
            assert!(message.contains("redis://"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }

    let certs = TestCerts::generate();
    let tls = spawn_tls(&certs);
    let config = RedisConfig::from_url(&format!("redis://127.0.0.1:{}", tls.port())).unwrap();
    match config.connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(
                message.contains(&format!("127.0.0.1:{}", tls.port())),
                "{message}"
            );
            assert!(message.contains("speaks TLS"), "{message}");
            assert!(message.contains("rediss://"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}
