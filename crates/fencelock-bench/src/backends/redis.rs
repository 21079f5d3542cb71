//! Redis, one node and Redlock, against raw commands on the same server.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::LockKey;
use fencelock_redis::{RedisConfig, RedlockConfig, hash_tag};
use redis::aio::ConnectionManager;

use crate::error::{BenchError, Result};
use crate::fenced_subject::FencedSubject;
use crate::subject::{Baseline, Cleanup, Op, RawTryLock, TTL};
use crate::suite::Suite;

impl Suite {
    /// fencelock's one-node backend on the server `config` names (its key prefix and
    /// timeouts), with [`RedisStorage`](fencelock_redis::RedisStorage) on the same server,
    /// against raw commands on a connection of its own to that server.
    pub async fn redis(config: &RedisConfig) -> Result<Self> {
        let backend = config.connect().await?;
        let storage = Arc::new(backend.storage());
        let baseline = RedisBaseline::connect(config).await?;
        let cleanup = RedisCleanup::new(backend.prefix(), [config]);
        Ok(Suite::new(
            "redis",
            FencedSubject::new(Arc::new(backend), storage),
            Arc::new(baseline),
            Vec::new(),
        )
        .with_cleanup(Arc::new(cleanup)))
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
        // Tokens on every node, locks too if a run stopped half way, data on the storage
        // server; the peer's keys are on the first node, under the same prefix.
        let cleanup = RedisCleanup::new(
            backend.prefix(),
            config.node_configs().iter().chain(config.storage()),
        );
        Ok(Suite::new(
            format!("redlock-{}", config.node_configs().len()),
            FencedSubject::new(Arc::new(backend), storage),
            Arc::new(baseline),
            vec![Arc::new(FencedSubject::new(
                Arc::new(one_node),
                one_node_storage,
            ))],
        )
        .with_cleanup(Arc::new(cleanup)))
    }
}

/// Raw commands on one Redis server: `SET key owner NX PX ttl` + `DEL key`, plain `SET`,
/// `PING`. [`close`](Baseline::close) deletes the keys its writers wrote; its locks are
/// deleted as they are released (or expire after [`TTL`] if a run stopped half way).
#[derive(Clone)]
pub struct RedisBaseline {
    conn: ConnectionManager,
    written: Arc<Mutex<Vec<String>>>,
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
        Ok(RedisBaseline {
            conn,
            written: Arc::default(),
        })
    }
}

#[async_trait]
impl RawTryLock for RedisBaseline {
    const LABEL: &'static str = "raw SET NX PX + DEL";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        set_nx_px_del(&mut self.conn.clone(), key).await
    }
}

/// `SET key owner NX PX ttl`, then, if it was set, `DEL key`: whether the lock was free.
pub(crate) async fn set_nx_px_del<C>(conn: &mut C, key: &LockKey) -> Result<bool>
where
    C: redis::aio::ConnectionLike + Send,
{
    let set: Option<String> = redis::cmd("SET")
        .arg(key.as_str())
        .arg("owner")
        .arg("NX")
        .arg("PX")
        .arg(TTL.as_millis() as u64)
        .query_async(conn)
        .await
        .map_err(|e| BenchError::raw("SET NX PX", e))?;
    if set.is_none() {
        return Ok(false);
    }
    let _: i64 = redis::cmd("DEL")
        .arg(key.as_str())
        .query_async(conn)
        .await
        .map_err(|e| BenchError::raw("DEL", e))?;
    Ok(true)
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
        if written.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        let _: i64 = redis::cmd("DEL")
            .arg(&written)
            .query_async(&mut conn)
            .await
            .map_err(|e| BenchError::raw("DEL of the plain writes", e))?;
        Ok(())
    }
}

/// Plain `SET`s of one key, about 64 bytes each, on one server's connection or a cluster's.
pub(crate) struct RedisWriter<C> {
    pub(crate) conn: C,
    pub(crate) resource: String,
    pub(crate) value: Vec<u8>,
}

#[async_trait]
impl<C> Op for RedisWriter<C>
where
    C: redis::aio::ConnectionLike + Clone + Send + Sync,
{
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

/// Deletes fencelock's keys for a run's key prefix on every server of a suite:
/// `<prefix>:{<key>}:lock`, `:token` and `:data` for every key under the run's prefix, found
/// with `SCAN ... MATCH` (the run's keys are spread over up to `Settings::keys` keys per
/// subject, and `SCAN` finds them without a list).
#[derive(Debug)]
struct RedisCleanup {
    prefix: String,
    servers: Vec<RedisConfig>,
}

impl RedisCleanup {
    /// On `servers` (each once), for fencelock's key `prefix`.
    fn new<'a>(prefix: &str, servers: impl IntoIterator<Item = &'a RedisConfig>) -> Self {
        let mut distinct: Vec<RedisConfig> = Vec::new();
        for server in servers {
            if !distinct.iter().any(|s| s.to_url() == server.to_url()) {
                distinct.push(server.clone());
            }
        }
        RedisCleanup {
            prefix: prefix.to_owned(),
            servers: distinct,
        }
    }

    fn pattern(&self, key_prefix: &str) -> Result<String> {
        scan_pattern(&self.prefix, key_prefix)
    }

    async fn clean_server(&self, server: &RedisConfig, pattern: &str) -> Result<()> {
        let what = |step: &str| format!("{step} on {server}");
        let client = redis::Client::open(server.to_url())
            .map_err(|e| BenchError::raw(what("connect"), e))?;
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| BenchError::raw(what("connect"), e))?;
        let mut cursor: u64 = 0;
        loop {
            let (next, names): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .map_err(|e| BenchError::raw(what("SCAN"), e))?;
            if !names.is_empty() {
                let _: i64 = redis::cmd("DEL")
                    .arg(&names)
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
impl Cleanup for RedisCleanup {
    async fn clean(&self, key_prefix: &str) -> Result<()> {
        let pattern = self.pattern(key_prefix)?;
        let mut outcome = Ok(());
        for server in &self.servers {
            let cleaned = self.clean_server(server, &pattern).await;
            outcome = outcome.and(cleaned);
        }
        outcome
    }
}

/// The `SCAN` pattern of every key fencelock names, under its key `prefix`, after a key
/// starting with `key_prefix`: `<prefix>:` then the hash tag of the key, open-ended. The same
/// on one server and on a cluster, where the hash tag also picks the slot.
pub(crate) fn scan_pattern(prefix: &str, key_prefix: &str) -> Result<String> {
    let tag = hash_tag(&LockKey::new(key_prefix)?);
    let open_tag = tag.strip_suffix('}').unwrap_or(&tag);
    Ok(format!(
        "{}:{}*",
        glob_escape(prefix),
        glob_escape(open_tag)
    ))
}

/// `text` with the characters `SCAN ... MATCH` reads as a glob (`*`, `?`, `[`, `]`, `\`)
/// escaped, so it matches itself only.
fn glob_escape(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_pattern_matches_the_run_keys_literally() {
        let server = RedisConfig::from_url("redis://127.0.0.1:6379").unwrap();
        let cleanup = RedisCleanup::new("app*[1]", [&server, &server]);
        assert_eq!(cleanup.servers.len(), 1, "the same server once");
        assert_eq!(
            cleanup.pattern("fencelock-bench/00ff/").unwrap(),
            "app\\*\\[1\\]:{fencelock-bench/00ff/*"
        );
        assert_eq!(
            cleanup.pattern("run{1}%/").unwrap(),
            "app\\*\\[1\\]:{run%7B1%7D%25/*"
        );
    }
}
