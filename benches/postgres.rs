//! The PostgreSQL backends (lease table and advisory locks) next to raw sqlx
//! `pg_try_advisory_lock` + `pg_advisory_unlock`, a raw `UPDATE`, `SELECT 1` and sqlx's
//! `PgAdvisoryLock`, every scenario of `fencelock-bench` in one run.
//!
//! Runs against `FENCELOCK_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`) in a
//! throwaway schema per backend.

use fencelock::postgres::{PgBackendKind, PgConfig};
use fencelock_bench::Suite;
use fencelock_testkit::postgres::PgSchema;

async fn setup(kind: PgBackendKind) -> fencelock_bench::Result<(Suite, PgSchema)> {
    let schema = PgSchema::create().await;
    let config = PgConfig::from_url(schema.url())?
        .schema(schema.name())
        .with_backend_kind(kind);
    let suite = Suite::connect(&config).await?;
    Ok((suite, schema))
}

fencelock_bench::define_bench!(
    pg_lease => setup(PgBackendKind::Lease),
    pg_advisory => setup(PgBackendKind::Advisory),
);
