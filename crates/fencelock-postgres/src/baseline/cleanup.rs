//! Removes fencelock's rows for a benchmark run's keys.

use async_trait::async_trait;
use fencelock_core::Result;
use fencelock_core::tools::Cleanup;
use sqlx::postgres::PgPool;

use super::raw;
use crate::statements::quote_ident;

/// Deletes the run's rows in one statement (`sql/bench_cleanup.sql`, schema filled in).
const CLEANUP: &str = include_str!("../../sql/bench_cleanup.sql");

/// Deletes fencelock's rows for a run's keys in one schema: leases, lease readers, advisory
/// holders, phases and readers, stored values, token counters.
#[derive(Debug)]
pub(crate) struct PgCleanup {
    pool: PgPool,
    delete: String,
    /// Through a transaction-mode pooler: the statement unprepared, inside a transaction,
    /// so that its parse and its bind reach the same server connection.
    in_transaction: bool,
}

impl PgCleanup {
    /// The cleanup of fencelock's tables in `schema`, on `pool`.
    pub(crate) fn new(pool: PgPool, schema: &str, in_transaction: bool) -> Self {
        PgCleanup {
            pool,
            delete: delete_statement(schema),
            in_transaction,
        }
    }
}

/// The statement that deletes the run's rows from fencelock's tables in `schema`.
fn delete_statement(schema: &str) -> String {
    CLEANUP.replace("{schema}", &quote_ident(schema))
}

#[async_trait]
impl Cleanup for PgCleanup {
    async fn clean(&self, key_prefix: &str) -> Result<()> {
        let failed = raw("delete the run's rows");
        if self.in_transaction {
            let mut tx = self.pool.begin().await.map_err(&failed)?;
            sqlx::query(&self.delete)
                .bind(key_prefix)
                .persistent(false)
                .execute(&mut *tx)
                .await
                .map_err(&failed)?;
            tx.commit().await.map_err(&failed)?;
        } else {
            sqlx::query(&self.delete)
                .bind(key_prefix)
                .execute(&self.pool)
                .await
                .map_err(&failed)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_schema_is_filled_in_quoted() {
        let delete = delete_statement("user");
        assert!(!delete.contains("{schema}"), "{delete}");
        assert!(
            delete.contains("DELETE FROM \"user\".fencelock_counters"),
            "{delete}"
        );
    }
}
