//! `RedisStorage`: the fenced data side on Redis.

use std::sync::Arc;

use async_trait::async_trait;
use fencelock_core::{
    Error, Fence, FenceRule, FencedStorage, LockKey, Result, Snapshot, validate_value,
};
use tokio::sync::OnceCell;
use tracing::Instrument;
use tracing::field::Empty;

use crate::codec::parse_fence;
use crate::config::RedisConfig;
use crate::connection::Connection;
use crate::error::{REDIS as BACKEND, protocol};
use crate::outcome::finish;
use crate::scripts::SCRIPTS;

/// A [`FencedStorage`] on one Redis server: one hash per resource
/// (`{prefix}:{<resource>}:data` with fields `value`, `token`, `owner`), and one Lua script
/// (`scripts/storage_apply.lua`) that applies the [`FenceRule`] and the read or write
/// atomically, one round trip per operation.
///
/// Tokens are compared as decimal strings inside the scripts, so the full `u64` range is exact
/// (Lua numbers are doubles). A refused operation changes nothing and is [`Error::Stale`].
/// Values larger than [`max_value_len`](FencedStorage::max_value_len) are refused before any
/// I/O. The storage is as durable as the server's persistence settings make it.
///
/// ```no_run
/// # async fn demo() -> fencelock_core::Result<()> {
/// use std::time::Duration;
/// use fencelock_core::{FencedStorage, LockBackend, LockKey};
/// use fencelock_redis::RedisLockBackend;
///
/// let backend = RedisLockBackend::connect("redis://127.0.0.1:6379").await?;
/// let storage = backend.storage();
/// let key = LockKey::new("ledger")?;
/// if let Some(lease) = backend.try_acquire(&key, Duration::from_secs(10)).await? {
///     let balance = storage.read(&key, lease.fence()).await?;
///     storage.write(&key, lease.fence(), b"100").await?;
///     backend.release(&lease).await?;
/// #   let _ = balance;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisStorage {
    source: Arc<Source>,
    rule: FenceRule,
    max_value_len: usize,
}

/// Where a storage's connection comes from: opened already, or (`lazy`) at the first
/// operation, for the storage node of a Redlock, which may be down while the lock nodes are
/// up; a failed attempt is tried again by the next operation.
#[derive(Debug)]
struct Source {
    cell: OnceCell<Connection>,
    lazy: Option<(RedisConfig, &'static str)>,
}

impl Source {
    async fn connection(&self) -> Result<&Connection> {
        self.cell
            .get_or_try_init(|| async {
                match &self.lazy {
                    Some((config, role)) => Connection::open(config, BACKEND, role).await,
                    // A source without a config is built with its connection in the cell.
                    None => Err(protocol(BACKEND, "storage without a connection")),
                }
            })
            .await
    }
}

impl RedisConfig {
    /// Connects a [`RedisStorage`] with this config's fence rule and value limit, refusing a
    /// server that may evict keys unless [`allow_eviction`](Self::allow_eviction) is set.
    pub async fn connect_storage(&self) -> Result<RedisStorage> {
        let connection = Connection::open(self, BACKEND, "server").await?;
        Ok(RedisStorage::new(
            Source {
                cell: OnceCell::new_with(Some(connection)),
                lazy: None,
            },
            self.rule(),
            self.value_limit(),
        ))
    }
}

impl RedisStorage {
    fn new(source: Source, rule: FenceRule, max_value_len: usize) -> Self {
        RedisStorage {
            source: Arc::new(source),
            rule,
            max_value_len,
        }
    }

    /// A storage on an open connection.
    pub(crate) fn on(conn: Connection, rule: FenceRule, max_value_len: usize) -> Self {
        let source = Source {
            cell: OnceCell::new_with(Some(conn)),
            lazy: None,
        };
        RedisStorage::new(source, rule, max_value_len)
    }

    /// A storage on the server `config` names, connected at its first operation (`role`
    /// names the server in errors). The config is checked now.
    pub(crate) fn lazy(config: RedisConfig, role: &'static str) -> Result<Self> {
        config.validate()?;
        let (rule, max_value_len) = (config.rule(), config.value_limit());
        Ok(RedisStorage::new(
            Source {
                cell: OnceCell::new(),
                lazy: Some((config, role)),
            },
            rule,
            max_value_len,
        ))
    }

