//! `ChaosError`: why a chaos run could not be carried out.
//!
//! A run that was carried out is never an error, whatever it found: violations and a control
//! that lost nothing are [`Outcome`](crate::Outcome)s of the [`ChaosReport`](crate::ChaosReport).

use std::error::Error as StdError;

/// Why a chaos run could not be carried out. Messages never contain a password.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChaosError {
    /// The configuration cannot be run as given (a fault that does not apply to the target, an
    /// in-process backend, a ttl too short, ...). Nothing was started.
    #[error("{message}")]
    InvalidConfig {
        /// What is wrong, in words the user can act on.
        message: String,
    },
    /// A backend call failed: the spec does not parse, a server is unreachable, the final read
    /// of the counter failed.
    #[error(transparent)]
    Backend(#[from] fencelock::Error),
    /// A tool of the run failed: starting or restarting redis-server, a fault proxy, a worker
    /// process, the Postgres admin session.
    #[error("{message}")]
    Harness {
        /// What failed.
        message: String,
        /// The underlying error, when there is one.
        #[source]
        source: Option<Box<dyn StdError + Send + Sync>>,
    },
    /// A worker process never connected, or exited while the run was going: the run is
    /// invalid. The message carries the worker's last lines on stderr.
    #[error("{message}")]
    Worker {
        /// Which worker and what it said.
        message: String,
    },
}

impl ChaosError {
    /// An [`InvalidConfig`](Self::InvalidConfig) error.
    pub fn config(message: impl Into<String>) -> Self {
        ChaosError::InvalidConfig {
            message: message.into(),
        }
    }

    /// A [`Harness`](Self::Harness) error without a source.
    pub(crate) fn harness(message: impl Into<String>) -> Self {
        ChaosError::Harness {
            message: message.into(),
            source: None,
        }
    }

    /// A [`Harness`](Self::Harness) error caused by `source`.
    pub(crate) fn harness_from(
        message: impl Into<String>,
        source: impl StdError + Send + Sync + 'static,
    ) -> Self {
        ChaosError::Harness {
            message: message.into(),
            source: Some(Box::new(source)),
        }
    }

    /// Whether the error is the caller's input (configuration or spec), as opposed to a
    /// failure while carrying the run out.
    pub fn is_input(&self) -> bool {
        match self {
            ChaosError::InvalidConfig { .. } => true,
            ChaosError::Backend(e) => e.is_input(),
            _ => false,
        }
    }
}

/// `Result` with [`ChaosError`].
pub type Result<T, E = ChaosError> = std::result::Result<T, E>;
