//! The one mapping from the driver's errors to fencelock's [`Error`].

use std::future::Future;
use std::time::Duration;

use fencelock_core::{Error, Result};
use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::BACKEND;

/// Maps a driver error to fencelock's [`Error`]:
///
/// - connection refused, I/O errors, dropped connections, time-outs, and server states that
///   pass (`LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY`) are
///   [`Error::Unavailable`] (retryable);
/// - refused credentials (`WRONGPASS`, `NOAUTH`) are [`Error::InvalidConfig`]: trying again with
///   the same URL cannot succeed;
/// - everything else the server or the protocol says (`WRONGTYPE`, `NOPERM`, script errors,
///   unexpected replies) is [`Error::Backend`].
pub(crate) fn map_error(e: RedisError) -> Error {
    let code = e.code().unwrap_or_default().to_owned();
    if matches!(code.as_str(), "WRONGPASS" | "NOAUTH")
        || matches!(e.kind(), ErrorKind::AuthenticationFailed)
    {
        return Error::InvalidConfig {
            message: format!("redis refused the credentials: {e}"),
            source: Some(Box::new(e)),
        };
    }
    let passing = matches!(
        e.kind(),
        ErrorKind::Server(
            ServerErrorKind::BusyLoading
                | ServerErrorKind::TryAgain
                | ServerErrorKind::ClusterDown
                | ServerErrorKind::MasterDown
                | ServerErrorKind::ReadOnly
        )
    );
    if e.is_io_error()
        || e.is_connection_refusal()
        || e.is_connection_dropped()
        || e.is_timeout()
        || passing
    {
        return Error::Unavailable {
            backend: BACKEND,
            message: e.to_string(),
            source: Some(Box::new(e)),
        };
    }
    Error::Backend {
        backend: BACKEND,
        message: e.to_string(),
        source: Some(Box::new(e)),
    }
}

/// A protocol error: the server answered something the scripts never return.
pub(crate) fn protocol(message: impl Into<String>) -> Error {
    Error::Backend {
        backend: BACKEND,
        message: message.into(),
        source: None,
    }
}

/// Runs one call against the server, bounded by `limit`: no answer in time is
/// [`Error::Unavailable`], so a dead or paused server never hangs a caller.
pub(crate) async fn bounded<T>(
    limit: Duration,
    what: &str,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result.map_err(map_error),
        Err(_) => Err(Error::Unavailable {
            backend: BACKEND,
            message: format!("{what}: no answer within {limit:?}"),
            source: None,
        }),
    }
}
