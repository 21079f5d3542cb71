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
/// - Connection loss, time-outs, no reachable host, a session that expired or was closed,
///   throttling, and the connection to one member breaking under a request in flight (a reset,
///   a broken pipe: the client reconnects within the session) are [`Error::Unavailable`]
///   (retryable).
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
        _ if is_broken_connection(&error) => Error::Unavailable {
            backend: BACKEND,
            message: format!("the connection to a member broke: {error}"),
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

/// Whether `error` is the client's I/O error of a connection that broke under a request (the
/// member died or reset it): a connection loss within the session, which the client recovers
/// from by reconnecting to a member, not a failure of the request's meaning.
fn is_broken_connection(error: &zk::Error) -> bool {
    use std::io::ErrorKind;
    let zk::Error::Custom(custom) = error else {
        return false;
    };
    type Shared = std::sync::Arc<dyn std::error::Error + Send + Sync>;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(custom);
    while let Some(e) = cause {
        // The client keeps its I/O error behind an `Arc`, whose own `source` skips it.
        let io = e.downcast_ref::<std::io::Error>().or_else(|| {
            e.downcast_ref::<Shared>()
                .and_then(|shared| shared.downcast_ref::<std::io::Error>())
        });
        if let Some(io) = io {
            return matches!(
                io.kind(),
                ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::BrokenPipe
                    | ErrorKind::UnexpectedEof
                    | ErrorKind::NotConnected
            );
        }
        cause = e.source();
    }
    false
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
