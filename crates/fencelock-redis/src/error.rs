//! The one mapping from the driver's errors to fencelock's [`Error`], [`RedisResultExt`] to
//! apply it with `?`, and the backends' names that errors, logs and spans carry.

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

/// Maps a redis-rs error met by `backend` to fencelock's [`Error`], naming `backend` in it
/// (the crate's own backends use it for every driver call; an application's own commands on
/// its own connection get the same typed errors through it, or through [`RedisResultExt`]):
///
/// - connection refused, I/O errors, dropped connections, time-outs, and server states that
///   pass (`LOADING`, `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `READONLY`) are
///   [`Error::Unavailable`] (retryable);
/// - refused credentials (`WRONGPASS`, `NOAUTH`) are [`Error::InvalidConfig`]: trying again with
///   the same URL cannot succeed;
/// - everything else the server or the protocol says (`WRONGTYPE`, `NOPERM`, script errors,
///   unexpected replies) is [`Error::Backend`].
pub fn map_redis_error(backend: &'static str, e: RedisError) -> Error {
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

/// The crate's own name for [`map_redis_error`].
pub(crate) use map_redis_error as map_error;

/// `?` on a redis-rs result inside a function returning fencelock's
/// [`Result`](fencelock_core::Result): maps the error with [`map_redis_error`], naming
/// `backend`.
///
/// fencelock's [`Error`] cannot implement `From<redis::RedisError>`: the orphan rule allows
/// that impl only in fencelock's core crate or in redis-rs, and the core does not depend on any
/// driver. This trait is the conversion instead, one call before the `?`. The PostgreSQL
/// crate's `SqlxResultExt` has the same method for `sqlx` results, so one idiom covers both
/// drivers.
///
/// ```no_run
/// use fencelock_core::Result;
/// use fencelock_redis::{RedisResultExt, redis};
/// use redis::AsyncCommands;
///
/// /// Counts a visit in the application's own key, on its own connection.
/// async fn visit(client: &redis::Client) -> Result<u64> {
///     let mut conn = client
///         .get_multiplexed_async_connection()
///         .await
///         .into_fencelock("cache")?;
///     let seen: u64 = conn.incr("visits", 1).await.into_fencelock("cache")?;
///     Ok(seen)
/// }
/// ```
///
/// The error is typed by meaning, with the name given:
///
/// ```
/// use fencelock_core::Error;
/// use fencelock_redis::{RedisResultExt, redis};
///
/// let refused: redis::RedisResult<()> = Err(redis::RedisError::from(std::io::Error::from(
///     std::io::ErrorKind::ConnectionRefused,
/// )));
/// let error = refused.into_fencelock("cache").unwrap_err();
/// assert!(matches!(error, Error::Unavailable { backend: "cache", .. }));
/// assert!(error.is_retryable());
/// ```
pub trait RedisResultExt<T> {
    /// This result with a redis-rs error mapped by [`map_redis_error`], naming `backend` in it.
    fn into_fencelock(self, backend: &'static str) -> Result<T>;
}

impl<T> RedisResultExt<T> for redis::RedisResult<T> {
    fn into_fencelock(self, backend: &'static str) -> Result<T> {
        self.map_err(|error| map_redis_error(backend, error))
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
