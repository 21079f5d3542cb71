//! What the tools above a backend ask of it, as traits the backend implements: benchmarks
//! measure a [`Subject`] next to the backend's raw [`Baseline`] and remove a run's keys with a
//! [`Cleanup`]; chaos runs end server sessions through [`SessionFaults`], and kill and restart
//! the servers a backend started for them ([`Spawn`], [`SpawnedServers`]).
//!
//! The tools never learn a backend's private tables or keys: the backend hands them these
//! objects from [`BackendConfig::bench_kit`], [`BackendConfig::session_faults`] and its
//! [`Scheme::spawn`](crate::Scheme::spawn).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::config::{BackendConfig, Connected};
use crate::error::{Error, Result};
use crate::key::LockKey;

/// The ttl of every lease a benchmark takes, the fenced lock's and the raw baselines' alike:
/// long enough that nothing expires during a run.
pub const TTL: Duration = Duration::from_secs(30);

/// One operation of a latency scenario, prepared (a writer holds its lease, ...).
#[async_trait]
pub trait Op: Send + Sync {
    /// Runs the operation once. `Some(latency)` when it measures itself (hand-off: release
    /// start to grant), `None` to be timed from outside.
    async fn once(&self) -> Result<Option<Duration>>;

    /// Undoes the preparation (releases a held lease, ...).
    async fn finish(self: Box<Self>) -> Result<()> {
        Ok(())
    }
}

/// Something that takes and releases locks: the fenced lock, a raw baseline, or a peer.
#[async_trait]
pub trait Subject: Send + Sync + fmt::Debug + 'static {
    /// How the subject shows in a report (`fencelock pg-lease`, `raw SET NX PX + DEL`, ...).
    fn label(&self) -> String;

    /// Takes the free lock on `key` without waiting and releases it. A lock found held is an
    /// error: every subject gets keys of its own.
    async fn acquire_release(&self, key: &LockKey) -> Result<()>;

    /// Waits up to `wait` for the lock on `key`, then releases it: one operation of the
    /// contended scenarios.
    async fn lock_release(&self, key: &LockKey, wait: Duration) -> Result<()>;
}

/// The raw baseline for one server: what a user would write against it without fencelock.
/// Every ratio of a benchmark report is counted against it.
///
/// A baseline is a [`Subject`] (usually through [`RawTryLock`]) with, in addition, the
/// server's cheapest request and a plain, unfenced write.
#[async_trait]
pub trait Baseline: Subject {
    /// The label of [`round_trip`](Self::round_trip) (`raw PING`, `raw SELECT 1`).
    fn round_trip_label(&self) -> String;

    /// The label of the plain writes of [`writer`](Self::writer) (`raw SET`, `raw UPDATE`).
    fn write_label(&self) -> String;

    /// The cheapest request the server answers (`PING`, `SELECT 1`): one round trip.
    async fn round_trip(&self) -> Result<()>;

    /// Plain, unfenced writes of `resource`, about 64 bytes each.
    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>>;

    /// Removes what the baseline created on the server (a table, the keys it wrote). Called
    /// once, after the run.
    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

/// A bare try-lock, as a user calls it: take the lock if free and release it at once.
///
/// Every `RawTryLock` is a [`Subject`]: acquire+release is one try (a held lock is an
/// error), and waiting is the polling loop a user writes around it, pausing with fencelock's
/// own default [`Backoff`] so that the comparison is about the lock, not the retry policy.
#[async_trait]
pub trait RawTryLock: Send + Sync + fmt::Debug + 'static {
    /// What the subject is called in reports (`raw SET NX PX + DEL`).
    const LABEL: &'static str;

    /// `true` when the lock on `key` was free, taken and released; `false` when it was held.
    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool>;
}

#[async_trait]
impl<T: RawTryLock> Subject for T {
    fn label(&self) -> String {
        T::LABEL.into()
    }

    async fn acquire_release(&self, key: &LockKey) -> Result<()> {
        if self.try_lock_unlock(key).await? {
            Ok(())
        } else {
            Err(held_by_someone_else(T::LABEL, key))
        }
    }

    async fn lock_release(&self, key: &LockKey, wait: Duration) -> Result<()> {
        poll(key, wait, || self.try_lock_unlock(key)).await
    }
}

