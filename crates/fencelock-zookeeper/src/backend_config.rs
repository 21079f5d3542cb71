//! `zookeeper://`: [`ZkConfig`] as a [`BackendConfig`], connecting, and the scheme this crate
//! owns.

use std::sync::Arc;

use fencelock_core::tools::BenchKit;
use fencelock_core::{BackendConfig, Connected, HostPort, OwnerId, Result, Scheme, async_trait};

use crate::backend::ZkLockBackend;
use crate::baseline::{ZkBaseline, ZkCleanup};
use crate::config::ZkConfig;
use crate::session::Sessions;
use crate::storage::ZkStorage;

/// The scheme this crate owns, `zookeeper://`, to register in a
/// [`Schemes`](fencelock_core::Schemes) registry.
pub const SCHEMES: &[Scheme] = &[spawns(
    Scheme::new(
        "zookeeper",
        "a ZooKeeper ensemble, reached through one or more servers",
        |url| Ok(Box::new(ZkConfig::from_url(url)?)),
    )
    .with_example("zookeeper://127.0.0.1:2181"),
)];

#[cfg(feature = "servers")]
const fn spawns(scheme: Scheme) -> Scheme {
    scheme.with_spawn(crate::spawn::zookeeper)
}

#[cfg(not(feature = "servers"))]
const fn spawns(scheme: Scheme) -> Scheme {
    scheme
}

impl ZkConfig {
    /// Opens a session (proving the ensemble answers, the chroot exists and the credentials
    /// open fencelock's znodes) and returns the lock backend; its storage shares the session
    /// ([`ZkLockBackend::storage`]). Unreachable servers are [`fencelock_core::Error::Unavailable`],
    /// a missing chroot or refused credentials [`fencelock_core::Error::InvalidConfig`].
    pub async fn connect(&self) -> Result<ZkLockBackend> {
        Ok(ZkLockBackend::new(Sessions::open(self.clone()).await?))
    }
}

impl ZkLockBackend {
    /// The fenced storage on the same session.
    pub fn storage(&self) -> ZkStorage {
        ZkStorage::new(self.sessions.clone())
    }

    /// The config this backend was opened with.
    pub fn config(&self) -> &ZkConfig {
        self.sessions.config()
    }
}

#[async_trait]
impl BackendConfig for ZkConfig {
    fn scheme(&self) -> &str {
        "zookeeper"
    }

    fn to_url(&self) -> String {
        ZkConfig::to_url(self)
    }

    fn redacted_url(&self) -> String {
        ZkConfig::redacted_url(self)
    }

    fn hosts(&self) -> Vec<HostPort> {
        ZkConfig::hosts(self)
    }

    fn with_hosts(&self, hosts: &[HostPort]) -> Result<Box<dyn BackendConfig>> {
        Ok(Box::new(ZkConfig::with_hosts(self.clone(), hosts)?))
    }

    fn clone_config(&self) -> Box<dyn BackendConfig> {
        Box::new(self.clone())
    }

    async fn connect(&self) -> Result<Connected> {
        let backend = ZkConfig::connect(self).await?;
        Ok(Connected {
            storage: Arc::new(backend.storage()),
            backend: Arc::new(backend),
        })
    }

    /// fencelock's znodes under the config's prefix, against the raw recipe on the same
    /// session under `/<prefix>-raw-<run id>` ([`ZkBaseline`]). Named `zookeeper-<servers>`;
    /// the cleanup removes the run's key and resource nodes ([`ZkCleanup`]).
    async fn bench_kit(&self) -> Result<Option<BenchKit>> {
        let servers = self.hosts().len();
        let backend = ZkConfig::connect(self).await?;
        let sessions = backend.sessions.clone();
        let fenced = Connected {
            storage: Arc::new(backend.storage()),
            backend: Arc::new(backend),
        };
        let run = format!("{:016x}", OwnerId::random().as_u128() as u64);
        let root = format!("/{}-raw-{run}", self.prefix_name());
        let baseline = ZkBaseline::new(sessions.clone(), root).await?;
        Ok(Some(
            BenchKit::new(format!("zookeeper-{servers}"), fenced, Arc::new(baseline))
                .cleanup(Arc::new(ZkCleanup::new(sessions))),
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
        let url = "zookeeper://app:s3cret@10.0.0.1:2181,10.0.0.2:2190/apps?session_timeout=10s&prefix=orders";
        let config = (scheme.parse)(url).unwrap();
        assert_eq!(config.scheme(), scheme.name);
        assert_eq!(config.to_url(), url);
        assert_eq!((scheme.parse)(&config.to_url()).unwrap().to_url(), url);
        let shown = config.redacted_url();
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.starts_with("zookeeper://app:***@10.0.0.1:2181,"),
            "{shown}"
        );
        assert!(config.is_shared());
        assert_eq!(config.hosts().len(), 2);
        let moved = config
            .with_hosts(&[HostPort::new("p1", 1), HostPort::new("p2", 2)])
            .unwrap();
        assert_eq!(
            moved.to_url(),
            "zookeeper://app:s3cret@p1:1,p2:2/apps?session_timeout=10s&prefix=orders"
        );
        assert!(config.with_hosts(&[HostPort::new("p1", 1)]).is_err());
        assert!(config.clone_config().downcast_ref::<ZkConfig>().is_some());
    }
}
