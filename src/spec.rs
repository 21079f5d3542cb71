//! Backend specs: one URL names a backend and how to reach it.
//!
//! `BackendSpec::parse(url)?.connect().await?` is the front door from a URL to a lock backend
//! and its fenced storage. Each backend crate owns its own URL grammar (`RedisConfig::from_url`,
//! `RedlockConfig::from_url`, `PgConfig::from_url`); this module only looks at the scheme and
//! hands the URL to the crate that owns it, so a spec travels as a typed config from here on.
//!
//! | scheme | backend | grammar |
//! |---|---|---|
//! | `memory://` | `MemoryLockBackend` + `MemoryStorage` (in-process; the default) | no host, path or options |
//! | `redis://`, `rediss://` | `RedisLockBackend` + `RedisStorage` (feature `redis`; `rediss://` with `tls`) | `RedisConfig::from_url` |
//! | `redlock://` | `Redlock` over independent Redis servers + `RedisStorage` on one of them (feature `redis`) | `RedlockConfig::from_url` |
//! | `redis+cluster://`, `rediss+cluster://` | `RedisClusterBackend` + `RedisStorage` on a Redis Cluster (feature `redis`) | `RedisClusterConfig::from_url` |
//! | `postgres://`, `postgresql://` | `PgLeaseBackend` or `PgAdvisoryBackend` + `PgStorage` (feature `postgres`) | `PgConfig::from_url` |
//! | `mysql://`, `mariadb://` | `MySqlLockBackend` (`GET_LOCK`) + `MySqlStorage` (feature `mysql`) | `MySqlConfig::from_url` |
//! | `etcd://` | `EtcdLockBackend` + `EtcdStorage` on an etcd cluster (feature `etcd`) | `EtcdConfig::from_url` |

use std::fmt;
use std::sync::Arc;

use fencelock_core::{Error, FencedStorage, HostPort, LockBackend, Result};

/// Every scheme this crate knows, with the feature that brings it.
const SCHEMES: &[(&str, &str)] = &[
    ("memory", "memory"),
    ("redis", "redis"),
    ("rediss", "redis"),
    ("redlock", "redis"),
    ("redis+cluster", "redis"),
    ("rediss+cluster", "redis"),
    ("postgres", "postgres"),
    ("postgresql", "postgres"),
    ("mysql", "mysql"),
    ("mariadb", "mysql"),
    ("etcd", "etcd"),
];

/// A parsed backend spec: the typed config of the backend the URL names. Parsing validates the
/// whole URL (the owning crate's `from_url`); connecting happens in [`BackendSpec::connect`].
///
/// `Display` and `Debug` hide passwords; [`to_url`](Self::to_url) gives the URL back whole.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fencelock::Result<()> {
/// use fencelock::spec::BackendSpec;
/// use fencelock::{FencedStorageExt, Locker};
///
/// // Any spec: `redis://host:6379`, `postgres://user@host/db?backend=lease`, `etcd://h1:2379`...
/// let spec = BackendSpec::parse("memory://")?;
/// let connected = spec.connect().await?;
/// let locker = Locker::new(connected.backend);
/// let guard = locker.lock("jobs/nightly").await?;
/// connected.storage.write_key("jobs/nightly", guard.fence(), b"started").await?;
/// guard.release().await?;
///
/// // Passwords never show, and a bad URL is a typed error naming what is wrong.
/// assert!(BackendSpec::parse("redis://:secret@127.0.0.1:99999").is_err());
/// # Ok(()) }
/// ```
#[derive(Clone, PartialEq)]
#[non_exhaustive]
// A spec is parsed once per process and moved rarely: boxing the configs would only add noise
// to every `match` users write.
#[allow(clippy::large_enum_variant)]
pub enum BackendSpec {
    /// `memory://`: the in-process backend. Every `connect` makes a new, empty one.
    Memory,
    /// `redis://` or `rediss://`: one Redis server.
    #[cfg(feature = "redis")]
    Redis(fencelock_redis::RedisConfig),
    /// `redlock://`: Redlock over independent Redis servers.
    #[cfg(feature = "redis")]
    Redlock(fencelock_redis::RedlockConfig),
    /// `redis+cluster://` or `rediss+cluster://`: a Redis Cluster, reached through seed nodes.
    #[cfg(feature = "redis")]
    RedisCluster(fencelock_redis::RedisClusterConfig),
    /// `postgres://` or `postgresql://`: one PostgreSQL database, either lock backend.
    #[cfg(feature = "postgres")]
    Postgres(fencelock_postgres::PgConfig),
    /// `mysql://` or `mariadb://`: one MySQL or MariaDB database.
    #[cfg(feature = "mysql")]
    MySql(fencelock_mysql::MySqlConfig),
    /// `etcd://`: an etcd cluster.
    #[cfg(feature = "etcd")]
    Etcd(fencelock_etcd::EtcdConfig),
}

