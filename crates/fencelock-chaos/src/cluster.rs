//! The servers a chaos run talks to, and the handles the nemesis pulls: spawned redis-server
//! nodes and etcd members (killed and restarted), fault proxies in front of every server
//! (partitions), and the backend's own session fault where it has one (PostgreSQL's
//! `pg_terminate_backend`), which the backend provides through
//! `BackendConfig::session_faults`.
//!
//! Specs are typed configs from here on: proxies go in front of servers with `with_hosts`, and
//! the workers' sessions are tagged by the session fault so that it ends theirs only.

use std::net::SocketAddr;
use std::sync::Arc;

use fencelock::HostPort;
use fencelock::redis::{RedisConfig, RedlockConfig};
use fencelock::spec::{BackendSpec, Connected};
use fencelock::tools::SessionFaults;

use crate::config::Persistence;
use crate::error::{ChaosError, Result};
#[cfg(feature = "etcd")]
use fencelock_servers::etcd::EtcdServer;
use fencelock_servers::proxy::FaultProxy;
use fencelock_servers::redis::{RedisOptions, RedisServer};

/// Everything a run talks to.
#[derive(Debug)]
pub(crate) struct Cluster {
    /// The lock service for workers: through the proxies when there are any, Postgres sessions
    /// tagged with the run's application name.
    pub(crate) worker_backend: BackendSpec,
    /// The storage for workers, when it is not the lock service's own.
    pub(crate) worker_storage: Option<BackendSpec>,
    /// The storage, reached directly, for the final read.
    pub(crate) direct_storage: BackendSpec,
    /// Lock nodes this process started and may kill.
    pub(crate) nodes: Vec<Node>,
    /// The most nodes one kill episode may take down at once.
    pub(crate) kill_at_most: usize,
    /// A separate storage node this process started, never killed; held so that it lives
    /// as long as the run.
    _storage_node: Option<Arc<RedisServer>>,
    /// Fault proxies in front of every server the workers reach.
    pub(crate) proxies: Vec<FaultProxy>,
    /// The backend's server-side session fault, when it has one; the workers' sessions are
    /// tagged for it.
    pub(crate) faults: Option<Arc<dyn SessionFaults>>,
    /// How the spec was given, for the report (passwords hidden).
    pub(crate) described: String,
    /// A backend that lives inside this process (`memory://`), connected once and shared by
    /// every worker, which then run as threads.
    pub(crate) in_process: Option<Connected>,
}

/// A server the run started, which the kill fault kills with SIGKILL and restarts on its port
/// and data.
#[derive(Debug, Clone)]
pub(crate) enum Node {
    /// A redis-server process.
    Redis(Arc<RedisServer>),
    /// Member `index` of a spawned etcd cluster.
    #[cfg(feature = "etcd")]
    Etcd {
        cluster: Arc<EtcdServer>,
        index: usize,
    },
}

impl Node {
    /// Whether the process runs (a paused one counts as running).
    fn is_running(&self) -> bool {
        match self {
            Node::Redis(server) => server.is_running(),
            #[cfg(feature = "etcd")]
            Node::Etcd { cluster, index } => cluster.is_running(*index),
        }
    }

    /// Kills the node with SIGKILL and waits for it to exit.
    pub(crate) async fn kill(&self) -> Result<()> {
        let node = self.clone();
        tokio::task::spawn_blocking(move || match node {
            Node::Redis(server) => server.kill(),
            #[cfg(feature = "etcd")]
            Node::Etcd { cluster, index } => cluster.kill(index),
        })
        .await
        .map_err(|e| ChaosError::harness_from("killing a server failed", e))
    }

    /// Starts a killed node again on its port and data, and waits until it answers (an etcd
    /// member: until it is healthy, which needs a quorum of members up).
    pub(crate) async fn restart(&self) -> Result<()> {
        let node = self.clone();
        tokio::task::spawn_blocking(move || match node {
            Node::Redis(server) => server.try_restart(),
            #[cfg(feature = "etcd")]
            Node::Etcd { cluster, index } => cluster.try_restart(index),
        })
        .await
        .map_err(|e| ChaosError::harness_from("restarting a server failed", e))?
        .map_err(|e| ChaosError::harness_from(e.to_string(), e))
    }

    /// Whether the node is the etcd member that leads its cluster now (never for Redis).
    pub(crate) async fn is_leader(&self) -> bool {
        match self {
            Node::Redis(_) => false,
            #[cfg(feature = "etcd")]
            Node::Etcd { cluster, index } => {
                let (cluster, index) = (cluster.clone(), *index);
                tokio::task::spawn_blocking(move || cluster.leader() == Some(index))
                    .await
                    .unwrap_or(false)
            }
        }
    }
}

