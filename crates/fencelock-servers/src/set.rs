//! Spawned servers as one set a fault run pulls: [`ServerSet`] implements the core's
//! [`SpawnedServers`] over any [`Process`] (each member of a
//! [`Members`](crate::members::Members) group, or a server a backend's crate runs itself, such
//! as `fencelock_redis::servers::RedisServer`), so a backend's spawner is a few lines that
//! start its servers and name the lock service and the storage on them.

use std::any::Any;
use std::fmt;
use std::io;
use std::sync::Arc;

use fencelock_core::tools::SpawnedServers;
use fencelock_core::{BackendConfig, Error, Result, async_trait};

/// One server of a set: a process a fault run kills with SIGKILL and starts again on its port
/// and data.
pub trait Process: Send + Sync + fmt::Debug + 'static {
    /// Whether the process runs (a paused one counts as running).
    fn is_running(&self) -> bool;

    /// Kills the process with SIGKILL and waits for it to exit.
    fn kill(&self);

    /// Starts the killed process again on its port and data, and waits until it answers.
    fn try_restart(&self) -> io::Result<()>;

    /// Whether the process leads the others now (an etcd leader, a ZooKeeper leader).
    fn leads(&self) -> bool {
        false
    }
}

/// Servers a backend started, with the lock service and the storage on them.
pub struct ServerSet {
    service: &'static str,
    lock: Box<dyn BackendConfig>,
    storage: Option<Box<dyn BackendConfig>>,
    described: String,
    processes: Vec<Arc<dyn Process>>,
    kill_at_most: usize,
    keep: Vec<Arc<dyn Any + Send + Sync>>,
}

impl fmt::Debug for ServerSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerSet")
            .field("service", &self.service)
            .field("lock", &self.lock.redacted_url())
            .field("processes", &self.processes)
            .field("kill_at_most", &self.kill_at_most)
            .finish_non_exhaustive()
    }
}

impl ServerSet {
    /// `processes` of `service` (`redis-server`, `etcd`; errors name it) serving `lock`,
    /// described as `described`. A kill takes at most one process at a time unless
    /// [`kill_at_most`](Self::kill_at_most) says otherwise.
    pub fn new(
        service: &'static str,
        lock: impl BackendConfig,
        described: impl Into<String>,
        processes: Vec<Arc<dyn Process>>,
    ) -> Self {
        ServerSet {
            service,
            lock: Box::new(lock),
            storage: None,
            described: described.into(),
            processes,
            kill_at_most: 1,
            keep: Vec::new(),
        }
    }

    /// With the storage on `storage` (a server of its own, never killed) instead of on the
    /// lock service.
    pub fn storage(mut self, storage: impl BackendConfig) -> Self {
        self.storage = Some(Box::new(storage));
        self
    }

    /// With at most `most` processes killed at once.
    pub fn kill_at_most(mut self, most: usize) -> Self {
        self.kill_at_most = most;
        self
    }

    /// Keeps `server` alive as long as the set (a storage server, which is never killed).
    pub fn keep(mut self, server: Arc<dyn Any + Send + Sync>) -> Self {
        self.keep.push(server);
        self
    }

    fn process(&self, node: usize) -> Result<Arc<dyn Process>> {
        self.processes.get(node).cloned().ok_or_else(|| {
            Error::config(format!(
                "no {} server {node}: the set has {}",
                self.service,
                self.processes.len()
            ))
        })
    }

    fn failed(&self, what: &str, e: impl fmt::Display) -> Error {
        Error::Unavailable {
            backend: self.service,
            message: format!("{what}: {e}"),
            source: None,
        }
    }
}

#[async_trait]
impl SpawnedServers for ServerSet {
    fn lock(&self) -> Box<dyn BackendConfig> {
        self.lock.clone()
    }

    fn storage(&self) -> Option<Box<dyn BackendConfig>> {
        self.storage.clone()
    }

    fn describe(&self) -> String {
        self.described.clone()
    }

    fn nodes(&self) -> usize {
        self.processes.len()
    }

    fn kill_at_most(&self) -> usize {
        self.kill_at_most
    }

    fn is_running(&self, node: usize) -> bool {
        self.processes.get(node).is_some_and(|p| p.is_running())
    }

    async fn kill(&self, node: usize) -> Result<()> {
        let process = self.process(node)?;
        tokio::task::spawn_blocking(move || process.kill())
            .await
            .map_err(|e| self.failed("killing a server failed", e))
    }

    async fn restart(&self, node: usize) -> Result<()> {
        let process = self.process(node)?;
        tokio::task::spawn_blocking(move || process.try_restart())
            .await
            .map_err(|e| self.failed("restarting a server failed", e))?
            .map_err(|e| self.failed(&format!("cannot restart server {node}"), e))
    }

    async fn leader(&self) -> Option<usize> {
        let processes = self.processes.clone();
        tokio::task::spawn_blocking(move || processes.iter().position(|p| p.leads()))
            .await
            .ok()
            .flatten()
    }
}

/// Runs `start` (a blocking spawn of `service`) off the runtime; a failure is
/// [`Error::Unavailable`] naming the service, and what to install when its binary is missing.
pub async fn start<T, F>(service: &'static str, start: F) -> Result<T>
where
    T: Send + 'static,
    F: FnOnce() -> io::Result<T> + Send + 'static,
{
    let failed = |message: String| Error::Unavailable {
        backend: service,
        message,
        source: None,
    };
    tokio::task::spawn_blocking(start)
        .await
        .map_err(|e| failed(format!("starting {service} failed: {e}")))?
        .map_err(|e| failed(format!("cannot start {service}: {e}")))
}
