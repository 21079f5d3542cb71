//! The error of a benchmark run.

/// Why a benchmark run failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BenchError {
    /// fencelock itself failed.
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
    pub(crate) fn raw(
        what: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        BenchError::Raw {
            what: what.into(),
            source: Box::new(source),
        }
    }
}

/// The result of a benchmark step.
pub type Result<T, E = BenchError> = std::result::Result<T, E>;
