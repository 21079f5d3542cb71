//! The SQL of one installation: every statement with the table prefix filled in, the objects
//! `install` creates and `uninstall` drops.

use fencelock_core::Result;
use sqlx::{Executor, MySqlPool};

use crate::config::validate_prefix;
use crate::error::{BACKEND, map_sqlx_error};

/// `ER_SP_ALREADY_EXISTS`: another process created the procedure first.
const PROCEDURE_EXISTS: u16 = 1304;

/// One table of an installation.
struct Table {
    /// The name, without the prefix.
    name: &'static str,
    /// The `CREATE TABLE IF NOT EXISTS` statement.
    create: &'static str,
    /// The `VARBINARY` column that holds the lock key or resource of a row: what the cleanup
    /// of a benchmark run matches its key prefix against (`None`: a table without keys).
    key: Option<&'static str>,
}

/// The tables, in creation order. Every table is here and nowhere else, so install,
/// uninstall and the cleanup of a run's rows cannot disagree on what exists.
const TABLES: &[Table] = &[
    Table {
        name: "locks",
        create: include_str!("../sql/locks_table.sql"),
        key: Some("lock_key"),
    },
    Table {
        name: "epoch",
        create: include_str!("../sql/epoch_table.sql"),
        key: None,
    },
    Table {
        name: "counters",
        create: include_str!("../sql/counters_table.sql"),
        key: Some("lock_key"),
    },
    Table {
        name: "leases",
        create: include_str!("../sql/leases_table.sql"),
        key: Some("lock_key"),
    },
    Table {
        name: "readers",
        create: include_str!("../sql/readers_table.sql"),
        key: Some("lock_key"),
    },
    Table {
        name: "queue",
        create: include_str!("../sql/queue_table.sql"),
        key: Some("lock_key"),
    },
    Table {
        name: "storage",
        create: include_str!("../sql/storage_table.sql"),
        key: Some("resource"),
    },
    Table {
        name: "fences",
        create: include_str!("../sql/fences_table.sql"),
        key: Some("resource"),
    },
];

/// Deletes one table's rows whose key starts with a prefix (`{table}` and `{column}` filled
/// in per table).
const CLEANUP: &str = include_str!("../sql/cleanup.sql");

/// One stored procedure of an installation.
struct Procedure {
    /// The name, without the prefix.
    name: &'static str,
    /// The `CREATE PROCEDURE` statement.
    create: &'static str,
    /// Whether it runs as its definer, the installation's owner (`SQL SECURITY DEFINER`):
    /// the procedures that write the counters, the epoch, the storage and the fences, which
    /// an application account may not write itself (DESIGN 8.3, *Who may move the fence*).
    /// The others run with the caller's rights.
    as_owner: bool,
}

/// The procedures, in creation order.
const PROCEDURES: &[Procedure] = &[
    Procedure {
        name: "new_epoch_v1",
        create: include_str!("../sql/new_epoch.sql"),
        as_owner: false,
    },
    Procedure {
        name: "next_token_v2",
        create: include_str!("../sql/next_token.sql"),
        as_owner: true,
    },
    Procedure {
        name: "install_epoch_v1",
        create: include_str!("../sql/install_epoch.sql"),
        as_owner: true,
    },
    Procedure {
        name: "take_lock_v1",
        create: include_str!("../sql/take_lock.sql"),
        as_owner: false,
    },
    Procedure {
        name: "queue_head_v1",
        create: include_str!("../sql/queue_head.sql"),
        as_owner: false,
    },
    Procedure {
        name: "acquire_v6",
        create: include_str!("../sql/acquire.sql"),
        as_owner: false,
    },
    Procedure {
        name: "extend_v2",
        create: include_str!("../sql/extend.sql"),
        as_owner: false,
    },
    Procedure {
        name: "release_v3",
        create: include_str!("../sql/release.sql"),
        as_owner: false,
    },
    Procedure {
        name: "wait_v5",
        create: include_str!("../sql/wait.sql"),
        as_owner: false,
    },
    Procedure {
        name: "leave_v1",
        create: include_str!("../sql/leave.sql"),
        as_owner: false,
    },
    Procedure {
        name: "acquire_shared_v3",
        create: include_str!("../sql/acquire_shared.sql"),
        as_owner: false,
    },
    Procedure {
        name: "extend_shared_v1",
        create: include_str!("../sql/extend_shared.sql"),
        as_owner: false,
    },
    Procedure {
        name: "release_shared_v1",
        create: include_str!("../sql/release_shared.sql"),
        as_owner: false,
    },
    Procedure {
        name: "advance_token_v2",
        create: include_str!("../sql/advance_token.sql"),
        as_owner: false,
    },
    Procedure {
        name: "storage_apply_v1",
        create: include_str!("../sql/storage_apply.sql"),
        as_owner: true,
    },
    Procedure {
        name: "admit_v1",
        create: include_str!("../sql/admit.sql"),
        as_owner: true,
    },
];