/// The fault proxies of a run, and where they listen.
#[derive(Debug, Default)]
struct Proxies(Vec<FaultProxy>);

impl Proxies {
    /// A proxy in front of each of `hosts`: the addresses to reach them through.
    async fn in_front_of(&mut self, hosts: &[HostPort]) -> Result<Vec<HostPort>> {
        let mut through = Vec::with_capacity(hosts.len());
        for host in hosts {
            let proxy = start_proxy(resolve(host).await?).await?;
            through.push(HostPort::new(proxy.addr().ip().to_string(), proxy.port()));
            self.0.push(proxy);
        }
        Ok(through)
    }
}

impl Cluster {
    /// Starts `count` redis-server processes, plus a separate persistent storage node unless
    /// there is one persistent lock node (which then keeps the storage too). A storage that
    /// loses admitted writes in a restart is data loss, not a fencing failure, so the storage
    /// always lives on a persistent node.
    pub(crate) async fn spawn_redis(
        count: usize,
        persistence: Persistence,
        proxied: bool,
    ) -> Result<Self> {
        if count == 0 {
            return Err(ChaosError::config("spawning Redis needs at least one node"));
        }
        let persistent = persistence == Persistence::Always;
        let options = if persistent {
            RedisOptions::persistent()
        } else {
            RedisOptions::default()
        };
        let mut nodes = Vec::with_capacity(count);
        for _ in 0..count {
            nodes.push(Arc::new(start_redis(options.clone()).await?));
        }
        let shared_storage = count == 1 && persistent;
        let storage_node = if shared_storage {
            None
        } else {
            Some(Arc::new(start_redis(RedisOptions::persistent()).await?))
        };
        let mut proxies = Proxies::default();
        let direct = if count == 1 {
            BackendSpec::from_config(RedisConfig::from_url(&nodes[0].url())?)
        } else {
            BackendSpec::from_config(RedlockConfig::new(nodes.iter().map(|n| n.url())))
        };
        let worker_backend = if proxied {
            direct
                .clone()
                .with_hosts(&proxies.in_front_of(&direct.hosts()).await?)?
        } else {
            direct.clone()
        };
        let (worker_storage, direct_storage) = match &storage_node {
            Some(node) => {
                let storage = RedisConfig::from_url(&node.url())?;
                let for_workers = if proxied {
                    storage
                        .clone()
                        .with_hosts(&proxies.in_front_of(&storage.hosts()).await?)?
                } else {
                    storage.clone()
                };
                (
                    Some(BackendSpec::from_config(for_workers)),
                    BackendSpec::from_config(storage),
                )
            }
            None => (None, direct),
        };
        let described = format!(
            "{count} spawned redis-server node{} ({}), storage on {}",
            if count == 1 { "" } else { "s" },
            if persistent {
                "AOF, appendfsync always"
            } else {
                "no persistence"
            },
            if shared_storage {
                "the same node"
            } else {
                "a separate persistent node that is never killed"
            }
        );
        Ok(Cluster {
            worker_backend,
            worker_storage,
            direct_storage,
            nodes: nodes.into_iter().map(Node::Redis).collect(),
            // One node, or a minority of Redlock's.
            kill_at_most: (count / 2).max(1),
            _storage_node: storage_node,
            proxies: proxies.0,
            faults: None,
            described,
            in_process: None,
        })
    }

    /// Starts `count` etcd members as one cluster; the lock and the storage both live on it,
    /// under a key prefix of the run. The kill fault takes down fewer than half of the members
    /// at a time (the one member, when there is one), so a cluster of three keeps its quorum
    /// and a restarted member rejoins with its data.
    #[cfg(feature = "etcd")]
    pub(crate) async fn spawn_etcd(count: usize, run_tag: &str, proxied: bool) -> Result<Self> {
        if count == 0 {
            return Err(ChaosError::config(
                "spawning etcd needs at least one member",
            ));
        }
        let server = tokio::task::spawn_blocking(move || EtcdServer::try_spawn_cluster(count))
            .await
            .map_err(|e| ChaosError::harness_from("starting etcd failed", e))?
            .map_err(|e| ChaosError::harness_from(format!("cannot start etcd: {e}"), e))?;
        let server = Arc::new(server);
        let prefix = format!("fencelock-chaos/{run_tag}");
        let direct = BackendSpec::from_config(
            fencelock_etcd::EtcdConfig::from_url(&server.url())?.prefix(prefix.clone()),
        );
        let mut proxies = Proxies::default();
        let worker_backend = if proxied {
            direct
                .clone()
                .with_hosts(&proxies.in_front_of(&direct.hosts()).await?)?
        } else {
            direct.clone()
        };
        let described = format!(
            "{count} spawned etcd member{}, storage on the same cluster (keys under {prefix}/)",
            if count == 1 { "" } else { "s" },
        );
        Ok(Cluster {
            worker_backend,
            worker_storage: None,
            direct_storage: direct,
            nodes: (0..count)
                .map(|index| Node::Etcd {
                    cluster: server.clone(),
                    index,
                })
                .collect(),
            kill_at_most: (count.saturating_sub(1) / 2).max(1),
            _storage_node: None,
            proxies: proxies.0,
            faults: None,
            described,
            in_process: None,
        })
    }

