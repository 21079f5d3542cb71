//! How an operation ended, recorded on its span. Shared by every backend of the crate.

use fencelock_core::{Lease, Result};

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