/// Procedures of earlier versions, which `uninstall` drops too.
const RETIRED: &[&str] = &[
    "acquire_v1",
    "acquire_v2",
    "acquire_v3",
    "acquire_v4",
    "acquire_v5",
    "acquire_shared_v1",
    "acquire_shared_v2",
    "advance_token_v1",
    "extend_v1",
    "next_token_v1",
    "release_v1",
    "release_v2",
    "wait_v1",
    "wait_v2",
    "wait_v3",
    "wait_v4",
];

/// Every statement fencelock runs, for one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) prefix: String,
    pub(crate) acquire: String,
    pub(crate) extend: String,
    pub(crate) release: String,
    pub(crate) wait: String,
    pub(crate) leave: String,
    pub(crate) acquire_shared: String,
    pub(crate) extend_shared: String,
    pub(crate) release_shared: String,
    pub(crate) advance_token: String,
    pub(crate) inspect: String,
    pub(crate) inspect_queue: String,
    pub(crate) storage_apply: String,
    pub(crate) storage_peek: String,
    pub(crate) admit: String,
    pub(crate) fence_peek: String,
}

impl Statements {
    /// The statements for `prefix`, which must pass [`validate_prefix`]: it is pasted into
    /// identifiers.
    pub(crate) fn new(prefix: &str) -> Result<Self> {
        validate_prefix(prefix)?;
        let call = |name: &str, args: usize| {
            let marks = vec!["?"; args].join(", ");
            format!("CALL {prefix}{name}({marks})")
        };
        Ok(Statements {
            prefix: prefix.to_owned(),
            acquire: call("acquire_v6", 9),
            extend: call("extend_v2", 6),
            release: call("release_v3", 4),
            wait: call("wait_v5", 5),
            leave: call("leave_v1", 3),
            acquire_shared: call("acquire_shared_v3", 7),
            extend_shared: call("extend_shared_v1", 5),
            release_shared: call("release_shared_v1", 4),
            advance_token: call("advance_token_v2", 2),
            inspect: fill(include_str!("../sql/inspect.sql"), prefix),
            inspect_queue: fill(include_str!("../sql/inspect_queue.sql"), prefix),
            storage_apply: call("storage_apply_v1", 6),
            storage_peek: fill(include_str!("../sql/storage_peek.sql"), prefix),
            admit: call("admit_v1", 4),
            fence_peek: fill(include_str!("../sql/fence_peek.sql"), prefix),
        })
    }

    /// The place keeper's statement for `places` places (DESIGN 5.4, *One refresh per
    /// process*): binds the place ttl in microseconds, then each place's key and waiter.
    /// Only live places are kept: one that lapsed or was given up is never revived.
    pub(crate) fn keep_places(&self, places: usize) -> String {
        let pairs = vec!["(?, ?)"; places.max(1)].join(", ");
        format!(
            "UPDATE {}queue SET lapses_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
             WHERE lapses_at > UTC_TIMESTAMP(6) AND (lock_key, waiter) IN ({pairs})",
            self.prefix
        )
    }