    /// A backend the user runs. With `proxied`, a fault proxy is put in front of every lock
    /// server of the spec and the workers reach them through it. A backend that lives inside
    /// one process (`memory://`) is connected here, and the workers will be threads sharing it.
    pub(crate) async fn external(spec: &BackendSpec, run_tag: &str, proxied: bool) -> Result<Self> {
        if !spec.is_shared() {
            return Ok(Cluster {
                worker_backend: spec.clone(),
                worker_storage: None,
                direct_storage: spec.clone(),
                nodes: Vec::new(),
                kill_at_most: 0,
                _storage_node: None,
                proxies: Vec::new(),
                faults: None,
                described: format!("{spec} (workers are threads of this process)"),
                in_process: Some(spec.connect().await?),
            });
        }
        let mut proxies = Proxies::default();
        let mut worker_backend = if proxied {
            spec.clone()
                .with_hosts(&proxies.in_front_of(&spec.hosts()).await?)?
        } else {
            spec.clone()
        };
        let faults = spec.config().session_faults(run_tag).await?;
        if let Some(faults) = &faults {
            worker_backend = faults.tag(worker_backend.config())?.into();
        }
        Ok(Cluster {
            worker_backend,
            worker_storage: None,
            direct_storage: spec.clone(),
            nodes: Vec::new(),
            kill_at_most: 0,
            _storage_node: None,
            proxies: proxies.0,
            faults,
            described: spec.to_string(),
            in_process: None,
        })
    }

    /// The storage, for the coordinator's reads: the workers' own when they share an
    /// in-process backend.
    pub(crate) async fn storage(&self) -> Result<Arc<dyn fencelock::FencedStorage>> {
        match &self.in_process {
            Some(connected) => Ok(connected.storage.clone()),
            None => Ok(self.direct_storage.connect().await?.storage),
        }
    }

    /// The lock backend, as the coordinator reaches it (to check its capabilities).
    pub(crate) async fn backend(&self) -> Result<Arc<dyn fencelock::LockBackend>> {
        match &self.in_process {
            Some(connected) => Ok(connected.backend.clone()),
            None => Ok(self.worker_backend.connect().await?.backend),
        }
    }

    /// Removes every network fault and restarts every lock node that is down.
    pub(crate) async fn heal(&self) -> Result<()> {
        for proxy in &self.proxies {
            proxy.heal();
        }
        for node in &self.nodes {
            if !node.is_running() {
                node.restart().await?;
            }
        }
        Ok(())
    }
}

async fn start_redis(options: RedisOptions) -> Result<RedisServer> {
    tokio::task::spawn_blocking(move || RedisServer::try_spawn_with(options))
        .await
        .map_err(|e| ChaosError::harness_from("starting redis-server failed", e))?
        .map_err(|e| ChaosError::harness_from(format!("cannot start redis-server: {e}"), e))
}

async fn start_proxy(target: SocketAddr) -> Result<FaultProxy> {
    FaultProxy::start(target).await.map_err(|e| {
        ChaosError::harness_from(format!("cannot start a fault proxy for {target}: {e}"), e)
    })
}

async fn resolve(host: &HostPort) -> Result<SocketAddr> {
    if host.host.is_empty() || host.host.starts_with('/') {
        return Err(ChaosError::config(
            "partition needs servers reached over TCP by host and port (a Unix socket cannot be \
             proxied)",
        ));
    }
    tokio::net::lookup_host((host.host.as_str(), host.port))
        .await
        .ok()
        .and_then(|mut addrs| addrs.next())
        .ok_or_else(|| {
            ChaosError::config(format!(
                "cannot resolve {host} to put a fault proxy in front of it"
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn unix_sockets_cannot_be_proxied() {
        let err = resolve(&HostPort::new("/var/run/postgresql", 5432))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("Unix socket"), "{err}");
    }
}
