//! Shared set-up: every test gets a throwaway schema on the server at `FENCELOCK_PG_URL`.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

pub mod bouncer;
pub mod own_tables;
pub mod queue;
pub mod roles;
pub mod trojans;

use std::sync::Arc;
use std::time::Duration;

use fencelock_conformance::Setup;
use fencelock_postgres::{PgConfig, PgDatabase};
use fencelock_testkit::postgres::{PgSchema, pg_addr, pg_options};
use fencelock_testkit::proxy::FaultProxy;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

/// Per-call time-out in tests: short, so outages surface quickly.
pub const OP_TIMEOUT: Duration = Duration::from_secs(2);

/// The application's own pool, as an application would configure it: its tables live in
/// `app_schema`, which its connections have as `search_path` (the application's choice, made
/// in its own connect options; fencelock sets nothing on a connection).
pub fn app_pool(app_schema: &str) -> PgPool {
    app_pool_on(pg_options(), app_schema)
}

/// [`app_pool`] on the server `options` name, with `search_path` `path`.
pub fn app_pool_on(options: sqlx::postgres::PgConnectOptions, path: &str) -> PgPool {
    PgPoolOptions::new()
        .max_connections(10)
        .acquire_timeout(OP_TIMEOUT)
        .connect_lazy_with(
            options
                .application_name("fencelock-test-app")
                .options([("search_path", path)]),
        )
}

/// fencelock on the application's pool, its tables in the same fresh schema as the
/// application's (unqualified names in the tests' SQL mean that schema), migrated explicitly.
pub async fn database() -> (PgSchema, PgDatabase) {
    let schema = PgSchema::create().await;
    let db =
        PgDatabase::from_pool(app_pool(schema.name()), schema.name()).expect("a valid schema name");
    db.migrate().await.expect("migrating the test schema");
    (schema, db)
}

/// The application's tables in one fresh schema (its pool's `search_path`) and fencelock's in
/// another, connected through fencelock's own pool: unqualified names in the application's
/// SQL can only mean the application's tables.
pub struct Split {
    /// The application's schema and pool.
    pub app: PgSchema,
    /// The application's pool.
    pub pool: PgPool,
    /// fencelock's schema.
    pub locks: PgSchema,
    /// fencelock on the application's pool, in `locks`.
    pub db: PgDatabase,
}

/// A [`Split`]: fencelock adopts the application's pool, its tables in a schema of their own.
pub async fn split() -> Split {
    split_on(pg_options(), "").await
}

/// [`split`] on the server `options` name, with `path_tail` after the application's schema on
/// its connections' `search_path` (`",public"`).
pub async fn split_on(options: sqlx::postgres::PgConnectOptions, path_tail: &str) -> Split {
    let app = PgSchema::create().await;
    let locks = PgSchema::create().await;
    let pool = app_pool_on(options, &format!("{}{path_tail}", app.name()));
    let db = PgDatabase::from_pool(pool.clone(), locks.name()).expect("a valid schema name");
    db.migrate().await.expect("migrating fencelock's schema");
    Split {
        app,
        pool,
        locks,
        db,
    }
}

/// A database in a fresh schema, reached through a fault proxy.
pub async fn proxied_database() -> (PgSchema, Arc<FaultProxy>, PgDatabase) {
    proxied_database_on(pg_options()).await
}

/// [`proxied_database`] with fencelock's connections made from `options` (their startup
/// options, a `search_path` say, kept).
pub async fn proxied_database_on(
    options: sqlx::postgres::PgConnectOptions,
) -> (PgSchema, Arc<FaultProxy>, PgDatabase) {
    let schema = PgSchema::create().await;
    let (proxy, db) = proxied_connect(&schema, options).await;
    (schema, proxy, db)
}

