//! `fencelock run` built with the `tls` feature, against a real `redis-server` speaking TLS
//! only and a throwaway PostgreSQL cluster with `ssl = on`, both with certificates made for
//! the test: the command runs under the lock, and a CA that did not sign the server's
//! certificate is bad input (exit 2) naming the server.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::process::{Command, Output};

use fencelock::redis::servers::{RedisTlsFiles, TlsRedis};
use fencelock_testkit::tls::{TestCerts, TlsPostgres};

fn fencelock(backend: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_fencelock"))
        .env_remove("FENCELOCK_BACKEND")
        .args(["run", "--backend", backend, "-w", "20", "--key"])
        .args(args)
        .output()
        .expect("the fencelock binary runs")
}

/// A `redis-server` speaking TLS only with `certs`' server certificate.
fn spawn_tls(certs: &TestCerts) -> TlsRedis {
    TlsRedis::spawn(&RedisTlsFiles {
        cert: certs.server_cert(),
        key: certs.server_key(),
        ca: certs.ca(),
    })
}

fn path(p: &std::path::Path) -> &str {
    p.to_str().expect("a UTF-8 temp path")
}

#[test]
fn run_reaches_redis_over_tls() {
    let certs = TestCerts::generate();
    let server = spawn_tls(&certs);
    let url = format!("{}?tls_ca={}", server.url(), path(&certs.ca()));
    let out = fencelock(
        &url,
        &["tls/job", "--", "sh", "-c", "echo $FENCELOCK_TOKEN"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let token: u64 = String::from_utf8_lossy(&out.stdout).trim().parse().unwrap();
    assert!(token > 0);

    let wrong = TestCerts::other_ca();
    let url = format!("{}?tls_ca={}", server.url(), path(&wrong.ca()));
    let out = fencelock(&url, &["tls/job", "--", "true"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(&server.port().to_string()), "{stderr}");
}

#[test]
fn run_reaches_postgres_over_tls() {
    let certs = TestCerts::generate();
    let server = TlsPostgres::spawn(Some(&certs));
    let url = format!(
        "{}?sslmode=verify-full&sslrootcert={}",
        server.url(),
        path(&certs.ca())
    );
    let out = fencelock(
        &url,
        &["tls/job", "--", "sh", "-c", "echo $FENCELOCK_TOKEN"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u64>()
            .is_ok()
    );
}