/// The error of a benchmark subject that found a lock held that should have been free.
pub fn held_by_someone_else(subject: &str, key: &LockKey) -> Error {
    Error::Backend {
        backend: "bench",
        message: format!("{subject}: the lock on {key} is held by someone else"),
        source: None,
    }
}

/// Retries `try_lock` (true when granted and released) until it succeeds or `wait` is spent,
/// pausing with fencelock's own default backoff; out of time is [`Error::Timeout`].
async fn poll<F, Fut>(key: &LockKey, wait: Duration, mut try_lock: F) -> Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let start = Instant::now();
    let deadline = start + wait;
    let backoff = Backoff::default();
    let mut attempt = 0;
    loop {
        if try_lock().await? {
            return Ok(());
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::Timeout {
                key: key.to_string(),
                waited: now - start,
            });
        }
        tokio::time::sleep(backoff.pause(attempt).min(deadline - now)).await;
        attempt += 1;
    }
}

/// Removes what the fenced lock left on its servers for the keys of one benchmark run:
/// locks, token counters, stored data, readers, holder records.
///
/// Every key a run uses starts with the run's key prefix, which no other run shares, so
/// deleting their token counters is safe even though a backend never deletes one by itself:
/// nobody holds, and nobody will ever lock, a key of a finished run again. The backend owns
/// its layout, so the cleanup is the backend's: no tool re-encodes its tables or keys.
#[async_trait]
pub trait Cleanup: Send + Sync + fmt::Debug + 'static {
    /// Deletes every lock, token counter and stored value whose key or resource starts with
    /// `key_prefix`. Called once, after every lease of the run was released.
    async fn clean(&self, key_prefix: &str) -> Result<()>;
}

/// A peer in a benchmark: another library's lock on the same server, or fencelock on another
/// backend the comparison is about (Redlock's one-node backend on its first node).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Peer {
    /// Another library's lock.
    Raw(Arc<dyn Subject>),
    /// fencelock on another backend, measured as the fenced lock is.
    Fenced(Connected),
}

/// What a benchmark measures on one backend, from the backend itself
/// ([`BackendConfig::bench_kit`]).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct BenchKit {
    /// The backend as reports name it (`redis`, `redlock-3`, `pg-lease`).
    pub name: String,
    /// The fenced lock and its storage.
    pub fenced: Connected,
    /// The raw baseline on the same server.
    pub baseline: Arc<dyn Baseline>,
    /// Peers on the same server.
    pub peers: Vec<Peer>,
    /// What removes a run's keys, if the backend keeps anything after a process ends.
    pub cleanup: Option<Arc<dyn Cleanup>>,
}

impl BenchKit {
    /// A kit without peers or cleanup.
    pub fn new(name: impl Into<String>, fenced: Connected, baseline: Arc<dyn Baseline>) -> Self {
        BenchKit {
            name: name.into(),
            fenced,
            baseline,
            peers: Vec::new(),
            cleanup: None,
        }
    }

    /// With `peer` measured next to the baseline.
    pub fn peer(mut self, peer: Peer) -> Self {
        self.peers.push(peer);
        self
    }

    /// With `cleanup` run after the run.
    pub fn cleanup(mut self, cleanup: Arc<dyn Cleanup>) -> Self {
        self.cleanup = Some(cleanup);
        self
    }
}

/// A server-side fault of chaos runs: the server ends client sessions (PostgreSQL's
/// `pg_terminate_backend`), as an operator or a failover does.
///
/// The fault ends only sessions opened through a config [`tag`](Self::tag) returned, so it
/// never touches anything but the run's workers.
#[async_trait]
pub trait SessionFaults: Send + Sync + fmt::Debug + 'static {
    /// `config` (the workers' config, perhaps pointed at fault proxies) with its sessions
    /// marked so that [`end_sessions`](Self::end_sessions) finds them.
    fn tag(&self, config: &dyn BackendConfig) -> Result<Box<dyn BackendConfig>>;

    /// Ends the tagged sessions: all of them, or about half when `all` is false. Returns how
    /// many it ended.
    async fn end_sessions(&self, all: bool) -> Result<u64>;

    /// What the fault is called in reports (`pg_terminate_backend`).
    fn label(&self) -> &'static str;
}

