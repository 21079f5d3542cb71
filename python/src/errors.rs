//! `fencelock::Error` as the exceptions of `fencelock._errors` (defined in Python, so that
//! `TimeoutError` can also be the builtin `TimeoutError` and `InvalidConfigError` a
//! `ValueError`).

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use fencelock::Error;

use crate::fence::Fence;

/// The Python module that defines the exception classes.
const MODULE: &str = "fencelock._errors";

/// The exception class for `error`, by `Error::kind`.
fn class_name(error: &Error) -> &'static str {
    match error {
        Error::InvalidKey { .. } => "InvalidKeyError",
        Error::InvalidTtl { .. } => "InvalidTtlError",
        Error::InvalidConfig { .. } => "InvalidConfigError",
        Error::ValueTooLarge { .. } => "ValueTooLargeError",
        Error::AlreadyHeld { .. } => "AlreadyHeldError",
        Error::Timeout { .. } => "TimeoutError",
        Error::LeaseLost { .. } => "LockLostError",
        Error::Stale { .. } => "StaleError",
        Error::QuorumFailed { .. } => "QuorumError",
        Error::Unavailable { .. } => "UnavailableError",
        Error::Conflict { .. } => "ConflictError",
        Error::Unsupported { .. } => "UnsupportedError",
        Error::Backend { .. } => "BackendError",
        _ => "FencelockError",
    }
}

/// `error` as a Python exception: its class, message and the fields a caller acts on.
pub(crate) fn to_py(error: Error) -> PyErr {
    Python::attach(|py| match build(py, &error) {
        Ok(err) => err,
        // The package's own module failed to import: still an exception, never a panic.
        Err(import) => PyRuntimeError::new_err(format!("{error} (and {import})")),
    })
}

fn build(py: Python<'_>, error: &Error) -> PyResult<PyErr> {
    let class = py.import(MODULE)?.getattr(class_name(error))?;
    let exception = class.call1((error.to_string(),))?;
    exception.setattr("kind", error.kind())?;
    exception.setattr("retryable", error.is_retryable())?;
    match error {
        Error::Stale {
            resource,
            presented,
            current,
        } => {
            exception.setattr("resource", resource)?;
            exception.setattr("presented", Fence::from(*presented))?;
            exception.setattr("current", Fence::from(*current))?;
        }
        Error::Timeout { key, waited } => {
            exception.setattr("key", key)?;
            exception.setattr("waited", waited.as_secs_f64())?;
        }
        Error::LeaseLost { key, reason } => {
            exception.setattr("key", key)?;
            exception.setattr("reason", reason.word())?;
        }
        Error::AlreadyHeld { key } | Error::InvalidKey { key, .. } => {
            exception.setattr("key", key)?;
        }
        _ => {}
    }
    Ok(PyErr::from_value(exception))
}

/// An `InvalidConfigError` for an argument refused before it reached Rust.
pub(crate) fn invalid_argument(message: &str) -> PyErr {
    to_py(Error::config(message.to_owned()))
}
