//! Backend specs: one URL names a backend and how to reach it, for the CLI, tests and benches.
//!
//! | spec | backend |
//! |---|---|
//! | `memory://` | [`MemoryLockBackend`](fencelock_memory::MemoryLockBackend) + `MemoryStorage` (in-process) |
//! | `redis://[user][:password@]host[:port][/db]` | `RedisLockBackend` + `RedisStorage` (feature `redis`; `rediss://` with `tls`) |
//! | `postgres://user@host[:port]/db[?backend=lease\|advisory][&schema=name]` (or `postgresql://`) | `PgLeaseBackend` (default) or `PgAdvisoryBackend`, + `PgStorage` (feature `postgres`); other query parameters go to the driver |

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
    /// `postgres://` or `postgresql://`: one PostgreSQL database.
    Postgres {
        /// The driver URL, without fencelock's own parameters (credentials included;
        /// `Display` hides the password).
        url: String,
        /// Which lock backend to use (`?backend=`).
        backend: PgBackendKind,
        /// The schema for fencelock's tables (`?schema=`); `None` means the default.
        schema: Option<String>,
    },
}

/// The PostgreSQL lock backends a `postgres://` spec can choose with `?backend=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PgBackendKind {
    /// `lease` (default): the lease table.
    #[default]
    Lease,
    /// `advisory`: session advisory locks.
    Advisory,
}

/// A connected backend and its storage.
#[derive(Debug, Clone)]
pub struct Connected {
    /// The lock backend.
    pub backend: Arc<dyn LockBackend>,
    /// The fenced storage that lives next to it.
    pub storage: Arc<dyn FencedStorage>,
}

const SCHEMES: &str = "memory://, redis://, rediss://, postgres://, postgresql://";

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
            "postgres" | "postgresql" => parse_postgres(&url),
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
            #[cfg(feature = "postgres")]
            BackendSpec::Postgres {
                url,
                backend,
                schema,
            } => {
                let mut config = fencelock_postgres::PgConfig::from_url(url)?;
                if let Some(schema) = schema {
                    config = config.schema(schema.as_str());
                }
                let db = config.connect().await?;
                let backend: Arc<dyn LockBackend> = match backend {
                    PgBackendKind::Lease => Arc::new(db.lease_backend()),
                    PgBackendKind::Advisory => Arc::new(db.advisory_backend()),
                };
                Ok(Connected {
                    backend,
                    storage: Arc::new(db.storage()),
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

/// `postgres://` / `postgresql://`: a host, fencelock's `backend=` and `schema=` parameters
/// (each at most once), and any driver parameters, which are passed on.
fn parse_postgres(url: &Url) -> Result<BackendSpec> {
    let shown = redact(url);
    if url.host_str().is_none_or(str::is_empty) {
        return Err(Error::config(format!(
            "postgres spec {shown:?} names no host"
        )));
    }
    if url.fragment().is_some() {
        return Err(Error::config(format!(
            "postgres spec {shown:?} takes no fragment"
        )));
    }
    let mut backend = None;
    let mut schema = None;
    let mut driver = Vec::new();
    for (name, value) in url.query_pairs() {
        match &*name {
            "backend" if backend.is_none() => {
                backend = Some(match &*value {
                    "lease" => PgBackendKind::Lease,
                    "advisory" => PgBackendKind::Advisory,
                    other => {
                        return Err(Error::config(format!(
                            "postgres spec {shown:?}: backend {other:?} is not `lease` or `advisory`"
                        )));
                    }
                });
            }
            "schema" if schema.is_none() => {
                let valid = value
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
                    && value
                        .chars()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
                    && value.len() <= 48;
                if !valid {
                    return Err(Error::config(format!(
                        "postgres spec {shown:?}: schema {value:?} must be lowercase ASCII \
                         letters, digits and `_`, not starting with a digit, at most 48 bytes"
                    )));
                }
                schema = Some(value.into_owned());
            }
            "backend" | "schema" => {
                return Err(Error::config(format!(
                    "postgres spec {shown:?} repeats `{name}`"
                )));
            }
            _ => driver.push((name.into_owned(), value.into_owned())),
        }
    }
    let mut stripped = url.clone();
    if driver.is_empty() {
        stripped.set_query(None);
    } else {
        stripped.query_pairs_mut().clear().extend_pairs(&driver);
    }
    if cfg!(feature = "postgres") {
        Ok(BackendSpec::Postgres {
            url: stripped.to_string(),
            backend: backend.unwrap_or_default(),
            schema,
        })
    } else {
        Err(not_built("postgres"))
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
            BackendSpec::Postgres {
                url,
                backend,
                schema,
            } => {
                let Ok(mut parsed) = Url::parse(url) else {
                    return f.write_str("postgres://<unparsable>");
                };
                if parsed.password().is_some() {
                    let _ = parsed.set_password(Some("***"));
                }
                if *backend == PgBackendKind::Advisory {
                    parsed.query_pairs_mut().append_pair("backend", "advisory");
                }
                if let Some(schema) = schema {
                    parsed.query_pairs_mut().append_pair("schema", schema);
                }
                f.write_str(parsed.as_str())
            }
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

    #[cfg(feature = "postgres")]
    #[test]
    fn parses_postgres() {
        let spec = BackendSpec::parse(
            "postgresql://app:secret@db:5433/test?backend=advisory&sslmode=disable&schema=locks",
        )
        .unwrap();
        assert_eq!(
            spec,
            BackendSpec::Postgres {
                url: "postgresql://app:secret@db:5433/test?sslmode=disable".into(),
                backend: PgBackendKind::Advisory,
                schema: Some("locks".into()),
            }
        );
        let shown = spec.to_string();
        assert!(!shown.contains("secret"), "{shown}");
        assert_eq!(
            BackendSpec::parse(&shown.replace("***", "secret")).unwrap(),
            spec
        );
        assert_eq!(
            BackendSpec::parse("postgres://postgres@127.0.0.1:5432/test").unwrap(),
            BackendSpec::Postgres {
                url: "postgres://postgres@127.0.0.1:5432/test".into(),
                backend: PgBackendKind::Lease,
                schema: None,
            }
        );
    }

    #[test]
    fn refuses_bad_postgres_specs() {
        for spec in [
            "postgres://",
            "postgres:///test",
            "postgres://host/db?backend=",
            "postgres://host/db?backend=redlock",
            "postgres://host/db?backend=lease&backend=advisory",
            "postgres://host/db?schema=Upper",
            "postgres://host/db?schema=1st",
            "postgres://host/db?schema=a-b",
            "postgres://host/db?schema=a&schema=b",
            "postgres://host/db#frag",
        ] {
            assert!(
                matches!(BackendSpec::parse(spec), Err(Error::InvalidConfig { .. })),
                "{spec:?}"
            );
        }
    }
}
