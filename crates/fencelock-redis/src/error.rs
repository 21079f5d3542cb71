//! The one mapping from the driver's errors to fencelock's [`Error`], and the backends' names
//! that errors, logs and spans carry.

use std::future::Future;
use std::time::Duration;

use fencelock_core::{Error, Result};
use redis::{ErrorKind, RedisError, ServerErrorKind};

/// The one-node backend's and the storage's name.
pub(crate) const REDIS: &str = "redis";
/// The Redis Cluster backend's name.
pub(crate) const REDIS_CLUSTER: &str = "redis-cluster";
/// Redlock's name.
pub(crate) const REDLOCK: &str = "redlock";

/// Maps a driver error met by `backend` to fencelock's [`Error`]:
///
/// - connection refused, I/O errors, dropped connections, time-outs, and server states that
///   pass (`LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY`) are
///   [`Error::Unavailable`] (retryable);
/// - refused credentials (`WRONGPASS`, `NOAUTH`) are [`Error::InvalidConfig`]: trying again with
///   the same URL cannot succeed;
/// - everything else the server or the protocol says (`WRONGTYPE`, `NOPERM`, script errors,
///   unexpected replies) is [`Error::Backend`].
pub(crate) fn map_error(backend: &'static str, e: RedisError) -> Error {
    let code = e.code().unwrap_or_default().to_owned();
    if matches!(code.as_str(), "WRONGPASS" | "NOAUTH")
        || matches!(e.kind(), ErrorKind::AuthenticationFailed)
    {
        return Error::InvalidConfig {
            message: format!("{backend} refused the credentials: {e}"),
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
            backend,
            message: e.to_string(),
            source: Some(Box::new(e)),
        };
    }
    Error::Backend {
        backend,
        message: e.to_string(),
        source: Some(Box::new(e)),
    }
}

/// A protocol error: the server answered something the scripts never return.
pub(crate) fn protocol(backend: &'static str, message: impl Into<String>) -> Error {
    Error::Backend {
        backend,
        message: message.into(),
        source: None,
    }
}

/// Runs one call against the server, bounded by `limit`: no answer in time is
/// [`Error::Unavailable`], so a dead or paused server never hangs a caller.
pub(crate) async fn bounded<T>(
    backend: &'static str,
    limit: Duration,
    what: &str,
    call: impl Future<Output = redis::RedisResult<T>>,
) -> Result<T> {
    match tokio::time::timeout(limit, call).await {
        Ok(result) => result.map_err(|e| map_error(backend, e)),
        Err(_) => Err(Error::Unavailable {
            backend,
            message: format!("{what}: no answer within {limit:?}"),
            source: None,
        }),
    }
}
