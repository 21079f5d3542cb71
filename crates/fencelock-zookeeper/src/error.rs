//! The one mapping from `zookeeper-client` errors to fencelock's [`Error`], and the time
//! limit of an operation.

use std::future::Future;
use std::time::Duration;

use fencelock_core::Error;
use zookeeper_client as zk;

/// The backend's name in errors and logs.
pub(crate) const BACKEND: &str = "zookeeper";

/// Maps a `zookeeper-client` error to fencelock's [`Error`].
///
/// - Connection loss, time-outs, no reachable host, a session that expired or was closed, and
///   throttling are [`Error::Unavailable`] (retryable).
/// - `NoAuth`, `AuthFailed` and `InvalidAcl` are [`Error::InvalidConfig`]: the credentials
///   of the URL do not open fencelock's znodes, and retrying cannot help. ZooKeeper's message
///   never contains the password.
/// - Everything else is [`Error::Backend`].
pub fn map_zk_error(error: zk::Error) -> Error {
    match &error {
        zk::Error::ConnectionLoss
        | zk::Error::Timeout
        | zk::Error::NoHosts
        | zk::Error::SessionExpired
        | zk::Error::ClientClosed
        | zk::Error::SessionMoved
        | zk::Error::Throttled => Error::Unavailable {
            backend: BACKEND,
            message: error.to_string(),
            source: Some(Box::new(error)),
        },
        zk::Error::NoAuth | zk::Error::AuthFailed | zk::Error::InvalidAcl => Error::InvalidConfig {
            message: format!(
                "{BACKEND} refused access ({error}): check the user:password of the URL"
            ),
            source: Some(Box::new(error)),
        },
        _ => Error::Backend {
            backend: BACKEND,
            message: error.to_string(),
            source: Some(Box::new(error)),
        },
    }
}

/// Maps `error` with `what` (the operation) in front of the message.
pub(crate) fn mapped(error: zk::Error, what: &str) -> Error {
    map_zk_error(error).in_context(what)
}

/// Runs `request` under `limit`: no answer in time is [`Error::Unavailable`] saying what did
/// not answer; ZooKeeper's own errors are handed back unmapped.
pub(crate) async fn within<T, E>(
    limit: Duration,
    what: &str,
    request: impl Future<Output = Result<T, E>>,
) -> Result<Result<T, E>, Error> {
    tokio::time::timeout(limit, request)
        .await
        .map_err(|_| Error::Unavailable {
            backend: BACKEND,
            message: format!(
                "{what}: no answer within {limit:?} (is a quorum of the ensemble up?)"
            ),
            source: None,
        })
}

/// A reply that does not have the shape fencelock writes.
pub(crate) fn protocol(what: &str) -> Error {
    Error::Backend {
        backend: BACKEND,
        message: format!("unexpected content: {what}"),
        source: None,
    }
}
