//! fencelock's `GET_LOCK` backend and storage table against raw `GET_LOCK` + `RELEASE_LOCK`
//! on the same server, through `fencelock_bench::define_bench!`.
//!
//! `cargo bench -p fencelock-mysql --bench mysql` (server: `FENCELOCK_MYSQL_URL`, default
//! `mysql://root@127.0.0.1:3306/test`). Groups are named `mysql/<scenario>`.
#![allow(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_bench::{Baseline, BenchError, FencedSubject, Op, RawTryLock, Subject, Suite};
use fencelock_core::{LockKey, OwnerId, async_trait};
use fencelock_mysql::sqlx::mysql::{MySqlPool, MySqlPoolOptions};
use fencelock_mysql::sqlx::{self, Executor};
use fencelock_mysql::{MySqlConfig, lock_name};

const DEFAULT_URL: &str = "mysql://root@127.0.0.1:3306/test";

fn raw(what: &str, source: sqlx::Error) -> BenchError {
    BenchError::Raw {
        what: what.to_owned(),
        source: Box::new(source),
    }
}

/// What a user writes without fencelock: `GET_LOCK(name, 0)` and `RELEASE_LOCK(name)` on one
/// pooled connection, `SELECT 1`, and `UPDATE` of a plain table, on a pool configured like
/// fencelock's.
#[derive(Debug)]
struct RawGetLock {
    pool: MySqlPool,
    table: String,
}

/// A peer: what a user writes to get a durable counter with the lock, the raw way:
/// `GET_LOCK`, `INSERT ... ON DUPLICATE KEY UPDATE n = n + 1` (autocommit), `RELEASE_LOCK`.
/// It pays the same log flush per grant as fencelock's token counter, so the two compare
/// like for like.
#[derive(Debug)]
struct RawCountedGetLock {
    pool: MySqlPool,
    counters: String,
}

impl RawGetLock {
    async fn connect(config: &MySqlConfig, table: String) -> Result<Self, BenchError> {
        let pool = MySqlPoolOptions::new()
            .max_connections(100)
            .test_before_acquire(false)
            .connect_with(config.connect_options()?)
            .await
            .map_err(|e| raw("connect", e))?;
        pool.execute(
            format!(
                "CREATE TABLE {table} (resource VARBINARY(512) PRIMARY KEY, value LONGBLOB) \
                 ENGINE = InnoDB"
            )
            .as_str(),
        )
        .await
        .map_err(|e| raw("create the plain table", e))?;
        pool.execute(
            format!(
                "CREATE TABLE {table}_counters (lock_name VARCHAR(64) PRIMARY KEY, n BIGINT) \
                 ENGINE = InnoDB"
            )
            .as_str(),
        )
        .await
        .map_err(|e| raw("create the counter table", e))?;
        Ok(RawGetLock { pool, table })
    }

    fn counted(&self) -> RawCountedGetLock {
        RawCountedGetLock {
            pool: self.pool.clone(),
            counters: format!("{}_counters", self.table),
        }
    }
}

#[async_trait]
impl RawTryLock for RawCountedGetLock {
    const LABEL: &'static str = "raw GET_LOCK + counter + RELEASE_LOCK";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool, BenchError> {
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
        sqlx::query(&format!(
            "INSERT INTO {} VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1",
            self.counters
        ))
        .bind(&name)
        .execute(&mut *conn)
        .await
        .map_err(|e| raw("counter", e))?;
        let _: Option<i64> = sqlx::query_scalar("SELECT RELEASE_LOCK(?)")
            .bind(&name)
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| raw("RELEASE_LOCK", e))?;
        Ok(true)
    }
}

#[async_trait]
impl RawTryLock for RawGetLock {
    const LABEL: &'static str = "raw GET_LOCK + RELEASE_LOCK";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool, BenchError> {
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
impl Baseline for RawGetLock {
    fn round_trip_label(&self) -> String {
        "raw SELECT 1".into()
    }

    fn write_label(&self) -> String {
        "raw UPDATE".into()
    }

    async fn round_trip(&self) -> Result<(), BenchError> {
        let _: i32 = sqlx::query_scalar("SELECT 1")
            .fetch_one(&self.pool)
            .await
            .map_err(|e| raw("SELECT 1", e))?;
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>, BenchError> {
        sqlx::query(&format!(
            "INSERT IGNORE INTO {} VALUES (?, NULL)",
            self.table
        ))
        .bind(resource.as_str().as_bytes())
        .execute(&self.pool)
        .await
        .map_err(|e| raw("insert the plain row", e))?;
        Ok(Box::new(PlainWriter {
            pool: self.pool.clone(),
            update: format!("UPDATE {} SET value = ? WHERE resource = ?", self.table),
            resource: resource.as_str().as_bytes().to_vec(),
            value: vec![7; 64],
        }))
    }

    async fn close(&self) -> Result<(), BenchError> {
        let drop = format!("DROP TABLE IF EXISTS {0}, {0}_counters", self.table);
        self.pool
            .execute(drop.as_str())
            .await
            .map_err(|e| raw("drop the plain tables", e))?;
        self.pool.close().await;
        Ok(())
    }
}

struct PlainWriter {
    pool: MySqlPool,
    update: String,
    resource: Vec<u8>,
    value: Vec<u8>,
}

#[async_trait]
impl Op for PlainWriter {
    async fn once(&self) -> Result<Option<Duration>, BenchError> {
        sqlx::query(&self.update)
            .bind(&self.value[..])
            .bind(&self.resource[..])
            .execute(&self.pool)
            .await
            .map_err(|e| raw("UPDATE", e))?;
        Ok(None)
    }
}

/// Drops the run's tables and procedures once the bench is over (its token counters too:
/// the prefix is the run's own), through a connection of its own: the bench's runtime no
/// longer runs when this is dropped.
struct Uninstall(MySqlConfig);

impl Drop for Uninstall {
    fn drop(&mut self) {
        let config = self.0.clone().install(false);
        let _ = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            runtime.block_on(async {
                let db = config.connect().await.ok()?;
                let dropped = db.uninstall().await.ok();
                db.close().await;
                dropped
            })
        })
        .join();
    }
}

async fn setup() -> Result<(Suite, Uninstall), BenchError> {
    let url = std::env::var("FENCELOCK_MYSQL_URL").unwrap_or_else(|_| DEFAULT_URL.to_owned());
    let run = format!("{:08x}", OwnerId::random().as_u128() as u32);
    let config = MySqlConfig::from_url(&url)?.prefix(format!("bench_{run}_"));
    let db = config.connect().await?;
    let fenced = FencedSubject::new(db.backend(), Arc::new(db.storage()));
    let baseline = RawGetLock::connect(&config, format!("bench_{run}_plain")).await?;
    let peer: Arc<dyn Subject> = Arc::new(baseline.counted());
    let suite = Suite::new("mysql", fenced, Arc::new(baseline), vec![peer]);
    Ok((suite, Uninstall(config)))
}

fencelock_bench::define_bench!(mysql => setup());
