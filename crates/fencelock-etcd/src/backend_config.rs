//! `etcd://`: [`EtcdConfig`] as a [`BackendConfig`], and the scheme this crate owns.

use std::sync::Arc;

use fencelock_core::tools::{BenchKit, Peer};
use fencelock_core::{BackendConfig, Connected, HostPort, OwnerId, Result, Scheme, async_trait};

use crate::baseline::{EtcdBaseline, EtcdCleanup, EtcdLockServicePeer};
use crate::config::EtcdConfig;

/// The scheme this crate owns, `etcd://`, to register in a
/// [`Schemes`](fencelock_core::Schemes) registry.
pub const SCHEMES: &[Scheme] = &[spawns(
    Scheme::new(
        "etcd",
        "an etcd cluster, reached through one or more members",
        |url| Ok(Box::new(EtcdConfig::from_url(url)?)),
    )
    .with_example("etcd://127.0.0.1:2379"),
)];

#[cfg(feature = "servers")]
const fn spawns(scheme: Scheme) -> Scheme {
    scheme.with_spawn(crate::spawn::etcd)
}

#[cfg(not(feature = "servers"))]
const fn spawns(scheme: Scheme) -> Scheme {
    scheme
}

#[async_trait]
impl BackendConfig for EtcdConfig {
    fn scheme(&self) -> &str {
        "etcd"
    }

    fn to_url(&self) -> String {
        EtcdConfig::to_url(self)
    }

    fn redacted_url(&self) -> String {
        EtcdConfig::redacted_url(self)
    }

    fn hosts(&self) -> Vec<HostPort> {
        EtcdConfig::hosts(self)
    }

    fn with_hosts(&self, hosts: &[HostPort]) -> Result<Box<dyn BackendConfig>> {
        Ok(Box::new(EtcdConfig::with_hosts(self.clone(), hosts)?))
    }

    fn clone_config(&self) -> Box<dyn BackendConfig> {
        Box::new(self.clone())
    }

    async fn connect(&self) -> Result<Connected> {
        let cluster = EtcdConfig::connect(self).await?;
        Ok(Connected {
            backend: cluster.backend(),
            storage: Arc::new(cluster.storage()),
        })
    }

    /// fencelock's keys under the config's prefix, against raw transactions on the same
    /// connection under `<prefix>-raw/<run id>/` ([`EtcdBaseline`]), with etcd's v3 lock
    /// service as the peer ([`EtcdLockServicePeer`]). Named `etcd-<members>` in reports; the
    /// cleanup sweeps every family of fencelock's keys for the run ([`EtcdCleanup`]).
    async fn bench_kit(&self) -> Result<Option<BenchKit>> {
        let members = EtcdConfig::hosts(self).len();
        let cluster = EtcdConfig::connect(self).await?;
        let fenced = Connected {
            backend: cluster.backend(),
            storage: Arc::new(cluster.storage()),
        };
        let run = format!("{:016x}", OwnerId::random().as_u128() as u64);
        let root = format!("{}-raw/{run}/", self.prefix_name());
        let baseline = EtcdBaseline::new(cluster.client().clone(), root.clone());
        let peer = EtcdLockServicePeer::start(cluster.client().clone(), root).await?;
        let cleanup = EtcdCleanup::new(&cluster);
        Ok(Some(
            BenchKit::new(format!("etcd-{members}"), fenced, Arc::new(baseline))
                .peer(Peer::Raw(Arc::new(peer)))
                .cleanup(Arc::new(cleanup)),
        ))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_scheme_parses_round_trips_and_hides_the_password() {
        let [scheme] = SCHEMES else {
            panic!("one scheme");
        };
        let url = "etcd://app:s3cret@10.0.0.1:2379,10.0.0.2:2390?prefix=orders";
        let config = (scheme.parse)(url).unwrap();
        assert_eq!(config.scheme(), scheme.name);
        assert_eq!(config.to_url(), url);
        assert_eq!((scheme.parse)(&config.to_url()).unwrap().to_url(), url);
        let shown = config.redacted_url();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.starts_with("etcd://app:***@10.0.0.1:2379,"),
            "{shown}"
        );
        assert!(config.is_shared());
        assert_eq!(config.hosts().len(), 2);
        let moved = config
            .with_hosts(&[HostPort::new("p1", 1), HostPort::new("p2", 2)])
            .unwrap();
        assert_eq!(moved.to_url(), "etcd://app:s3cret@p1:1,p2:2?prefix=orders");
        assert!(config.with_hosts(&[HostPort::new("p1", 1)]).is_err());
        assert!(config.clone_config().downcast_ref::<EtcdConfig>().is_some());
    }
}
