//! Backend specs: one URL names a backend and how to reach it.
//!
//! `BackendSpec::parse(url)?.connect().await?` is the front door from a URL to a lock backend
//! and its fenced storage. Each backend crate owns its URL grammar and exports its schemes
//! ([`Scheme`]); this module only keeps the registry ([`Schemes`]) they are found in. The
//! built-in backends are registered by feature; a backend written elsewhere joins with one
//! call to [`register`], and from then on every tool that takes a spec (this module, the
//! `fencelock` command built on `fencelock-cli`, benches and chaos runs) reaches it.
//!
//! The built-in backends and their schemes are listed at [`built_in`]; each backend's config
//! type (`RedisConfig::from_url`, `PgConfig::from_url`, ...) documents its grammar.

use std::fmt;
use std::sync::{Arc, LazyLock, PoisonError, RwLock};

pub use crate::storage_spec::StorageSpec;
pub use fencelock_core::{BackendConfig, Connected, Scheme, Schemes, StorageConfig, StorageScheme};
use fencelock_core::{Error, HostPort, Result};

/// The built-in schemes, the feature that brings each, and whether it is storage only, so
/// that a spec of a backend this build lacks is told which feature to turn on.
const BUILT_IN: &[(&str, &str, bool)] = built_in_backends!(scheme_features);

/// The feature that brings the built-in scheme `scheme`, and whether it is storage only;
/// `None` for a scheme that is not built in.
fn built_in_scheme(scheme: &str) -> Option<(&'static str, bool)> {
    BUILT_IN
        .iter()
        .find(|(name, ..)| *name == scheme)
        .map(|&(_, feature, storage_only)| (feature, storage_only))
}

/// The schemes of the built-in backends this build has, by feature:
///
#[doc = built_in_backends!(backend_table)]
pub fn built_in() -> Schemes {
    let mut schemes = Schemes::new();
    let register = built_in_backends!(register_built_in);
    register(&mut schemes);
    schemes
}

static REGISTRY: LazyLock<RwLock<Schemes>> = LazyLock::new(|| RwLock::new(built_in()));

/// Registers a backend's scheme for this process: from then on [`BackendSpec::parse`] (and
/// every tool built on it) reads its URLs. A name that is taken (a built-in's included) or
/// malformed is [`Error::InvalidConfig`] and changes nothing.
///
/// ```
/// use fencelock::spec::{BackendSpec, Scheme, register};
///
/// // A scheme of your own, here parsed as the memory backend.
/// register(Scheme::new("my-memory", "an example", |_| {
///     Ok(Box::new(fencelock::memory::MemoryConfig))
/// }))?;
/// assert!(BackendSpec::parse("my-memory://").is_ok());
/// # Ok::<(), fencelock::Error>(())
/// ```
pub fn register(scheme: Scheme) -> Result<()> {
    REGISTRY
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .register(scheme)
}

