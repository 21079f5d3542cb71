//! Backend specs: one URL names a backend and how to reach it, for the CLI, tests and benches.
//!
//! | spec | backend |
//! |---|---|
//! | `memory://` | [`MemoryLockBackend`](fencelock_memory::MemoryLockBackend) + `MemoryStorage` (in-process) |
//! | `redis://[user][:password@]host[:port][/db]` | `RedisLockBackend` + `RedisStorage` (feature `redis`; `rediss://` with `tls`) |
//! | `redlock://[user][:password@]host1:port1,host2:port2,...[/db][?storage=redis://...]` | `Redlock` over the listed independent servers, each reached as `redis://[user][:password@]hostN:portN[/db]` (one set of credentials and one database number for every node), + `RedisStorage` on the `storage=` server, by default the first node (feature `redis`); see the note below |
//! | `postgres://user@host[:port]/db[?backend=lease\|advisory][&schema=name]` (or `postgresql://`) | `PgLeaseBackend` (default) or `PgAdvisoryBackend`, + `PgStorage` (feature `postgres`); other query parameters go to the driver |
//!
//! Where a `redlock://` spec keeps the data: the lock is Redlock, the data lives on one Redis
//! server, the first node unless `storage=` names another (a `redis://` URL, percent-encoded
//! if it carries a query). Point it at a server that persists its writes: a node killed
//! without persistence loses the stored values, which is data loss, not a fencing failure
//! (the fence keeps stale writers out; it cannot bring lost data back). Nodes with different
//! credentials, TLS nodes and other options: build a `RedlockConfig` instead.

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
    /// `redlock://`: Redlock over independent Redis servers.
    Redlock {
        /// Each node's `redis://` URL (credentials included; `Display` hides the password).
        nodes: Vec<String>,
        /// The `redis://` URL of the server that holds the fenced data (`?storage=`, by
        /// default the first node).
        storage: String,
    },
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

const SCHEMES: &str = "memory://, redis://, rediss://, redlock://, postgres://, postgresql://";
const REDLOCK: &str = "redlock://";

