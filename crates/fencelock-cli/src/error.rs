//! `CliError`: every way a subcommand fails, and the exit code each one gets.

use fencelock_bench::BenchError;
use fencelock_chaos::ChaosError;

use crate::exit::Exit;

/// Why a subcommand failed. [`exit`](Self::exit) is the only place an error becomes a code.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// Input the command refuses before touching anything.
    #[error("{0}")]
    Input(String),
    /// The lock library failed (or refused its input).
    #[error(transparent)]
    Lock(#[from] fencelock::Error),
    /// A chaos run could not be carried out.
    #[error(transparent)]
    Chaos(#[from] ChaosError),
    /// A benchmark could not be carried out.
    #[error(transparent)]
    Bench(#[from] BenchError),
    /// The server did not answer within the time the command had.
    #[error("no answer from {server} within {}", crate::duration::shown(*.within))]
    NoAnswer {
        /// The server, as its spec names it (password hidden).
        server: String,
        /// The time it had.
        within: std::time::Duration,
    },
    /// A process or terminal operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
}

impl CliError {
    /// An [`Io`](Self::Io) error.
    pub(crate) fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        CliError::Io {
            what: what.into(),
            source,
        }
    }

    /// The exit status: [`Exit::Usage`] for bad input, [`Exit::Failure`] otherwise.
    pub fn exit(&self) -> Exit {
        let input = match self {
            CliError::Input(_) => true,
            CliError::Lock(e) | CliError::Bench(BenchError::Fencelock(e)) => e.is_input(),
            CliError::Chaos(e) => e.is_input(),
            CliError::Bench(_) | CliError::NoAnswer { .. } | CliError::Io { .. } => false,
        };
        if input { Exit::Usage } else { Exit::Failure }
    }
}
