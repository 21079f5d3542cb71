//! The crate's URL schemes as [`BackendConfig`]s: `redis://` and `rediss://`
//! ([`RedisConfig`]), `redlock://` ([`RedlockConfig`]), `redis+cluster://` and
//! `rediss+cluster://` ([`RedisClusterConfig`]).

use std::sync::Arc;

use async_trait::async_trait;
use fencelock_core::tools::BenchKit;
use fencelock_core::{BackendConfig, Connected, HostPort, Result, Scheme};

use crate::baseline;
use crate::cluster::RedisClusterConfig;
use crate::config::RedisConfig;
use crate::redlock::RedlockConfig;

/// The schemes this crate owns, to register in a [`Schemes`](fencelock_core::Schemes)
/// registry. The TLS ones parse only with the `tls` feature.
pub const SCHEMES: &[Scheme] = &[
    spawns(
        Scheme::new("redis", "one Redis server", parse_redis)
            .with_example("redis://127.0.0.1:6379"),
        SpawnAs::Redis,
    ),
    Scheme::new(
        "rediss",
        "one Redis server over TLS (feature `tls`)",
        parse_redis,
    ),
    spawns(
        Scheme::new("redlock", "Redlock over independent Redis servers", |url| {
            Ok(Box::new(RedlockConfig::from_url(url)?))
        }),
        SpawnAs::Redlock,
    ),
    Scheme::new(
        "redis+cluster",
        "a Redis Cluster, reached through seed nodes",
        parse_cluster,
    ),
    Scheme::new(
        "rediss+cluster",
        "a Redis Cluster over TLS, reached through seed nodes (feature `tls`)",
        parse_cluster,
    ),
];

/// Which spawner a scheme gets with the `servers` feature.
#[cfg_attr(not(feature = "servers"), allow(dead_code))]
enum SpawnAs {
    Redis,
    Redlock,
}

#[cfg(feature = "servers")]
const fn spawns(scheme: Scheme, what: SpawnAs) -> Scheme {
    scheme.with_spawn(match what {
        SpawnAs::Redis => crate::spawn::redis,
        SpawnAs::Redlock => crate::spawn::redlock,
    })
}

#[cfg(not(feature = "servers"))]
const fn spawns(scheme: Scheme, _: SpawnAs) -> Scheme {
    scheme
}

fn parse_redis(url: &str) -> Result<Box<dyn BackendConfig>> {
    Ok(Box::new(RedisConfig::from_url(url)?))
}

fn parse_cluster(url: &str) -> Result<Box<dyn BackendConfig>> {
    Ok(Box::new(RedisClusterConfig::from_url(url)?))
}

#[async_trait]
impl BackendConfig for RedisConfig {
    fn scheme(&self) -> &str {
        // A config built with `new` from text that is no URL prints that text; it says
        // `redis` as the scheme it was meant for.
        match self.endpoint() {
            Some(endpoint) if endpoint.is_tls() => "rediss",
            _ => "redis",
        }
    }

    fn to_url(&self) -> String {
        RedisConfig::to_url(self)
    }

    fn redacted_url(&self) -> String {
        RedisConfig::redacted_url(self)
    }

    fn hosts(&self) -> Vec<HostPort> {
        RedisConfig::hosts(self)
    }

    fn with_hosts(&self, hosts: &[HostPort]) -> Result<Box<dyn BackendConfig>> {
        Ok(Box::new(RedisConfig::with_hosts(self.clone(), hosts)?))
    }

    fn clone_config(&self) -> Box<dyn BackendConfig> {
        Box::new(self.clone())
    }

    async fn connect(&self) -> Result<Connected> {
        let backend = RedisConfig::connect(self).await?;
        Ok(Connected {
            storage: Arc::new(backend.storage()),
            backend: Arc::new(backend),
        })
    }

    /// Against `SET NX PX` + `DEL` on a connection of its own; named `redis`.
    async fn bench_kit(&self) -> Result<Option<BenchKit>> {
        baseline::redis_kit(self).await.map(Some)
    }
}

#[async_trait]
impl BackendConfig for RedlockConfig {
    fn scheme(&self) -> &str {
        "redlock"
    }

    fn to_url(&self) -> String {
        RedlockConfig::to_url(self)
    }

    fn redacted_url(&self) -> String {
        RedlockConfig::redacted_url(self)
    }

    fn hosts(&self) -> Vec<HostPort> {
        RedlockConfig::hosts(self)
    }

    fn with_hosts(&self, hosts: &[HostPort]) -> Result<Box<dyn BackendConfig>> {
        Ok(Box::new(RedlockConfig::with_hosts(self.clone(), hosts)?))
    }

    fn clone_config(&self) -> Box<dyn BackendConfig> {
        Box::new(self.clone())
    }

    async fn connect(&self) -> Result<Connected> {
        Ok(Connected {
            backend: Arc::new(RedlockConfig::connect(self).await?),
            storage: Arc::new(RedlockConfig::connect_storage(self).await?),
        })
    }

    /// Against `SET NX PX` + `DEL` on the first node, with the one-node backend there as a
    /// peer; named `redlock-<nodes>`.
    async fn bench_kit(&self) -> Result<Option<BenchKit>> {
        baseline::redlock_kit(self).await.map(Some)
    }
}

