//! `pg_terminate_backend` as chaos runs use it: only the tagged sessions end, and the backend
//! connects again afterwards. Needs the server at `FENCELOCK_PG_URL`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fencelock_core::{BackendConfig, Error, LockKey};
use fencelock_postgres::{PgConfig, PgSessionFaults};
use fencelock_testkit::postgres::PgSchema;

const TTL: Duration = Duration::from_secs(30);

/// A run tag no other test process uses.
fn run_tag() -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("t{}-{nanos:x}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tagged_sessions_are_ended_and_others_kept() {
    // Panics saying what to start or set when the server cannot be used.
    let schema = PgSchema::create().await;
    let url = format!("{}?schema={}", schema.url(), schema.name());
    let config = PgConfig::from_url(&url).unwrap();
    let tag = run_tag();
    let faults = config
        .session_faults(&tag)
        .await
        .unwrap_or_else(|e| panic!("opening the admin session on {url}: {e}"))
        .expect("Postgres has session faults");
    assert_eq!(faults.label(), "pg_terminate_backend");

    let tagged = faults.tag(&config).unwrap();
    assert!(
        tagged
            .to_url()
            .contains(&format!("application_name=fencelock-chaos-{tag}")),
        "{}",
        tagged.to_url()
    );
    let connected = tagged.connect().await.unwrap();
    let key = LockKey::new("session-faults/one").unwrap();
    // A lease taken and released: the pool holds an open, tagged session now.
    let lease = connected.backend.try_acquire(&key, TTL).await.unwrap();
    connected
        .backend
        .release(&lease.expect("the key is free"))
        .await
        .unwrap();

    let ended = faults.end_sessions(true).await.unwrap();
    assert!(ended >= 1, "no tagged session was ended ({ended})");

    // Untagged sessions (the schema's admin pool) are untouched, and the tagged pool
    // connects again: the fault ends sessions, not the backend.
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(schema.admin())
        .await
        .unwrap();
    assert_eq!(one, 1);
    let mut again = None;
    for _ in 0..20 {
        match connected.backend.try_acquire(&key, TTL).await {
            Ok(lease) => {
                again = lease;
                break;
            }
            Err(e) if e.is_retryable() => tokio::time::sleep(Duration::from_millis(100)).await,
            Err(e) => panic!("after the sessions ended: {e}"),
        }
    }
    connected
        .backend
        .release(&again.expect("the lock again after the sessions ended"))
        .await
        .unwrap();
    // Nothing is left to end; `all = false` runs the same statement.
    faults.end_sessions(false).await.unwrap();
    schema.cleanup().await;
}

#[tokio::test]
async fn an_unreachable_server_is_unavailable_without_the_password() {
    // Port 1 on loopback: refused at once, no server needed.
    let config = PgConfig::from_url("postgres://app:hunter2@127.0.0.1:1/test").unwrap();
    let err = PgSessionFaults::open(&config, "x").await.unwrap_err();
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("cannot open the admin session on postgres://app:***@127.0.0.1:1/test"),
        "{message}"
    );
    assert!(!message.contains("hunter2"), "{message}");
}
