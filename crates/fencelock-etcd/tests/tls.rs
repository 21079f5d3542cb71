//! TLS on real etcd: a member whose client port speaks TLS only, with a certificate made at
//! test time (`fencelock_testkit::tls::TestCerts`). Locks and fenced writes over TLS (with a
//! password user too), a CA that did not sign the member's certificate, a certificate for
//! another name, a plain client at the TLS port, a client certificate for a member that asks
//! for one (and as the user, with authentication on), and TLS files that cannot be used.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, OwnerId};
use fencelock_etcd::servers::{EtcdTls, EtcdTlsFiles, EtcdTlsMembers};
use fencelock_etcd::{EtcdCluster, EtcdConfig};
use fencelock_testkit::members::Spawned;
use fencelock_testkit::tls::TestCerts;
use tokio::time::Instant;

/// TLS-serving etcd members owned by a test.
type EtcdTlsServer = Spawned<EtcdTls>;

/// One member serving TLS with `certs`' server certificate, asking clients for a certificate
/// when `client_auth`.
fn spawn_tls(certs: &TestCerts, client_auth: bool) -> EtcdTlsServer {
    let files = EtcdTlsFiles {
        cert: certs.server_cert(),
        key: certs.server_key(),
        ca: certs.ca(),
    };
    EtcdTlsServer::spawn_with(EtcdTls::new(files, client_auth), 1)
}

/// How long a refused connect may take: a handshake on 127.0.0.1, a few tries.
const REFUSED_WITHIN: Duration = Duration::from_secs(10);

/// Certificates and a TLS member using them (off the async threads: it waits for it); with
/// `client_auth`, the member asks clients for a certificate.
async fn spawn(certs: TestCerts, client_auth: bool) -> (Arc<TestCerts>, Arc<EtcdTlsServer>) {
    tokio::task::spawn_blocking(move || {
        let server = if client_auth {
            spawn_tls(&certs, true)
        } else {
            spawn_tls(&certs, false)
        };
        (Arc::new(certs), Arc::new(server))
    })
    .await
    .expect("spawning etcd with TLS panicked")
}

async fn certs() -> TestCerts {
    tokio::task::spawn_blocking(TestCerts::generate)
        .await
        .expect("making test certificates panicked")
}

fn key(name: &str) -> LockKey {
    LockKey::new(format!("tls/{name}/{}", OwnerId::random())).unwrap()
}

/// `url`'s config under a prefix of its own, with short time-outs: a refusal comes quickly.
fn config(url: &str) -> EtcdConfig {
    EtcdConfig::from_url(url)
        .unwrap()
        .prefix(format!("tls-{}", OwnerId::random()))
        .connect_timeout(Duration::from_secs(5))
}

/// A lock, a fenced write, a release, a new holder, and the superseded holder refused.
async fn locks_and_writes(cluster: &EtcdCluster) {
    let (backend, storage) = (cluster.lock_backend(), cluster.storage());
    let key = key("works");
    let first = backend
        .try_acquire(&key, Duration::from_secs(5))
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
        .try_acquire(&key, Duration::from_secs(5))
        .await
        .unwrap()
        .expect("a released lock is granted again");
    assert!(second.fence().token > first.fence().token);
    storage.write(&key, second.fence(), b"two").await.unwrap();
    match storage.write(&key, first.fence(), b"late").await {
        Err(Error::Stale { .. }) => {}
        other => panic!("the superseded holder's write: expected Stale, got {other:?}"),
    }
}

