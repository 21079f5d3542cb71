//! The one mapping from the AWS SDK's errors to fencelock's [`Error`].

use aws_sdk_dynamodb::config::http::HttpResponse;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use fencelock_core::Error;

/// The backend's name in errors and logs.
pub(crate) const BACKEND: &str = "dynamodb";

/// Error codes that mean "not now": throttling, capacity, a server-side failure.
const UNAVAILABLE: &[&str] = &[
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "LimitExceededException",
    "InternalServerError",
    "InternalFailure",
    "ServiceUnavailable",
    "ServiceUnavailableException",
];

/// Error codes of a concurrent transaction on the same item: nothing applied, try again.
const CONFLICT: &[&str] = &[
    "TransactionConflictException",
    "TransactionInProgressException",
];

/// Error codes of refused credentials: retrying cannot help.
const CREDENTIALS: &[&str] = &[
    "UnrecognizedClientException",
    "InvalidSignatureException",
    "AccessDeniedException",
    "MissingAuthenticationToken",
    "MissingAuthenticationTokenException",
    "ExpiredTokenException",
    "IncompleteSignature",
    "InvalidClientTokenId",
];

/// The error code of a table that does not exist (or is not active yet).
pub(crate) const NOT_FOUND: &str = "ResourceNotFoundException";

/// What a missing table's error says to do about it.
pub(crate) const CREATE_HINT: &str = "create it with the partition key `pk` of type S (string) \
     and no sort key, or add `create=true` to the URL to have fencelock create it";

/// Maps an AWS SDK error to fencelock's [`Error`], naming `backend`, the operation (`what`)
/// and the table and where it lives (`table`: `table "locks" at http://127.0.0.1:5000`). The
/// secret key never appears: the SDK does not put it in errors, and `table` is built from the
/// config's public parts.
///
/// - No answer (a connection refused or reset, a time-out) and the error codes of throttling,
///   capacity and server-side failures, or any HTTP 5xx: [`Error::Unavailable`] (retryable).
///   A write that failed this way may have been applied.
/// - A transaction conflict: [`Error::Conflict`] (retryable, nothing applied).
/// - Refused credentials (`UnrecognizedClientException`, `InvalidSignatureException`,
///   `AccessDeniedException`, ...) and a missing table (`ResourceNotFoundException`):
///   [`Error::InvalidConfig`], which retrying cannot fix; the missing table's message says
///   how to create it.
/// - Everything else: [`Error::Backend`] with the error code and DynamoDB's message.
///
/// A failed condition (`ConditionalCheckFailedException`) is not an error of the backend: the
/// callers read it (and the item it returns) before they map anything.
pub fn map_dynamodb_error<E>(
    backend: &'static str,
    what: &str,
    table: &str,
    error: SdkError<E, HttpResponse>,
) -> Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let context = format!("{what} on {table}");
    let status = error.raw_response().map(|r| r.status().as_u16());
    let code = error.code().map(str::to_owned);
    let detail = match (&code, error.message()) {
        (Some(code), Some(message)) => format!("{code}: {message}"),
        (Some(code), None) => code.clone(),
        _ => chain(&error),
    };
    let source: Option<fencelock_core::BoxError> = Some(Box::new(error));
    let unavailable = |message: String, source| Error::Unavailable {
        backend,
        message: format!("{context}: {message}"),
        source,
    };
    match code.as_deref() {
        None => match status {
            Some(status) if status < 500 => Error::Backend {
                backend,
                message: format!("{context}: HTTP {status}: {detail}"),
                source,
            },
            // No answer at all (refused, reset, timed out), or a 5xx without an error body.
            _ => unavailable(detail, source),
        },
        Some(code) if UNAVAILABLE.contains(&code) => unavailable(detail, source),
        Some(code) if CONFLICT.contains(&code) => Error::Conflict {
            backend,
            message: format!("{context}: {detail}"),
            source,
        },
        Some(code) if CREDENTIALS.contains(&code) => Error::InvalidConfig {
            message: format!("{backend} refused the credentials ({context}): {detail}"),
            source,
        },
        Some(NOT_FOUND) => Error::InvalidConfig {
            message: format!("{table} does not exist or is not active ({detail}): {CREATE_HINT}"),
            source,
        },
        Some(_) if status.is_some_and(|s| s >= 500) => unavailable(detail, source),
        Some(_) => Error::Backend {
            backend,
            message: format!("{context}: {detail}"),
            source,
        },
    }
}

/// An error and its sources, each shown once (`dispatch failure: io error: ... Connection
/// refused`), without the `Debug` dump the SDK's own context display ends with.
fn chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let shown = cause.to_string();
        if !text.contains(&shown) {
            text.push_str(": ");
            text.push_str(&shown);
        }
        source = cause.source();
    }
    text
}

/// An answer of a shape the request does not allow (an attribute missing or of the wrong
/// type): [`Error::Backend`] naming the item.
pub(crate) fn protocol(table: &str, what: &str) -> Error {
    Error::Backend {
        backend: BACKEND,
        message: format!("unexpected answer from {table}: {what}"),
        source: None,
    }
}
