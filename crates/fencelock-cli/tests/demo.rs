//! `fencelock demo` end to end, as a user runs it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::fencelock;

fn demo_on(spec: &str) {
    let (code, out, err) = fencelock(&["demo", "--backend", spec, "--ttl", "300ms"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let fenced = out.split("Without fencing").next().unwrap();
    assert!(fenced.contains("REFUSED: stale fence token 1"), "{out}");
    assert!(fenced.contains("storage is at token 2"), "{out}");
    assert!(fenced.contains("final balance 150: correct"), "{out}");
    let unfenced = out.split("Without fencing").nth(1).unwrap();
    assert!(unfenced.contains("ACCEPTED"), "{out}");
    assert!(unfenced.contains("final balance 70: CORRUPTED"), "{out}");
}

#[test]
fn demo_on_memory() {
    demo_on("memory://");
}

#[test]
fn demo_on_redis() {
    let server = fencelock::redis::servers::RedisServer::spawn();
    demo_on(&server.url());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_on_postgres_lease_and_advisory() {
    // A schema serves one lock mechanism: one schema per backend.
    for backend in ["lease", "advisory"] {
        let schema = fencelock_testkit::postgres::PgSchema::create().await;
        let spec = format!(
            "{}?schema={}&backend={backend}",
            schema.url(),
            schema.name()
        );
        tokio::task::spawn_blocking(move || demo_on(&spec))
            .await
            .unwrap();
        schema.cleanup().await;
    }
}

#[test]
fn demo_reports_bad_input_with_typed_errors() {
    let (code, _, err) = fencelock(&["demo", "--backend", "nosuch://x"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown backend scheme"), "{err}");
    // Every input error is exit 2, whether clap or the library finds it.
    let (code, _, err) = fencelock(&["demo", "--ttl", "0s"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("invalid ttl"), "{err}");
    let (code, _, err) = fencelock(&["demo", "--ttl", "soon"]);
    assert_eq!(code, 2, "{err}");
}