/// `config`'s connect, which must fail soon with `InvalidConfig`; its message.
async fn refused(config: &EtcdConfig) -> String {
    let started = Instant::now();
    let outcome = config.connect().await;
    assert!(
        started.elapsed() < REFUSED_WITHIN,
        "the refusal took {:?}",
        started.elapsed()
    );
    match outcome {
        Err(Error::InvalidConfig { message, .. }) => message,
        Err(other) => panic!("expected InvalidConfig, got {other:?}"),
        Ok(_) => panic!("connected where TLS should have refused: {config}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn locks_and_fenced_writes_work_over_tls() {
    let (certs, server) = spawn(certs().await, false).await;
    let config = config(&server.tls_url(&certs.ca()));
    assert!(config.is_tls());
    let cluster = config.connect().await.expect("connect over TLS");
    locks_and_writes(&cluster).await;
    // The builder spells the same config.
    let port = server.client_port(0);
    let built = EtcdConfig::from_url(&format!("etcd://localhost:{port}"))
        .unwrap()
        .tls_ca(certs.ca());
    assert_eq!(
        built,
        EtcdConfig::from_url(&server.tls_url(&certs.ca())).unwrap()
    );
    built.connect().await.expect("connect over TLS, built");
    // The certificate is made out to 127.0.0.1 too: an IP address is checked as well.
    let by_ip = config
        .clone()
        .with_hosts(&[fencelock_core::HostPort::new("127.0.0.1", port)]);
    locks_and_writes(&by_ip.unwrap().connect().await.expect("connect by IP")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_user_works_over_tls() {
    let (certs, server) = spawn(certs().await, false).await;
    let url = server.tls_url(&certs.ca());
    // Turn authentication on over TLS: a root user with the root role.
    let admin = config(&url).connect().await.expect("connect over TLS");
    let mut client = admin.client().clone();
    let _ = client.role_add("root").await; // exists already on some versions
    client.user_add("root", "r00t-pw", None).await.unwrap();
    client.user_grant_role("root", "root").await.unwrap();
    client.auth_enable().await.unwrap();
    let with_password = url.replacen("etcd://", "etcd://root:r00t-pw@", 1);
    let cluster = config(&with_password)
        .connect()
        .await
        .expect("connect over TLS with a password");
    locks_and_writes(&cluster).await;
    let wrong = url.replacen("etcd://", "etcd://root:wrong-pw@", 1);
    match config(&wrong).connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("refused the credentials"), "{message}");
            assert!(!message.contains("wrong-pw"), "{message}");
        }
        other => panic!("a wrong password: expected InvalidConfig, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ca_that_did_not_sign_the_member_is_refused_without_a_grant() {
    let (_certs, server) = spawn(certs().await, false).await;
    let other = tokio::task::spawn_blocking(TestCerts::other_ca)
        .await
        .unwrap();
    let port = server.client_port(0);
    for password in ["", "root:pw@"] {
        let url = server
            .tls_url(&other.ca())
            .replacen("etcd://", &format!("etcd://{password}"), 1);
        let message = refused(&config(&url)).await;
        assert!(
            message.contains(&format!(
                "the TLS certificate of etcd member localhost:{port} could not be verified"
            )),
            "{message}"
        );
        assert!(message.contains("UnknownIssuer"), "{message}");
        assert!(message.contains("tls_ca"), "{message}");
        assert!(!message.contains(":pw@"), "{message}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_for_another_name_is_refused() {
    // A trusted certificate, made out to another name than the host the URL reaches.
    let certs =
        tokio::task::spawn_blocking(|| TestCerts::generate_for_name("etcd.example.invalid"))
            .await
            .unwrap();
    let (certs, server) = spawn(certs, false).await;
    let message = refused(&config(&server.tls_url(&certs.ca()))).await;
    assert!(message.contains("could not be verified"), "{message}");
    assert!(message.contains("not valid for name"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_client_at_the_tls_port_fails_clearly() {
    let (_certs, server) = spawn(certs().await, false).await;
    let port = server.client_port(0);
    let config = config(&format!("etcd://localhost:{port}"));
    let started = Instant::now();
    match config.connect().await {
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.contains(&format!("etcd member localhost:{port} took the connection")),
                "{message}"
            );
            assert!(
                message.contains("the URL needs tls=true&tls_ca="),
                "{message}"
            );
        }
        Ok(_) => panic!("a plain connection to the TLS port"),
    }
    assert!(
        started.elapsed() < REFUSED_WITHIN,
        "took {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_is_shown_to_a_member_that_asks_for_one() {
    let (certs, server) = spawn(certs().await, true).await;
    let url = server.tls_url(&certs.ca());
    // Without a certificate the member refuses the connection: it ends it after the
    // handshake, or with an alert in it; either way the message says what the member wants.
    match config(&url).connect().await {
        Err(Error::Unavailable { message, .. } | Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("tls_cert and tls_key"), "{message}");
        }
        Err(other) => panic!("without a client certificate: got {other:?}"),
        Ok(_) => panic!("a member with --client-cert-auth served a client without a certificate"),
    }
    let (cert, key) = certs.client_cert("app");
    let with_cert = config(&url).tls_client_cert(&cert, &key);
    let cluster = with_cert
        .connect()
        .await
        .expect("connect with a client certificate");
    locks_and_writes(&cluster).await;
    // The URL spells it as the builder does.
    assert_eq!(
        EtcdConfig::from_url(&with_cert.to_url()).unwrap().to_url(),
        with_cert.to_url()
    );
    // A certificate another CA signed is refused by the member.
    let other = tokio::task::spawn_blocking(TestCerts::other_ca)
        .await
        .unwrap();
    let (cert, key) = other.client_cert("app");
    match config(&url).tls_client_cert(&cert, &key).connect().await {
        Err(Error::Unavailable { message, .. } | Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("tls_cert and tls_key"), "{message}");
        }
        Err(other) => panic!("another CA's client certificate: got {other:?}"),
        Ok(_) => panic!("a client certificate another CA signed was accepted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_names_the_user_when_authentication_is_on() {
    let (certs, server) = spawn(certs().await, true).await;
    let url = server.tls_url(&certs.ca());
    let shown_as = |name: &str| {
        let (cert, key) = certs.client_cert(name);
        config(&url).tls_client_cert(cert, key)
    };
    // Before authentication is on, any certificate the CA signed may set it up: a root user,
    // and `app` with read and write on one prefix only.
    let app = shown_as("app");
    let prefix = app.prefix_name().to_owned();
    let admin = shown_as("root").connect().await.expect("connect to set up");
    let mut client = admin.client().clone();
    let _ = client.role_add("root").await; // exists already on some versions
    client.user_add("root", "r00t-pw", None).await.unwrap();
    client.user_grant_role("root", "root").await.unwrap();
    client.role_add("app-role").await.unwrap();
    let on_prefix = etcd_client::Permission::read_write(prefix.clone()).with_prefix();
    client
        .role_grant_permission("app-role", on_prefix)
        .await
        .unwrap();
    client.user_add("app", "unused-pw", None).await.unwrap();
    client.user_grant_role("app", "app-role").await.unwrap();
    client.auth_enable().await.unwrap();
    // No password in the URL: the certificate's common name is the user.
    let cluster = app
        .connect()
        .await
        .expect("connect as app by its certificate");
    locks_and_writes(&cluster).await;
    // The same user outside its prefix, and a name that is no user, are refused.
    for (config, who) in [
        (app.clone().prefix("elsewhere"), "app outside its prefix"),
        (shown_as("stranger").prefix(prefix.clone()), "a stranger"),
    ] {
        let refused = match config.connect().await {
            Err(e) => e,
            Ok(cluster) => cluster
                .lock_backend()
                .try_acquire(&key("auth"), Duration::from_secs(5))
                .await
                .expect_err(who),
        };
        assert!(
            matches!(refused, Error::InvalidConfig { .. }),
            "{who}: {refused:?}"
        );
    }
}

#[tokio::test]
async fn bad_tls_files_are_invalid_config_naming_the_option() {
    let dir = tempfile::tempdir().unwrap();
    let not_pem = dir.path().join("not.pem");
    std::fs::write(&not_pem, "s3cret-looking text, not a certificate").unwrap();
    let missing = dir.path().join("missing.pem");
    // Nothing listens: the files are checked before any connection.
    let port = fencelock_servers::port::free_port().unwrap();
    let base = EtcdConfig::from_url(&format!("etcd://localhost:{port}")).unwrap();
    let certs = certs().await;
    let (cert, key) = certs.client_cert("app");
    for (config, named, path) in [
        (base.clone().tls_ca(&missing), "tls_ca", &missing),
        (base.clone().tls_ca(&not_pem), "tls_ca", &not_pem),
        (
            base.clone()
                .tls_ca(certs.ca())
                .tls_client_cert(&not_pem, &key),
            "tls_cert",
            &not_pem,
        ),
        (
            base.clone()
                .tls_ca(certs.ca())
                .tls_client_cert(&cert, &not_pem),
            "tls_key",
            &not_pem,
        ),
        (
            base.clone()
                .tls_ca(certs.ca())
                .tls_client_cert(&cert, &missing),
            "tls_key",
            &missing,
        ),
    ] {
        match config.connect().await {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(
                    message.contains(&format!("{named} {}", path.display())),
                    "{message}"
                );
                assert!(!message.contains("s3cret-looking"), "{message}");
            }
            other => panic!("expected InvalidConfig naming {named}, got {other:?}"),
        }
        assert!(!format!("{config:?}").contains("s3cret-looking"));
    }
    // A key file's content never shows, even when it is a real key given as the CA.
    match base.clone().tls_ca(&key).connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("tls_ca"), "{message}");
            assert!(!message.contains("PRIVATE KEY"), "{message}");
        }
        other => panic!("a key as tls_ca: expected InvalidConfig, got {other:?}"),
    }
}
