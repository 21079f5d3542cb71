//! The servers a chaos run talks to, and the handles the nemesis pulls: servers a backend
//! spawned for the run (killed and restarted, through `SpawnedServers`), fault proxies in front
//! of every server (partitions), and the backend's own session fault where it has one
//! (PostgreSQL's `pg_terminate_backend`), which the backend provides through
//! `BackendConfig::session_faults`.
//!
//! Specs are typed configs from here on: proxies go in front of servers with `with_hosts`, and
//! the workers' sessions are tagged by the session fault so that it ends theirs only.

use std::net::SocketAddr;
use std::sync::Arc;

use fencelock::HostPort;
use fencelock::spec::{BackendSpec, Connected, StorageSpec};
use fencelock::tools::{SessionFaults, SpawnRequest, SpawnedServers};

use crate::config::Persistence;
use crate::error::{ChaosError, Result};
use fencelock_servers::proxy::FaultProxy;

/// Everything a run talks to.
#[derive(Debug)]
pub(crate) struct Cluster {
    /// The lock service for workers: through the proxies when there are any, Postgres sessions
    /// tagged with the run's application name.
    pub(crate) worker_backend: BackendSpec,
    /// The storage for workers, when it is not the lock service's own.
    pub(crate) worker_storage: Option<StorageSpec>,
    /// The storage, reached directly, for the final read.
    pub(crate) direct_storage: StorageSpec,
    /// Servers this run started and may kill; dropped with the cluster, which stops them.
    pub(crate) spawned: Option<Box<dyn SpawnedServers>>,
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

    /// `spec`, reached through proxies when `proxied`.
    async fn route(&mut self, spec: &BackendSpec, proxied: bool) -> Result<BackendSpec> {
        if !proxied {
            return Ok(spec.clone());
        }
        Ok(spec
            .clone()
            .with_hosts(&self.in_front_of(&spec.hosts()).await?)?)
    }

    /// `spec`, reached through proxies when `proxied`.
    async fn route_storage(&mut self, spec: &StorageSpec, proxied: bool) -> Result<StorageSpec> {
        if !proxied {
            return Ok(spec.clone());
        }
        Ok(spec
            .clone()
            .with_hosts(&self.in_front_of(&spec.hosts()).await?)?)
    }
}

impl Cluster {
    /// Starts `nodes` servers of the registered scheme `scheme` through the backend's own
    /// spawner ([`Scheme::spawn`](fencelock::Scheme::spawn)). The lock lives on them; the
    /// storage too, or on a server of its own the backend started and never kills.
    pub(crate) async fn spawn(
        scheme: &str,
        nodes: usize,
        persistence: Persistence,
        run_tag: &str,
        proxied: bool,
    ) -> Result<Self> {
        let spawn = fencelock::spec::spawner(scheme)?;
        let request = SpawnRequest::new(nodes, run_tag).durable(persistence == Persistence::Always);
        let servers = spawn(request).await?;
        let mut proxies = Proxies::default();
        let lock = BackendSpec::from(servers.lock());
        let worker_backend = proxies.route(&lock, proxied).await?;
        let (worker_storage, direct_storage) = match servers.storage() {
            Some(storage) => {
                let storage = StorageSpec::from_backend(storage);
                (
                    Some(proxies.route_storage(&storage, proxied).await?),
                    storage,
                )
            }
            None => (
                None,
                StorageSpec::from_backend(lock.config().clone_config()),
            ),
        };
        Ok(Cluster {
            worker_backend,
            worker_storage,
            direct_storage,
            described: servers.describe(),
            spawned: Some(servers),
            proxies: proxies.0,
            faults: None,
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
                direct_storage: StorageSpec::from_backend(spec.config().clone_config()),
                spawned: None,
                proxies: Vec::new(),
                faults: None,
                described: format!("{spec} (workers are threads of this process)"),
                in_process: Some(spec.connect().await?),
            });
        }
        let mut proxies = Proxies::default();
        let mut worker_backend = proxies.route(spec, proxied).await?;
        let faults = spec.config().session_faults(run_tag).await?;
        if let Some(faults) = &faults {
            worker_backend = faults.tag(worker_backend.config())?.into();
        }
        Ok(Cluster {
            worker_backend,
            worker_storage: None,
            direct_storage: StorageSpec::from_backend(spec.config().clone_config()),
            spawned: None,
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
            None => Ok(self.direct_storage.connect().await?),
        }
    }

    /// The workers keep their counter in `storage` instead of the lock service's: a storage
    /// spec of its own (`s3://`) or another backend's storage. It must be reachable from
    /// every worker process; with `proxied`, a fault proxy goes in front of its servers too.
    pub(crate) async fn store_in(&mut self, storage: &StorageSpec, proxied: bool) -> Result<()> {
        if self.in_process.is_some() || !storage.is_shared() {
            return Err(ChaosError::config(format!(
                "a storage of its own needs a lock service and a storage that every worker \
                 process reaches over the network (not {} with {storage})",
                self.worker_backend
            )));
        }
        let mut proxies = Proxies::default();
        self.worker_storage = Some(proxies.route_storage(storage, proxied).await?);
        self.proxies.extend(proxies.0);
        self.direct_storage = storage.clone();
        self.described = format!("{}, storage {storage}", self.described);
        Ok(())
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
        if let Some(servers) = &self.spawned {
            for node in 0..servers.nodes() {
                if !servers.is_running(node) {
                    servers.restart(node).await?;
                }
            }
        }
        Ok(())
    }
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
