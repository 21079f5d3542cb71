//! What `fencelock bench` measures on PostgreSQL: the fenced lock (either backend) against
//! raw sqlx on a pool of its own to the same database, and sqlx's own `PgAdvisoryLock`;
//! through a transaction-mode pooler, against the raw statements that are correct there.
//!
//! [`BackendConfig::bench_kit`](fencelock_core::BackendConfig::bench_kit) of a [`PgConfig`]
//! assembles the kit:
//!
//! - on a direct connection, the baseline is [`PgBaseline`] (`pg_try_advisory_lock` +
//!   `pg_advisory_unlock` on one pooled connection, `UPDATE` of a plain table, `SELECT 1`)
//!   and the peer is [`SqlxAdvisoryLockPeer`];
//! - through a transaction-mode pooler (`?pooler=transaction`, or one detected: see
//!   [`PgPooler`](crate::PgPooler)) every raw statement is one simple-protocol query with its
//!   values written in as hex and number literals (no prepared statements, which such a
//!   pooler loses between transactions), and the try-lock is a transaction-scoped
//!   `pg_try_advisory_xact_lock`, held from `BEGIN` to `COMMIT` on one connection. A session
//!   advisory lock would stay on whatever server connection the pooler lent, so there is no
//!   peer. Only the lease backend works there; the advisory backend refuses to connect.
//!
//! Either way the cleanup deletes fencelock's rows for a run's keys in the config's schema.

mod cleanup;
mod direct;
mod pooler;

use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use fencelock_core::tools::{BenchKit, Peer};
use fencelock_core::{Connected, Error, Result};
use sqlx::Executor;
use sqlx::postgres::{PgPool, PgPoolOptions};

use crate::statements::quote_ident;
use crate::{PgConfig, map_sqlx_error};

pub use direct::{PgBaseline, SqlxAdvisoryLockPeer};

use cleanup::PgCleanup;
use pooler::PgPoolerBaseline;

/// The kit of [`BackendConfig::bench_kit`](fencelock_core::BackendConfig::bench_kit): fencelock
/// connected first (which creates the schema the baselines' plain table goes in), then the
/// baseline that fits the connection.
pub(crate) async fn bench_kit(config: &PgConfig) -> Result<BenchKit> {
    let db = config.clone().connect().await?;
    let behind_pooler = db.behind_transaction_pooler().await?;
    let backend = db.backend();
    let name = backend.name();
    let fenced = Connected {
        backend,
        storage: Arc::new(db.storage()),
    };
    let kit = if behind_pooler {
        let baseline = PgPoolerBaseline::connect(config).await?;
        let cleanup = PgCleanup::new(baseline.pool().clone(), db.schema(), true);
        BenchKit::new(name, fenced, Arc::new(baseline)).cleanup(Arc::new(cleanup))
    } else {
        let baseline = PgBaseline::connect(config).await?;
        let peer = SqlxAdvisoryLockPeer::new(baseline.pool().clone());
        let cleanup = PgCleanup::new(baseline.pool().clone(), db.schema(), false);
        BenchKit::new(name, fenced, Arc::new(baseline))
            .peer(Peer::Raw(Arc::new(peer)))
            .cleanup(Arc::new(cleanup))
    };
    Ok(kit)
}

/// Maps a driver error of the raw operation `what`, as the backend maps its own.
fn raw(what: &str) -> impl Fn(sqlx::Error) -> Error + '_ {
    move |e| map_sqlx_error("postgres", e).in_context(what)
}

/// A pool of 10 connections to the database `config` names, and a new plain table (resource,
/// value) in its schema, created with one simple-protocol statement.
async fn connect_with_plain_table(config: &PgConfig) -> Result<(PgPool, String)> {
    let pool = crate::database::tested_after_idle(PgPoolOptions::new().max_connections(10))
        .connect_with(config.connect_options().clone())
        .await
        .map_err(raw(&format!("connect to {config}")))?;
    let table = format!(
        "{}.fencelock_bench_plain_{:08x}",
        quote_ident(config.schema_name()),
        random_u32()
    );
    pool.execute(format!("CREATE TABLE {table} (resource text PRIMARY KEY, value bytea)").as_str())
        .await
        .map_err(raw("create the plain table"))?;
    Ok((pool, table))
}

/// Drops the plain table (one simple-protocol statement) and closes the pool.
async fn drop_plain_table(pool: &PgPool, table: &str) -> Result<()> {
    pool.execute(format!("DROP TABLE IF EXISTS {table}").as_str())
        .await
        .map_err(raw("drop the plain table"))?;
    pool.close().await;
    Ok(())
}

/// A random table suffix, so that runs side by side get tables of their own: std's hasher
/// keys are random per process and differ from one `RandomState` to the next.
fn random_u32() -> u32 {
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    // Truncation is the point: any 32 bits of the hash will do.
    hasher.finish() as u32
}