/// A connected backend and its storage.
#[derive(Debug, Clone)]
pub struct Connected {
    /// The lock backend.
    pub backend: Arc<dyn LockBackend>,
    /// The fenced storage that lives next to it.
    pub storage: Arc<dyn FencedStorage>,
}

impl BackendSpec {
    /// Parses `spec`. An unknown scheme, a malformed URL or a backend this build lacks is
    /// [`Error::InvalidConfig`]; no message repeats a password.
    pub fn parse(spec: &str) -> Result<Self> {
        let Some((scheme, rest)) = spec.split_once("://") else {
            return Err(Error::config(format!(
                "a backend spec is a URL such as redis://127.0.0.1:6379 (schemes: {})",
                scheme_list()
            )));
        };
        let scheme = scheme.to_ascii_lowercase();
        let Some(&(_, feature)) = SCHEMES.iter().find(|(known, _)| *known == scheme) else {
            return Err(Error::config(format!(
                "unknown backend scheme {scheme:?} (expected one of {})",
                scheme_list()
            )));
        };
        match (scheme.as_str(), feature) {
            ("memory", _) => {
                if !matches!(rest, "" | "/") {
                    return Err(Error::config("memory:// takes no host, path or options"));
                }
                if cfg!(feature = "memory") {
                    Ok(BackendSpec::Memory)
                } else {
                    Err(not_built(feature))
                }
            }
            #[cfg(feature = "redis")]
            ("redlock", _) => fencelock_redis::RedlockConfig::from_url(spec).map(Self::Redlock),
            #[cfg(feature = "redis")]
            ("redis+cluster" | "rediss+cluster", _) => {
                fencelock_redis::RedisClusterConfig::from_url(spec).map(Self::RedisCluster)
            }
            #[cfg(feature = "redis")]
            (_, "redis") => fencelock_redis::RedisConfig::from_url(spec).map(Self::Redis),
            #[cfg(feature = "postgres")]
            (_, "postgres") => fencelock_postgres::PgConfig::from_url(spec).map(Self::Postgres),
            #[cfg(feature = "mysql")]
            (_, "mysql") => fencelock_mysql::MySqlConfig::from_url(spec).map(Self::MySql),
            #[cfg(feature = "etcd")]
            (_, "etcd") => fencelock_etcd::EtcdConfig::from_url(spec).map(Self::Etcd),
            (_, feature) => Err(not_built(feature)),
        }
    }

    /// Connects to the backend and its storage.
    pub async fn connect(&self) -> Result<Connected> {
        match self {
            BackendSpec::Memory => memory(),
            #[cfg(feature = "redis")]
            BackendSpec::Redis(config) => {
                let backend = config.connect().await?;
                Ok(Connected {
                    storage: Arc::new(backend.storage()),
                    backend: Arc::new(backend),
                })
            }
            #[cfg(feature = "redis")]
            BackendSpec::Redlock(config) => Ok(Connected {
                backend: Arc::new(config.connect().await?),
                storage: Arc::new(config.connect_storage().await?),
            }),
            #[cfg(feature = "redis")]
            BackendSpec::RedisCluster(config) => {
                let backend = config.connect().await?;
                Ok(Connected {
                    storage: Arc::new(backend.storage()),
                    backend: Arc::new(backend),
                })
            }
            #[cfg(feature = "postgres")]
            BackendSpec::Postgres(config) => {
                let db = config.clone().connect().await?;
                Ok(Connected {
                    backend: db.backend(),
                    storage: Arc::new(db.storage()),
                })
            }
            #[cfg(feature = "mysql")]
            BackendSpec::MySql(config) => {
                let db = config.connect().await?;
                Ok(Connected {
                    backend: db.backend(),
                    storage: Arc::new(db.storage()),
                })
            }
            #[cfg(feature = "etcd")]
            BackendSpec::Etcd(config) => {
                let cluster = config.connect().await?;
                Ok(Connected {
                    backend: cluster.backend(),
                    storage: Arc::new(cluster.storage()),
                })
            }
        }
    }

