//! The one mapping from `object_store` errors to fencelock's [`Error`].
//!
//! | `object_store` | fencelock |
//! |---|---|
//! | `Precondition`, `AlreadyExists` | handled by the caller (a concurrent update: read again) |
//! | `NotFound` | on a read, handled by the caller (no object yet); on a put, [`Error::InvalidConfig`] (no bucket) |
//! | `NotImplemented`, `NotSupported` | [`Error::InvalidConfig`]: the store lacks what fencing needs |
//! | `PermissionDenied`, `Unauthenticated`, `UnknownConfigurationKey`, `InvalidPath` | [`Error::InvalidConfig`] |
//! | anything else (HTTP errors, time-outs, refused connections) | [`Error::Unavailable`] (retryable) |
//!
//! Messages name the store (its `Display`: `AmazonS3(bucket)`, `InMemory`) and the object,
//! never a credential: `object_store` errors carry none.

use fencelock_core::Error;
use object_store::Error as StoreError;

/// The backend name in errors and logs.
pub(crate) const BACKEND: &str = "object-store";

/// `error`, from the store `store` while doing `what` (`put of a/b`), as a fencelock error.
pub(crate) fn map_store_error(store: &str, what: &str, error: StoreError) -> Error {
    let context = format!("{store}: {what}");
    match error {
        StoreError::NotImplemented { .. } | StoreError::NotSupported { .. } => {
            Error::InvalidConfig {
                message: format!(
                    "{context}: the store does not offer an operation fencing needs (conditional puts)"
                ),
                source: Some(Box::new(error)),
            }
        }
        // Reads handle a missing object before they get here: on a put or a delete, what is
        // missing is the bucket (or container) itself.
        StoreError::NotFound { .. } => Error::InvalidConfig {
            message: format!("{context}: not found; does the bucket exist?"),
            source: Some(Box::new(error)),
        },
        StoreError::PermissionDenied { .. }
        | StoreError::Unauthenticated { .. }
        | StoreError::UnknownConfigurationKey { .. }
        | StoreError::InvalidPath { .. } => Error::InvalidConfig {
            message: format!("{context}: {}", first_line(&error)),
            source: Some(Box::new(error)),
        },
        other => Error::Unavailable {
            backend: BACKEND,
            message: format!("{context}: {}", first_line(&other)),
            source: Some(Box::new(other)),
        },
    }
}

/// A store that answered something the protocol does not allow (an object that is not a
/// fenced object, a read without a version).
pub(crate) fn protocol(store: &str, message: String) -> Error {
    Error::Backend {
        backend: BACKEND,
        message: format!("{store}: {message}"),
        source: None,
    }
}

/// An operation that did not finish within the call's time-out.
pub(crate) fn timed_out(store: &str, what: &str, timeout: std::time::Duration) -> Error {
    Error::Unavailable {
        backend: BACKEND,
        message: format!("{store}: {what} did not finish within {timeout:?}"),
        source: None,
    }
}

/// An error's message cut at its first line: HTTP error bodies can be long.
fn first_line(error: &StoreError) -> String {
    let text = error.to_string();
    let line = text.lines().next().unwrap_or_default();
    line.chars().take(300).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_features_are_configuration_errors_and_outages_are_retryable() {
        let missing = map_store_error(
            "LocalFileSystem(/tmp)",
            "put of a",
            StoreError::NotImplemented {
                operation: "put_opts".into(),
                implementer: "LocalFileSystem".into(),
            },
        );
        assert!(matches!(missing, Error::InvalidConfig { .. }), "{missing}");
        assert!(missing.to_string().contains("conditional puts"));
        let down = map_store_error(
            "AmazonS3(b)",
            "get of a",
            StoreError::Generic {
                store: "S3",
                source: "connection refused".into(),
            },
        );
        assert!(down.is_retryable(), "{down}");
        assert!(down.to_string().contains("AmazonS3(b): get of a"), "{down}");
    }
}
