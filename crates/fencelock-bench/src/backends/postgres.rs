//! PostgreSQL, both lock backends, against raw sqlx on the same database and sqlx's own
//! `PgAdvisoryLock`; through a transaction-mode pooler, against the raw statements that are
//! correct there.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{FencedStorage, LockKey};
use fencelock_postgres::{PgConfig, advisory_lock_id};
use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgAdvisoryLock, PgPool, PgPoolOptions};
use sqlx::{Either, Executor, Postgres, Row};

use crate::error::{BenchError, Result};
use crate::fenced_subject::FencedSubject;
use crate::subject::{Baseline, Cleanup, Op, RawTryLock, Subject};
use crate::suite::Suite;

impl Suite {
    /// The PostgreSQL database `config` names, with the lock backend it chose
    /// ([`PgConfig::backend_kind`], `?backend=lease|advisory`) and fencelock's tables in its
    /// schema ([`PgConfig::schema_name`], `?schema=`), against raw sqlx statements on a pool
    /// of its own to the same database, and sqlx's `PgAdvisoryLock`.
    ///
    /// Through a transaction-mode pooler (`?pooler=transaction`, or one detected: see
    /// [`fencelock_postgres::PgPooler`]) the raw baseline is what is correct there: every
    /// statement one simple-protocol query with its values written in as hex and number
    /// literals (no prepared statements, which such a pooler loses between transactions),
    /// and the try-lock a transaction-scoped `pg_try_advisory_xact_lock`, held from
    /// `BEGIN` to `COMMIT` on one connection. A session advisory lock would stay on whatever
    /// server connection the pooler lent, so there is no session-advisory peer: the suite
    /// has no peers. Only the lease backend works through such a pooler; the advisory
    /// backend refuses to connect.
    pub async fn postgres(config: &PgConfig) -> Result<Self> {
        let db = config.clone().connect().await?;
        let behind_pooler = db.behind_transaction_pooler().await?;
        let backend = db.backend();
        let storage: Arc<dyn FencedStorage> = Arc::new(db.storage());
        let name = backend.name();
        let fenced = FencedSubject::new(backend, storage);
        let delete = PG_CLEANUP.replace("{schema}", &quote_ident(db.schema()));
        let suite = if behind_pooler {
            let baseline = PgPoolerBaseline::connect(config).await?;
            let cleanup = PgCleanup {
                pool: baseline.pool.clone(),
                delete,
                in_transaction: true,
            };
            Suite::new(name, fenced, Arc::new(baseline), Vec::new()).with_cleanup(Arc::new(cleanup))
        } else {
            let baseline = PgBaseline::connect(config).await?;
            let peer = SqlxAdvisoryLockPeer::new(baseline.pool().clone());
            let cleanup = PgCleanup {
                pool: baseline.pool().clone(),
                delete,
                in_transaction: false,
            };
            let peers: Vec<Arc<dyn Subject>> = vec![Arc::new(peer)];
            Suite::new(name, fenced, Arc::new(baseline), peers).with_cleanup(Arc::new(cleanup))
        };
        Ok(suite)
    }
}

/// Deletes fencelock's rows for a run's keys (`sql/pg_cleanup.sql`, with the schema filled in).
const PG_CLEANUP: &str = include_str!("../../sql/pg_cleanup.sql");

/// `name` as a quoted SQL identifier.
fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// Deletes fencelock's rows for a run's keys in one schema: leases, lease readers, advisory
/// holders, stored values, token counters.
#[derive(Debug)]
struct PgCleanup {
    pool: PgPool,
    delete: String,
    /// Through a transaction-mode pooler: the statement unprepared, inside a transaction,
    /// so that its parse and its bind reach the same server connection.
    in_transaction: bool,
}

#[async_trait]
impl Cleanup for PgCleanup {
    async fn clean(&self, key_prefix: &str) -> Result<()> {
        let failed = |e| BenchError::raw("delete the run's rows", e);
        if self.in_transaction {
            let mut tx = self.pool.begin().await.map_err(failed)?;
            sqlx::query(&self.delete)
                .bind(key_prefix)
                .persistent(false)
                .execute(&mut *tx)
                .await
                .map_err(failed)?;
            tx.commit().await.map_err(failed)?;
        } else {
            sqlx::query(&self.delete)
                .bind(key_prefix)
                .execute(&self.pool)
                .await
                .map_err(failed)?;
        }
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
        drop_plain_table(&self.pool, &self.table).await
    }
}

/// A pool of 10 connections to the database `config` names, and a new plain table (resource,
/// value) in its schema, created with one simple-protocol statement.
async fn connect_with_plain_table(config: &PgConfig) -> Result<(PgPool, String)> {
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
    pool.execute(format!("CREATE TABLE {table} (resource text PRIMARY KEY, value bytea)").as_str())
        .await
        .map_err(|e| BenchError::raw("create the plain table", e))?;
    Ok((pool, table))
}