    /// Whether the backend can be shared between processes (everything but `memory://`).
    pub fn is_shared(&self) -> bool {
        !matches!(self, BackendSpec::Memory)
    }

    /// The whole URL, credentials included, that [`parse`](Self::parse) reads back as `self`.
    pub fn to_url(&self) -> String {
        match self {
            BackendSpec::Memory => "memory://".to_owned(),
            #[cfg(feature = "redis")]
            BackendSpec::Redis(config) => config.to_url(),
            #[cfg(feature = "redis")]
            BackendSpec::Redlock(config) => config.to_url(),
            #[cfg(feature = "redis")]
            BackendSpec::RedisCluster(config) => config.to_url(),
            #[cfg(feature = "postgres")]
            BackendSpec::Postgres(config) => config.to_url(),
            #[cfg(feature = "mysql")]
            BackendSpec::MySql(config) => config.to_url(),
            #[cfg(feature = "etcd")]
            BackendSpec::Etcd(config) => config.to_url(),
        }
    }

    /// The servers the lock backend reaches, in URL order (none for `memory://`).
    pub fn hosts(&self) -> Vec<HostPort> {
        match self {
            BackendSpec::Memory => Vec::new(),
            #[cfg(feature = "redis")]
            BackendSpec::Redis(config) => config.hosts(),
            #[cfg(feature = "redis")]
            BackendSpec::Redlock(config) => config.hosts(),
            #[cfg(feature = "redis")]
            BackendSpec::RedisCluster(config) => config.hosts(),
            #[cfg(feature = "postgres")]
            BackendSpec::Postgres(config) => config.hosts(),
            #[cfg(feature = "mysql")]
            BackendSpec::MySql(config) => config.hosts(),
            #[cfg(feature = "etcd")]
            BackendSpec::Etcd(config) => config.hosts(),
        }
    }
}

impl BackendSpec {
    /// The same spec pointed at other servers (a fault proxy, a test server), one per entry of
    /// [`hosts`](Self::hosts) in the same order; a different count is [`Error::InvalidConfig`].
    /// Only the addresses change: credentials, database, schema and options stay.
    pub fn with_hosts(self, hosts: &[HostPort]) -> Result<Self> {
        Ok(match self {
            BackendSpec::Memory if hosts.is_empty() => BackendSpec::Memory,
            BackendSpec::Memory => {
                return Err(Error::config(
                    "memory:// reaches no server to point elsewhere",
                ));
            }
            #[cfg(feature = "redis")]
            BackendSpec::Redis(config) => BackendSpec::Redis(config.with_hosts(hosts)?),
            #[cfg(feature = "redis")]
            BackendSpec::Redlock(config) => BackendSpec::Redlock(config.with_hosts(hosts)?),
            #[cfg(feature = "redis")]
            BackendSpec::RedisCluster(config) => {
                BackendSpec::RedisCluster(config.with_hosts(hosts)?)
            }
            #[cfg(feature = "postgres")]
            BackendSpec::Postgres(config) => BackendSpec::Postgres(config.with_hosts(hosts)?),
            #[cfg(feature = "mysql")]
            BackendSpec::MySql(config) => BackendSpec::MySql(config.with_hosts(hosts)?),
            #[cfg(feature = "etcd")]
            BackendSpec::Etcd(config) => BackendSpec::Etcd(config.with_hosts(hosts)?),
        })
    }
}

#[cfg(feature = "memory")]
fn memory() -> Result<Connected> {
    Ok(Connected {
        backend: Arc::new(fencelock_memory::MemoryLockBackend::new()),
        storage: Arc::new(fencelock_memory::MemoryStorage::new()),
    })
}

