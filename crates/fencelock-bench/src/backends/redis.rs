//! Redis, one node and Redlock, against raw commands on the same server.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::LockKey;
use fencelock_redis::{RedisConfig, RedlockConfig};
use redis::aio::ConnectionManager;

use crate::error::{BenchError, Result};
use crate::fenced_subject::FencedSubject;
use crate::subject::{Baseline, Op, RawTryLock, TTL};
use crate::suite::Suite;

impl Suite {
    /// fencelock's one-node backend on the server `config` names (its key prefix and
    /// timeouts), with [`RedisStorage`](fencelock_redis::RedisStorage) on the same server,
    /// against raw commands on a connection of its own to that server.
    pub async fn redis(config: &RedisConfig) -> Result<Self> {
        let backend = config.connect().await?;
        let storage = Arc::new(backend.storage());
        let baseline = RedisBaseline::connect(config).await?;
        Ok(Suite::new(
            "redis",
            FencedSubject::new(Arc::new(backend), storage),
            Arc::new(baseline),
            Vec::new(),
        ))
    }

    /// Redlock over the nodes of `config`, fenced data on its storage server
    /// ([`RedlockConfig::storage`], by default the first node), against raw commands on the
    /// first node, with fencelock's one-node Redis backend on that node (same key prefix) as
    /// a peer: the cost of the quorum is Redlock's ratio to it.
    pub async fn redlock(config: &RedlockConfig) -> Result<Self> {
        let first = config
            .node_configs()
            .first()
            .ok_or_else(|| BenchError::Run("Redlock needs at least one node".into()))?;
        let backend = config.connect().await?;
        let storage = Arc::new(config.connect_storage().await?);
        let one_node = first.clone().prefix(backend.prefix()).connect().await?;
        let one_node_storage = Arc::new(one_node.storage());
        let baseline = RedisBaseline::connect(first).await?;
        Ok(Suite::new(
            format!("redlock-{}", config.node_configs().len()),
            FencedSubject::new(Arc::new(backend), storage),
            Arc::new(baseline),
            vec![Arc::new(FencedSubject::new(
                Arc::new(one_node),
                one_node_storage,
            ))],
        ))
    }
}

/// Raw commands on one Redis server: `SET key owner NX PX ttl` + `DEL key`, plain `SET`,
/// `PING`.
#[derive(Clone)]
pub struct RedisBaseline {
    conn: ConnectionManager,
}

impl std::fmt::Debug for RedisBaseline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisBaseline").finish_non_exhaustive()
    }
}

impl RedisBaseline {
    /// Connects to the server `config` names, with a connection of its own.
    pub async fn connect(config: &RedisConfig) -> Result<Self> {
        let client = redis::Client::open(config.to_url())
            .map_err(|e| BenchError::raw(format!("redis URL {config}"), e))?;
        let conn = client
            .get_connection_manager()
            .await
            .map_err(|e| BenchError::raw(format!("connect to {config}"), e))?;
        Ok(RedisBaseline { conn })
    }
}

#[async_trait]
impl RawTryLock for RedisBaseline {
    const LABEL: &'static str = "raw SET NX PX + DEL";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        let mut conn = self.conn.clone();
        let set: Option<String> = redis::cmd("SET")
            .arg(key.as_str())
            .arg("owner")
            .arg("NX")
            .arg("PX")
            .arg(TTL.as_millis() as u64)
            .query_async(&mut conn)
            .await
            .map_err(|e| BenchError::raw("SET NX PX", e))?;
        if set.is_none() {
            return Ok(false);
        }
        let _: i64 = redis::cmd("DEL")
            .arg(key.as_str())
            .query_async(&mut conn)
            .await
            .map_err(|e| BenchError::raw("DEL", e))?;
        Ok(true)
    }
}

#[async_trait]
impl Baseline for RedisBaseline {
    fn round_trip_label(&self) -> String {
        "raw PING".into()
    }

    fn write_label(&self) -> String {
        "raw SET".into()
    }

    async fn round_trip(&self) -> Result<()> {
        let mut conn = self.conn.clone();
        let _: String = redis::cmd("PING")
            .query_async(&mut conn)
            .await
            .map_err(|e| BenchError::raw("PING", e))?;
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        Ok(Box::new(RedisWriter {
            conn: self.conn.clone(),
            resource: resource.as_str().to_owned(),
            value: vec![7; 64],
        }))
    }
}

struct RedisWriter {
    conn: ConnectionManager,
    resource: String,
    value: Vec<u8>,
}

#[async_trait]
impl Op for RedisWriter {
    async fn once(&self) -> Result<Option<Duration>> {
        let mut conn = self.conn.clone();
        let () = redis::cmd("SET")
            .arg(&self.resource)
            .arg(&self.value[..])
            .query_async(&mut conn)
            .await
            .map_err(|e| BenchError::raw("SET", e))?;
        Ok(None)
    }
}
