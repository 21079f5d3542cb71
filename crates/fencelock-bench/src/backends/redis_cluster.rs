//! A Redis Cluster: fencelock's cluster backend and storage against raw commands through the
//! redis crate's async cluster connection to the same cluster.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use fencelock_core::{HostPort, LockKey};
use fencelock_redis::{RedisClusterBackend, RedisClusterConfig};
use redis::FromRedisValue;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use super::redis::{RedisWriter, scan_pattern, set_nx_px_del};
use crate::error::{BenchError, Result};
use crate::fenced_subject::FencedSubject;
use crate::subject::{Baseline, Cleanup, Op, RawTryLock};
use crate::suite::Suite;

impl Suite {
    /// fencelock's [`RedisClusterBackend`](fencelock_redis::RedisClusterBackend) on the
    /// cluster `config` names (its key prefix and timeouts), with its
    /// [`RedisStorage`](fencelock_redis::RedisStorage) on the same connection, against raw
    /// commands through a cluster connection of its own. Named `redis-cluster` in reports.
    pub async fn redis_cluster(config: &RedisClusterConfig) -> Result<Self> {
        let backend = config.connect().await?;
        let storage = Arc::new(backend.storage());
        let baseline = RedisClusterBaseline::connect(config).await?;
        let cleanup = RedisClusterCleanup {
            backend: backend.clone(),
            conn: baseline.conn.clone(),
        };
        Ok(Suite::new(
            "redis-cluster",
            FencedSubject::new(Arc::new(backend), storage),
            Arc::new(baseline),
            Vec::new(),
        )
        .with_cleanup(Arc::new(cleanup)))
    }
}

/// Raw commands through the redis crate's async cluster connection: `SET key owner NX PX
/// ttl` + `DEL key`, plain `SET`, `PING` (to one node). Each command goes to the master of its
/// key's slot. [`close`](Baseline::close) deletes the keys its writers wrote; its locks are
/// deleted as they are released (or expire after [`TTL`](crate::TTL) if a run stopped half
/// way).
#[derive(Clone)]
pub struct RedisClusterBaseline {
    conn: ClusterConnection,
    written: Arc<Mutex<Vec<String>>>,
}

impl std::fmt::Debug for RedisClusterBaseline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClusterBaseline")
            .finish_non_exhaustive()
    }
}

impl RedisClusterBaseline {
    /// Connects to the cluster `config` names through its seeds, with a cluster connection of
    /// its own.
    pub async fn connect(config: &RedisClusterConfig) -> Result<Self> {
        let client = ClusterClientBuilder::new(config.seed_urls())
            .build()
            .map_err(|e| BenchError::raw(format!("redis cluster URL {config}"), e))?;
        let conn = client
            .get_async_connection()
            .await
            .map_err(|e| BenchError::raw(format!("connect to {config}"), e))?;
        Ok(RedisClusterBaseline {
            conn,
            written: Arc::default(),
        })
    }
}

#[async_trait]
impl RawTryLock for RedisClusterBaseline {
    const LABEL: &'static str = "raw SET NX PX + DEL";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        set_nx_px_del(&mut self.conn.clone(), key).await
    }
}

#[async_trait]
impl Baseline for RedisClusterBaseline {
    fn round_trip_label(&self) -> String {
        "raw PING".into()
    }

    fn write_label(&self) -> String {
        "raw SET".into()
    }

    async fn round_trip(&self) -> Result<()> {
        // Routed to one node: the driver would send a bare PING to every master.
        let reply = self
            .conn
            .clone()
            .route_command(
                redis::cmd("PING"),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await
            .map_err(|e| BenchError::raw("PING", e))?;
        String::from_redis_value(reply).map_err(|e| BenchError::raw("PING", e))?;
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(resource.as_str().to_owned());
        Ok(Box::new(RedisWriter {
            conn: self.conn.clone(),
            resource: resource.as_str().to_owned(),
            value: vec![7; 64],
        }))
    }

    async fn close(&self) -> Result<()> {
        let written =
            std::mem::take(&mut *self.written.lock().unwrap_or_else(PoisonError::into_inner));
        let mut conn = self.conn.clone();
        // One DEL per key: the keys lie in different slots.
        for key in written {
            let _: i64 = redis::cmd("DEL")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .map_err(|e| BenchError::raw("DEL of the plain writes", e))?;
        }
        Ok(())
    }
}

/// Deletes fencelock's keys for a run's key prefix on every master of the cluster (as the
/// backend's [`master_addresses`](RedisClusterBackend::master_addresses) lists them):
/// `<prefix>:{<key>}:...` for every key under the run's prefix. Each key's hash tag puts its
/// names in a slot of their own, so the run's keys are spread over the masters; each is
/// scanned with `SCAN ... MATCH`, and what it finds is deleted one key at a time (the names
/// lie in different slots).
#[derive(Clone)]
struct RedisClusterCleanup {
    /// For its key prefix and its reading of the cluster's masters.
    backend: RedisClusterBackend,
    conn: ClusterConnection,
}

impl std::fmt::Debug for RedisClusterCleanup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClusterCleanup")
            .field("prefix", &self.backend.prefix())
            .finish_non_exhaustive()
    }
}

impl RedisClusterCleanup {
    async fn clean_master(&self, master: &HostPort, pattern: &str) -> Result<()> {
        let what = |step: &str| format!("{step} on {master}");
        let mut conn = self.conn.clone();
        let mut cursor: u64 = 0;
        loop {
            let reply = conn
                .route_command(
                    redis::cmd("SCAN")
                        .arg(cursor)
                        .arg("MATCH")
                        .arg(pattern)
                        .arg("COUNT")
                        .arg(1000)
                        .clone(),
                    RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                        host: master.host.clone(),
                        port: master.port,
                    }),
                )
                .await
                .map_err(|e| BenchError::raw(what("SCAN"), e))?;
            let (next, names): (u64, Vec<String>) = FromRedisValue::from_redis_value(reply)
                .map_err(|e| BenchError::raw(what("SCAN"), e))?;
            for name in names {
                let _: i64 = redis::cmd("DEL")
                    .arg(&name)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| BenchError::raw(what("DEL"), e))?;
            }
            if next == 0 {
                return Ok(());
            }
            cursor = next;
        }
    }
}

#[async_trait]
impl Cleanup for RedisClusterCleanup {
    async fn clean(&self, key_prefix: &str) -> Result<()> {
        let pattern = scan_pattern(self.backend.prefix(), key_prefix)?;
        let mut outcome = Ok(());
        for master in &self.backend.master_addresses().await? {
            let cleaned = self.clean_master(master, &pattern).await;
            outcome = outcome.and(cleaned);
        }
        outcome
    }
}