    /// Connects to `url` with the default [`RedisConfig`].
    pub async fn connect(url: &str) -> Result<Self> {
        RedisConfig::new(url).connect_storage().await
    }

    /// Applies `rule` instead of the default [`FenceRule::Monotonic`].
    pub fn with_rule(mut self, rule: FenceRule) -> Self {
        self.rule = rule;
        self
    }

    /// Accepts values up to `max` bytes (default 16 MiB).
    pub fn with_max_value_len(mut self, max: usize) -> Self {
        self.max_value_len = max;
        self
    }

    /// The rule this storage applies.
    pub fn rule(&self) -> FenceRule {
        self.rule
    }

    /// One fenced operation through `storage_apply.lua`: a write of `value`, or a read (`None`)
    /// returning the stored value.
    async fn apply(
        &self,
        resource: &LockKey,
        fence: Fence,
        value: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>> {
        let server = self.source.connection().await?;
        let mut invocation = SCRIPTS.storage_apply.prepare_invoke();
        invocation
            .key(server.keys.data(resource))
            .arg(fence.token.get().to_string())
            .arg(fence.owner.to_string())
            .arg(self.rule.as_str());
        match value {
            Some(value) => invocation.arg("write").arg(value),
            None => invocation.arg("read"),
        };
        let operation = if value.is_some() {
            "fenced write"
        } else {
            "fenced read"
        };
        let mut conn = server.link.clone();
        let mut reply: Vec<Option<Vec<u8>>> = server
            .call(operation, invocation.invoke_async(&mut conn))
            .await?;
        match status(&reply) {
            Some(b"ok") if reply.len() == 2 => Ok(reply.pop().flatten()),
            Some(b"stale") => Err(Self::stale(resource, fence, &reply)),
            _ => Err(protocol(
                BACKEND,
                format!("{operation} script answered something unexpected"),
            )),
        }
    }

    fn stale(resource: &LockKey, presented: Fence, reply: &[Option<Vec<u8>>]) -> Error {
        match parse_stored(reply.get(1), reply.get(2)) {
            Ok(current) => Error::Stale {
                resource: resource.to_string(),
                presented,
                current,
            },
            Err(e) => e,
        }
    }
}

fn parse_stored(token: Option<&Option<Vec<u8>>>, owner: Option<&Option<Vec<u8>>>) -> Result<Fence> {
    parse_fence(
        BACKEND,
        token.and_then(Option::as_deref),
        owner.and_then(Option::as_deref),
    )
}

fn status(reply: &[Option<Vec<u8>>]) -> Option<&[u8]> {
    reply.first().and_then(Option::as_deref)
}

#[async_trait]
impl FencedStorage for RedisStorage {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn max_value_len(&self) -> usize {
        self.max_value_len
    }

    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        let span = tracing::debug_span!("fenced_read", backend = BACKEND, resource = %resource, token = fence.token.get(), outcome = Empty);
        let result = self
            .apply(resource, fence, None)
            .instrument(span.clone())
            .await;
        finish(&span, result, "admitted")
    }

    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        validate_value(value, self.max_value_len)?;
        let span = tracing::debug_span!("fenced_write", backend = BACKEND, resource = %resource, token = fence.token.get(), len = value.len(), outcome = Empty);
        let result = self
            .apply(resource, fence, Some(value))
            .instrument(span.clone())
            .await;
        finish(&span, result.map(drop), "admitted")
    }

    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        let server = self.source.connection().await?;
        let mut conn = server.link.clone();
        let reply: Vec<Option<Vec<u8>>> = server
            .call(
                "peek",
                redis::cmd("HMGET")
                    .arg(server.keys.data(resource))
                    .arg("token")
                    .arg("owner")
                    .arg("value")
                    .query_async(&mut conn),
            )
            .await?;
        if reply.first().is_none_or(Option::is_none) {
            return Ok(None);
        }
        let fence = parse_stored(reply.first(), reply.get(1))?;
        Ok(Some(Snapshot {
            value: reply.get(2).cloned().flatten(),
            fence,
        }))
    }
}
