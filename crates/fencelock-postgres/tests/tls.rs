//! `sslmode=verify-full` against a throwaway PostgreSQL cluster with `ssl = on` and a CA and
//! server certificate made for the test: connect trusting that CA, lock, write fenced,
//! release; a CA that did not sign the server's certificate is refused at connect, naming
//! the server; and `sslmode=require` against a server without TLS fails at connect.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockKey, Locker};
use fencelock_postgres::PgConfig;
use fencelock_testkit::tls::{TestCerts, TlsPostgres};

const TTL: Duration = Duration::from_secs(10);

fn path(p: &std::path::Path) -> &str {
    p.to_str().expect("a UTF-8 temp path")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_writes_over_verified_tls() {
    let certs = TestCerts::generate();
    let server = TlsPostgres::spawn(Some(&certs));
    let url = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        server.url(),
        path(&certs.ca())
    );
    let config = PgConfig::from_url(&url).unwrap();
    assert_eq!(PgConfig::from_url(&config.to_url()).unwrap(), config);
    let database = config.connect().await.unwrap();
    let tls: bool = sqlx::query_scalar("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        .fetch_one(database.pool())
        .await
        .unwrap();
    assert!(tls, "the connection is not encrypted");
    let storage = database.storage();
    let locker = Locker::new(database.lease_backend());
    let key = LockKey::new("tls/account").unwrap();
    let first = locker.lock(key.as_str()).ttl(TTL).await.unwrap();
    storage.write(&key, first.fence(), b"one").await.unwrap();
    let stale = first.fence();
    let stale_token = first.token();
    assert!(first.release().await.unwrap());
    let second = locker.lock(key.as_str()).ttl(TTL).await.unwrap();
    assert!(second.token() > stale_token);
    storage.write(&key, second.fence(), b"two").await.unwrap();
    match storage.write(&key, stale, b"late").await {
        Err(Error::Stale { .. }) => {}
        other => panic!("expected Stale, got {other:?}"),
    }
    assert_eq!(
        storage.read(&key, second.fence()).await.unwrap().as_deref(),
        Some(&b"two"[..])
    );
    assert!(second.release().await.unwrap());
    database.close().await;
}

/// The error of connecting to `url`, which must fail.
async fn connect_error(url: &str) -> Error {
    let config = PgConfig::from_url(url)
        .unwrap()
        .operation_timeout(Duration::from_secs(5));
    match config.connect().await {
        Ok(_) => panic!("{url}: connected"),
        Err(e) => e,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_from_another_ca_is_refused_naming_the_server() {
    let certs = TestCerts::generate();
    let server = TlsPostgres::spawn(Some(&certs));
    let wrong = TestCerts::other_ca();
    let url = format!(
        "postgres://postgres:s3cr3t@localhost:{}/postgres?sslmode=verify-full&sslrootcert={}",
        server.port(),
        path(&wrong.ca())
    );
    let error = connect_error(&url).await;
    let message = error.to_string();
    assert!(
        matches!(error, Error::InvalidConfig { .. }),
        "expected InvalidConfig, got {error:?}"
    );
    assert!(
        message.contains(&format!("localhost:{}", server.port())),
        "{message}"
    );
    assert!(message.contains("not trusted"), "{message}");
    assert!(!message.contains("s3cr3t"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_against_a_server_without_tls_fails_clearly() {
    let server = TlsPostgres::spawn(None);
    let url = format!("{}?sslmode=require", server.url());
    let error = connect_error(&url).await;
    let message = error.to_string();
    assert!(
        matches!(error, Error::InvalidConfig { .. }),
        "expected InvalidConfig, got {error:?}"
    );
    assert!(
        message.contains(&format!("localhost:{}", server.port())),
        "{message}"
    );
    assert!(message.contains("TLS"), "{message}");
}

/// `verify-ca` checks the server's chain but not its host name: with the CA that signed the
/// certificate it connects (it once panicked, no crypto provider being installed), and with
/// another CA it is refused. `require` with a root certificate verifies the chain the same
/// way, as libpq does; the driver alone would have checked nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_ca_and_require_with_a_root_certificate_check_the_chain() {
    let certs = TestCerts::generate();
    let server = TlsPostgres::spawn(Some(&certs));
    for mode in ["verify-ca", "require"] {
        let url = format!(
            "{}?sslmode={mode}&sslrootcert={}",
            server.url(),
            path(&certs.ca())
        );
        let database = PgConfig::from_url(&url)
            .unwrap()
            .connect()
            .await
            .unwrap_or_else(|e| panic!("{mode} with the signing CA: {e}"));
        database.close().await;
    }
    let wrong = TestCerts::other_ca();
    for mode in ["verify-ca", "require"] {
        let url = format!(
            "postgres://postgres:s3cr3t@localhost:{}/postgres?sslmode={mode}&sslrootcert={}",
            server.port(),
            path(&wrong.ca())
        );
        let error = connect_error(&url).await;
        assert!(
            matches!(error, Error::InvalidConfig { .. }),
            "{mode} with another CA: expected InvalidConfig, got {error:?}"
        );
        assert!(error.to_string().contains("not trusted"), "{mode}: {error}");
    }
}
