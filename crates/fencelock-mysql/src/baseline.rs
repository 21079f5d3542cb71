//! What `fencelock bench` measures fencelock's `GET_LOCK` backend against: raw `GET_LOCK` +
//! `RELEASE_LOCK` on the same server ([`MySqlBaseline`]), and the sweep of a run's rows from
//! fencelock's tables ([`MySqlCleanup`]).

use std::time::Duration;

use fencelock_core::tools::{Baseline, Cleanup, Op, RawTryLock};
use fencelock_core::{LockKey, OwnerId, Result, async_trait};
use sqlx::Executor;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};

use crate::config::MySqlConfig;
use crate::error::{BACKEND, map_sqlx_error};
use crate::lock_name::lock_name;
use crate::schema::Statements;

/// Connections of the raw baseline's pool, as many as the PostgreSQL baseline's.
const POOL_SIZE: u32 = 10;

fn raw(what: &str, error: sqlx::Error) -> fencelock_core::Error {
    map_sqlx_error(BACKEND, error).in_context(what)
}

/// Deletes fencelock's rows for a run's keys from every table of one installation (one
/// table prefix): token counters, leases, readers, stored values, fence records.
#[derive(Debug)]
pub struct MySqlCleanup {
    pool: MySqlPool,
    deletes: Vec<String>,
}

impl MySqlCleanup {
    /// On `pool`, for the tables under `prefix` (the installation's
    /// [`MySqlDatabase::prefix`](crate::MySqlDatabase::prefix)). A prefix that
    /// [`validate_prefix`](crate::validate_prefix) refuses is [`Error::InvalidConfig`]: it is
    /// pasted into table names.
    ///
    /// [`Error::InvalidConfig`]: fencelock_core::Error::InvalidConfig
    pub fn new(pool: MySqlPool, prefix: &str) -> Result<Self> {
        let deletes = Statements::new(prefix)?.cleanup();
        Ok(MySqlCleanup { pool, deletes })
    }
}

#[async_trait]
impl Cleanup for MySqlCleanup {
    async fn clean(&self, key_prefix: &str) -> Result<()> {
        let prefix = key_prefix.as_bytes();
        for delete in &self.deletes {
            sqlx::query(delete)
                .bind(prefix.len() as u64)
                .bind(prefix)
                .execute(&self.pool)
                .await
                .map_err(|e| raw("delete the run's rows", e))?;
        }
        Ok(())
    }
}

/// Raw sqlx on a pool of its own: `GET_LOCK(name, 0)` + `RELEASE_LOCK(name)` on one pooled
/// connection (the name fencelock would give the key, [`lock_name`]), an
/// `INSERT ... ON DUPLICATE KEY UPDATE` into a plain table of its own, `SELECT 1`.
#[derive(Debug, Clone)]
pub struct MySqlBaseline {
    pool: MySqlPool,
    table: String,
}

impl MySqlBaseline {
    /// Connects to the database `config` names, on a pool of its own, and creates the plain
    /// table of the write baseline there, named after the config's table prefix (removed by
    /// [`Baseline::close`]).
    pub async fn connect(config: &MySqlConfig) -> Result<Self> {
        crate::validate_prefix(config.prefix_name())?;
        // No test on the way out, as the backend's pools skip it for a connection used again
        // within a moment: the baseline's round trips are the server's, not the pool's.
        let pool = MySqlPoolOptions::new()
            .max_connections(POOL_SIZE)
            .test_before_acquire(false)
            .connect_with(config.connect_options()?)
            .await
            .map_err(|e| raw(&format!("connect to {config}"), e))?;
        // The prefix is checked above (letters, digits, `_`, at most 32): with the 20
        // characters added the name stays within MySQL's 64.
        let table = format!(
            "{}bench_plain_{:08x}",
            config.prefix_name(),
            OwnerId::random().as_u128() as u32
        );
        pool.execute(
            format!(
                "CREATE TABLE {table} (resource VARBINARY(512) PRIMARY KEY, value LONGBLOB) \
                 ENGINE = InnoDB"
            )
            .as_str(),
        )
        .await
        .map_err(|e| raw("create the plain table", e))?;
        Ok(MySqlBaseline { pool, table })
    }

    /// The pool.
    pub fn pool(&self) -> &MySqlPool {
        &self.pool
    }
}

#[async_trait]
impl RawTryLock for MySqlBaseline {
    const LABEL: &'static str = "raw GET_LOCK + RELEASE_LOCK";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        let name = lock_name(key);
        let mut conn = self.pool.acquire().await.map_err(|e| raw("pool", e))?;
        let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
            .bind(&name)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| raw("GET_LOCK", e))?;
        if got != Some(1) {
            return Ok(false);
        }
        let _: Option<i64> = sqlx::query_scalar("SELECT RELEASE_LOCK(?)")
            .bind(&name)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| raw("RELEASE_LOCK", e))?;
        Ok(true)
    }
}

#[async_trait]
impl Baseline for MySqlBaseline {
    fn round_trip_label(&self) -> String {
        "raw SELECT 1".into()
    }

    fn write_label(&self) -> String {
        "raw INSERT ON DUPLICATE KEY UPDATE".into()
    }

    async fn round_trip(&self) -> Result<()> {
        let _: i32 = sqlx::query_scalar("SELECT 1")
            .fetch_one(&self.pool)
            .await
            .map_err(|e| raw("SELECT 1", e))?;
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        Ok(Box::new(MySqlWriter {
            pool: self.pool.clone(),
            upsert: format!(
                "INSERT INTO {} (resource, value) VALUES (?, ?) \
                 ON DUPLICATE KEY UPDATE value = ?",
                self.table
            ),
            resource: resource.as_str().as_bytes().to_vec(),
            value: vec![7; 64],
        }))
    }

    async fn close(&self) -> Result<()> {
        self.pool
            .execute(format!("DROP TABLE IF EXISTS {}", self.table).as_str())
            .await
            .map_err(|e| raw("drop the plain table", e))?;
        self.pool.close().await;
        Ok(())
    }
}

struct MySqlWriter {
    pool: MySqlPool,
    upsert: String,
    resource: Vec<u8>,
    value: Vec<u8>,
}

#[async_trait]
impl Op for MySqlWriter {
    async fn once(&self) -> Result<Option<Duration>> {
        sqlx::query(&self.upsert)
            .bind(&self.resource[..])
            .bind(&self.value[..])
            .bind(&self.value[..])
            .execute(&self.pool)
            .await
            .map_err(|e| raw("INSERT ON DUPLICATE KEY UPDATE", e))?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_cleanup_refuses_a_prefix_it_would_paste_unchecked() {
        // A lazy pool never connects: only the statements are looked at.
        let options = MySqlConfig::from_url("mysql://root@127.0.0.1:1/test")
            .unwrap()
            .connect_options()
            .unwrap();
        let pool = MySqlPoolOptions::new().connect_lazy_with(options);
        let cleanup = MySqlCleanup::new(pool.clone(), "p_").unwrap();
        assert_eq!(
            cleanup.deletes.last().and_then(|s| s.lines().last()),
            Some("DELETE FROM p_fences WHERE LEFT(resource, ?) = ?")
        );
        assert!(cleanup.deletes.iter().all(|s| !s.contains('{')));
        assert!(MySqlCleanup::new(pool, "p; DROP TABLE x; --").is_err());
    }
}
