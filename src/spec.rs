//! Backend specs: one URL names a backend and how to reach it, for the CLI, tests and benches.
//!
//! | spec | backend |
//! |---|---|
//! | `memory://` | [`MemoryLockBackend`](fencelock_memory::MemoryLockBackend) + `MemoryStorage` (in-process) |
//! | `redis://[user][:password@]host[:port][/db]` | `RedisLockBackend` + `RedisStorage` (feature `redis`; `rediss://` with `tls`) |

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
    /// `redis://` or `rediss://`: one Redis server; holds the full URL (credentials included;
    /// `Display` hides the password).
    Redis(String),
}

/// A connected backend and its storage.
#[derive(Debug, Clone)]
pub struct Connected {
    /// The lock backend.
    pub backend: Arc<dyn LockBackend>,
    /// The fenced storage that lives next to it.
    pub storage: Arc<dyn FencedStorage>,
}

const SCHEMES: &str = "memory://, redis://, rediss://";

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
            "redis" | "rediss" => parse_redis(spec, &url),
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
            #[cfg(feature = "redis")]
            BackendSpec::Redis(url) => {
                let backend = fencelock_redis::RedisConfig::new(url).connect().await?;
                Ok(Connected {
                    storage: Arc::new(backend.storage()),
                    backend: Arc::new(backend),
                })
            }
            #[allow(unreachable_patterns)]
            _ => Err(not_built(&self.to_string())),
        }
    }
}

/// `redis://` / `rediss://`: a host, an optional numeric database, nothing else.
fn parse_redis(spec: &str, url: &Url) -> Result<BackendSpec> {
    let shown = redact(url);
    if url.host_str().is_none_or(str::is_empty) {
        return Err(Error::config(format!("redis spec {shown:?} names no host")));
    }
    let db = url.path().trim_start_matches('/');
    if !db.is_empty() && (url.path().matches('/').count() > 1 || db.parse::<u32>().is_err()) {
        return Err(Error::config(format!(
            "redis spec {shown:?}: the path must be a database number"
        )));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(Error::config(format!(
            "redis spec {shown:?} takes no options"
        )));
    }
    if url.scheme() == "rediss" && !cfg!(feature = "tls") {
        return Err(not_built("tls"));
    }
    if cfg!(feature = "redis") {
        Ok(BackendSpec::Redis(spec.to_owned()))
    } else {
        Err(not_built("redis"))
    }
}

/// `url` with its password replaced by `***`.
fn redact(url: &Url) -> String {
    let mut url = url.clone();
    if url.password().is_some() {
        let _ = url.set_password(Some("***"));
    }
    url.to_string()
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
            BackendSpec::Redis(url) => match Url::parse(url) {
                Ok(parsed) => f.write_str(&redact(&parsed)),
                Err(_) => f.write_str("redis://<unparsable>"),
            },
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

    #[cfg(feature = "redis")]
    #[test]
    fn parses_redis() {
        for spec in [
            "redis://127.0.0.1",
            "redis://127.0.0.1:6379",
            "redis://127.0.0.1:6379/",
            "redis://127.0.0.1:6379/3",
            "redis://app:secret@localhost:6380/0",
            "redis://:secret@[::1]:6379",
        ] {
            assert_eq!(
                BackendSpec::parse(spec).unwrap(),
                BackendSpec::Redis(spec.to_owned())
            );
        }
        let shown = BackendSpec::parse("redis://app:secret@localhost:6380/0")
            .unwrap()
            .to_string();
        assert!(!shown.contains("secret"), "{shown}");
    }

    #[test]
    fn refuses_bad_redis_specs() {
        for spec in [
            "redis://",
            "redis:///0",
            "redis://host/notadb",
            "redis://host/0/1",
            "redis://host/-1",
            "redis://host?prefix=x",
            "redis://host#frag",
            "redis:host",
        ] {
            match BackendSpec::parse(spec) {
                Err(Error::InvalidConfig { message, .. }) => {
                    assert!(!message.contains("secret"), "{message}");
                }
                other => panic!("{spec:?}: expected InvalidConfig, got {other:?}"),
            }
        }
        let tls = BackendSpec::parse("rediss://host:6380");
        if cfg!(all(feature = "redis", feature = "tls")) {
            assert!(tls.is_ok());
        } else {
            assert!(matches!(tls, Err(Error::InvalidConfig { .. })));
        }
        if !cfg!(feature = "redis") {
            assert!(matches!(
                BackendSpec::parse("redis://127.0.0.1"),
                Err(Error::InvalidConfig { .. })
            ));
        }
        match BackendSpec::parse("redis://u:secret@host/x") {
            Err(Error::InvalidConfig { message, .. }) => assert!(!message.contains("secret")),
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
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
