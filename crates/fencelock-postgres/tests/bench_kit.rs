//! The benchmark kit against the server at `FENCELOCK_PG_URL`: directly (prepared statements,
//! sqlx's `PgAdvisoryLock` as a peer) and through PgBouncer in transaction mode (simple
//! queries, no peer). Each piece runs once, and the cleanup leaves none of the run's rows.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::bouncer::{bouncer, url};
use fencelock_core::tools::{BenchKit, Peer};
use fencelock_core::{BackendConfig, LockKey};
use fencelock_postgres::PgConfig;
use fencelock_testkit::postgres::PgSchema;

const WAIT: Duration = Duration::from_secs(5);

/// Runs every part of `kit` once on keys under `prefix`, then the cleanup; the run's rows
/// are gone afterwards.
async fn exercise(kit: BenchKit, schema: &PgSchema, prefix: &str) {
    let key = LockKey::new(format!("{prefix}/lock")).unwrap();
    let fenced = kit
        .fenced
        .backend
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the key is free");
    kit.fenced.backend.release(&fenced).await.unwrap();

    let baseline = &kit.baseline;
    baseline.acquire_release(&key).await.unwrap();
    baseline.lock_release(&key, WAIT).await.unwrap();
    baseline.round_trip().await.unwrap();
    let writer = baseline
        .writer(&LockKey::new(format!("{prefix}/data")).unwrap())
        .await
        .unwrap();
    writer.once().await.unwrap();
    writer.finish().await.unwrap();
    for peer in &kit.peers {
        let Peer::Raw(peer) = peer else {
            panic!("Postgres has raw peers only");
        };
        peer.acquire_release(&key).await.unwrap();
        peer.lock_release(&key, WAIT).await.unwrap();
    }

    let counters = format!(
        "SELECT count(*) FROM {}.fencelock_counters WHERE starts_with(key, $1)",
        schema.name()
    );
    let before: i64 = sqlx::query_scalar(&counters)
        .bind(prefix)
        .fetch_one(schema.admin())
        .await
        .unwrap();
    assert!(before >= 1, "the fenced lock left no token counter");
    kit.cleanup
        .expect("Postgres keeps rows: the kit cleans up")
        .clean(prefix)
        .await
        .unwrap();
    let after: i64 = sqlx::query_scalar(&counters)
        .bind(prefix)
        .fetch_one(schema.admin())
        .await
        .unwrap();
    assert_eq!(after, 0, "the cleanup left the run's counters");
    baseline.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_direct_kit_has_the_raw_baseline_and_the_sqlx_peer() {
    let schema = PgSchema::create().await;
    let config = PgConfig::from_url(&format!("{}?schema={}", schema.url(), schema.name())).unwrap();
    let kit = config
        .bench_kit()
        .await
        .unwrap()
        .expect("Postgres has a kit");
    assert_eq!(kit.name, "pg-lease");
    assert_eq!(
        kit.baseline.label(),
        "raw sqlx pg_try_advisory_lock + unlock"
    );
    assert_eq!(kit.baseline.round_trip_label(), "raw SELECT 1");
    assert_eq!(kit.baseline.write_label(), "raw UPDATE");
    let labels: Vec<String> = kit
        .peers
        .iter()
        .map(|peer| match peer {
            Peer::Raw(peer) => peer.label(),
            _ => panic!("Postgres has raw peers only"),
        })
        .collect();
    assert_eq!(labels, ["sqlx PgAdvisoryLock"]);
    exercise(kit, &schema, "kit-direct").await;
    schema.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_a_transaction_pooler_the_kit_speaks_simple_queries() {
    let bouncer = bouncer(fencelock_testkit::pgbouncer::DEFAULT_POOL_SIZE).await;
    let schema = PgSchema::create().await;
    // Left to detection, as `fencelock bench` is by default.
    let config = PgConfig::from_url(&url(&bouncer, &format!("schema={}", schema.name()))).unwrap();
    let kit = config
        .bench_kit()
        .await
        .unwrap_or_else(|e| panic!("through PgBouncer: {e}{}", bouncer.log_tail()))
        .expect("Postgres has a kit");
    assert_eq!(
        kit.baseline.label(),
        "raw BEGIN; pg_try_advisory_xact_lock; COMMIT (simple query)"
    );
    assert_eq!(
        kit.baseline.round_trip_label(),
        "raw SELECT 1 (simple query)"
    );
    assert!(
        kit.peers.is_empty(),
        "no session-advisory peer behind a pooler"
    );
    exercise(kit, &schema, "kit-pooler").await;
    schema.cleanup().await;
}
