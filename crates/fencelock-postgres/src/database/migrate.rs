//! Creating the schema and applying the embedded migrations.

use fencelock_core::{Error, Result};
use std::borrow::Cow;
use std::future::Future;
use std::pin::Pin;

use sqlx::error::BoxDynError;
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::{Executor, PgConnection};

use super::{BACKEND, PgDatabase};
use crate::error::{map_sqlx_error, timed};
use crate::exec::{Arg, Protocol, Sql};
use crate::statements::quote_ident;

/// One embedded migration. None of fencelock's opts out of its transaction.
macro_rules! migration {
    ($version:literal, $description:literal, $file:literal) => {
        Migration::new(
            $version,
            Cow::Borrowed($description),
            MigrationType::Simple,
            Cow::Borrowed(include_str!(concat!("../../migrations/", $file))),
            false,
        )
    };
}

/// The migrations, embedded at compile time: `migrations/<version>_<description>.sql`, listed
/// once here (a test checks the list against the directory). `Migration::new` takes the same
/// checksum as sqlx's `migrate!` macro, so a database migrated by an earlier build sees its
/// applied versions unchanged; the list spares the build sqlx's macro crates, which compile
/// sqlx's drivers a second time for the compiler.
#[derive(Debug, Clone, Copy)]
struct Embedded;

impl Embedded {
    fn migrations() -> Vec<Migration> {
        vec![
            migration!(1, "fencelock", "0001_fencelock.sql"),
            migration!(2, "fence your data", "0002_fence_your_data.sql"),
            migration!(
                3,
                "guard condition inline",
                "0003_guard_condition_inline.sql"
            ),
            migration!(4, "epoch tokens", "0004_epoch_tokens.sql"),
            migration!(5, "one lock mechanism", "0005_one_lock_mechanism.sql"),
            migration!(6, "lease readers", "0006_lease_readers.sql"),
            migration!(7, "advisory readers", "0007_advisory_readers.sql"),
            migration!(8, "token rule", "0008_token_rule.sql"),
            migration!(9, "mechanism at grant", "0009_mechanism_at_grant.sql"),
            migration!(10, "token floor limit", "0010_token_floor_limit.sql"),
            migration!(
                11,
                "epoch follows timeline",
                "0011_epoch_follows_timeline.sql"
            ),
            migration!(12, "admit bounds", "0012_admit_bounds.sql"),
            migration!(13, "lease sets", "0013_lease_sets.sql"),
            migration!(14, "lease queue", "0014_lease_queue.sql"),
            migration!(15, "handed grant", "0015_handed_grant.sql"),
            migration!(16, "advisory queue", "0016_advisory_queue.sql"),
            migration!(17, "pinned paths", "0017_pinned_paths.sql"),
            migration!(18, "closed fence", "0018_closed_fence.sql"),
            migration!(19, "lower after loss", "0019_lower_after_loss.sql"),
            migration!(20, "counters kept", "0020_counters_kept.sql"),
        ]
    }
}