    /// Creates the tables and procedures that are missing. Safe to run concurrently from
    /// several processes: tables are created `IF NOT EXISTS`, and a procedure another process
    /// created first is left as it is (procedure names carry a version, so a changed body
    /// gets a new name rather than replacing one in use).
    ///
    /// When every table and procedure is there already, nothing is created: `CREATE TABLE IF
    /// NOT EXISTS` needs the CREATE privilege even for a table that exists, so an account
    /// that may use an installation but not change it (no CREATE, no CREATE ROUTINE) connects
    /// to one its owner made (DESIGN 8.3).
    pub(crate) async fn install(&self, pool: &MySqlPool) -> Result<()> {
        if !self.is_complete(pool).await? {
            self.create(pool).await?;
            self.secure(pool).await?;
        }
        // The epoch row (and, on a new installation, its live marker): after the tables it
        // reads and the procedure that writes it.
        let epoch = format!("CALL {}install_epoch_v1()", self.prefix);
        pool.execute(sqlx::raw_sql(&epoch))
            .await
            .map_err(|e| map_sqlx_error(BACKEND, e))?;
        Ok(())
    }

    /// Whether every table and procedure of this installation exists in the database, as the
    /// connecting account sees them, each procedure running as it should (its `SQL
    /// SECURITY`): an installation made before the fence's procedures ran as their owner is
    /// incomplete, and the owner's next connect completes it.
    async fn is_complete(&self, pool: &MySqlPool) -> Result<bool> {
        let names = |count: usize| vec!["?"; count].join(", ");
        let sql = format!(
            "SELECT (SELECT COUNT(*) FROM information_schema.tables \
                      WHERE table_schema = DATABASE() AND table_name IN ({})), \
                    (SELECT COUNT(*) FROM information_schema.routines \
                      WHERE routine_schema = DATABASE() AND routine_type = 'PROCEDURE' \
                        AND (routine_name, security_type) IN ({}))",
            names(TABLES.len()),
            vec!["(?, ?)"; PROCEDURES.len()].join(", ")
        );
        let mut query = sqlx::query_as::<_, (i64, i64)>(&sql);
        for table in TABLES {
            query = query.bind(format!("{}{}", self.prefix, table.name));
        }
        for procedure in PROCEDURES {
            query = query
                .bind(format!("{}{}", self.prefix, procedure.name))
                .bind(security(procedure));
        }
        let (tables, procedures) = query
            .fetch_one(pool)
            .await
            .map_err(|e| map_sqlx_error(BACKEND, e))?;
        Ok(usize::try_from(tables).ok() == Some(TABLES.len())
            && usize::try_from(procedures).ok() == Some(PROCEDURES.len()))
    }

    /// Creates the tables and procedures that are missing.
    async fn create(&self, pool: &MySqlPool) -> Result<()> {
        for table in TABLES {
            pool.execute(sqlx::raw_sql(&fill(table.create, &self.prefix)))
                .await
                .map_err(|e| map_sqlx_error(BACKEND, e))?;
        }
        for procedure in PROCEDURES {
            let name = procedure.name;
            match pool
                .execute(sqlx::raw_sql(&fill(procedure.create, &self.prefix)))
                .await
            {
                Ok(_) => {}
                Err(sqlx::Error::Database(db))
                    if db
                        .try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>()
                        .is_some_and(|e| e.number() == PROCEDURE_EXISTS) => {}
                Err(e) => {
                    return Err(map_sqlx_error(BACKEND, e)
                        .in_context(&format!("cannot create procedure {}{name}", self.prefix)));
                }
            }
        }
        Ok(())
    }

    /// Makes each procedure run as it should: `CREATE PROCEDURE` leaves one another process
    /// (or an earlier version) created alone, so its `SQL SECURITY` is set here. Needs ALTER
    /// ROUTINE, which the account that created a procedure has.
    async fn secure(&self, pool: &MySqlPool) -> Result<()> {
        for procedure in PROCEDURES {
            let alter = format!(
                "ALTER PROCEDURE {}{} SQL SECURITY {}",
                self.prefix,
                procedure.name,
                security(procedure)
            );
            pool.execute(sqlx::raw_sql(&alter)).await.map_err(|e| {
                map_sqlx_error(BACKEND, e).in_context(&format!(
                    "cannot make procedure {}{} run as {}",
                    self.prefix,
                    procedure.name,
                    security(procedure)
                ))
            })?;
        }
        Ok(())
    }

