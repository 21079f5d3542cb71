//! The one mapping from `etcd-client` errors to fencelock's [`Error`], and the time limit of
//! an operation.

use std::future::Future;
use std::time::Duration;

use fencelock_core::Error;
use tonic::Code;

/// The backend's name in errors and logs.
pub(crate) const BACKEND: &str = "etcd";

/// What etcd says to credentials when the cluster has authentication turned off.
const AUTH_NOT_ENABLED: &str = "authentication is not enabled";

/// What etcd says when a request names a lease that does not exist (any more).
const LEASE_NOT_FOUND: &str = "requested lease not found";

/// Maps an `etcd-client` error to fencelock's [`Error`], naming `backend` in the message.
///
/// - Transport and I/O errors, and the gRPC codes that mean the cluster cannot answer now
///   (`Unavailable`: no leader, a member going away, a request the leader gave up on;
///   `DeadlineExceeded`, `Cancelled`, `Aborted`, `ResourceExhausted`) are
///   [`Error::Unavailable`] (retryable).
/// - Refused credentials (`authentication failed`, `Unauthenticated`, `PermissionDenied`),
///   and credentials sent to a cluster without authentication (`authentication is not
///   enabled`), are [`Error::InvalidConfig`]: retrying cannot help. etcd's message names the
///   user at most, never the password.
/// - A TLS handshake that failed (feature `tls`: a member's certificate that does not
///   check, a port without TLS) is [`Error::Unavailable`] saying so; `connect` reports it
///   as [`Error::InvalidConfig`] instead, since no retry fixes a configuration's CA.
/// - Everything else is [`Error::Backend`] with the gRPC code and etcd's message.
pub fn map_etcd_error(backend: &'static str, error: etcd_client::Error) -> Error {
    if let Some(failure) = crate::tls::handshake_failure(&error) {
        let what = if failure.certificate {
            "the member's TLS certificate could not be verified"
        } else {
            "the TLS handshake failed"
        };
        return Error::Unavailable {
            backend,
            message: format!("{what} ({})", failure.detail),
            source: Some(Box::new(error)),
        };
    }
    match &error {
        etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => {
            Error::Unavailable {
                backend,
                message: error.to_string(),
                source: Some(Box::new(error)),
            }
        }
        etcd_client::Error::GRpcStatus(status) => {
            let message = format!("{:?}: {}", status.code(), status.message());
            match status.code() {
                Code::Unavailable
                | Code::DeadlineExceeded
                | Code::Cancelled
                | Code::Aborted
                | Code::ResourceExhausted => Error::Unavailable {
                    backend,
                    message,
                    source: Some(Box::new(error)),
                },
                Code::Unauthenticated | Code::PermissionDenied => Error::InvalidConfig {
                    message: format!("{backend} refused the credentials: {message}"),
                    source: Some(Box::new(error)),
                },
                _ if status.message().contains("authentication failed") => Error::InvalidConfig {
                    message: format!("{backend} refused the credentials: {message}"),
                    source: Some(Box::new(error)),
                },
                _ if status.message().contains(AUTH_NOT_ENABLED) => Error::InvalidConfig {
                    message: format!(
                        "{backend} refused the credentials: {message} (the cluster has no \
                         users: leave user:password out of the URL)"
                    ),
                    source: Some(Box::new(error)),
                },
                // tonic reports a connection it could not make as `Unknown` with the
                // transport error as its text.
                Code::Unknown if status.message().contains("transport error") => {
                    Error::Unavailable {
                        backend,
                        message,
                        source: Some(Box::new(error)),
                    }
                }
                _ => Error::Backend {
                    backend,
                    message,
                    source: Some(Box::new(error)),
                },
            }
        }
        _ => Error::Backend {
            backend,
            message: error.to_string(),
            source: Some(Box::new(error)),
        },
    }
}

/// `error` and the errors that caused it, outermost first. `etcd_client::Error` does not
/// expose its source, its gRPC status or transport error does; an I/O error's own error (a
/// rustls error, say) is listed too, as `source()` skips it.
pub(crate) fn causes(
    error: &etcd_client::Error,
) -> impl Iterator<Item = &(dyn std::error::Error + 'static)> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = match error {
        etcd_client::Error::GRpcStatus(status) => Some(status),
        etcd_client::Error::TransportError(e) => Some(e),
        etcd_client::Error::IoError(e) => Some(e),
        _ => None,
    };
    let mut inner: Option<&(dyn std::error::Error + 'static)> = None;
    std::iter::from_fn(move || {
        if let Some(cause) = inner.take() {
            return Some(cause);
        }
        let current = next?;
        next = current.source();
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            inner = io
                .get_ref()
                .map(|e| e as &(dyn std::error::Error + 'static));
        }
        Some(current)
    })
}

/// Whether etcd refused a request because the lease it names is gone (expired or revoked).
pub(crate) fn is_lease_not_found(error: &etcd_client::Error) -> bool {
    match error {
        etcd_client::Error::GRpcStatus(status) => status.message().contains(LEASE_NOT_FOUND),
        etcd_client::Error::LeaseKeepAliveError(message) => message.contains("lease not found"),
        _ => false,
    }
}

/// Runs `request` under the time-out `limit`: a request that does not finish in time is
/// [`Error::Unavailable`] saying what did not answer; etcd's own errors are handed back
/// unmapped.
pub(crate) async fn within<T>(
    limit: Duration,
    what: &str,
    members: &str,
    request: impl Future<Output = Result<T, etcd_client::Error>>,
) -> Result<Result<T, etcd_client::Error>, Error> {
    tokio::time::timeout(limit, request)
        .await
        .map_err(|_| Error::Unavailable {
            backend: BACKEND,
            message: format!(
                "{what}: no answer from {members} within {limit:?} (is a quorum of the \
                 cluster up?)"
            ),
            source: None,
        })
}

/// Maps `error` naming the operation and the cluster's members.
pub(crate) fn mapped(error: etcd_client::Error, what: &str, members: &str) -> Error {
    with_context(map_etcd_error(BACKEND, error), what, members)
}

/// Prefixes an error's message with the operation and the cluster's members; a config error
/// names the cluster after its message instead.
fn with_context(error: Error, what: &str, members: &str) -> Error {
    match error {
        Error::InvalidConfig { message, source } => Error::InvalidConfig {
            message: format!("{message} (cluster {members})"),
            source,
        },
        other => other.in_context(&format!("{what} on {members}")),
    }
}

/// A reply that does not have the shape the request asked for.
pub(crate) fn protocol(what: &str) -> Error {
    Error::Backend {
        backend: BACKEND,
        message: format!("unexpected reply to {what}"),
        source: None,
    }
}