#[cfg(not(feature = "memory"))]
fn memory() -> Result<Connected> {
    Err(not_built("memory"))
}

fn scheme_list() -> String {
    SCHEMES
        .iter()
        .map(|(scheme, _)| format!("{scheme}://"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn not_built(feature: &str) -> Error {
    Error::config(format!(
        "this build of fencelock lacks the `{feature}` feature"
    ))
}

impl fmt::Display for BackendSpec {
    /// The URL with its password hidden.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendSpec::Memory => f.write_str("memory://"),
            #[cfg(feature = "redis")]
            BackendSpec::Redis(config) => f.write_str(&config.redacted_url()),
            #[cfg(feature = "redis")]
            BackendSpec::Redlock(config) => f.write_str(&config.redacted_url()),
            #[cfg(feature = "redis")]
            BackendSpec::RedisCluster(config) => f.write_str(&config.redacted_url()),
            #[cfg(feature = "postgres")]
            BackendSpec::Postgres(config) => f.write_str(&config.redacted_url()),
            #[cfg(feature = "mysql")]
            BackendSpec::MySql(config) => f.write_str(&config.redacted_url()),
            #[cfg(feature = "etcd")]
            BackendSpec::Etcd(config) => f.write_str(&config.redacted_url()),
        }
    }
}

impl fmt::Debug for BackendSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BackendSpec({self})")
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

    /// Every spec here carries the password `secret`, which no error or display may show.
    fn refused(spec: &str) -> String {
        match BackendSpec::parse(spec) {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(!message.contains("secret"), "{spec:?}: {message}");
                message
            }
            other => panic!("{spec:?}: expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn parses_memory() {
        assert_eq!(
            BackendSpec::parse("memory://").unwrap(),
            BackendSpec::Memory
        );
        assert_eq!(
            BackendSpec::parse("MEMORY:///").unwrap(),
            BackendSpec::Memory
        );
        assert!(!BackendSpec::Memory.is_shared());
        for spec in ["memory://host", "memory:///path", "memory://?x=1"] {
            refused(spec);
        }
    }

    #[test]
    fn refuses_what_is_not_a_spec_without_echoing_it() {
        assert!(refused("").contains("URL"));
        assert!(refused("redis:secret@host").contains("URL"));
        assert!(refused("nosuch://u:secret@x").contains("\"nosuch\""));
    }

    #[cfg(feature = "redis")]
    #[test]
    fn dispatches_redis_schemes_to_their_crate() {
        let spec = BackendSpec::parse("redis://app:secret@127.0.0.1:6380/2").unwrap();
        assert!(matches!(spec, BackendSpec::Redis(_)));
        assert!(spec.is_shared());
        assert!(!spec.to_string().contains("secret"));
        assert!(!format!("{spec:?}").contains("secret"));
        assert_eq!(BackendSpec::parse(&spec.to_url()).unwrap(), spec);
        assert_eq!(spec.hosts(), vec![HostPort::new("127.0.0.1", 6380)]);
        let moved = spec
            .clone()
            .with_hosts(&[HostPort::new("proxy", 7000)])
            .unwrap();
        assert_eq!(moved.to_url(), "redis://app:secret@proxy:7000/2");
        assert!(spec.with_hosts(&[]).is_err());

        let spec = BackendSpec::parse("redlock://:secret@h1:1,h2:2,h3:3").unwrap();
        assert!(matches!(spec, BackendSpec::Redlock(_)));
        assert_eq!(spec.hosts().len(), 3);
        assert_eq!(BackendSpec::parse(&spec.to_url()).unwrap(), spec);
        assert!(!spec.to_string().contains("secret"));

        refused("redis://:secret@127.0.0.1:99999");
        refused("redis://:secret@:6379");
        refused("redlock://:secret@h1,,h2");

        let spec = BackendSpec::parse("redis+cluster://app:secret@c1:7000,c2:7001,c3").unwrap();
        assert!(matches!(spec, BackendSpec::RedisCluster(_)));
        assert!(spec.is_shared());
        assert_eq!(BackendSpec::parse(&spec.to_url()).unwrap(), spec);
        assert_eq!(
            spec.hosts(),
            vec![
                HostPort::new("c1", 7000),
                HostPort::new("c2", 7001),
                HostPort::new("c3", 6379)
            ]
        );
        assert_eq!(
            spec.to_string(),
            "redis+cluster://app:***@c1:7000,c2:7001,c3:6379"
        );
        assert!(!format!("{spec:?}").contains("secret"));
        let through = [
            HostPort::new("p", 1),
            HostPort::new("p", 2),
            HostPort::new("p", 3),
        ];
        let moved = spec.clone().with_hosts(&through).unwrap();
        assert_eq!(moved.to_url(), "redis+cluster://app:secret@p:1,p:2,p:3");
        assert!(spec.with_hosts(&through[..1]).is_err());
        assert!(BackendSpec::parse("REDIS+CLUSTER://h1").is_ok());
        refused("redis+cluster://:secret@h1,,h2");
        refused("redis+cluster://:secret@h1/0");
        refused("redis+cluster://:secret@h1:99999");
    }

    #[cfg(feature = "postgres")]
    #[test]
    fn dispatches_postgres_schemes_to_their_crate() {
        let spec =
            BackendSpec::parse("postgresql://app:secret@db:5433/test?backend=advisory").unwrap();
        assert!(matches!(spec, BackendSpec::Postgres(_)));
        assert_eq!(BackendSpec::parse(&spec.to_url()).unwrap(), spec);
        assert!(!spec.to_string().contains("secret"));
        assert_eq!(spec.hosts(), vec![HostPort::new("db", 5433)]);
        refused("postgres://app:secret@db/test?backend=leese");
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn dispatches_mysql_schemes_to_their_crate() {
        let spec = BackendSpec::parse("mysql://root:secret@db:3307/test").unwrap();
        assert!(matches!(spec, BackendSpec::MySql(_)));
        assert_eq!(BackendSpec::parse(&spec.to_url()).unwrap(), spec);
        assert!(!spec.to_string().contains("secret"));
        assert_eq!(spec.hosts(), vec![HostPort::new("db", 3307)]);
        refused("mysql://root:secret@db:99999/test");
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn dispatches_etcd_to_its_crate() {
        let spec = BackendSpec::parse("etcd://e1:2379,e2:2380,e3").unwrap();
        assert!(matches!(spec, BackendSpec::Etcd(_)));
        assert_eq!(BackendSpec::parse(&spec.to_url()).unwrap(), spec);
        assert_eq!(spec.hosts().len(), 3);
    }

    #[cfg(not(feature = "etcd"))]
    #[test]
    fn names_the_missing_etcd_feature() {
        assert!(refused("etcd://u:secret@e1:2379").contains("`etcd` feature"));
    }

    #[cfg(all(feature = "redis", feature = "postgres", feature = "mysql"))]
    #[test]
    fn every_backend_is_pointed_at_other_servers() {
        let through = [HostPort::new("127.0.0.1", 1), HostPort::new("127.0.0.1", 2)];
        let redlock = BackendSpec::parse("redlock://:pw@a:10,b:20/3").unwrap();
        let moved = redlock.with_hosts(&through).unwrap();
        assert_eq!(moved.hosts(), through);
        assert!(moved.to_url().contains(":pw@"), "{}", moved.to_url());
        let pg = BackendSpec::parse("postgres://u:pw@db/test?backend=advisory&schema=s").unwrap();
        let moved = pg.with_hosts(&through[..1]).unwrap();
        assert_eq!(moved.hosts(), through[..1]);
        let url = moved.to_url();
        assert!(
            url.contains("backend=advisory") && url.contains("schema=s"),
            "{url}"
        );
        let mysql = BackendSpec::parse("mysql://root:pw@db:3306/test").unwrap();
        let moved = mysql.with_hosts(&through[..1]).unwrap();
        assert_eq!(moved.hosts(), through[..1]);
        assert!(BackendSpec::Memory.with_hosts(&through[..1]).is_err());
        assert_eq!(
            BackendSpec::Memory.with_hosts(&[]).unwrap(),
            BackendSpec::Memory
        );
    }

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn names_the_missing_feature() {
        assert!(refused("postgres://u:secret@db/test").contains("`postgres` feature"));
    }
}
