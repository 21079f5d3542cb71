//! TLS on real ZooKeeper: a standalone server serving a TLS client port with a certificate
//! made at test time (`fencelock_testkit::tls::TestCerts`). Locks and fenced writes over TLS,
//! a CA that did not sign the server's certificate, a plaintext client at the TLS port, and
//! bad TLS files.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, OwnerId};
use fencelock_testkit::members::Spawned;
use fencelock_testkit::tls::TestCerts;
use fencelock_zookeeper::ZkConfig;
use fencelock_zookeeper::servers::{ZkMembers, ZkTlsFiles, ZooKeeper};

type ZkServer = Spawned<ZooKeeper>;

/// One standalone server that also serves TLS with `certs`' server certificate; clients need
/// not show one.
fn spawn_tls(certs: &TestCerts) -> ZkServer {
    let files = ZkTlsFiles {
        cert: certs.server_cert(),
        key: certs.server_key(),
        ca: certs.ca(),
    };
    ZkServer::spawn_with(ZooKeeper::tls(files), 1)
}

/// [`ZkMembers::tls_url`], which a TLS server always has.
fn tls_url(server: &ZkServer, ca: &std::path::Path) -> String {
    server.tls_url(ca).expect("the server serves TLS")
}
use tokio::time::Instant;

/// The certificates and a TLS server using them (off the async threads: it waits for it).
async fn spawn() -> (Arc<TestCerts>, Arc<ZkServer>) {
    tokio::task::spawn_blocking(|| {
        let certs = TestCerts::generate();
        let server = spawn_tls(&certs);
        (Arc::new(certs), Arc::new(server))
    })
    .await
    .expect("spawning ZooKeeper with TLS panicked")
}

fn key(name: &str) -> LockKey {
    LockKey::new(format!("tls/{name}/{}", OwnerId::random())).unwrap()
}

fn with_prefix(url: &str) -> ZkConfig {
    ZkConfig::from_url(url)
        .unwrap()
        .prefix(format!("tls-{}", OwnerId::random()))
        .session_timeout(Duration::from_secs(4))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_fenced_writes_work_over_tls() {
    let (certs, server) = spawn().await;
    let config = with_prefix(&tls_url(&server, &certs.ca()));
    assert!(config.is_tls());
    let backend = config.connect().await.expect("connect over TLS");
    let storage = backend.storage();
    let key = key("works");
    let first = backend
        .try_acquire(&key, Duration::from_secs(3))
        .await
        .unwrap()
        .expect("a free lock is granted");
    storage.write(&key, first.fence(), b"one").await.unwrap();
    assert_eq!(
        storage.read(&key, first.fence()).await.unwrap().as_deref(),
        Some(&b"one"[..])
    );
    assert!(backend.release(&first).await.unwrap());
    let second = backend
        .try_acquire(&key, Duration::from_secs(3))
        .await
        .unwrap()
        .expect("a released lock is granted again");
    assert!(second.fence().token > first.fence().token);
    storage.write(&key, second.fence(), b"two").await.unwrap();
    match storage.write(&key, first.fence(), b"late").await {
        Err(Error::Stale { .. }) => {}
        other => panic!("the superseded holder's write: expected Stale, got {other:?}"),
    }
    // The builder spells the same config.
    let port = server.secure_port(0).unwrap();
    let built = ZkConfig::from_url(&format!("zookeeper://localhost:{port}"))
        .unwrap()
        .tls_ca(certs.ca());
    assert_eq!(
        built,
        ZkConfig::from_url(&tls_url(&server, &certs.ca())).unwrap()
    );
    built.connect().await.expect("connect over TLS, built");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_that_did_not_sign_the_server_is_refused_without_a_grant() {
    let (_certs, server) = spawn().await;
    let other = tokio::task::spawn_blocking(TestCerts::other_ca)
        .await
        .unwrap();
    let config = with_prefix(&tls_url(&server, &other.ca()));
    let started = Instant::now();
    match config.connect().await {
        Err(Error::Unavailable { message, .. }) => {
            assert!(message.contains("TLS handshake"), "{message}");
            assert!(message.contains("tls_ca"), "{message}");
        }
        Err(other) => panic!("expected Unavailable naming TLS, got {other:?}"),
        Ok(_) => panic!("a server signed by another CA was trusted"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_refused() {
    // A trusted certificate, made out to another name than the host the URL reaches.
    let (certs, server) = tokio::task::spawn_blocking(|| {
        let certs = TestCerts::generate_for_name("zk.example.invalid");
        let server = spawn_tls(&certs);
        (certs, server)
    })
    .await
    .unwrap();
    match with_prefix(&tls_url(&server, &certs.ca())).connect().await {
        Err(Error::Unavailable { message, .. }) => {
            assert!(message.contains("TLS handshake"), "{message}")
        }
        Err(other) => panic!("expected Unavailable naming TLS, got {other:?}"),
        Ok(_) => panic!("a certificate for another host was accepted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plaintext_client_at_the_tls_port_fails_within_its_wait() {
    let (_certs, server) = spawn().await;
    let port = server.secure_port(0).unwrap();
    let config = with_prefix(&format!("zookeeper://127.0.0.1:{port}"));
    let started = Instant::now();
    match config.connect().await {
        Err(Error::Unavailable { message, .. }) => {
            assert!(message.contains("tls=true"), "{message}")
        }
        Err(other) => panic!("expected Unavailable, got {other:?}"),
        Ok(_) => panic!("a plaintext session on the TLS port"),
    }
    // The wait is the 4 s session timeout; the refusal comes well within it.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "took {:?}",
        started.elapsed()
    );
    // The plain port of the same server still serves plaintext clients.
    with_prefix(&server.url())
        .connect()
        .await
        .expect("plain port");
}

#[tokio::test]
async fn bad_tls_files_are_invalid_config_naming_the_setting() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "secret-looking text, not a certificate").unwrap();
    let missing = dir.path().join("missing.pem");
    // Nothing listens: the files are checked before any connection.
    let port = fencelock_servers::port::free_port().unwrap();
    for (ca, word) in [(&missing, "tls_ca"), (&not_pem, "tls_ca")] {
        let config = ZkConfig::from_url(&format!("zookeeper://localhost:{port}"))
            .unwrap()
            .tls_ca(ca);
        match config.connect().await {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(message.contains(word), "{message}");
                assert!(!message.contains("secret-looking"), "{message}");
            }
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }
    let certs = tokio::task::spawn_blocking(TestCerts::generate)
        .await
        .unwrap();
    let config = ZkConfig::from_url(&format!("zookeeper://localhost:{port}"))
        .unwrap()
        .tls_ca(certs.ca())
        .tls_client_cert(certs.server_cert(), &not_pem);
    match config.connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("tls_key"), "{message}");
            assert!(!message.contains("secret-looking"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert!(!format!("{config:?}").contains("secret-looking"));
}
