//! `memory://`: the in-process backend as a [`BackendConfig`].

use std::sync::Arc;

use async_trait::async_trait;
use fencelock_core::tools::BenchKit;
use fencelock_core::{BackendConfig, Connected, Error, HostPort, Result, Scheme};

use crate::baseline::MemoryBaseline;
use crate::{MemoryLockBackend, MemoryStorage};

/// `memory://`: the in-process backend. It takes no host, path or options, and every
/// [`connect`](BackendConfig::connect) makes a new, empty backend and storage.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryConfig;

/// The scheme this crate owns, `memory://`, to register in a
/// [`Schemes`](fencelock_core::Schemes) registry.
pub const SCHEMES: &[Scheme] = &[Scheme::new(
    "memory",
    "the in-process backend (the default; nothing is shared between processes)",
    |url| Ok(Box::new(MemoryConfig::from_url(url)?)),
)];

impl MemoryConfig {
    /// Parses `memory://` (also `memory:///`, in any case).
    pub fn from_url(url: &str) -> Result<Self> {
        match url.split_once("://") {
            Some((scheme, "" | "/")) if scheme.eq_ignore_ascii_case("memory") => Ok(MemoryConfig),
            Some((scheme, _)) if scheme.eq_ignore_ascii_case("memory") => {
                Err(Error::config("memory:// takes no host, path or options"))
            }
            _ => Err(Error::config("a memory backend URL is memory://")),
        }
    }
}

#[async_trait]
impl BackendConfig for MemoryConfig {
    fn scheme(&self) -> &str {
        "memory"
    }

    fn to_url(&self) -> String {
        "memory://".to_owned()
    }

    fn redacted_url(&self) -> String {
        self.to_url()
    }

    fn hosts(&self) -> Vec<HostPort> {
        Vec::new()
    }

    fn with_hosts(&self, hosts: &[HostPort]) -> Result<Box<dyn BackendConfig>> {
        if hosts.is_empty() {
            Ok(Box::new(*self))
        } else {
            Err(Error::config(
                "memory:// reaches no server to point elsewhere",
            ))
        }
    }

    fn clone_config(&self) -> Box<dyn BackendConfig> {
        Box::new(*self)
    }

    fn is_shared(&self) -> bool {
        false
    }

    async fn connect(&self) -> Result<Connected> {
        Ok(Connected {
            backend: Arc::new(MemoryLockBackend::new()),
            storage: Arc::new(MemoryStorage::new()),
        })
    }

    /// Against a `tokio::sync::Mutex<HashMap>` lock table. Nothing outlives the process, so
    /// the kit has no cleanup.
    async fn bench_kit(&self) -> Result<Option<BenchKit>> {
        Ok(Some(BenchKit::new(
            "memory",
            self.connect().await?,
            Arc::new(MemoryBaseline::new()),
        )))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_the_bare_scheme_parses() {
        for url in ["memory://", "MEMORY:///", "Memory://"] {
            assert_eq!(MemoryConfig::from_url(url).unwrap(), MemoryConfig);
        }
        for url in [
            "memory://host",
            "memory:///path",
            "memory://?x=1",
            "redis://h",
        ] {
            assert!(MemoryConfig::from_url(url).is_err(), "{url}");
        }
        let config = (SCHEMES[0].parse)("memory://").unwrap();
        assert!(!config.is_shared());
        assert_eq!(config.to_url(), "memory://");
        assert!(config.with_hosts(&[HostPort::new("h", 1)]).is_err());
        assert!(config.with_hosts(&[]).is_ok());
    }
}
