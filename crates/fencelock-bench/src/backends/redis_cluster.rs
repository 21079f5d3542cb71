//! A Redis Cluster: fencelock's cluster backend and storage against raw commands through the
//! redis crate's async cluster connection to the same cluster.

use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;
use fencelock_core::LockKey;
use fencelock_redis::RedisClusterConfig;
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
            prefix: backend.prefix().to_owned(),
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

/// The `redis://` (or `rediss://`) URL of every seed of `config`, with the config's
/// credentials: what the redis crate's cluster client takes.
fn seed_urls(config: &RedisClusterConfig) -> Vec<String> {
    // `to_url` writes `<scheme>+cluster://[userinfo@]host:port,...[?query]`; the hosts come
    // typed from `hosts`, only the scheme and the credentials are taken from the text.
    let url = config.to_url();
    let (scheme, rest) = url.split_once("://").unwrap_or(("redis+cluster", ""));
    let scheme = scheme.strip_suffix("+cluster").unwrap_or("redis");
    let authority = rest.split('?').next().unwrap_or_default();
    let userinfo = authority.rfind('@').map_or("", |at| &authority[..=at]);
    config
        .hosts()
        .iter()
        .map(|host| format!("{scheme}://{userinfo}{host}"))
        .collect()
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
        let client = ClusterClientBuilder::new(seed_urls(config))
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

/// Deletes fencelock's keys for a run's key prefix on every master of the cluster:
/// `<prefix>:{<key>}:...` for every key under the run's prefix. Each key's hash tag puts its
/// names in a slot of their own, so the run's keys are spread over the masters; each is
/// scanned with `SCAN ... MATCH`, and what it finds is deleted one key at a time (the names
/// lie in different slots).
#[derive(Clone)]
struct RedisClusterCleanup {
    prefix: String,
    conn: ClusterConnection,
}

impl std::fmt::Debug for RedisClusterCleanup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisClusterCleanup")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl RedisClusterCleanup {
    /// The masters serving slots now, as `CLUSTER NODES` on one node lists them.
    async fn masters(&self) -> Result<Vec<(String, u16)>> {
        let reply = self
            .conn
            .clone()
            .route_command(
                redis::cmd("CLUSTER").arg("NODES").clone(),
                RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
            )
            .await
            .map_err(|e| BenchError::raw("CLUSTER NODES", e))?;
        let nodes =
            String::from_redis_value(reply).map_err(|e| BenchError::raw("CLUSTER NODES", e))?;
        Ok(masters_serving_slots(&nodes))
    }

    async fn clean_master(&self, host: &str, port: u16, pattern: &str) -> Result<()> {
        let what = |step: &str| format!("{step} on {host}:{port}");
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
                        host: host.to_owned(),
                        port,
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
        let pattern = scan_pattern(&self.prefix, key_prefix)?;
        let mut outcome = Ok(());
        for (host, port) in self.masters().await? {
            let cleaned = self.clean_master(&host, port, &pattern).await;
            outcome = outcome.and(cleaned);
        }
        outcome
    }
}

/// `host` and `port` of every master in a `CLUSTER NODES` reply that serves slots and is not
/// marked failed.
fn masters_serving_slots(nodes: &str) -> Vec<(String, u16)> {
    let mut masters = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // id, address, flags, master, ping, pong, epoch, link state, then slot ranges.
        if fields.len() < 9 {
            continue;
        }
        let flags: Vec<&str> = fields[2].split(',').collect();
        if !flags.contains(&"master")
            || flags
                .iter()
                .any(|f| matches!(*f, "fail" | "fail?" | "noaddr" | "handshake"))
        {
            continue;
        }
        let address = fields[1].split(['@', ',']).next().unwrap_or_default();
        let Some((host, port)) = address.rsplit_once(':') else {
            continue;
        };
        let Ok(port) = port.parse::<u16>() else {
            continue;
        };
        masters.push((host.trim_matches(['[', ']']).to_owned(), port));
    }
    masters
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn seeds_keep_scheme_and_credentials() {
        let config = RedisClusterConfig::from_url(
            "redis+cluster://app:s%40cret@10.0.0.1:7000,[::1]:7001?allow_eviction=true",
        )
        .unwrap();
        assert_eq!(
            seed_urls(&config),
            [
                "redis://app:s%40cret@10.0.0.1:7000",
                "redis://app:s%40cret@[::1]:7001"
            ]
        );
        let bare = RedisClusterConfig::from_url("redis+cluster://127.0.0.1:7000").unwrap();
        assert_eq!(seed_urls(&bare), ["redis://127.0.0.1:7000"]);
    }

    #[test]
    fn only_live_masters_with_slots_are_scanned() {
        let nodes = "\
a1 127.0.0.1:7000@17000 myself,master - 0 0 1 connected 0-5460
a2 127.0.0.1:7001@17001,host.example master - 0 0 2 connected 5461-10922
a3 127.0.0.1:7002@17002 master,fail - 0 0 3 disconnected 10923-16383
r1 127.0.0.1:7003@17003 slave a1 0 0 1 connected
a4 127.0.0.1:7004@17004 master - 0 0 4 connected
a5 [::1]:7005@17005 master - 0 0 5 connected 10923-16383
";
        assert_eq!(
            masters_serving_slots(nodes),
            [
                ("127.0.0.1".to_owned(), 7000),
                ("127.0.0.1".to_owned(), 7001),
                ("::1".to_owned(), 7005)
            ]
        );
    }
}