impl BackendSpec {
    /// Parses `spec`. Unknown schemes, malformed URLs and backends this build lacks are
    /// [`Error::InvalidConfig`].
    pub fn parse(spec: &str) -> Result<Self> {
        // A list of hosts is not a URL authority, so `redlock://` is split by hand.
        if spec
            .get(..REDLOCK.len())
            .is_some_and(|scheme| scheme.eq_ignore_ascii_case(REDLOCK))
        {
            return parse_redlock(&spec[REDLOCK.len()..]);
        }
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
            #[cfg(feature = "redis")]
            BackendSpec::Redlock { nodes, storage } => {
                let backend = fencelock_redis::RedlockConfig::new(nodes.iter().cloned())
                    .connect()
                    .await?;
                let storage = fencelock_redis::RedisConfig::new(storage.as_str())
                    .connect_storage()
                    .await?;
                Ok(Connected {
                    backend: Arc::new(backend),
                    storage: Arc::new(storage),
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

/// `redlock://` without its scheme: `[userinfo@]host:port,host:port,...[/db][?storage=url]`.
/// Each node becomes `redis://[userinfo@]host:port[/db]` and is checked like a `redis://`
/// spec; `storage` must be a `redis://` or `rediss://` spec.
fn parse_redlock(rest: &str) -> Result<BackendSpec> {
    let (rest, fragment) = match rest.split_once('#') {
        Some((rest, fragment)) => (rest, Some(fragment)),
        None => (rest, None),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let (userinfo, hosts) = match authority.rsplit_once('@') {
        Some((userinfo, hosts)) => (Some(userinfo), hosts),
        None => (None, authority),
    };
    let shown = format!(
        "{REDLOCK}{}{hosts}{path}",
        if userinfo.is_some() { "***@" } else { "" }
    );
    if fragment.is_some() {
        return Err(Error::config(format!(
            "redlock spec {shown:?} takes no fragment"
        )));
    }
    if userinfo.is_some_and(|u| u.contains([',', '@'])) {
        return Err(Error::config(format!(
            "redlock spec {shown:?}: one set of credentials goes before the first node, \
             percent-encoded"
        )));
    }
    let mut nodes = Vec::new();
    for host in hosts.split(',') {
        if host.is_empty() {
            return Err(Error::config(format!(
                "redlock spec {shown:?} lists an empty node"
            )));
        }
        let node = match userinfo {
            Some(userinfo) => format!("redis://{userinfo}@{host}{path}"),
            None => format!("redis://{host}{path}"),
        };
        let url = Url::parse(&node).map_err(|e| Error::InvalidConfig {
            message: format!("redlock spec {shown:?}: node {host:?} is not host[:port]"),
            source: Some(Box::new(e)),
        })?;
        match parse_redis(&node, &url)? {
            BackendSpec::Redis(node) => nodes.push(node),
            _ => {
                return Err(Error::config(format!(
                    "redlock spec {shown:?} is not usable"
                )));
            }
        }
    }
    let mut storage = None;
    for (name, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*name {
            "storage" if storage.is_none() => {
                let url = Url::parse(&value).map_err(|e| Error::InvalidConfig {
                    message: format!("redlock spec {shown:?}: storage is not a redis:// URL"),
                    source: Some(Box::new(e)),
                })?;
                if !matches!(url.scheme(), "redis" | "rediss") {
                    return Err(Error::config(format!(
                        "redlock spec {shown:?}: storage must be a redis:// or rediss:// URL"
                    )));
                }
                match parse_redis(&value, &url)? {
                    BackendSpec::Redis(url) => storage = Some(url),
                    _ => {
                        return Err(Error::config(format!(
                            "redlock spec {shown:?}: storage is not usable"
                        )));
                    }
                }
            }
            "storage" => {
                return Err(Error::config(format!(
                    "redlock spec {shown:?} repeats `storage`"
                )));
            }
            other => {
                return Err(Error::config(format!(
                    "redlock spec {shown:?}: unknown option {other:?} (only `storage`)"
                )));
            }
        }
    }
    let storage = match storage {
        Some(storage) => storage,
        None => nodes
            .first()
            .cloned()
            .ok_or_else(|| Error::config(format!("redlock spec {shown:?} names no node")))?,
    };
    Ok(BackendSpec::Redlock { nodes, storage })
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
            BackendSpec::Redlock { nodes, storage } => {
                f.write_str(REDLOCK)?;
                let parsed: Vec<Url> = nodes.iter().filter_map(|n| Url::parse(n).ok()).collect();
                if let Some(first) = parsed.first()
                    && (!first.username().is_empty() || first.password().is_some())
                {
                    write!(f, "{}", first.username())?;
                    if first.password().is_some() {
                        f.write_str(":***")?;
                    }
                    f.write_str("@")?;
                }
                let hosts: Vec<&str> = parsed
                    .iter()
                    .map(|u| &u[url::Position::BeforeHost..url::Position::AfterPort])
                    .collect();
                f.write_str(&hosts.join(","))?;
                if let Some(first) = parsed.first() {
                    f.write_str(first.path())?;
                }
                if nodes.first() != Some(storage) {
                    match Url::parse(storage) {
                        Ok(storage) => write!(f, "?storage={}", redact(&storage))?,
                        Err(_) => f.write_str("?storage=<unparsable>")?,
                    }
                }
                Ok(())
            }
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

    #[cfg(feature = "redis")]
    #[test]
    fn parses_redlock() {
        assert_eq!(
            BackendSpec::parse("redlock://h1:6379,h2:6380,[::1]:6381").unwrap(),
            BackendSpec::Redlock {
                nodes: vec![
                    "redis://h1:6379".into(),
                    "redis://h2:6380".into(),
                    "redis://[::1]:6381".into(),
                ],
                storage: "redis://h1:6379".into(),
            }
        );
        let spec = BackendSpec::parse(
            "redlock://app:secret@h1:1,h2:2/3?storage=redis%3A%2F%2Fu%3Apw%40data%3A7%2F1",
        )
        .unwrap();
        assert_eq!(
            spec,
            BackendSpec::Redlock {
                nodes: vec![
                    "redis://app:secret@h1:1/3".into(),
                    "redis://app:secret@h2:2/3".into()
                ],
                storage: "redis://u:pw@data:7/1".into(),
            }
        );
        let shown = spec.to_string();
        assert!(
            !shown.contains("secret") && !shown.contains("pw"),
            "{shown}"
        );
        assert!(
            shown.starts_with("redlock://app:***@h1:1,h2:2/3?storage="),
            "{shown}"
        );
        assert_eq!(
            BackendSpec::parse("REDLOCK://h1").unwrap(),
            BackendSpec::Redlock {
                nodes: vec!["redis://h1".into()],
                storage: "redis://h1".into(),
            }
        );
    }

    #[cfg(feature = "redis")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redlock_spec_connects_lock_and_storage() {
        use fencelock_testkit::redis::RedisServer;
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::spawn()).collect();
        let data = RedisServer::spawn();
        let hosts: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
        let spec = format!("redlock://{}?storage={}", hosts.join(","), data.url());
        let connected = BackendSpec::parse(&spec).unwrap().connect().await.unwrap();
        assert_eq!(connected.backend.name(), "redlock");
        let key = fencelock_core::LockKey::new("spec/redlock").unwrap();
        let lease = connected
            .backend
            .try_acquire(&key, std::time::Duration::from_secs(10))
            .await
            .unwrap()
            .unwrap();
        connected
            .storage
            .write(&key, lease.fence(), b"v")
            .await
            .unwrap();
        assert!(connected.backend.release(&lease).await.unwrap());
        // The value went to the storage server, not to a lock node.
        let mut conn = redis::Client::open(data.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        let stored: Option<String> = redis::cmd("HGET")
            .arg("fencelock:{spec/redlock}:data")
            .arg("value")
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(stored.as_deref(), Some("v"));
    }

    #[test]
    fn refuses_bad_redlock_specs() {
        for spec in [
            "redlock://",
            "redlock://h1,,h2",
            "redlock://h1,",
            "redlock://h1:notaport,h2",
            "redlock://h1,h2/notadb",
            "redlock://h1,h2/0/1",
            "redlock://h1,h2?prefix=x",
            "redlock://h1,h2?storage=http://x",
            "redlock://h1,h2?storage=redis://x&storage=redis://y",
            "redlock://h1,h2#frag",
            "redlock://u:secret@h1,v:secret@h2",
            "redlock://u:secret@h1:x",
        ] {
            match BackendSpec::parse(spec) {
                Err(Error::InvalidConfig { message, .. }) => {
                    assert!(!message.contains("secret"), "{message}");
                }
                other => panic!("{spec:?}: expected InvalidConfig, got {other:?}"),
            }
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
