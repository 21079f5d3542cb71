//! PostgreSQL, both lock backends, against raw sqlx on the same database and sqlx's own
//! `PgAdvisoryLock`.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{FencedStorage, LockKey};
use fencelock_postgres::{PgConfig, advisory_lock_id};
use sqlx::postgres::{PgAdvisoryLock, PgPool, PgPoolOptions};
use sqlx::{Either, Executor};

use crate::error::{BenchError, Result};
use crate::fenced_subject::FencedSubject;
use crate::subject::{Baseline, Cleanup, Op, RawTryLock};
use crate::suite::Suite;

impl Suite {
    /// The PostgreSQL database `config` names, with the lock backend it chose
    /// ([`PgConfig::backend_kind`], `?backend=lease|advisory`) and fencelock's tables in its
    /// schema ([`PgConfig::schema_name`], `?schema=`), against raw sqlx statements on a pool
    /// of its own to the same database, and sqlx's `PgAdvisoryLock`.
    pub async fn postgres(config: &PgConfig) -> Result<Self> {
        let db = config.clone().connect().await?;
        let backend = db.backend();
        let storage: Arc<dyn FencedStorage> = Arc::new(db.storage());
        let name = backend.name();
        let baseline = PgBaseline::connect(config).await?;
        let peer = SqlxAdvisoryLockPeer::new(baseline.pool().clone());
        let cleanup = PgCleanup {
            pool: baseline.pool().clone(),
            delete: PG_CLEANUP.replace("{schema}", &quote_ident(db.schema())),
        };
        Ok(Suite::new(
            name,
            FencedSubject::new(backend, storage),
            Arc::new(baseline),
            vec![Arc::new(peer)],
        )
        .with_cleanup(Arc::new(cleanup)))
    }
}

/// Deletes fencelock's rows for a run's keys (`sql/pg_cleanup.sql`, with the schema filled in).
const PG_CLEANUP: &str = include_str!("../../sql/pg_cleanup.sql");

/// `name` as a quoted SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Deletes fencelock's rows for a run's keys in one schema: leases, advisory holders, stored
/// values, token counters.
#[derive(Debug)]
struct PgCleanup {
    pool: PgPool,
    delete: String,
}

#[async_trait]
impl Cleanup for PgCleanup {
    async fn clean(&self, key_prefix: &str) -> Result<()> {
        sqlx::query(&self.delete)
            .bind(key_prefix)
            .execute(&self.pool)
            .await
            .map_err(|e| BenchError::raw("delete the run's rows", e))?;
        Ok(())
    }
}

/// Raw sqlx on a pool of its own: `pg_try_advisory_lock` + `pg_advisory_unlock` on one
/// pooled connection, `UPDATE` of a plain table, `SELECT 1`.
#[derive(Debug, Clone)]
pub struct PgBaseline {
    pool: PgPool,
    table: String,
}

impl PgBaseline {
    /// Connects to the database `config` names, on a pool of its own, and creates the plain
    /// table of the write baseline in the config's schema (removed by [`Baseline::close`]).
    /// The schema must exist: [`Suite::postgres`] connects fencelock first, which creates it.
    pub async fn connect(config: &PgConfig) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .connect_with(config.connect_options().clone())
            .await
            .map_err(|e| BenchError::raw(format!("connect to {config}"), e))?;
        let table = format!(
            "{}.fencelock_bench_plain_{:08x}",
            quote_ident(config.schema_name()),
            rand::random::<u32>()
        );
        pool.execute(
            format!("CREATE TABLE {table} (resource text PRIMARY KEY, value bytea)").as_str(),
        )
        .await
        .map_err(|e| BenchError::raw("create the plain table", e))?;
        Ok(PgBaseline { pool, table })
    }

    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }
}

#[async_trait]
impl RawTryLock for PgBaseline {
    const LABEL: &'static str = "raw sqlx pg_try_advisory_lock + unlock";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        let id = advisory_lock_id(key);
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| BenchError::raw("pool", e))?;
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(id)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| BenchError::raw("pg_try_advisory_lock", e))?;
        if !got {
            return Ok(false);
        }
        let _: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
            .bind(id)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| BenchError::raw("pg_advisory_unlock", e))?;
        Ok(true)
    }
}

#[async_trait]
impl Baseline for PgBaseline {
    fn round_trip_label(&self) -> String {
        "raw SELECT 1".into()
    }

    fn write_label(&self) -> String {
        "raw UPDATE".into()
    }

    async fn round_trip(&self) -> Result<()> {
        let _: i32 = sqlx::query_scalar("SELECT 1")
            .fetch_one(&self.pool)
            .await
            .map_err(|e| BenchError::raw("SELECT 1", e))?;
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        sqlx::query(&format!(
            "INSERT INTO {} VALUES ($1, NULL) ON CONFLICT DO NOTHING",
            self.table
        ))
        .bind(resource.as_str())
        .execute(&self.pool)
        .await
        .map_err(|e| BenchError::raw("insert the plain row", e))?;
        Ok(Box::new(PgWriter {
            pool: self.pool.clone(),
            update: format!("UPDATE {} SET value = $2 WHERE resource = $1", self.table),
            resource: resource.as_str().to_owned(),
            value: vec![7; 64],
        }))
    }

    async fn close(&self) -> Result<()> {
        self.pool
            .execute(format!("DROP TABLE IF EXISTS {}", self.table).as_str())
            .await
            .map_err(|e| BenchError::raw("drop the plain table", e))?;
        self.pool.close().await;
        Ok(())
    }
}

struct PgWriter {
    pool: PgPool,
    update: String,
    resource: String,
    value: Vec<u8>,
}

#[async_trait]
impl Op for PgWriter {
    async fn once(&self) -> Result<Option<Duration>> {
        sqlx::query(&self.update)
            .bind(&self.resource)
            .bind(&self.value[..])
            .execute(&self.pool)
            .await
            .map_err(|e| BenchError::raw("UPDATE", e))?;
        Ok(None)
    }
}

/// sqlx's own `PgAdvisoryLock` (a peer), on a pooled connection.
#[derive(Debug, Clone)]
pub struct SqlxAdvisoryLockPeer {
    pool: PgPool,
}

impl SqlxAdvisoryLockPeer {
    /// The peer on `pool`.
    pub fn new(pool: PgPool) -> Self {
        SqlxAdvisoryLockPeer { pool }
    }
}

#[async_trait]
impl RawTryLock for SqlxAdvisoryLockPeer {
    const LABEL: &'static str = "sqlx PgAdvisoryLock";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        let lock = PgAdvisoryLock::new(key.as_str());
        let conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| BenchError::raw("pool", e))?;
        match lock
            .try_acquire(conn)
            .await
            .map_err(|e| BenchError::raw("PgAdvisoryLock::try_acquire", e))?
        {
            Either::Left(guard) => {
                guard
                    .release_now()
                    .await
                    .map_err(|e| BenchError::raw("PgAdvisoryLock release", e))?;
                Ok(true)
            }
            Either::Right(_) => Ok(false),
        }
    }
}
