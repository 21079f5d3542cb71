//! The raw baselines (what a user writes without fencelock) and the peers from crates.io.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{Backoff, LockKey};
use fencelock_postgres::advisory_lock_id;
use redis::aio::ConnectionManager;
use sqlx::postgres::{PgAdvisoryLock, PgPool, PgPoolOptions};
use sqlx::{Either, Executor};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::error::{BenchError, Result};
use crate::suite::{Baseline, Op, Subject, TTL};

/// Retries `try_lock` (true when granted and released) until it succeeds or `wait` is spent,
/// pausing with fencelock's own default backoff: the polling loop a user writes around a raw
/// try-lock.
async fn poll<F, Fut>(key: &LockKey, wait: Duration, mut try_lock: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let deadline = Instant::now() + wait;
    let backoff = Backoff::default();
    let mut attempt = 0;
    loop {
        if try_lock().await? {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(BenchError::Run(format!(
                "{key} not obtained within {wait:?}"
            )));
        }
        tokio::time::sleep(backoff.pause(attempt).min(deadline - now)).await;
        attempt += 1;
    }
}

fn not_granted(key: &LockKey) -> BenchError {
    BenchError::Run(format!("the raw lock on {key} is held by someone else"))
}

/// A raw try-lock a user would call: take the lock if free and release it at once.
#[async_trait]
trait RawTryLock: Send + Sync + std::fmt::Debug + 'static {
    /// What the subject is called in reports.
    const LABEL: &'static str;

    /// `true` when the lock was free, taken and released.
    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool>;
}

/// Every raw try-lock is a subject: acquire+release is one try, and waiting is the polling loop
/// a user writes around it.
#[async_trait]
impl<T: RawTryLock> Subject for T {
    fn label(&self) -> String {
        T::LABEL.into()
    }

    async fn acquire_release(&self, key: &LockKey) -> Result<()> {
        if self.try_lock_unlock(key).await? {
            Ok(())
        } else {
            Err(not_granted(key))
        }
    }

    async fn lock_release(&self, key: &LockKey, wait: Duration) -> Result<()> {
        poll(key, wait, || self.try_lock_unlock(key)).await
    }
}

/// `tokio::sync::Mutex<HashMap>`: a lock table and a data table in process.
#[derive(Debug, Default)]
pub struct MemoryBaseline {
    locks: Mutex<HashMap<String, u64>>,
    data: std::sync::Arc<Mutex<HashMap<String, Vec<u8>>>>,
    counter: AtomicU64,
}

impl MemoryBaseline {
    /// Empty tables.
    pub fn new() -> Self {
        Self::default()
    }
}

#[async_trait]
impl RawTryLock for MemoryBaseline {
    const LABEL: &'static str = "raw tokio Mutex<HashMap> insert + remove";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        let token = self.counter.fetch_add(1, Ordering::Relaxed) + 1;
        let mut locks = self.locks.lock().await;
        if locks.contains_key(key.as_str()) {
            return Ok(false);
        }
        locks.insert(key.as_str().to_owned(), token);
        drop(locks);
        self.locks.lock().await.remove(key.as_str());
        Ok(true)
    }
}

#[async_trait]
impl Baseline for MemoryBaseline {
    fn round_trip_label(&self) -> String {
        "raw tokio Mutex<HashMap> lookup".into()
    }

    fn write_label(&self) -> String {
        "raw tokio Mutex<HashMap> insert".into()
    }

    async fn round_trip(&self) -> Result<()> {
        std::hint::black_box(self.locks.lock().await.get("round-trip"));
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        Ok(Box::new(MemoryWriter {
            data: self.data.clone(),
            resource: resource.as_str().to_owned(),
            value: vec![7; 64],
        }))
    }
}

struct MemoryWriter {
    data: std::sync::Arc<Mutex<HashMap<String, Vec<u8>>>>,
    resource: String,
    value: Vec<u8>,
}

#[async_trait]
impl Op for MemoryWriter {
    async fn once(&self) -> Result<Option<Duration>> {
        let mut data = self.data.lock().await;
        std::hint::black_box(data.insert(self.resource.clone(), self.value.clone()));
        Ok(None)
    }
}

/// Raw commands on one Redis server: `SET key owner NX PX ttl` + `DEL key`, plain `SET`,
/// `PING`.
#[derive(Clone)]
pub struct RedisBaseline {
    conn: ConnectionManager,
}

impl std::fmt::Debug for RedisBaseline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBaseline").finish_non_exhaustive()
    }
}

impl RedisBaseline {
    /// Connects to `url` with a connection of its own.
    pub async fn connect(url: &str) -> Result<Self> {
        let client = redis::Client::open(url).map_err(|e| BenchError::raw("redis URL", e))?;
        let conn = client
            .get_connection_manager()
            .await
            .map_err(|e| BenchError::raw("redis connect", e))?;
        Ok(RedisBaseline { conn })
    }
}

#[async_trait]
impl RawTryLock for RedisBaseline {
    const LABEL: &'static str = "raw SET NX PX + DEL";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        let mut conn = self.conn.clone();
        let set: Option<String> = redis::cmd("SET")
            .arg(key.as_str())
            .arg("owner")
            .arg("NX")
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .query_async(&mut conn)
            .await
            .map_err(|e| BenchError::raw("SET NX PX", e))?;
        if set.is_none() {
            return Ok(false);
        }
        let _: i64 = redis::cmd("DEL")
            .arg(key.as_str())
            .query_async(&mut conn)
            .await
            .map_err(|e| BenchError::raw("DEL", e))?;
        Ok(true)
    }
}

#[async_trait]
impl Baseline for RedisBaseline {
    fn round_trip_label(&self) -> String {
        "raw PING".into()
    }

    fn write_label(&self) -> String {
        "raw SET".into()
    }

    async fn round_trip(&self) -> Result<()> {
        let mut conn = self.conn.clone();
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| BenchError::raw("PING", e))?;
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        Ok(Box::new(RedisWriter {
            conn: self.conn.clone(),
            resource: resource.as_str().to_owned(),
            value: vec![7; 64],
        }))
    }
}

struct RedisWriter {
    conn: ConnectionManager,
    resource: String,
    value: Vec<u8>,
}

#[async_trait]
impl Op for RedisWriter {
    async fn once(&self) -> Result<Option<Duration>> {
        let mut conn = self.conn.clone();
        let () = redis::cmd("SET")
            .arg(&self.resource)
            .arg(&self.value[..])
            .query_async(&mut conn)
            .await
            .map_err(|e| BenchError::raw("SET", e))?;
        Ok(None)
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
    /// Connects to `url` and creates the plain table of the write baseline in `schema`
    /// (removed by [`Baseline::close`]).
    pub async fn connect(url: &str, schema: &str) -> Result<Self> {
        let pool = PgPoolOptions::new()
            .max_connections(10)
            .connect(url)
            .await
            .map_err(|e| BenchError::raw("postgres connect", e))?;
        let table = format!(
            "\"{}\".fencelock_bench_plain_{:08x}",
            schema.replace('"', "\"\""),
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