/// Every scheme registered in this process, built-in ones first.
pub fn schemes() -> Schemes {
    REGISTRY
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// A spec of a built-in scheme this build lacks is told which feature brings it.
pub(crate) fn refuse_missing_feature(spec: &str) -> Result<()> {
    let registry = REGISTRY.read().unwrap_or_else(PoisonError::into_inner);
    if let Some(scheme) = Schemes::scheme_of(spec)
        && registry.get(&scheme).is_none()
        && registry.storage_schemes().all(|s| s.name != scheme)
        && let Some((feature, _)) = built_in_scheme(&scheme)
    {
        return Err(Error::config(format!(
            "this build of fencelock lacks the `{feature}` feature"
        )));
    }
    Ok(())
}

/// A storage spec given where a lock backend goes (`s3://`, `memory-objects://`) is told what
/// it is and where it goes, in a build with its feature or without.
fn refuse_storage_only(spec: &str) -> Result<()> {
    let Some(scheme) = Schemes::scheme_of(spec) else {
        return Ok(());
    };
    let registry = REGISTRY.read().unwrap_or_else(PoisonError::into_inner);
    let built_in_storage = built_in_scheme(&scheme).is_some_and(|(_, storage_only)| storage_only);
    let registered_storage = registry.storage_schemes().any(|s| s.name == scheme);
    if registry.get(&scheme).is_none() && (built_in_storage || registered_storage) {
        return Err(Error::config(format!(
            "{scheme}:// is a storage spec, not a lock backend: it keeps fenced data and takes \
             its tokens from a lock backend, so it goes where storage goes (`fencelock chaos \
             --storage {scheme}://...`, `StorageSpec::parse` in code); the lock backend is one \
             of {}",
            registry.list()
        )));
    }
    Ok(())
}

/// The spawner of the registered scheme `scheme` (without `://`): what starts throwaway
/// servers of it for fault runs ([`Scheme::spawn`]). An unknown scheme, one this build lacks
/// the feature of, and one that cannot start servers are [`Error::InvalidConfig`] saying which
/// schemes can.
///
/// ```
/// let err = fencelock::spec::spawner("memory").unwrap_err();
/// assert!(err.to_string().contains("cannot start servers"));
/// ```
pub fn spawner(scheme: &str) -> Result<fencelock_core::tools::Spawn> {
    let scheme = scheme.trim_end_matches("://").to_ascii_lowercase();
    let registry = REGISTRY.read().unwrap_or_else(PoisonError::into_inner);
    let can = || spawnable_in(&registry);
    match registry.get(&scheme) {
        Some(found) => found.spawn.ok_or_else(|| {
            Error::config(format!(
                "{scheme}:// cannot start servers of its own (schemes that can: {})",
                can()
            ))
        }),
        None => match built_in_scheme(&scheme) {
            Some((feature, _)) => Err(Error::config(format!(
                "this build of fencelock lacks the `{feature}` feature, which spawns {scheme}://"
            ))),
            None => Err(Error::config(format!(
                "unknown scheme {scheme:?} to spawn (schemes that can: {})",
                can()
            ))),
        },
    }
}

/// The registered schemes that can start servers (`redis, redlock, etcd`), for messages.
pub fn spawnable() -> String {
    spawnable_in(&REGISTRY.read().unwrap_or_else(PoisonError::into_inner))
}

fn spawnable_in(registry: &Schemes) -> String {
    let names: Vec<&str> = registry
        .iter()
        .filter(|s| s.spawn.is_some())
        .map(|s| s.name)
        .collect();
    if names.is_empty() {
        "none in this build (the `servers` feature brings the built-in ones)".to_owned()
    } else {
        names.join(", ")
    }
}

/// A parsed backend spec: the typed config of the backend the URL names. Parsing validates the
/// whole URL (the owning crate's parser); connecting happens in [`BackendSpec::connect`].
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
#[derive(Clone)]
pub struct BackendSpec {
    config: Arc<dyn BackendConfig>,
}

impl BackendSpec {
    /// Parses `spec` with the registered scheme it names. An unknown scheme, a malformed URL
    /// or a backend this build lacks is [`Error::InvalidConfig`]; no message repeats a
    /// password.
    pub fn parse(spec: &str) -> Result<Self> {
        refuse_storage_only(spec)?;
        refuse_missing_feature(spec)?;
        let registry = REGISTRY.read().unwrap_or_else(PoisonError::into_inner);
        let config = registry.parse(spec)?;
        Ok(BackendSpec {
            config: Arc::from(config),
        })
    }

    /// The spec of a config built in code.
    pub fn from_config(config: impl BackendConfig) -> Self {
        BackendSpec {
            config: Arc::new(config),
        }
    }

    /// The typed config.
    pub fn config(&self) -> &dyn BackendConfig {
        self.config.as_ref()
    }

    /// The typed config, when it is a `T` (`spec.downcast_ref::<PgConfig>()`).
    pub fn downcast_ref<T: BackendConfig>(&self) -> Option<&T> {
        self.config.as_ref().downcast_ref::<T>()
    }

    /// The URL scheme (`redis`, `postgres`, ...).
    pub fn scheme(&self) -> &str {
        self.config.scheme()
    }

    /// Connects to the backend and its storage.
    pub async fn connect(&self) -> Result<Connected> {
        self.config.connect().await
    }

    /// Whether the backend can be shared between processes (everything but `memory://`).
    pub fn is_shared(&self) -> bool {
        self.config.is_shared()
    }

    /// The whole URL, credentials included, that [`parse`](Self::parse) reads back as `self`.
    pub fn to_url(&self) -> String {
        self.config.to_url()
    }

    /// The servers the lock backend reaches, in URL order (none for `memory://`).
    pub fn hosts(&self) -> Vec<HostPort> {
        self.config.hosts()
    }

    /// The same spec pointed at other servers (a fault proxy, a test server), one per entry of
    /// [`hosts`](Self::hosts) in the same order; a different count is [`Error::InvalidConfig`].
    /// Only the addresses change: credentials, database, schema and options stay.
    pub fn with_hosts(self, hosts: &[HostPort]) -> Result<Self> {
        Ok(BackendSpec {
            config: Arc::from(self.config.with_hosts(hosts)?),
        })
    }
}

impl From<Box<dyn BackendConfig>> for BackendSpec {
    fn from(config: Box<dyn BackendConfig>) -> Self {
        BackendSpec {
            config: Arc::from(config),
        }
    }
}

impl PartialEq for BackendSpec {
    /// Two specs are equal when they name the same backend with the same URL.
    fn eq(&self, other: &Self) -> bool {
        self.scheme() == other.scheme() && self.to_url() == other.to_url()
    }
}

impl fmt::Display for BackendSpec {
    /// The URL with its password hidden.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.config.redacted_url())
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
    fn every_built_in_scheme_of_this_build_is_registered_once() {
        let schemes = built_in();
        for (name, feature, _) in BUILT_IN {
            let built = crate::backends::MODULES
                .iter()
                .any(|(_, f, built)| f == feature && *built);
            let registered =
                schemes.get(name).is_some() || schemes.storage_schemes().any(|s| s.name == *name);
            assert_eq!(registered, built, "{name}");
        }
        assert!(
            schemes
                .iter()
                .map(|s| s.name)
                .chain(schemes.storage_schemes().map(|s| s.name))
                .all(|name| BUILT_IN.iter().any(|(n, ..)| *n == name))
        );
    }

    #[test]
    fn a_registered_scheme_is_parsed_and_a_taken_one_refused() {
        fn parse(_: &str) -> Result<Box<dyn BackendConfig>> {
            Err(Error::config("the test scheme parses nothing"))
        }
        let scheme = Scheme::new("spec-test", "a test", parse);
        register(scheme).unwrap();
        assert!(register(scheme).is_err());
        assert!(refused("spec-test://x").contains("parses nothing"));
        assert!(schemes().get("spec-test").is_some());
        let memory = Scheme::new("memory", scheme.summary, scheme.parse);
        if cfg!(feature = "memory") {
            assert!(register(memory).is_err(), "a built-in name is taken");
        }
    }

    #[cfg(feature = "memory")]
    #[test]
    fn parses_memory() {
        let spec = BackendSpec::parse("memory://").unwrap();
        assert_eq!(BackendSpec::parse("MEMORY:///").unwrap(), spec);
        assert!(!spec.is_shared());
        assert_eq!(spec.scheme(), "memory");
        for spec in ["memory://host", "memory:///path", "memory://?x=1"] {
            refused(spec);
        }
        assert!(spec.clone().with_hosts(&[HostPort::new("h", 1)]).is_err());
        assert_eq!(spec.clone().with_hosts(&[]).unwrap(), spec);
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
        use fencelock_redis::{RedisClusterConfig, RedisConfig, RedlockConfig};
        let spec = BackendSpec::parse("redis://app:secret@127.0.0.1:6380/2").unwrap();
        assert!(spec.downcast_ref::<RedisConfig>().is_some());
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
        assert!(spec.downcast_ref::<RedlockConfig>().is_some());
        assert_eq!(spec.hosts().len(), 3);
        assert_eq!(BackendSpec::parse(&spec.to_url()).unwrap(), spec);
        assert!(!spec.to_string().contains("secret"));

        refused("redis://:secret@127.0.0.1:99999");
        refused("redis://:secret@:6379");
        refused("redlock://:secret@h1,,h2");

        let spec = BackendSpec::parse("redis+cluster://app:secret@c1:7000,c2:7001,c3").unwrap();
        assert!(spec.downcast_ref::<RedisClusterConfig>().is_some());
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
        assert!(
            spec.downcast_ref::<fencelock_postgres::PgConfig>()
                .is_some()
        );
        assert_eq!(BackendSpec::parse(&spec.to_url()).unwrap(), spec);
        assert!(!spec.to_string().contains("secret"));
        assert_eq!(spec.hosts(), vec![HostPort::new("db", 5433)]);
        refused("postgres://app:secret@db/test?backend=leese");
    }

    #[cfg(feature = "mysql")]
    #[test]
    fn dispatches_mysql_schemes_to_their_crate() {
        let spec = BackendSpec::parse("mysql://root:secret@db:3307/test").unwrap();
        assert!(
            spec.downcast_ref::<fencelock_mysql::MySqlConfig>()
                .is_some()
        );
        assert_eq!(BackendSpec::parse(&spec.to_url()).unwrap(), spec);
        assert!(!spec.to_string().contains("secret"));
        assert_eq!(spec.hosts(), vec![HostPort::new("db", 3307)]);
        refused("mysql://root:secret@db:99999/test");
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn dispatches_etcd_to_its_crate() {
        let spec = BackendSpec::parse("etcd://e1:2379,e2:2380,e3").unwrap();
        assert!(spec.downcast_ref::<fencelock_etcd::EtcdConfig>().is_some());
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
    }

    #[cfg(not(feature = "postgres"))]
    #[test]
    fn names_the_missing_feature() {
        assert!(refused("postgres://u:secret@db/test").contains("`postgres` feature"));
    }
}
