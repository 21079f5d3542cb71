//! fencelock's schema as DESIGN 8.1 deploys it: owned and migrated by a role that is no
//! superuser, used by an application role granted the recipe there (USAGE, SELECT on every
//! table, DML on the queue and holder tables alone, USAGE on the queues' sequences), which therefore cannot write a counter, a
//! fence, the storage, an epoch or the mechanism except through fencelock's functions.

use std::sync::Arc;

use fencelock_conformance::Setup;
use fencelock_postgres::{PgConfig, PgDatabase};
use fencelock_testkit::postgres::{PgSchema, pg_options};
use sqlx::Executor;
use sqlx::postgres::PgConnectOptions;

use super::own_tables::{AdmitStorage, RowGuardStorage};

/// The tables an application role writes itself (DESIGN 8.1's recipe): the leases, holders,
/// readers and places. Everything else of the schema it may only read.
pub const APP_WRITES: [&str; 7] = [
    "fencelock_leases",
    "fencelock_lease_places",
    "fencelock_lease_readers",
    "fencelock_advisory_holders",
    "fencelock_advisory_places",
    "fencelock_advisory_readers",
    "fencelock_advisory_phases",
];

/// DESIGN 8.1's application recipe for `role` on `schema`, as one batch.
pub fn app_recipe(schema: &str, role: &str) -> String {
    let writes = APP_WRITES
        .iter()
        .map(|table| format!("{schema}.{table}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "GRANT USAGE ON SCHEMA {schema} TO {role}; \
         GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}; \
         GRANT INSERT, UPDATE, DELETE ON {writes} TO {role}; \
         GRANT USAGE ON ALL SEQUENCES IN SCHEMA {schema} TO {role}"
    )
}

/// A fresh schema handed to a new owner role (no superuser), which migrates it, and an
/// application role granted [`app_recipe`].
pub struct Closed {
    /// fencelock's schema.
    pub schema: PgSchema,
    /// The schema's owner, which migrated it.
    pub owner: String,
    /// The application role.
    pub app: String,
}

impl Closed {
    /// Connect options of the application role.
    pub fn app_options(&self) -> PgConnectOptions {
        pg_options().username(&self.app)
    }

    /// Connect options of the owner.
    pub fn owner_options(&self) -> PgConnectOptions {
        pg_options().username(&self.owner)
    }
}

/// A [`Closed`] schema, migrated.
pub async fn closed() -> Closed {
    let schema = PgSchema::create().await;
    let name = schema.name().to_owned();
    let owner = schema.role("owner").await;
    schema
        .admin()
        .execute(format!("ALTER SCHEMA {name} OWNER TO {owner}").as_str())
        .await
        .unwrap();
    PgConfig::from_options(pg_options().username(&owner))
        .schema(&name)
        .connect()
        .await
        .expect("the owner migrates its schema")
        .close()
        .await;
    let app = schema.role("app").await;
    schema
        .admin()
        .execute(app_recipe(&name, &app).as_str())
        .await
        .unwrap();
    Closed { schema, owner, app }
}

/// A backend of a [`Closed`] schema, as the application role, behind a fault proxy.
async fn app_setup(pick: super::Pick) -> Setup {
    let closed = closed().await;
    let options = closed.app_options();
    let (proxy, db) = super::proxied_connect(&closed.schema, options.clone()).await;
    // advance_token is the operator's: the owner takes it.
    let owner = PgConfig::from_options(closed.owner_options())
        .schema(closed.schema.name())
        .operation_timeout(super::OP_TIMEOUT)
        .connect()
        .await
        .expect("the owner connects");
    super::setup_on(options, closed.schema, proxy, &db, pick).with_operator(pick(&owner))
}

/// The lease backend as the application role.
pub async fn lease_setup() -> Setup {
    app_setup(|db| Arc::new(db.lease_backend())).await
}

/// The advisory backend as the application role.
pub async fn advisory_setup() -> Setup {
    app_setup(|db| Arc::new(db.advisory_backend())).await
}

/// The application's own schema, where the application role creates and writes its tables,
/// and fencelock on its pool in a [`Closed`] schema.
async fn app_split() -> (PgSchema, Closed, sqlx::PgPool, PgDatabase) {
    let closed = closed().await;
    let data = PgSchema::create().await;
    data.admin()
        .execute(
            format!(
                "GRANT USAGE, CREATE ON SCHEMA {} TO {}",
                data.name(),
                closed.app
            )
            .as_str(),
        )
        .await
        .unwrap();
    let pool = super::app_pool_on(closed.app_options(), data.name());
    let db =
        PgDatabase::from_pool(pool.clone(), closed.schema.name()).expect("a valid schema name");
    (data, closed, pool, db)
}

/// `fencelock_admit` in the application role's transactions.
pub async fn admit_setup() -> Setup {
    let (data, closed, pool, db) = app_split().await;
    let storage = AdmitStorage::create(pool, db.fence()).await;
    Setup::for_storage(Arc::new(db.lease_backend()), Arc::new(storage))
        .keep(data)
        .keep(closed.schema)
}

/// The row guard on the application role's own table.
pub async fn row_guard_setup() -> Setup {
    let (data, closed, pool, db) = app_split().await;
    let storage = RowGuardStorage::create(pool, &db.fence()).await;
    Setup::for_storage(Arc::new(db.lease_backend()), Arc::new(storage))
        .keep(data)
        .keep(closed.schema)
}
