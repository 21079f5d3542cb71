//! Creating the schema and applying the embedded migrations.

use fencelock_core::Result;
use sqlx::{Executor, PgConnection};

use super::{BACKEND, PgDatabase};
use crate::error::{map_sqlx_error, timed};
use crate::exec::{Arg, Protocol, Sql};
use crate::statements::quote_ident;

/// The migrations, embedded at compile time.
static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!();

impl PgDatabase {
    /// Creates the schema if missing and applies the embedded migrations (`migrations/*.sql`)
    /// to it, in one transaction, waiting for any other process migrating the same database.
    /// Safe to run on every start: applied migrations are skipped.
    ///
    /// The migrations name fencelock's tables unqualified, so the transaction sets
    /// `search_path` to the schema for itself only (`set_config(..., true)`); the connection
    /// goes back to the pool unchanged. A failed migration closes its connection.
    pub async fn migrate(&self) -> Result<()> {
        let inner = &self.inner;
        let protocol = self.protocol().await?;
        let exists: bool =
            timed(
                BACKEND,
                inner.timeout,
                Sql::new("SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)")
                    .scalar_one(protocol, &inner.pool, &[Arg::Text(&inner.schema)]),
            )
            .await?;
        if !exists {
            let create = Sql::new(&format!(
                "CREATE SCHEMA IF NOT EXISTS {}",
                quote_ident(&inner.schema)
            ));
            match tokio::time::timeout(inner.timeout, create.execute(protocol, &inner.pool, &[]))
                .await
            {
                Ok(Ok(_)) => {}
                // A concurrent CREATE SCHEMA of the same name won the race: fine.
                Ok(Err(e)) if crate::error::sqlstate(&e).as_deref() == Some("23505") => {}
                Ok(Err(e)) => return Err(map_sqlx_error(BACKEND, e)),
                Err(_) => return Err(crate::error::timed_out(BACKEND, inner.timeout)),
            }
        }
        let mut conn = timed(BACKEND, inner.timeout, inner.pool.acquire()).await?;
        // Migrations may wait for another process migrating the same database, so they get
        // a more generous bound than one call.
        let bound = inner.timeout.saturating_mul(6);
        let outcome = match tokio::time::timeout(bound, self.migrate_on(&mut conn, protocol)).await
        {
            Ok(outcome) => outcome,
            Err(_) => Err(crate::error::timed_out(BACKEND, bound)),
        };
        if outcome.is_err() || protocol == Protocol::Simple {
            // After a failure the migrator's session-level advisory lock may still be held:
            // do not pool the connection. Behind a transaction pooler, its cache names
            // statements that were deallocated before the commit: do not pool it either.
            let _ = conn.close().await;
        }
        outcome
    }

    async fn migrate_on(&self, conn: &mut PgConnection, protocol: Protocol) -> Result<()> {
        let mut tx = sqlx::Connection::begin(conn)
            .await
            .map_err(|e| map_sqlx_error(BACKEND, e))?;
        // pg_temp last, so a temporary table can never stand in for one of fencelock's.
        let path = format!("{}, pg_temp", quote_ident(&self.inner.schema));
        Sql::new("SELECT set_config('search_path', $1, true)")
            .execute(protocol, &mut *tx, &[Arg::Text(&path)])
            .await
            .map_err(|e| map_sqlx_error(BACKEND, e))?;
        // The migrator's own lock is released before this transaction commits, so a second
        // process could apply the same migrations before the first one's tables are visible
        // (duplicate type names). A transaction-level lock per schema, held until commit,
        // makes the second migrator wait and then see what the first one committed. The
        // two-key form lives apart from the one-`bigint` ids of advisory locks.
        Sql::new("SELECT pg_advisory_xact_lock(hashtext('fencelock migrations'), hashtext($1))")
            .execute(protocol, &mut *tx, &[Arg::Text(&self.inner.schema)])
            .await
            .map_err(|e| map_sqlx_error(BACKEND, e))?;
        // `run_direct` on the connection itself: `run` goes through `Acquire`, whose
        // higher-ranked bound makes this future (and `connect`'s) not `Send`.
        MIGRATOR
            .run_direct(&mut *tx)
            .await
            .map_err(|e| map_sqlx_error(BACKEND, sqlx::Error::Migrate(Box::new(e))))?;
        if protocol == Protocol::Simple {
            // The migrator prepares named statements. Behind a transaction pooler they would
            // stay on this server connection after the commit, where another client's
            // statement of the same name would collide with them: drop them while the
            // transaction still holds the connection.
            (&mut *tx)
                .execute(sqlx::raw_sql("DEALLOCATE ALL"))
                .await
                .map_err(|e| map_sqlx_error(BACKEND, e))?;
        }
        tx.commit().await.map_err(|e| map_sqlx_error(BACKEND, e))
    }
}
