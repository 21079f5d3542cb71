//! The raw baseline through a transaction-mode pooler: simple-protocol statements only.

use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::tools::{Baseline, Op, RawTryLock};
use fencelock_core::{LockKey, Result};
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgPool;
use sqlx::{Executor, Postgres, Row};

use super::{connect_with_plain_table, drop_plain_table, raw};
use crate::exec::hex;
use crate::{PgConfig, advisory_lock_id};

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
    /// Connects as [`PgBaseline::connect`](super::PgBaseline::connect) does, with
    /// simple-protocol statements only.
    pub(crate) async fn connect(config: &PgConfig) -> Result<Self> {
        let (pool, table) = connect_with_plain_table(config).await?;
        Ok(PgPoolerBaseline { pool, table })
    }

    /// The pool.
    pub(crate) fn pool(&self) -> &PgPool {
        &self.pool
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
        let mut conn = self.pool.acquire().await.map_err(raw("pool"))?;
        let got = match conn.fetch_one(sqlx::raw_sql(&lock)).await {
            Ok(row) => row.try_get::<bool, _>(0),
            Err(e) => Err(e),
        };
        let got = match got {
            Ok(got) => got,
            Err(e) => {
                Self::abandon(conn).await;
                return Err(raw("BEGIN; pg_try_advisory_xact_lock")(e));
            }
        };
        if let Err(e) = conn.execute(sqlx::raw_sql("COMMIT")).await {
            Self::abandon(conn).await;
            return Err(raw("COMMIT")(e));
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
            .map_err(raw("SELECT 1"))?;
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
            .map_err(raw("insert the plain row"))?;
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
            .map_err(raw("UPDATE"))?;
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
