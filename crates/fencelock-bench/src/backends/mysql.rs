//! MySQL and MariaDB: fencelock's `GET_LOCK` backend and storage table against raw
//! `GET_LOCK` + `RELEASE_LOCK` on the same server.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::LockKey;
use fencelock_mysql::{MySqlConfig, lock_name};
use sqlx::Executor;
use sqlx::mysql::{MySqlPool, MySqlPoolOptions};

use crate::error::{BenchError, Result};
use crate::fenced_subject::FencedSubject;
use crate::subject::{Baseline, Cleanup, Op, RawTryLock};
use crate::suite::Suite;

/// Connections of the raw baseline's pool, as many as the PostgreSQL baseline's.
const POOL_SIZE: u32 = 10;

impl Suite {
    /// The database `config` names, with the lock backend it chose
    /// ([`MySqlConfig::backend_kind`]) and fencelock's tables and procedures under its table
    /// prefix ([`MySqlConfig::prefix_name`], `?prefix=`), against raw `GET_LOCK(name, 0)` +
    /// `RELEASE_LOCK(name)` on a pool of its own to the same database. Named after the
    /// backend (`mysql`) in reports.
    pub async fn mysql(config: &MySqlConfig) -> Result<Self> {
        let db = config.connect().await?;
        let backend = db.backend();
        let name = backend.name();
        let fenced = FencedSubject::new(backend, Arc::new(db.storage()));
        let baseline = MySqlBaseline::connect(config).await?;
        let cleanup = MySqlCleanup::new(baseline.pool.clone(), db.prefix());
        Ok(
            Suite::new(name, fenced, Arc::new(baseline), Vec::new())
                .with_cleanup(Arc::new(cleanup)),
        )
    }
}

/// Deletes one table's rows for a run's keys (`sql/mysql_cleanup.sql`, table and column
/// filled in).
const MYSQL_CLEANUP: &str = include_str!("../../sql/mysql_cleanup.sql");

/// fencelock's tables (without the prefix) with the column that holds a lock key or a
/// resource: token counters, leases, readers, stored values, fence records.
const FENCELOCK_TABLES: &[(&str, &str)] = &[
    ("locks", "lock_key"),
    ("leases", "lock_key"),
    ("readers", "lock_key"),
    ("storage", "resource"),
    ("fences", "resource"),
];

/// Deletes fencelock's rows for a run's keys from the tables of one prefix.
#[derive(Debug)]
struct MySqlCleanup {
    pool: MySqlPool,
    deletes: Vec<String>,
}

impl MySqlCleanup {
    /// On `pool`, for fencelock's tables under `prefix` (a checked prefix: letters, digits
    /// and `_`, so it is pasted into identifiers as it is, as fencelock itself does).
    fn new(pool: MySqlPool, prefix: &str) -> Self {
        let deletes = FENCELOCK_TABLES
            .iter()
            .map(|(table, column)| {
                MYSQL_CLEANUP
                    .replace("{table}", &format!("{prefix}{table}"))
                    .replace("{column}", column)
            })
            .collect();
        MySqlCleanup { pool, deletes }
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
                .map_err(|e| BenchError::raw("delete the run's rows", e))?;
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
        let pool = MySqlPoolOptions::new()
            .max_connections(POOL_SIZE)
            .connect_with(config.connect_options()?)
            .await
            .map_err(|e| BenchError::raw(format!("connect to {config}"), e))?;
        // The prefix is checked by MySqlConfig (letters, digits, `_`, at most 32): with the
        // 20 characters added the name stays within MySQL's 64.
        let table = format!(
            "{}bench_plain_{:08x}",
            config.prefix_name(),
            rand::random::<u32>()
        );
        pool.execute(
            format!(
                "CREATE TABLE {table} (resource VARBINARY(512) PRIMARY KEY, value LONGBLOB) \
                 ENGINE = InnoDB"
            )
            .as_str(),
        )
        .await
        .map_err(|e| BenchError::raw("create the plain table", e))?;
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
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| BenchError::raw("pool", e))?;
        let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
            .bind(&name)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| BenchError::raw("GET_LOCK", e))?;
        if got != Some(1) {
            return Ok(false);
        }
        let _: Option<i64> = sqlx::query_scalar("SELECT RELEASE_LOCK(?)")
            .bind(&name)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| BenchError::raw("RELEASE_LOCK", e))?;
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
            .map_err(|e| BenchError::raw("SELECT 1", e))?;
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
            .map_err(|e| BenchError::raw("drop the plain table", e))?;
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
            .map_err(|e| BenchError::raw("INSERT ON DUPLICATE KEY UPDATE", e))?;
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_table_gets_its_delete() {
        // A lazy pool never connects: only the statements are looked at.
        let options = MySqlConfig::from_url("mysql://root@127.0.0.1:1/test")
            .and_then(|c| c.connect_options());
        let Ok(options) = options else {
            panic!("a plain MySQL URL is refused: {options:?}");
        };
        let cleanup = MySqlCleanup::new(MySqlPoolOptions::new().connect_lazy_with(options), "p_");
        assert_eq!(
            cleanup.deletes.last().map(|s| s.lines().last()),
            Some(Some("DELETE FROM p_fences WHERE LEFT(resource, ?) = ?"))
        );
        assert_eq!(cleanup.deletes.len(), FENCELOCK_TABLES.len());
        assert!(cleanup.deletes.iter().all(|s| !s.contains('{')));
    }
}
