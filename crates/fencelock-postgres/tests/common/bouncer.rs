//! fencelock through a real PgBouncer in transaction mode, in front of the test server.

use std::sync::Arc;

use fencelock_conformance::Setup;
use fencelock_postgres::{PgConfig, PgDatabase};
use fencelock_testkit::pgbouncer::PgBouncer;
use fencelock_testkit::postgres::PgSchema;

use super::OP_TIMEOUT;

/// A PgBouncer of its own (started off the runtime's threads: it waits for the port).
pub async fn bouncer(pool_size: u32) -> Arc<PgBouncer> {
    tokio::task::spawn_blocking(move || Arc::new(PgBouncer::spawn_with_pool_size(pool_size)))
        .await
        .expect("starting PgBouncer")
}

/// `url` of the bouncer with fencelock's `query` (`schema=...&pooler=...`).
pub fn url(bouncer: &PgBouncer, query: &str) -> String {
    format!("{}?{query}", bouncer.url())
}

/// fencelock connected through `bouncer`, its tables in a fresh schema, with `pooler` as the
/// URL's `?pooler=` (`transaction`, `detect`, `none`).
pub async fn database(bouncer: &PgBouncer, pooler: &str) -> (PgSchema, PgDatabase) {
    let schema = PgSchema::create().await;
    let url = url(
        bouncer,
        &format!("schema={}&pooler={pooler}", schema.name()),
    );
    let db = PgConfig::from_url(&url)
        .expect("a valid URL")
        .operation_timeout(OP_TIMEOUT)
        .connect()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "connecting through PgBouncer ({url}): {e}{}",
                bouncer.log_tail()
            )
        });
    (schema, db)
}

/// The lease backend and the storage through PgBouncer; the outage kills PgBouncer.
pub async fn lease_setup(pooler: &str) -> Setup {
    let bouncer = bouncer(fencelock_testkit::pgbouncer::DEFAULT_POOL_SIZE).await;
    let (schema, db) = database(&bouncer, pooler).await;
    let outage_bouncer = bouncer.clone();
    let reopen_url = url(
        &bouncer,
        &format!("schema={}&pooler={pooler}", schema.name()),
    );
    Setup::new(
        Arc::new(db.lease_backend()),
        Arc::new(db.storage()),
        Box::new(move || {
            let bouncer = outage_bouncer.clone();
            Box::pin(async move {
                tokio::task::spawn_blocking(move || bouncer.kill())
                    .await
                    .expect("killing PgBouncer");
            })
        }),
    )
    // Reopened as a new process would: a new database through the same PgBouncer.
    .with_reopen(Box::new(move || {
        let url = reopen_url.clone();
        Box::pin(async move {
            let db = PgConfig::from_url(&url)
                .expect("a valid URL")
                .operation_timeout(OP_TIMEOUT)
                .connect()
                .await
                .expect("reopening through PgBouncer");
            let backend: Arc<dyn fencelock_core::LockBackend> = Arc::new(db.lease_backend());
            backend
        })
    }))
    .keep(bouncer)
    .keep(schema)
}

/// The storage alone through PgBouncer, the pooler left to detection, tokens from the lease
/// backend on the same connections.
pub async fn detected_storage_setup() -> Setup {
    let bouncer = bouncer(fencelock_testkit::pgbouncer::DEFAULT_POOL_SIZE).await;
    let (schema, db) = database(&bouncer, "detect").await;
    assert!(
        db.behind_transaction_pooler().await.unwrap(),
        "PgBouncer in transaction mode was not detected"
    );
    Setup::for_storage(Arc::new(db.lease_backend()), Arc::new(db.storage()))
        .keep(bouncer)
        .keep(schema)
}
