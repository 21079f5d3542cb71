//! The round trips of an uncontended grant and of a release (DESIGN 4.0, *Round trips*), on
//! both backends, counted at the TCP level by a proxy between the backend and the server:
//! one statement each, which is all the call waits for, and sqlx's test of a connection on
//! its way back into the pool (a bare `Sync`), which it does not wait for.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use fencelock_core::{HostPort, LockBackend, LockKey};
use fencelock_postgres::{PgBackendKind, PgConfig};
use fencelock_testkit::postgres::{PgSchema, pg_addr, pg_url};
use fencelock_testkit::proxy::{FaultProxy, uncontended_round_trips};

async fn round_trips_are(kind: PgBackendKind, grant: u64, release: u64) {
    let schema = PgSchema::create().await;
    let proxy = FaultProxy::start(pg_addr()).await.unwrap();
    let db = PgConfig::from_url(&format!("{}?schema={}", pg_url(), schema.name()))
        .unwrap()
        .with_hosts(&[HostPort::new("127.0.0.1", proxy.port())])
        .unwrap()
        // One connection each, used every few hundred milliseconds, so none sits idle for the
        // 500 ms after which a connection is tested before use (one more exchange, waited for).
        .pool_size(1)
        .holder_pool_size(1)
        .connect()
        .await
        .unwrap();
    let backend = db.lock_backend(kind);
    let key = LockKey::new("round-trips").unwrap();
    let counted = uncontended_round_trips(&proxy, &backend, &key, 5).await;
    counted.assert_each(backend.name(), grant, release);
    db.close().await;
    schema.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_lease_backend_grants_and_releases_in_one_statement_each() {
    // The statement, and the pool's test of the connection given back.
    round_trips_are(PgBackendKind::Lease, 2, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_advisory_backend_grants_and_releases_in_one_statement_each() {
    // The grant keeps its session: the statement alone. The release gives it back.
    round_trips_are(PgBackendKind::Advisory, 1, 2).await;
}