/// Drops the plain table (one simple-protocol statement) and closes the pool.
async fn drop_plain_table(pool: &PgPool, table: &str) -> Result<()> {
    pool.execute(format!("DROP TABLE IF EXISTS {table}").as_str())
        .await
        .map_err(|e| BenchError::raw("drop the plain table", e))?;
    pool.close().await;
    Ok(())
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

/// The raw baseline through a transaction-mode pooler (PgBouncer `pool_mode = transaction`):
/// what an application writes there to be correct. Every statement is one simple-protocol
/// query (`raw_sql`), its values written in as literals made only of hex digits, decimal
/// digits and keywords; the try-lock is `BEGIN; SELECT pg_try_advisory_xact_lock(id)`, then
/// `COMMIT`, which releases it: the pooler keeps the server connection for the length of the
/// transaction, and nothing outlives it.
#[derive(Debug, Clone)]
pub(crate) struct PgPoolerBaseline {
    pool: PgPool,
    table: String,
}

impl PgPoolerBaseline {
    /// Connects as [`PgBaseline::connect`] does, with simple-protocol statements only.
    pub(crate) async fn connect(config: &PgConfig) -> Result<Self> {
        let (pool, table) = connect_with_plain_table(config).await?;
        Ok(PgPoolerBaseline { pool, table })
    }

    /// Ends the transaction of a try that failed half-way, or, if that fails too, closes the
    /// connection instead of handing it back to the pool inside a transaction.
    async fn abandon(mut conn: PoolConnection<Postgres>) {
        if conn.execute(sqlx::raw_sql("ROLLBACK")).await.is_err() {
            // Best effort: the connection is gone or broken either way.
            let _ = conn.close().await;
        }
    }
}

#[async_trait]
impl RawTryLock for PgPoolerBaseline {
    const LABEL: &'static str = "raw BEGIN; pg_try_advisory_xact_lock; COMMIT (simple query)";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        // A decimal literal, in parentheses so a negative id stays one bigint operand.
        let lock = format!(
            "BEGIN; SELECT pg_try_advisory_xact_lock(({})::bigint)",
            advisory_lock_id(key)
        );
        let mut conn = self
            .pool
            .acquire()
            .await
            .map_err(|e| BenchError::raw("pool", e))?;
        let got = match conn.fetch_one(sqlx::raw_sql(&lock)).await {
            Ok(row) => row.try_get::<bool, _>(0),
            Err(e) => Err(e),
        };
        let got = match got {
            Ok(got) => got,
            Err(e) => {
                Self::abandon(conn).await;
                return Err(BenchError::raw("BEGIN; pg_try_advisory_xact_lock", e));
            }
        };
        if let Err(e) = conn.execute(sqlx::raw_sql("COMMIT")).await {
            Self::abandon(conn).await;
            return Err(BenchError::raw("COMMIT", e));
        }
        Ok(got)
    }
}

#[async_trait]
impl Baseline for PgPoolerBaseline {
    fn round_trip_label(&self) -> String {
        "raw SELECT 1 (simple query)".into()
    }

    fn write_label(&self) -> String {
        "raw UPDATE (simple query)".into()
    }

    async fn round_trip(&self) -> Result<()> {
        self.pool
            .execute(sqlx::raw_sql("SELECT 1"))
            .await
            .map_err(|e| BenchError::raw("SELECT 1", e))?;
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        let resource = text_literal(resource.as_str());
        let insert = format!(
            "INSERT INTO {} VALUES ({resource}, NULL) ON CONFLICT DO NOTHING",
            self.table
        );
        self.pool
            .execute(sqlx::raw_sql(&insert))
            .await
            .map_err(|e| BenchError::raw("insert the plain row", e))?;
        Ok(Box::new(PgSimpleWriter {
            pool: self.pool.clone(),
            update: format!(
                "UPDATE {} SET value = {} WHERE resource = {resource}",
                self.table,
                bytea_literal(&[7; 64])
            ),
        }))
    }

    async fn close(&self) -> Result<()> {
        drop_plain_table(&self.pool, &self.table).await
    }
}

/// The plain `UPDATE` as one simple-protocol query, its values written in.
struct PgSimpleWriter {
    pool: PgPool,
    update: String,
}

#[async_trait]
impl Op for PgSimpleWriter {
    async fn once(&self) -> Result<Option<Duration>> {
        self.pool
            .execute(sqlx::raw_sql(&self.update))
            .await
            .map_err(|e| BenchError::raw("UPDATE", e))?;
        Ok(None)
    }
}

/// `text` as an SQL expression of type `text` made of hex digits and keywords only, so that
/// no value can change the statement, whatever `standard_conforming_strings` says.
fn text_literal(text: &str) -> String {
    format!(
        "convert_from(decode('{}', 'hex'), 'UTF8')",
        hex(text.as_bytes())
    )
}

/// `bytes` as an SQL expression of type `bytea` made of hex digits and keywords only.
fn bytea_literal(bytes: &[u8]) -> String {
    format!("decode('{}', 'hex')", hex(bytes))
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        // Writing to a String cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literals_carry_only_hex_digits() {
        assert_eq!(
            text_literal("it's $1 \\x00 ü"),
            "convert_from(decode('69742773202431205c78303020c3bc', 'hex'), 'UTF8')"
        );
        assert_eq!(bytea_literal(&[0, 255]), "decode('00ff', 'hex')");
    }
}
