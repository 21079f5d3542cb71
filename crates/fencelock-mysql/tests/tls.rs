//! TLS to a private MariaDB started with a certificate made for the test (`openssl`), never
//! the shared server: `ssl-mode=verify_identity` with the CA that signed it connects
//! encrypted, locks and writes through the fence; a CA that did not sign it is refused at
//! connect, naming the server and the certificate; `ssl-mode=required` against a server
//! without TLS fails at connect; and a mode that needs TLS names the feature when the file is
//! missing.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::server::PrivateServer;
use fencelock_core::{Error, FencedStorageExt, LockBackend, LockKey};
use fencelock_mysql::{MySqlConfig, MySqlTlsMode};
use fencelock_testkit::tls::TestCerts;

fn path(p: &std::path::Path) -> String {
    p.to_str().expect("a UTF-8 temp path").to_owned()
}

async fn tls_server(certs: &TestCerts) -> PrivateServer {
    let server = PrivateServer::start_with([
        format!("--ssl-ca={}", path(&certs.ca())),
        format!("--ssl-cert={}", path(&certs.server_cert())),
        format!("--ssl-key={}", path(&certs.server_key())),
    ]);
    server.ready().await;
    server
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_writes_over_verified_tls() {
    let certs = TestCerts::generate();
    let server = tls_server(&certs).await;
    let url = format!(
        "{}?ssl-mode=verify_identity&ssl-ca={}",
        server.url("t"),
        path(&certs.ca())
    );
    let config = MySqlConfig::from_url(&url).unwrap();
    assert_eq!(config.tls_mode(), Some(MySqlTlsMode::VerifyIdentity));
    assert_eq!(MySqlConfig::from_url(&config.to_url()).unwrap(), config);
    let db = config.connect().await.unwrap();
    let (_, cipher): (String, String) = sqlx_cipher(&db).await;
    assert!(!cipher.is_empty(), "the connection is not encrypted");
    let backend = db.lock_backend();
    let key = LockKey::new("tls/account").unwrap();
    let lease = backend
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a free key");
    db.storage()
        .write_key(key.as_str(), lease.fence(), b"over tls")
        .await
        .unwrap();
    assert!(backend.release(&lease).await.unwrap());
    db.close().await;

    // `required` with the CA checks it too (as libpq does).
    let required = format!(
        "{}?ssl-mode=required&ssl-ca={}",
        server.url("t"),
        path(&certs.ca())
    );
    let required = MySqlConfig::from_url(&required).unwrap();
    assert_eq!(required.tls_mode(), Some(MySqlTlsMode::VerifyCa));
    required.connect().await.unwrap().close().await;
}

async fn sqlx_cipher(db: &fencelock_mysql::MySqlDatabase) -> (String, String) {
    fencelock_mysql::sqlx::query_as("SHOW SESSION STATUS LIKE 'Ssl_cipher'")
        .fetch_one(db.pool())
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_another_ca_signed_is_refused_at_connect() {
    let certs = TestCerts::generate();
    let other = TestCerts::other_ca();
    let server = tls_server(&certs).await;
    let url = format!(
        "{}?ssl-mode=verify_ca&ssl-ca={}",
        server.url("t"),
        path(&other.ca())
    );
    match MySqlConfig::from_url(&url).unwrap().connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("127.0.0.1"), "{message}");
            assert!(message.to_lowercase().contains("certificate"), "{message}");
        }
        other => panic!("connected to a server another CA signed: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn required_tls_against_a_plain_server_fails_at_connect() {
    let server = PrivateServer::start_with(["--skip-ssl"]);
    server.ready().await;
    let url = format!("{}?ssl-mode=required", server.url("t"));
    match MySqlConfig::from_url(&url).unwrap().connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("TLS"), "{message}");
        }
        other => panic!("connected in the clear: {other:?}"),
    }
}

#[test]
fn bad_tls_options_are_refused_naming_them() {
    for (url, says) in [
        ("mysql://u@h/d?ssl-mode=sometimes", "ssl-mode"),
        ("mysql://u@h/d?ssl-ca=/no/such/ca.pem", "/no/such/ca.pem"),
        (
            "mysql://u@h/d?ssl-mode=disabled&ssl-ca=/etc/hostname",
            "ssl-mode=disabled",
        ),
    ] {
        match MySqlConfig::from_url(url) {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(message.contains(says), "{url}: {message}")
            }
            other => panic!("{url}: {other:?}"),
        }
    }
}