    /// Drops every table and procedure of this prefix, token counters included.
    pub(crate) async fn uninstall(&self, pool: &MySqlPool) -> Result<()> {
        let procedures = PROCEDURES
            .iter()
            .map(|procedure| &procedure.name)
            .chain(RETIRED);
        for name in procedures {
            let drop = format!("DROP PROCEDURE IF EXISTS {}{name}", self.prefix);
            pool.execute(sqlx::raw_sql(&drop))
                .await
                .map_err(|e| map_sqlx_error(BACKEND, e))?;
        }
        for table in TABLES.iter().rev() {
            let drop = format!("DROP TABLE IF EXISTS {}{}", self.prefix, table.name);
            pool.execute(sqlx::raw_sql(&drop))
                .await
                .map_err(|e| map_sqlx_error(BACKEND, e))?;
        }
        Ok(())
    }

    /// The names of every table and procedure of this prefix, tables first.
    pub(crate) fn object_names(&self) -> Vec<String> {
        let tables = TABLES.iter().map(|table| table.name);
        let procedures = PROCEDURES.iter().map(|procedure| procedure.name);
        tables
            .chain(procedures)
            .map(|name| format!("{}{name}", self.prefix))
            .collect()
    }

    /// One `DELETE` per table, in creation order, removing the rows whose key starts with a
    /// prefix: binds the prefix's length in bytes, then the prefix.
    pub(crate) fn cleanup(&self) -> Vec<String> {
        TABLES
            .iter()
            .filter_map(|table| {
                let key = table.key?;
                Some(
                    fill(CLEANUP, &self.prefix)
                        .replace("{table}", table.name)
                        .replace("{column}", key),
                )
            })
            .collect()
    }
}

/// The `SQL SECURITY` a procedure runs with, as `information_schema.routines` spells it.
fn security(procedure: &Procedure) -> &'static str {
    if procedure.as_owner {
        "DEFINER"
    } else {
        "INVOKER"
    }
}

fn fill(sql: &str, prefix: &str) -> String {
    sql.replace("{prefix}", prefix)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn every_placeholder_is_filled_and_names_fit() {
        let statements = Statements::new("p_").unwrap();
        let creates = TABLES.iter().map(|table| table.create);
        for sql in creates.chain(PROCEDURES.iter().map(|procedure| procedure.create)) {
            let filled = fill(sql, "p_");
            assert!(!filled.contains('{'), "{filled}");
        }
        assert_eq!(
            statements.acquire,
            "CALL p_acquire_v6(?, ?, ?, ?, ?, ?, ?, ?, ?)"
        );
        let longest = "p".repeat(crate::config::MAX_PREFIX_LEN);
        for name in Statements::new(&longest).unwrap().object_names() {
            assert!(name.len() <= 64, "{name} is longer than 64 characters");
        }
        assert!(Statements::new("bad-prefix").is_err());
        assert_eq!(
            statements.keep_places(2),
            "UPDATE p_queue SET lapses_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND \
             WHERE lapses_at > UTC_TIMESTAMP(6) AND (lock_key, waiter) IN ((?, ?), (?, ?))"
        );
    }

    #[test]
    fn each_procedure_says_whom_it_runs_as() {
        for procedure in PROCEDURES {
            let says = format!("\n    SQL SECURITY {}\n", security(procedure));
            assert!(
                procedure.create.contains(&says),
                "{} does not say{says}",
                procedure.name
            );
        }
    }

    #[test]
    fn the_cleanup_deletes_from_every_table_by_its_binary_key() {
        let cleanup = Statements::new("p_").unwrap().cleanup();
        let keyed: Vec<_> = TABLES
            .iter()
            .filter_map(|table| Some((table.name, table.key?, table.create)))
            .collect();
        // Only the epoch row has no key: it is every key's, and no run's to delete.
        assert_eq!(keyed.len(), TABLES.len() - 1);
        assert_eq!(cleanup.len(), keyed.len());
        for ((name, key, create), delete) in keyed.iter().zip(&cleanup) {
            let last = delete.lines().last().unwrap();
            assert_eq!(
                last,
                format!("DELETE FROM p_{name} WHERE LEFT({key}, ?) = ?")
            );
            // LEFT counts bytes only on a binary column, which is what the prefix is bound as.
            let column = format!("{key} VARBINARY(");
            assert!(create.contains(&column), "{name}");
        }
    }
}
