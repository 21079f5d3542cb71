//! The raw baseline on a direct connection, and sqlx's own `PgAdvisoryLock` as a peer.

use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::tools::{Baseline, Op, RawTryLock};
use fencelock_core::{LockKey, Result};
use sqlx::Either;
use sqlx::postgres::{PgAdvisoryLock, PgPool};

use super::{connect_with_plain_table, drop_plain_table, raw};
use crate::{PgConfig, advisory_lock_id};

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
    /// The schema must exist:
    /// [`BackendConfig::bench_kit`](fencelock_core::BackendConfig::bench_kit) connects
    /// fencelock first, which creates it.
    pub async fn connect(config: &PgConfig) -> Result<Self> {
        let (pool, table) = connect_with_plain_table(config).await?;
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
        let mut conn = self.pool.acquire().await.map_err(raw("pool"))?;
        let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
            .bind(id)
            .fetch_one(&mut *conn)
            .await
            .map_err(raw("pg_try_advisory_lock"))?;
        if !got {
            return Ok(false);
        }
        let _: bool = sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
            .bind(id)
            .fetch_one(&mut *conn)
            .await
            .map_err(raw("pg_advisory_unlock"))?;
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
            .map_err(raw("SELECT 1"))?;
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
        .map_err(raw("insert the plain row"))?;
        Ok(Box::new(PgWriter {
            pool: self.pool.clone(),
            update: format!("UPDATE {} SET value = $2 WHERE resource = $1", self.table),
            resource: resource.as_str().to_owned(),
            value: vec![7; 64],
        }))
    }

    async fn close(&self) -> Result<()> {
        drop_plain_table(&self.pool, &self.table).await
    }
}

/// The plain `UPDATE`, prepared.
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
            .map_err(raw("UPDATE"))?;
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
        let conn = self.pool.acquire().await.map_err(raw("pool"))?;
        match lock
            .try_acquire(conn)
            .await
            .map_err(raw("PgAdvisoryLock::try_acquire"))?
        {
            Either::Left(guard) => {
                guard
                    .release_now()
                    .await
                    .map_err(raw("PgAdvisoryLock release"))?;
                Ok(true)
            }
            Either::Right(_) => Ok(false),
        }
    }
}
