//! How an operation ended: the replies of the extend and release scripts read, and the
//! outcome recorded on the operation's span. Shared by every backend of the crate.

use std::time::Duration;

use fencelock_core::{Error, Lease, LostReason, Result, valid_until};
use tokio::time::Instant;

use crate::error::protocol;

/// An extend script's reply (`extend`, `extend_shared`): 1 renewed, the lease then counting
/// `ttl` from `sent_at`; 0 the lease is gone; -1 another grant holds the key.
pub(crate) fn extended(
    backend: &'static str,
    script: &str,
    reply: i64,
    (lease, ttl, sent_at): (&Lease, Duration, Instant),
) -> Result<Lease> {
    match reply {
        1 => Ok(Lease {
            ttl,
            valid_until: valid_until(sent_at, ttl),
            ..lease.clone()
        }),
        0 => Err(Error::lease_lost(&lease.key, LostReason::NotHeld)),
        -1 => Err(Error::lease_lost(&lease.key, LostReason::Superseded)),
        other => Err(protocol(
            backend,
            format!("{script} script answered {other}"),
        )),
    }
}

/// A release script's reply (`release`, `release_shared`): 1 released, 0 not held by it.
pub(crate) fn released(backend: &'static str, script: &str, reply: i64) -> Result<bool> {
    match reply {
        1 => Ok(true),
        0 => Ok(false),
        other => Err(protocol(
            backend,
            format!("{script} script answered {other}"),
        )),
    }
}

/// Records how an operation ended on its span (`ok` names success) and passes the result on.
pub(crate) fn finish<T>(span: &tracing::Span, result: Result<T>, ok: &'static str) -> Result<T> {
    match &result {
        Ok(_) => span.record("outcome", ok),
        Err(e) => span.record("outcome", tracing::field::display(e)),
    };
    result
}

/// [`finish`] for an acquire: the token when granted, `held` when not.
pub(crate) fn finish_grant(
    span: &tracing::Span,
    result: Result<Option<Lease>>,
) -> Result<Option<Lease>> {
    match &result {
        Ok(Some(lease)) => {
            span.record("token", lease.token.get());
            span.record("outcome", "granted");
        }
        Ok(None) => {
            span.record("outcome", "held");
        }
        Err(e) => {
            span.record("outcome", tracing::field::display(e));
        }
    }
    result
}
