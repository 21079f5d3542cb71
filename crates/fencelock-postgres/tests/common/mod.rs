//! Shared set-up: every test gets a throwaway schema on the server at `FENCELOCK_PG_URL`.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_conformance::Setup;
use fencelock_postgres::{PgConfig, PgDatabase};
use fencelock_testkit::postgres::{PgSchema, pg_addr, pg_options};
use fencelock_testkit::proxy::FaultProxy;

/// Per-call time-out in tests: short, so outages surface quickly.
pub const OP_TIMEOUT: Duration = Duration::from_secs(2);

/// A database in a fresh schema, connected directly.
pub async fn database() -> (PgSchema, PgDatabase) {
    let schema = PgSchema::create().await;
    let db = PgConfig::from_options(pg_options())
        .schema(schema.name())
        .operation_timeout(OP_TIMEOUT)
        .connect()
        .await
        .expect("connecting to the test schema");
    (schema, db)
}

/// A database in a fresh schema, reached through a fault proxy.
pub async fn proxied_database() -> (PgSchema, Arc<FaultProxy>, PgDatabase) {
    let schema = PgSchema::create().await;
    let proxy = Arc::new(
        FaultProxy::start(pg_addr())
            .await
            .expect("starting the proxy"),
    );
    let db = PgConfig::from_options(pg_options().host("127.0.0.1").port(proxy.port()))
        .schema(schema.name())
        .operation_timeout(OP_TIMEOUT)
        .connect()
        .await
        .expect("connecting to the test schema through the proxy");
    (schema, proxy, db)
}

fn setup(
    schema: PgSchema,
    proxy: Arc<FaultProxy>,
    db: &PgDatabase,
    backend: Arc<dyn fencelock_core::LockBackend>,
) -> Setup {
    let outage_proxy = proxy.clone();
    Setup::new(
        backend,
        Arc::new(db.storage()),
        Box::new(move || {
            let proxy = outage_proxy.clone();
            Box::pin(async move { proxy.set_blackhole(true) })
        }),
    )
    .keep(proxy)
    .keep(schema)
}

/// The lease-table backend behind a fault proxy, in a fresh schema.
pub async fn lease_setup() -> Setup {
    let (schema, proxy, db) = proxied_database().await;
    let backend = Arc::new(db.lease_backend());
    setup(schema, proxy, &db, backend)
}

/// The advisory-lock backend behind a fault proxy, in a fresh schema.
pub async fn advisory_setup() -> Setup {
    let (schema, proxy, db) = proxied_database().await;
    let backend = Arc::new(db.advisory_backend());
    setup(schema, proxy, &db, backend)
}
