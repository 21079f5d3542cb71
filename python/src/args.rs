//! Checks of the arguments Python hands over, made before any Rust call can panic on them.

use std::time::Duration;

use pyo3::prelude::*;

use crate::errors;

/// The wait budget of `lock()` when the caller names none, in seconds (the Rust default).
pub(crate) const DEFAULT_WAIT_SECS: f64 = 10.0;

/// The longest duration taken, in seconds (about 31 years): far above any backend's maximum
/// ttl, and far below what `Duration` and the clock can add.
const MAX_SECS: f64 = 1e9;

/// `value` seconds as a `Duration`; a negative, NaN, infinite or absurdly large value is
/// `InvalidConfigError` (a `ValueError`) naming `name`, raised before anything is touched.
pub(crate) fn seconds(name: &str, value: f64) -> PyResult<Duration> {
    let problem = if value.is_nan() {
        Some("is not a number")
    } else if value.is_infinite() {
        Some("is infinite")
    } else if value < 0.0 {
        Some("is negative")
    } else if value > MAX_SECS {
        Some("is too large (at most 1e9 seconds)")
    } else {
        None
    };
    if let Some(problem) = problem {
        return Err(errors::invalid_argument(&format!(
            "{name}={value} {problem}: give a number of seconds, 0 <= {name} <= 1e9"
        )));
    }
    Duration::try_from_secs_f64(value)
        .map_err(|e| errors::invalid_argument(&format!("{name}={value}: {e}")))
}

/// The wait budget: `None` waits without a bound.
pub(crate) fn wait(value: Option<f64>) -> PyResult<Duration> {
    match value {
        None => Ok(Duration::MAX),
        Some(value) if value.is_infinite() && value > 0.0 => Err(errors::invalid_argument(
            "wait=inf is not taken: use wait=None to wait without a bound",
        )),
        Some(value) => seconds("wait", value),
    }
}
