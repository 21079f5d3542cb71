//! What a benchmark run compares: fencelock, the raw baseline on the same server, and peers.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{FencedStorage, LockBackend, LockKey};

use crate::baseline::{MemoryBaseline, PgBaseline, RedisBaseline, SqlxAdvisoryLockPeer};
use crate::error::Result;
use crate::fencelock::Fencelock;

/// The ttl of every lease a scenario takes: long enough that nothing expires during a run.
pub(crate) const TTL: Duration = Duration::from_secs(30);

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

/// Something that takes and releases locks: fencelock, a raw baseline, or a peer.
#[async_trait]
pub trait Subject: Send + Sync + fmt::Debug + 'static {
    /// How the subject shows in a report (`fencelock pg-lease`, `raw SET NX PX + DEL`, ...).
    fn label(&self) -> String;

    /// Takes the free lock on `key` without waiting and releases it.
    async fn acquire_release(&self, key: &LockKey) -> Result<()>;

    /// Waits up to `wait` for the lock on `key`, then releases it: one operation of the
    /// contended scenarios.
    async fn lock_release(&self, key: &LockKey, wait: Duration) -> Result<()>;
}

/// The raw baseline for one server: what a user would write without fencelock.
#[async_trait]
pub trait Baseline: Subject {
    /// The label of [`round_trip`](Self::round_trip).
    fn round_trip_label(&self) -> String;

    /// The label of the plain writes of [`writer`](Self::writer).
    fn write_label(&self) -> String;

    /// The cheapest request the server answers (`PING`, `SELECT 1`): one round trip.
    async fn round_trip(&self) -> Result<()>;

    /// Plain, unfenced writes of `resource`.
    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>>;

    /// Removes what the baseline created on the server.
    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

/// Which PostgreSQL lock backend a [`Suite::postgres`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum PgLockKind {
    /// `PgLeaseBackend`.
    #[default]
    Lease,
    /// `PgAdvisoryBackend`.
    Advisory,
}

/// fencelock on one backend, the raw baseline on the same server, and peers.
#[derive(Debug, Clone)]
pub struct Suite {
    /// The backend, as shown in reports (`memory`, `redis`, `pg-lease`, ...).
    pub backend: String,
    /// fencelock on that backend.
    pub fencelock: Arc<Fencelock>,
    /// The raw baseline on the same server.
    pub baseline: Arc<dyn Baseline>,
    /// Other libraries on the same server.
    pub peers: Vec<Arc<dyn Subject>>,
    run_id: String,
}

impl Suite {
    /// A suite from its parts. `backend` names the backend in reports.
    pub fn new(
        backend: impl Into<String>,
        fencelock: Fencelock,
        baseline: Arc<dyn Baseline>,
        peers: Vec<Arc<dyn Subject>>,
    ) -> Self {
        Suite {
            backend: backend.into(),
            fencelock: Arc::new(fencelock),
            baseline,
            peers,
            run_id: format!("{:08x}", rand::random::<u32>()),
        }
    }

    /// The in-process backend, against a `tokio::sync::Mutex<HashMap>` lock table.
    pub fn memory() -> Self {
        let backend = Arc::new(fencelock_memory::MemoryLockBackend::new());
        let storage = Arc::new(fencelock_memory::MemoryStorage::new());
        Suite::new(
            "memory",
            Fencelock::new(backend, storage),
            Arc::new(MemoryBaseline::new()),
            Vec::new(),
        )
    }

    /// One Redis server at `url`, against raw commands on a connection of its own.
    pub async fn redis(url: &str) -> Result<Self> {
        let backend = fencelock_redis::RedisConfig::new(url).connect().await?;
        let storage = Arc::new(backend.storage());
        let baseline = RedisBaseline::connect(url).await?;
        Ok(Suite::new(
            "redis",
            Fencelock::new(Arc::new(backend), storage),
            Arc::new(baseline),
            Vec::new(),
        ))
    }

    /// Redlock over the Redis servers at `nodes`, fenced data on `storage`, against raw
    /// commands on the first node, with fencelock's one-node Redis backend on that node as a
    /// peer (the cost of the quorum is Redlock's ratio to it).
    pub async fn redlock(nodes: &[String], storage: &str) -> Result<Self> {
        let first = nodes
            .first()
            .ok_or_else(|| crate::BenchError::Run("Redlock needs at least one node".into()))?;
        let backend = fencelock_redis::RedlockConfig::new(nodes.iter().cloned())
            .connect()
            .await?;
        let storage = Arc::new(
            fencelock_redis::RedisConfig::new(storage)
                .connect_storage()
                .await?,
        );
        let one_node = fencelock_redis::RedisConfig::new(first.as_str())
            .connect()
            .await?;
        let one_node_storage = Arc::new(one_node.storage());
        let baseline = RedisBaseline::connect(first).await?;
        Ok(Suite::new(
            format!("redlock-{}", nodes.len()),
            Fencelock::new(Arc::new(backend), storage),
            Arc::new(baseline),
            vec![Arc::new(Fencelock::new(
                Arc::new(one_node),
                one_node_storage,
            ))],
        ))
    }

    /// The PostgreSQL database at `url` (fencelock's tables in `schema`, default `fencelock`),
    /// against raw sqlx statements on a pool of its own, and sqlx's `PgAdvisoryLock`.
    pub async fn postgres(url: &str, schema: Option<&str>, kind: PgLockKind) -> Result<Self> {
        let mut config = fencelock_postgres::PgConfig::from_url(url)?;
        let schema = schema.unwrap_or(fencelock_postgres::DEFAULT_SCHEMA);
        config = config.schema(schema);
        let db = config.connect().await?;
        let backend: Arc<dyn LockBackend> = match kind {
            PgLockKind::Lease => Arc::new(db.lease_backend()),
            PgLockKind::Advisory => Arc::new(db.advisory_backend()),
        };
        let storage: Arc<dyn FencedStorage> = Arc::new(db.storage());
        let name = backend.name();
        let baseline = PgBaseline::connect(url, schema).await?;
        let peer = SqlxAdvisoryLockPeer::new(baseline.pool().clone());
        Ok(Suite::new(
            name,
            Fencelock::new(backend, storage),
            Arc::new(baseline),
            vec![Arc::new(peer)],
        ))
    }

    /// A key no other run and no other subject of this run uses: the runs of each subject
    /// start from a free lock, and raw baselines never contend with fencelock.
    pub fn key(&self, subject: usize, name: &str) -> Result<LockKey> {
        Ok(LockKey::new(format!(
            "fencelock-bench/{}/{subject}/{name}",
            self.run_id
        ))?)
    }

    /// Removes what the baseline created on the server. fencelock's token counters for the
    /// run's keys stay: they are never deleted, by design.
    pub async fn close(&self) -> Result<()> {
        self.baseline.close().await
    }
}
