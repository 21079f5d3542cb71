//! The one mapping from `sqlx` errors to fencelock's [`Error`], and [`SqlxResultExt`] to apply
//! it with `?`.

use std::future::Future;
use std::time::Duration;

use fencelock_core::Error;
use sqlx::postgres::PgDatabaseError;

use crate::database::Explained;
use crate::fence::{STALE_SQLSTATE, UNGRANTED_SQLSTATE, stale_from_detail};

/// Maps a `sqlx` error to fencelock's [`Error`], naming `backend` in the message.
///
/// - I/O, TLS, pool time-outs, a closed pool, and server errors that mean the connection is
///   gone or refused (SQLSTATE class `08`, `53300`, `57P01`..`57P05`, and `25P03`: the
///   session ended for sitting idle in a transaction, which rolled back) are
///   [`Error::Unavailable`] (retryable).
/// - A serialization failure or a deadlock (SQLSTATE `40001`, `40P01`) is
///   [`Error::Conflict`] (retryable): the server rolled the transaction back and nothing of it
///   was applied.
/// - A malformed URL or option, refused credentials and a missing database (SQLSTATE class
///   `28`, `3D000`), a token floor that would use up the schema's epochs (`FL006`) and an
///   admit of a token the schema's counter never granted
///   ([`UNGRANTED_SQLSTATE`](crate::UNGRANTED_SQLSTATE)) are [`Error::InvalidConfig`]:
///   retrying cannot help. The server's message
///   names the role and the database, never the password.
/// - A fence refused by `fencelock_admit` or a row guard (SQLSTATE
///   [`STALE_SQLSTATE`](crate::STALE_SQLSTATE)) is [`Error::Stale`] with the presented and the
///   current fence, and the resource (`account/10`, or a guarded row such as
///   `public.accounts (id=10)`). Map the errors of the application's own statements on a
///   guarded table with this function to get it.
/// - Every other server error is [`Error::Backend`] with its SQLSTATE in the message, and
///   anything the protocol does not allow (decode failures, missing columns) is
///   [`Error::Backend`] too.
pub fn map_sqlx_error(backend: &'static str, error: sqlx::Error) -> Error {
    let error = match error {
        // A checkout of fencelock's pool refused or timed out, with what it found out
        // (`database/checkout.rs`): the server is full, or the pool busy.
        sqlx::Error::Io(io) if io.get_ref().is_some_and(|e| e.is::<Explained>()) => {
            let message = io.into_inner().map(|e| e.to_string()).unwrap_or_default();
            return Error::Unavailable {
                backend,
                message,
                source: None,
            };
        }
        other => other,
    };
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => Error::Unavailable {
            backend,
            message: error.to_string(),
            source: Some(Box::new(error)),
        },
        sqlx::Error::Configuration(_) => Error::InvalidConfig {
            message: format!("{backend}: {error}"),
            source: Some(Box::new(error)),
        },
        sqlx::Error::Database(ref db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            if code == STALE_SQLSTATE
                && let Some(stale) = db
                    .try_downcast_ref::<PgDatabaseError>()
                    .and_then(|pg| pg.detail())
                    .and_then(stale_from_detail)
            {
                return stale;
            }
            if code == FLOOR_REFUSED_SQLSTATE || code == UNGRANTED_SQLSTATE {
                // The server's message says which floor or token and why; nothing in it is
                // secret.
                let hint = db
                    .try_downcast_ref::<PgDatabaseError>()
                    .and_then(|pg| pg.hint())
                    .map(|hint| format!(" ({hint})"))
                    .unwrap_or_default();
                return Error::InvalidConfig {
                    message: format!("{backend}: {}{hint}", db.message()),
                    source: Some(Box::new(error)),
                };
            }
            let mut message = format!("SQLSTATE {code}: {}", db.message());
            if prepared_statement_lost(&code, db.message()) {
                message.push_str(POOLER_HINT);
            }
            if misconfigured(&code) {
                Error::InvalidConfig {
                    message: format!("{backend}: {message}"),
                    source: Some(Box::new(error)),
                }
            } else if conflict(&code) {
                Error::Conflict {
                    backend,
                    message,
                    source: Some(Box::new(error)),
                }
            } else if connection_gone(&code) {
                Error::Unavailable {
                    backend,
                    message,
                    source: Some(Box::new(error)),
                }
            } else {
                Error::Backend {
                    backend,
                    message,
                    source: Some(Box::new(error)),
                }
            }
        }
        sqlx::Error::Migrate(migrate) => match *migrate {
            sqlx::migrate::MigrateError::Execute(inner) => map_sqlx_error(backend, inner),
            other => Error::Backend {
                backend,
                message: format!("migration failed: {other}"),
                source: Some(Box::new(other)),
            },
        },
        other => Error::Backend {
            backend,
            message: other.to_string(),
            source: Some(Box::new(other)),
        },
    }
}