impl<'s> MigrationSource<'s> for Embedded {
    fn resolve(
        self,
    ) -> Pin<Box<dyn Future<Output = Result<Vec<Migration>, BoxDynError>> + Send + 's>> {
        Box::pin(async { Ok(Self::migrations()) })
    }
}

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
        if self.is_current().await? {
            return self.check_trust().await;
        }
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
        } else {
            drop(conn);
        }
        outcome?;
        self.check_trust().await
    }

    /// Whether the schema holds exactly the embedded migrations, each applied with the same
    /// checksum: then migrating changes nothing, and is skipped, so a role that may use the
    /// schema but not create in it (no CREATE: the migrator's bookkeeping table is created
    /// `IF NOT EXISTS`, which PostgreSQL checks the right for even when the table exists)
    /// connects to a schema its owner migrated. Anything else (no table, a version missing,
    /// one of another build) goes to the migrator, which applies what is missing or says what
    /// does not match. Two unprepared reads.
    async fn is_current(&self) -> Result<bool> {
        let inner = &self.inner;
        let table = format!("{}._sqlx_migrations", quote_ident(&inner.schema));
        let exists: bool =
            timed(
                BACKEND,
                inner.timeout,
                Sql::new("SELECT pg_catalog.to_regclass($1::pg_catalog.text) IS NOT NULL")
                    .scalar_one(Protocol::Simple, &inner.pool, &[Arg::Text(&table)]),
            )
            .await?;
        if !exists {
            return Ok(false);
        }
        let applied: Vec<(i64, Vec<u8>)> = timed(
            BACKEND,
            inner.timeout,
            Sql::new(&format!(
                "SELECT version, checksum FROM {table} WHERE success ORDER BY version"
            ))
            .fetch_all(Protocol::Simple, &inner.pool, &[]),
        )
        .await?;
        let embedded = Embedded::migrations();
        Ok(applied.len() == embedded.len()
            && applied
                .iter()
                .zip(&embedded)
                .all(|((version, checksum), m)| *version == m.version && **checksum == *m.checksum))
    }

    /// Refuses a schema in which a role other than its owner (or a superuser) can create, or
    /// owns a function, operator, relation or type (`sql/schema_trust.sql`): fencelock's
    /// functions resolve names on a path that holds the schema (migration 17), so such a role
    /// could plant an operator they would run, as whoever calls them, or replace a table the
    /// fence rests on (DESIGN 8, *Security model*). Sent unprepared, as a one-off: nothing
    /// is prepared at connect, whatever is between here and the server.
    pub(crate) async fn check_trust(&self) -> Result<()> {
        let inner = &self.inner;
        let found: Option<String> = timed(
            BACKEND,
            inner.timeout,
            Sql::new(include_str!("../../sql/schema_trust.sql")).scalar_optional(
                Protocol::Simple,
                &inner.pool,
                &[Arg::Text(&inner.schema)],
            ),
        )
        .await?;
        match found {
            None => Ok(()),
            Some(what) => Err(Error::InvalidConfig {
                message: format!(
                    "{BACKEND}: schema {} is not fencelock's alone: {what}; only the schema's \
                     owner (or a superuser) may create in it or own what is in it, since \
                     fencelock's functions resolve names there (revoke the grant, or drop or \
                     reassign the object)",
                    quote_ident(&inner.schema)
                ),
                source: None,
            }),
        }
    }

    async fn migrate_on(&self, conn: &mut PgConnection, protocol: Protocol) -> Result<()> {
        let mut tx = sqlx::Connection::begin(conn)
            .await
            .map_err(|e| map_sqlx_error(BACKEND, e))?;
        // pg_temp last, so a temporary table can never stand in for one of fencelock's. The
        // path functions pin (`SET search_path FROM CURRENT`, migration 17).
        let path = format!("{}, pg_catalog, pg_temp", quote_ident(&self.inner.schema));
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
        let migrator = Migrator::new(Embedded)
            .await
            .map_err(|e| map_sqlx_error(BACKEND, sqlx::Error::Migrate(Box::new(e))))?;
        migrator
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every file of `migrations/` is embedded, under the version and description sqlx's own
    /// directory reader gives it, and nothing else is: a migration added to the directory but
    /// not to the list fails here.
    #[test]
    fn the_embedded_list_is_the_migrations_directory() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
        let mut on_disk: Vec<(i64, String, String)> = std::fs::read_dir(&dir)
            .expect("the migrations directory")
            .map(|entry| {
                let name = entry.expect("a directory entry").file_name();
                let name = name.to_str().expect("a UTF-8 name").to_owned();
                let stem = name.strip_suffix(".sql").expect("a .sql file");
                let (version, description) = stem.split_once('_').expect("<version>_<description>");
                let sql = std::fs::read_to_string(dir.join(&name)).expect("readable");
                (
                    version.parse().expect("a numeric version"),
                    description.replace('_', " "),
                    sql,
                )
            })
            .collect();
        on_disk.sort();
        let embedded: Vec<(i64, String, String)> = Embedded::migrations()
            .into_iter()
            .map(|m| (m.version, m.description.into_owned(), m.sql.into_owned()))
            .collect();
        assert_eq!(embedded, on_disk);
        assert!(
            Embedded::migrations()
                .iter()
                .all(|m| !m.no_tx && !m.sql.starts_with("-- no-transaction"))
        );
    }
}
