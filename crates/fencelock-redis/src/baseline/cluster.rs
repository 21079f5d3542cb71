//! The raw baseline on a Redis Cluster, through the `redis` crate's async cluster connection,
//! and the sweep of a run's keys on every master.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use fencelock_core::tools::{Baseline, Cleanup, Op, RawTryLock};
use fencelock_core::{HostPort, LockKey, Result};
use redis::FromRedisValue;
use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};

use super::cleanup::scan_pattern;
use super::one_node::{RedisWriter, set_nx_px_del};
use crate::cluster::{RedisClusterBackend, RedisClusterConfig};
use crate::error::{REDIS_CLUSTER, map_error};

/// Raw commands through the redis crate's async cluster connection: `SET key owner NX PX
/// ttl` + `DEL key`, plain `SET`, `PING` (to one node). Each command goes to the master of its
/// key's slot. [`close`](Baseline::close) deletes the keys its writers wrote; its locks are
/// deleted as they are released (or expire after [`TTL`](fencelock_core::tools::TTL) if a run
/// stopped half way).
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
            .map_err(|e| {
                map_error(REDIS_CLUSTER, e).in_context(&format!("redis cluster URL {config}"))
            })?;
        let conn = client
            .get_async_connection()
            .await
            .map_err(|e| map_error(REDIS_CLUSTER, e).in_context(&format!("connect to {config}")))?;
        Ok(RedisClusterBaseline {
            conn,
            written: Arc::default(),
        })
    }

    /// The baseline's cluster connection, for the cleanup of the same kit.
    pub(super) fn connection(&self) -> ClusterConnection {
        self.conn.clone()
    }
}

#[async_trait]
impl RawTryLock for RedisClusterBaseline {
    const LABEL: &'static str = "raw SET NX PX + DEL";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        set_nx_px_del(REDIS_CLUSTER, &mut self.conn.clone(), key).await
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
            .map_err(|e| map_error(REDIS_CLUSTER, e).in_context("PING"))?;
        String::from_redis_value(reply)
            .map_err(|e| map_error(REDIS_CLUSTER, e.into()).in_context("PING"))?;
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(resource.as_str().to_owned());
        Ok(Box::new(RedisWriter::new(
            REDIS_CLUSTER,
            self.conn.clone(),
            resource,
        )))
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
                .map_err(|e| map_error(REDIS_CLUSTER, e).in_context("DEL of the plain writes"))?;
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
pub(crate) struct RedisClusterCleanup {
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
    /// For the keys of `backend` (its prefix, its masters), through `conn`.
    pub(crate) fn new(backend: RedisClusterBackend, conn: ClusterConnection) -> Self {
        RedisClusterCleanup { backend, conn }
    }

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
                .map_err(|e| map_error(REDIS_CLUSTER, e).in_context(&what("SCAN")))?;
            let (next, names): (u64, Vec<String>) = FromRedisValue::from_redis_value(reply)
                .map_err(|e| map_error(REDIS_CLUSTER, e.into()).in_context(&what("SCAN")))?;
            for name in names {
                let _: i64 = redis::cmd("DEL")
                    .arg(&name)
                    .query_async(&mut conn)
                    .await
                    .map_err(|e| map_error(REDIS_CLUSTER, e).in_context(&what("DEL")))?;
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
        // Every master is swept even when one fails; the first error is reported.
        let mut outcome = Ok(());
        for master in &self.backend.master_addresses().await? {
            let cleaned = self.clean_master(master, &pattern).await;
            outcome = outcome.and(cleaned);
        }
        outcome
    }
}