/// `?` on a `sqlx` result inside a function returning fencelock's
/// [`Result`](fencelock_core::Result): maps the error with [`map_sqlx_error`], naming `backend`.
///
/// fencelock's [`Error`] cannot implement `From<sqlx::Error>`: the orphan rule allows that impl
/// only in fencelock's core crate or in sqlx, and the core does not depend on any driver. This
/// trait is the conversion instead, one call before the `?`. The Redis crate's
/// `RedisResultExt` has the same method for redis-rs results, so one idiom covers both
/// drivers. (For MySQL / MariaDB, map with `fencelock_mysql::map_sqlx_error`, which knows that
/// server's error codes.)
///
/// ```no_run
/// use fencelock_core::{Fence, LockKey, Result};
/// use fencelock_postgres::{PgDatabase, SqlxResultExt, sqlx};
///
/// /// Debits account 10 under `fence`: `Error::Stale` if a newer holder has admitted one.
/// async fn debit(db: &PgDatabase, pool: &sqlx::PgPool, fence: Fence) -> Result<()> {
///     let mut tx = pool.begin().await.into_fencelock("ledger")?;
///     db.fence().admit(&mut *tx, &LockKey::new("account/10")?, fence).await?;
///     sqlx::query("UPDATE accounts SET balance = balance - 100 WHERE id = 10")
///         .execute(&mut *tx)
///         .await
///         .into_fencelock("ledger")?;
///     tx.commit().await.into_fencelock("ledger")?;
///     Ok(())
/// }
/// ```
///
/// The error is typed by meaning, with the name given:
///
/// ```
/// use fencelock_core::Error;
/// use fencelock_postgres::{SqlxResultExt, sqlx};
///
/// let timed_out: Result<(), sqlx::Error> = Err(sqlx::Error::PoolTimedOut);
/// let error = timed_out.into_fencelock("ledger").unwrap_err();
/// assert!(matches!(error, Error::Unavailable { backend: "ledger", .. }));
/// assert!(error.is_retryable());
/// ```
pub trait SqlxResultExt<T> {
    /// This result with a `sqlx` error mapped by [`map_sqlx_error`], naming `backend` in it.
    fn into_fencelock(self, backend: &'static str) -> Result<T, Error>;
}

impl<T> SqlxResultExt<T> for Result<T, sqlx::Error> {
    fn into_fencelock(self, backend: &'static str) -> Result<T, Error> {
        self.map_err(|error| map_sqlx_error(backend, error))
    }
}

/// SQLSTATE of a token floor `fencelock_advance_token` refuses (migration 10): it would use up
/// the schema's epochs.
const FLOOR_REFUSED_SQLSTATE: &str = "FL006";

/// Said after the error a named prepared statement gets behind a transaction-mode pooler.
const POOLER_HINT: &str = " (prepared statements do not survive between transactions here: \
     if this goes through a transaction-mode pooler such as PgBouncer, add ?pooler=transaction \
     to the URL, or PgDatabase::with_pooler(PgPooler::Transaction))";

/// A duplicate (`42P05`), missing (`26000`) or mismatched (`08P01`) prepared statement of
/// sqlx's naming: what sqlx's statement cache meets when its server session changes under it.
fn prepared_statement_lost(code: &str, message: &str) -> bool {
    matches!(code, "42P05" | "26000" | "08P01") && message.contains("prepared statement \"sqlx_s_")
}

/// Refused credentials or role (`28000`, `28P01`) or a database that does not exist
/// (`3D000`): the URL is wrong, and trying again cannot succeed.
fn misconfigured(code: &str) -> bool {
    code.starts_with("28") || code == "3D000"
}

/// A serialization failure (`40001`) or a deadlock (`40P01`): the server rolled the
/// transaction back because of a concurrent one, and running it again may succeed.
fn conflict(code: &str) -> bool {
    matches!(code, "40001" | "40P01")
}

/// SQLSTATEs meaning the session is gone or could not be opened: the server may be back later.
fn connection_gone(code: &str) -> bool {
    code.starts_with("08")
        || matches!(
            code,
            "25P03" | "53300" | "57P01" | "57P02" | "57P03" | "57P04" | "57P05"
        )
}

/// The SQLSTATE of a server error, if `error` is one.
pub(crate) fn sqlstate(error: &sqlx::Error) -> Option<String> {
    match error {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

/// Runs one database call under the per-call time-out: a dead server never hangs a caller.
pub(crate) async fn timed<T>(
    backend: &'static str,
    timeout: Duration,
    call: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(timeout, call).await {
        Ok(result) => result.map_err(|e| map_sqlx_error(backend, e)),
        Err(_) => Err(timed_out(backend, timeout)),
    }
}

/// The [`Error::Unavailable`] of a call that did not answer within `timeout`.
pub(crate) fn timed_out(backend: &'static str, timeout: Duration) -> Error {
    Error::Unavailable {
        backend,
        message: format!("no answer within {timeout:?}"),
        source: None,
    }
}

/// A reply that the protocol between fencelock and its own SQL does not allow.
pub(crate) fn protocol(backend: &'static str, message: impl Into<String>) -> Error {
    Error::Backend {
        backend,
        message: message.into(),
        source: None,
    }
}
