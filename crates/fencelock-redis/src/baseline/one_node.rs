//! The raw baseline on one Redis server: `SET NX PX` + `DEL`, plain `SET`, `PING`.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::tools::{Baseline, Op, RawTryLock, TTL};
use fencelock_core::{LockKey, Result};
use redis::aio::ConnectionManager;

use crate::config::RedisConfig;
use crate::error::{REDIS, map_error};

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
            .map_err(|e| map_error(REDIS, e).in_context(&format!("redis URL {config}")))?;
        let conn = client
            .get_connection_manager()
            .await
            .map_err(|e| map_error(REDIS, e).in_context(&format!("connect to {config}")))?;
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
        set_nx_px_del(REDIS, &mut self.conn.clone(), key).await
    }
}

/// `SET key owner NX PX ttl`, then, if it was set, `DEL key`: whether the lock was free.
/// Errors are mapped as `backend`'s.
pub(super) async fn set_nx_px_del<C>(
    backend: &'static str,
    conn: &mut C,
    key: &LockKey,
) -> Result<bool>
where
    C: redis::aio::ConnectionLike + Send,
{
    let ttl_ms = u64::try_from(TTL.as_millis()).unwrap_or(u64::MAX);
    let set: Option<String> = redis::cmd("SET")
        .arg(key.as_str())
        .arg("owner")
        .arg("NX")
        .arg("PX")
        .arg(ttl_ms)
        .query_async(conn)
        .await
        .map_err(|e| map_error(backend, e).in_context("SET NX PX"))?;
    if set.is_none() {
        return Ok(false);
    }
    let _: i64 = redis::cmd("DEL")
        .arg(key.as_str())
        .query_async(conn)
        .await
        .map_err(|e| map_error(backend, e).in_context("DEL"))?;
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
            .map_err(|e| map_error(REDIS, e).in_context("PING"))?;
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        self.written
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(resource.as_str().to_owned());
        Ok(Box::new(RedisWriter::new(
            REDIS,
            self.conn.clone(),
            resource,
        )))
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
            .map_err(|e| map_error(REDIS, e).in_context("DEL of the plain writes"))?;
        Ok(())
    }
}

/// Plain `SET`s of one key, about 64 bytes each, on one server's connection or a cluster's.
pub(super) struct RedisWriter<C> {
    backend: &'static str,
    conn: C,
    resource: String,
    value: Vec<u8>,
}

impl<C> RedisWriter<C> {
    /// Writes of `resource` on `conn`, errors mapped as `backend`'s.
    pub(super) fn new(backend: &'static str, conn: C, resource: &LockKey) -> Self {
        RedisWriter {
            backend,
            conn,
            resource: resource.as_str().to_owned(),
            value: vec![7; 64],
        }
    }
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
            .map_err(|e| map_error(self.backend, e).in_context("SET"))?;
        Ok(None)
    }
}
