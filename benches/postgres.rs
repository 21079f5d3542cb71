//! The PostgreSQL backends (lease table and advisory locks) next to raw sqlx
//! `pg_try_advisory_lock` + `pg_advisory_unlock`, a raw `UPDATE`, `SELECT 1` and sqlx's
//! `PgAdvisoryLock`, every scenario of `fencelock-bench` in one run.
//!
//! Runs against `FENCELOCK_PG_URL` (default `postgres://postgres@127.0.0.1:5432/test`) in a
//! throwaway schema per backend.

use fencelock_bench::{PgLockKind, Suite};
use fencelock_testkit::postgres::PgSchema;

async fn setup(kind: PgLockKind) -> fencelock_bench::Result<(Suite, PgSchema)> {
    let schema = PgSchema::create().await;
    let suite = Suite::postgres(schema.url(), Some(schema.name()), kind).await?;
    Ok((suite, schema))
}

fencelock_bench::define_bench!(
    pg_lease => setup(PgLockKind::Lease),
    pg_advisory => setup(PgLockKind::Advisory),
);