/// fencelock on `schema`, its connections made from `options` and reached through a fault
/// proxy.
pub async fn proxied_connect(
    schema: &PgSchema,
    options: sqlx::postgres::PgConnectOptions,
) -> (Arc<FaultProxy>, PgDatabase) {
    let proxy = Arc::new(
        FaultProxy::start(pg_addr())
            .await
            .expect("starting the proxy"),
    );
    let db = PgConfig::from_options(options.host("127.0.0.1").port(proxy.port()))
        .schema(schema.name())
        .operation_timeout(OP_TIMEOUT)
        .connect()
        .await
        .expect("connecting to the test schema through the proxy");
    (proxy, db)
}

/// Picks the backend under test out of a connected database.
pub type Pick = fn(&PgDatabase) -> Arc<dyn fencelock_core::LockBackend>;

fn setup(schema: PgSchema, proxy: Arc<FaultProxy>, db: &PgDatabase, pick: Pick) -> Setup {
    setup_on(pg_options(), schema, proxy, db, pick)
}

/// [`setup`], reopened with connections made from `options`.
pub fn setup_on(
    options: sqlx::postgres::PgConnectOptions,
    schema: PgSchema,
    proxy: Arc<FaultProxy>,
    db: &PgDatabase,
    pick: Pick,
) -> Setup {
    let outage_proxy = proxy.clone();
    let name = schema.name().to_owned();
    Setup::new(
        pick(db),
        Arc::new(db.storage()),
        Box::new(move || {
            let proxy = outage_proxy.clone();
            Box::pin(async move { proxy.set_blackhole(true) })
        }),
    )
    // Reopened as a new process would: a database of its own on the same schema, reached
    // directly (the proxy may be black-holed by then).
    .with_reopen(Box::new(move || {
        let (name, options) = (name.clone(), options.clone());
        Box::pin(async move {
            let db = PgConfig::from_options(options)
                .schema(&name)
                .operation_timeout(OP_TIMEOUT)
                .connect()
                .await
                .expect("reopening the test schema");
            pick(&db)
        })
    }))
    .keep(proxy)
    .keep(schema)
}

/// The lease-table backend behind a fault proxy, in a fresh schema.
pub async fn lease_setup() -> Setup {
    let (schema, proxy, db) = proxied_database().await;
    setup(schema, proxy, &db, |db| Arc::new(db.lease_backend()))
}

/// The advisory-lock backend behind a fault proxy, in a fresh schema.
pub async fn advisory_setup() -> Setup {
    let (schema, proxy, db) = proxied_database().await;
    setup(schema, proxy, &db, |db| Arc::new(db.advisory_backend()))
}

/// The storage properties on the application's own table fenced by `fencelock_admit`, tokens
/// from the lease backend.
pub async fn admit_setup() -> Setup {
    let s = split().await;
    let storage = own_tables::AdmitStorage::create(s.pool.clone(), s.db.fence()).await;
    Setup::for_storage(Arc::new(s.db.lease_backend()), Arc::new(storage))
        .keep(s.app)
        .keep(s.locks)
}

/// The storage properties on the application's own table under the row guard, tokens from
/// the lease backend.
pub async fn row_guard_setup() -> Setup {
    let s = split().await;
    let storage = own_tables::RowGuardStorage::create(s.pool.clone(), &s.db.fence()).await;
    Setup::for_storage(Arc::new(s.db.lease_backend()), Arc::new(storage))
        .keep(s.app)
        .keep(s.locks)
}

/// Empties `tables` (fencelock's UNLOGGED tables, unqualified) of `schema`, as crash recovery,
/// a promotion or a restore does. The transaction says it forgets counters on purpose: the
/// counters' guard (migration 20) refuses any other delete.
pub async fn lose_volatile_state(pool: &PgPool, schema: &str, tables: &[&str]) {
    let list: Vec<String> = tables.iter().map(|t| format!("\"{schema}\".{t}")).collect();
    let sql = format!(
        "BEGIN; SET LOCAL fencelock.forget_counters = on; TRUNCATE {}; COMMIT",
        list.join(", ")
    );
    sqlx::raw_sql(&sql)
        .execute(pool)
        .await
        .expect("emptying the volatile tables");
}
