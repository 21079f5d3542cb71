//! Backend specs: one URL names a backend and how to reach it, for the CLI, tests and benches.
//!
//! | spec | backend |
//! |---|---|
//! | `memory://` | [`MemoryLockBackend`](fencelock_memory::MemoryLockBackend) + `MemoryStorage` (in-process) |

use std::fmt;
use std::sync::Arc;

use fencelock_core::{Error, FencedStorage, LockBackend, Result};
use url::Url;

/// A parsed backend spec. Parsing checks the scheme and the shape of the URL; connecting
/// happens in [`BackendSpec::connect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum BackendSpec {
    /// `memory://`: the in-process backend.
    Memory,
}

/// A connected backend and its storage.
#[derive(Debug, Clone)]
pub struct Connected {
    /// The lock backend.
    pub backend: Arc<dyn LockBackend>,
    /// The fenced storage that lives next to it.
    pub storage: Arc<dyn FencedStorage>,
}

const SCHEMES: &str = "memory://";

impl BackendSpec {
    /// Parses `spec`. Unknown schemes, malformed URLs and backends this build lacks are
    /// [`Error::InvalidConfig`].
    pub fn parse(spec: &str) -> Result<Self> {
        let url = Url::parse(spec).map_err(|e| Error::InvalidConfig {
            message: format!("backend spec {spec:?} is not a URL (expected one of {SCHEMES})"),
            source: Some(Box::new(e)),
        })?;
        match url.scheme() {
            "memory" => {
                if url.has_host() || !matches!(url.path(), "" | "/") || url.query().is_some() {
                    return Err(Error::config(format!(
                        "memory spec takes no host, path or options: {spec:?}"
                    )));
                }
                if cfg!(feature = "memory") {
                    Ok(BackendSpec::Memory)
                } else {
                    Err(not_built("memory"))
                }
            }
            other => Err(Error::config(format!(
                "unknown backend scheme {other:?} in {spec:?} (expected one of {SCHEMES})"
            ))),
        }
    }

    /// Connects to the backend.
    pub async fn connect(&self) -> Result<Connected> {
        match self {
            #[cfg(feature = "memory")]
            BackendSpec::Memory => Ok(Connected {
                backend: Arc::new(fencelock_memory::MemoryLockBackend::new()),
                storage: Arc::new(fencelock_memory::MemoryStorage::new()),
            }),
            #[allow(unreachable_patterns)]
            _ => Err(not_built(&self.to_string())),
        }
    }
}

fn not_built(feature: &str) -> Error {
    Error::config(format!(
        "this build of fencelock lacks the `{feature}` feature"
    ))
}

impl fmt::Display for BackendSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendSpec::Memory => f.write_str("memory://"),
        }
    }
}

impl std::str::FromStr for BackendSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_memory() {
        assert_eq!(
            BackendSpec::parse("memory://").unwrap(),
            BackendSpec::Memory
        );
    }

    #[test]
    fn refuses_bad_specs() {
        for spec in [
            "",
            "memory",
            "nosuch://x",
            "memory://host",
            "memory:///path",
            "memory://?x=1",
        ] {
            assert!(
                matches!(BackendSpec::parse(spec), Err(Error::InvalidConfig { .. })),
                "{spec:?}"
            );
        }
    }
}
