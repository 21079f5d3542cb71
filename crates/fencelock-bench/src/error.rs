//! The error of a benchmark run.

/// Why a benchmark run failed: the fenced lock's own error, a raw baseline's or a peer's
/// driver error, or a run that could not be carried out.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// The fenced lock (its backend or storage) failed.
    #[error(transparent)]
    Fencelock(#[from] fencelock_core::Error),
    /// A raw baseline or a peer failed.
    #[error("{what}: {source}")]
    Raw {
        /// The operation.
        what: String,
        /// The driver's error.
        #[source]
        source: fencelock_core::BoxError,
    },
    /// The run could not be carried out (a lock that should have been free was not, a task
    /// died, ...).
    #[error("{0}")]
    Run(String),
}

impl BenchError {
    /// A [`Raw`](BenchError::Raw) error: the raw operation `what` (`SET NX PX`,
    /// `pg_try_advisory_lock`, ...) failed with the driver's error `source`. For baselines and
    /// peers; the driver's message should not carry a password (connection URLs are best
    /// kept out of it).
    pub fn raw(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        BenchError::Raw {
            what: what.into(),
            source: Box::new(source),
        }
    }
}

/// A run that could not be carried out, as the core error the subject and operation traits
/// return (a task that died, a lock that should have been free).
pub(crate) fn harness(message: String) -> fencelock_core::Error {
    fencelock_core::Error::Backend {
        backend: "bench",
        message,
        source: None,
    }
}

/// The result of a benchmark step.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;