#[async_trait]
impl BackendConfig for RedisClusterConfig {
    fn scheme(&self) -> &str {
        if self.is_tls() {
            "rediss+cluster"
        } else {
            "redis+cluster"
        }
    }

    fn to_url(&self) -> String {
        RedisClusterConfig::to_url(self)
    }

    fn redacted_url(&self) -> String {
        RedisClusterConfig::redacted_url(self)
    }

    fn hosts(&self) -> Vec<HostPort> {
        RedisClusterConfig::hosts(self)
    }

    fn with_hosts(&self, hosts: &[HostPort]) -> Result<Box<dyn BackendConfig>> {
        Ok(Box::new(RedisClusterConfig::with_hosts(
            self.clone(),
            hosts,
        )?))
    }

    fn clone_config(&self) -> Box<dyn BackendConfig> {
        Box::new(self.clone())
    }

    async fn connect(&self) -> Result<Connected> {
        let backend = RedisClusterConfig::connect(self).await?;
        Ok(Connected {
            storage: Arc::new(backend.storage()),
            backend: Arc::new(backend),
        })
    }

    /// Against `SET NX PX` + `DEL` through a cluster connection of its own; named
    /// `redis-cluster`.
    async fn bench_kit(&self) -> Result<Option<BenchKit>> {
        baseline::redis_cluster_kit(self).await.map(Some)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use fencelock_core::Schemes;

    /// A sample URL with a password for each scheme, and the scheme it prints back.
    const SAMPLES: &[(&str, &str)] = &[
        (
            "redis",
            "redis://app:secret@127.0.0.1:6380/2?allow_eviction=true",
        ),
        ("rediss", "rediss://app:secret@cache.example:6380/1"),
        (
            "redlock",
            "redlock://:secret@h1:1,h2:2,h3:3/4?storage=redis%3A%2F%2F%3Asecret%40h9%3A9",
        ),
        (
            "redis+cluster",
            "redis+cluster://app:secret@c1:7000,c2:7001,c3:6379",
        ),
        ("rediss+cluster", "rediss+cluster://:secret@c1:7000,c2:7001"),
    ];

    fn is_tls(scheme: &str) -> bool {
        scheme.starts_with("rediss")
    }

    #[test]
    fn every_scheme_parses_round_trips_and_hides_its_password() {
        let mut schemes = Schemes::new();
        schemes.register_all(SCHEMES).unwrap();
        assert_eq!(
            schemes.list(),
            "redis://, rediss://, redlock://, redis+cluster://, rediss+cluster://"
        );
        for &(name, url) in SAMPLES {
            let parsed = schemes.parse(url);
            if is_tls(name) && !cfg!(feature = "tls") {
                let err = parsed.unwrap_err().to_string();
                assert!(err.contains("tls") && !err.contains("secret"), "{err}");
                continue;
            }
            let config = parsed.unwrap();
            assert_eq!(config.scheme(), name, "{url}");
            assert_eq!(config.to_url(), url, "{url}");
            let again = schemes.parse(&config.to_url()).unwrap();
            assert_eq!(again.to_url(), config.to_url());
            let redacted = config.redacted_url();
            assert!(!redacted.contains("secret"), "{redacted}");
            assert!(redacted.contains("***"), "{redacted}");
            assert!(!format!("{config:?}").contains("secret"));
            assert!(config.is_shared());
            assert_eq!(config.clone_config().to_url(), url);
        }
    }

    #[test]
    fn hosts_are_moved_through_the_trait() {
        let config = (SCHEMES[0].parse)("redis://app:secret@127.0.0.1:6380/2").unwrap();
        assert_eq!(config.hosts(), vec![HostPort::new("127.0.0.1", 6380)]);
        let moved = config.with_hosts(&[HostPort::new("proxy", 7000)]).unwrap();
        assert_eq!(moved.to_url(), "redis://app:secret@proxy:7000/2");
        assert!(moved.downcast_ref::<RedisConfig>().is_some());
        assert!(config.with_hosts(&[]).is_err());

        let config = (SCHEMES[2].parse)("redlock://:secret@h1:1,h2:2,h3:3").unwrap();
        let through = [
            HostPort::new("p", 1),
            HostPort::new("p", 2),
            HostPort::new("p", 3),
        ];
        let moved = config.with_hosts(&through).unwrap();
        assert_eq!(moved.to_url(), "redlock://:secret@p:1,p:2,p:3");
        assert!(config.with_hosts(&through[..2]).is_err());

        let config = (SCHEMES[3].parse)("redis+cluster://app:secret@c1:7000,c2,c3").unwrap();
        assert_eq!(config.hosts().len(), 3);
        let moved = config.with_hosts(&through).unwrap();
        assert_eq!(moved.to_url(), "redis+cluster://app:secret@p:1,p:2,p:3");
        assert!(moved.downcast_ref::<RedisClusterConfig>().is_some());
        assert!(config.with_hosts(&through[..1]).is_err());
    }

    #[test]
    fn a_config_of_text_that_is_no_url_still_names_its_scheme() {
        let config: Box<dyn BackendConfig> = Box::new(RedisConfig::new("not a url :secret@"));
        assert_eq!(config.scheme(), "redis");
        assert!(config.hosts().is_empty());
        assert!(config.with_hosts(&[HostPort::new("h", 1)]).is_err());
    }
}
