//! The one mapping from `sqlx` errors to fencelock's [`Error`], and the time limit of an
//! operation.

use std::future::Future;
use std::time::Duration;

use fencelock_core::Error;
use sqlx::mysql::MySqlDatabaseError;

/// The backend's name in errors and logs.
pub(crate) const BACKEND: &str = "mysql";

/// Server error numbers that mean the session is gone, refused, or the server is going away:
/// the server may be back later. 1040 too many connections, 1053 shutdown in progress, 1077
/// normal shutdown, 1078 got signal, 1152/1153/1154/1158..1161 aborted or broken connection,
/// 1184 aborted new connection, 1317 query interrupted, 1927 connection killed (MariaDB),
/// 4031 disconnected for inactivity (MySQL 8).
const GONE: &[u16] = &[
    1040, 1053, 1077, 1078, 1152, 1153, 1154, 1158, 1159, 1160, 1161, 1184, 1317, 1927, 4031,
];

/// Server error numbers that mean the configuration is wrong: 1044 database access denied,
/// 1045 wrong user or password, 1049 unknown database, 1251 authentication method unsupported.
const MISCONFIGURED: &[u16] = &[1044, 1045, 1049, 1251];

/// Maps a `sqlx` error to fencelock's [`Error`], naming `backend` in the message.
///
/// - I/O, TLS, protocol, pool time-outs, a closed pool, and server errors that mean the
///   connection is gone (killed, shut down, too many connections) are
///   [`Error::Unavailable`] (retryable).
/// - Wrong user, password or database, and a malformed option are
///   [`Error::InvalidConfig`]: retrying cannot help. The server's message names the user and
///   database, never the password.
/// - Every other server error is [`Error::Backend`] with its error number and SQLSTATE in the
///   message.
pub fn map_sqlx_error(backend: &'static str, error: sqlx::Error) -> Error {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
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
            let number = server_error_number(&error).unwrap_or(0);
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            let message = format!("error {number} ({code}): {}", db.message());
            if GONE.contains(&number) {
                Error::Unavailable {
                    backend,
                    message,
                    source: Some(Box::new(error)),
                }
            } else if MISCONFIGURED.contains(&number) {
                Error::InvalidConfig {
                    message: format!("{backend}: {message}"),
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
        other => Error::Backend {
            backend,
            message: other.to_string(),
            source: Some(Box::new(other)),
        },
    }
}

/// The server's error number, if `error` is a server error.
pub(crate) fn server_error_number(error: &sqlx::Error) -> Option<u16> {
    match error {
        sqlx::Error::Database(db) => db
            .try_downcast_ref::<MySqlDatabaseError>()
            .map(MySqlDatabaseError::number),
        _ => None,
    }
}

/// The SQLSTATE of a server error, if `error` is one.
pub(crate) fn sqlstate(error: &sqlx::Error) -> Option<String> {
    match error {
        sqlx::Error::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

/// `ER_CON_COUNT_ERROR`: the server is at its `max_connections`.
pub(crate) const TOO_MANY_CONNECTIONS: u16 = 1040;

/// Runs `op`, mapping its error, and gives up after `limit` with [`Error::Unavailable`].
pub(crate) async fn timed<T>(
    limit: Duration,
    op: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<T, Error> {
    match tokio::time::timeout(limit, op).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(map_sqlx_error(BACKEND, e)),
        Err(_) => Err(timed_out(limit)),
    }
}

/// No answer within `limit`.
pub(crate) fn timed_out(limit: Duration) -> Error {
    Error::Unavailable {
        backend: BACKEND,
        message: format!("no answer within {limit:?}"),
        source: None,
    }
}

/// An answer the protocol does not allow.
pub(crate) fn protocol(message: impl Into<String>) -> Error {
    Error::Backend {
        backend: BACKEND,
        message: message.into(),
        source: None,
    }
}
