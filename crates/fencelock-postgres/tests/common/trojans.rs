//! Trojan operators and functions (`trojans.sql`) in schema `fl_trojans`, and fencelock's
//! backends and fences on connections that have it on their `search_path`, as `public` is on
//! every default path: whatever fencelock runs that resolves an operator or function there
//! instead of in pg_catalog or fencelock's schema counts itself, and
//! [`assert_none_fired`] fails.

use std::sync::Arc;

use fencelock_conformance::Setup;
use fencelock_testkit::postgres::pg_options;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{Executor, PgPool};
use tokio::sync::OnceCell;

use super::own_tables::{AdmitStorage, RowGuardStorage};

/// The planted schema, last on the path: exact matches win there all the same.
pub const PATH: &str = "public,fl_trojans";

static PLANTED: OnceCell<()> = OnceCell::const_new();

async fn admin() -> PgPool {
    PgPoolOptions::new()
        .max_connections(1)
        .connect_with(pg_options())
        .await
        .expect("connecting to the test server")
}

/// Plants the trojans, once per test process (afresh: a count left by an earlier run is not
/// this run's).
pub async fn plant() {
    PLANTED
        .get_or_init(|| async {
            let admin = admin().await;
            let mut tx = admin.begin().await.unwrap();
            tx.execute("SELECT pg_advisory_xact_lock(hashtext('fencelock trojans'))")
                .await
                .unwrap();
            tx.execute("DROP SCHEMA IF EXISTS fl_trojans CASCADE")
                .await
                .unwrap();
            tx.execute(sqlx::raw_sql(include_str!("trojans.sql")))
                .await
                .expect("planting the trojans");
            tx.commit().await.unwrap();
            admin.close().await;
        })
        .await;
}

/// Connect options whose sessions have the trojans on their path.
pub async fn options() -> PgConnectOptions {
    plant().await;
    pg_options().options([("search_path", PATH)])
}

/// Fails, naming what ran and in which statement, if any trojan ever fired.
pub async fn assert_none_fired() {
    let admin = admin().await;
    let (called,): (bool,) = sqlx::query_as("SELECT is_called FROM fl_trojans.hits")
        .fetch_one(&admin)
        .await
        .unwrap();
    let fired: Vec<(String, String)> =
        sqlx::query_as("SELECT what, query FROM fl_trojans.fired LIMIT 5")
            .fetch_all(&admin)
            .await
            .unwrap();
    admin.close().await;
    assert!(
        !called && fired.is_empty(),
        "a trojan on the caller's search_path ran instead of pg_catalog's: {fired:#?}"
    );
}

/// The lease backend with the trojans on its connections' path.
pub async fn lease_setup() -> Setup {
    let options = options().await;
    let (schema, proxy, db) = super::proxied_database_on(options.clone()).await;
    super::setup_on(options, schema, proxy, &db, |db| {
        Arc::new(db.lease_backend())
    })
}

/// The advisory backend with the trojans on its connections' path.
pub async fn advisory_setup() -> Setup {
    let options = options().await;
    let (schema, proxy, db) = super::proxied_database_on(options.clone()).await;
    super::setup_on(options, schema, proxy, &db, |db| {
        Arc::new(db.advisory_backend())
    })
}

/// `fencelock_admit` in the application's transactions, the trojans on the application's path.
pub async fn admit_setup() -> Setup {
    let s = super::split_on(options().await, &format!(",{PATH}")).await;
    let storage = AdmitStorage::create(s.pool.clone(), s.db.fence()).await;
    Setup::for_storage(Arc::new(s.db.lease_backend()), Arc::new(storage))
        .keep(s.app)
        .keep(s.locks)
}

/// The row guard on the application's table, the trojans on the application's path.
pub async fn row_guard_setup() -> Setup {
    let s = super::split_on(options().await, &format!(",{PATH}")).await;
    let storage = RowGuardStorage::create(s.pool.clone(), &s.db.fence()).await;
    Setup::for_storage(Arc::new(s.db.lease_backend()), Arc::new(storage))
        .keep(s.app)
        .keep(s.locks)
}