/// What a fault run asks a backend to start: `nodes` servers (members, nodes) of one
/// scheme, on free ports of this host.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpawnRequest {
    /// How many servers: Redlock's nodes, an etcd cluster's or a ZooKeeper ensemble's members.
    pub nodes: usize,
    /// Whether the servers keep what they acknowledged across a kill -9 (Redis: AOF with
    /// `appendfsync always`). A backend whose servers always do ignores it.
    pub durable: bool,
    /// A tag unique to the run, for key prefixes and names.
    pub run_tag: String,
}

impl SpawnRequest {
    /// `nodes` durable servers for the run tagged `run_tag`.
    pub fn new(nodes: usize, run_tag: impl Into<String>) -> Self {
        SpawnRequest {
            nodes,
            durable: true,
            run_tag: run_tag.into(),
        }
    }

    /// The same request with `durable` persistence.
    pub fn durable(mut self, durable: bool) -> Self {
        self.durable = durable;
        self
    }
}

/// What [`Scheme::spawn`](crate::Scheme::spawn) returns: the servers, once they answer.
pub type SpawnFuture = Pin<Box<dyn Future<Output = Result<Box<dyn SpawnedServers>>> + Send>>;

/// Starts the servers of a [`SpawnRequest`]. A request the backend cannot serve (no nodes,
/// more than one node of a one-server scheme) is [`Error::InvalidConfig`]; a server that
/// cannot start (its binary missing) is [`Error::Unavailable`] naming what to install.
pub type Spawn = fn(SpawnRequest) -> SpawnFuture;

/// Servers a backend started for a fault run, which the run kills and restarts. Dropping it
/// stops them all.
///
/// The contract a run relies on: the lock service on [`lock`](Self::lock) keeps every token
/// it granted across a kill of at most [`kill_at_most`](Self::kill_at_most) nodes at a time
/// and their [`restart`](Self::restart) (or says in its capabilities that it does not), and
/// the storage keeps every write it acknowledged, because a storage that loses admitted
/// writes is data loss, not a fencing failure.
#[async_trait]
pub trait SpawnedServers: Send + Sync + fmt::Debug + 'static {
    /// The lock service on these servers.
    fn lock(&self) -> Box<dyn BackendConfig>;

    /// The storage, when it is not the lock service's own: a server of its own that is never
    /// killed (a non-persistent Redis would lose admitted writes in a kill).
    fn storage(&self) -> Option<Box<dyn BackendConfig>> {
        None
    }

    /// What was started, for reports (`3 spawned etcd members`).
    fn describe(&self) -> String;

    /// How many servers may be killed: indices `0..nodes()`.
    fn nodes(&self) -> usize;

    /// The most servers one kill may take down at once while the service stays correct and
    /// available again after the restart (a minority of a quorum).
    fn kill_at_most(&self) -> usize;

    /// Whether server `node` runs (a paused one counts as running).
    fn is_running(&self, node: usize) -> bool;

    /// Kills server `node` with SIGKILL and waits until it is gone.
    async fn kill(&self, node: usize) -> Result<()>;

    /// Starts killed server `node` again on its port and data, and waits until it answers.
    async fn restart(&self, node: usize) -> Result<()>;

    /// The server that leads the others now, when the service has a leader.
    async fn leader(&self) -> Option<usize> {
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Held for its first `busy` tries.
    #[derive(Debug)]
    struct BusyAtFirst {
        busy: u32,
        tries: AtomicU32,
    }

    #[async_trait]
    impl RawTryLock for BusyAtFirst {
        const LABEL: &'static str = "busy at first";

        async fn try_lock_unlock(&self, _key: &LockKey) -> Result<bool> {
            Ok(self.tries.fetch_add(1, Ordering::Relaxed) >= self.busy)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_raw_try_lock_is_polled_until_free_or_out_of_time() {
        let key = LockKey::new("k").unwrap();
        let lock = BusyAtFirst {
            busy: 3,
            tries: AtomicU32::new(0),
        };
        assert_eq!(lock.label(), "busy at first");
        let err = lock.acquire_release(&key).await.unwrap_err();
        assert!(err.to_string().contains("held by someone else"), "{err}");
        lock.lock_release(&key, Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(lock.tries.load(Ordering::Relaxed), 4);

        let never = BusyAtFirst {
            busy: u32::MAX,
            tries: AtomicU32::new(0),
        };
        let err = never
            .lock_release(&key, Duration::from_secs(1))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
    }
}
