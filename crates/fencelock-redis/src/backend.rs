//! `RedisLockBackend`: one Redis node.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{
    Capabilities, Error, FencingToken, Lease, LockBackend, LockInfo, LockKey, LostReason, OwnerId,
    Result, TimeAuthority, TokenGuarantee, WakeUp, valid_until, validate_ttl,
};
use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use crate::codec::{MAX_TTL, lock_value, parse_lock_value, parse_token, ttl_millis};
use crate::config::RedisConfig;
use crate::connection::Connection;
use crate::error::{REDIS as BACKEND, protocol};
use crate::fence::RedisFence;
use crate::outcome::{finish, finish_grant};
use crate::scripts::SCRIPTS;
use crate::storage::RedisStorage;
use crate::waiters::Waiters;

/// A [`LockBackend`] on one Redis server.
///
/// Each key has a lock (`{prefix}:{<key>}:lock`, a string `<owner>:<token>` with a `PX`
/// expiry set by the server's clock) and a counter (`{prefix}:{<key>}:token`, never expired or
/// deleted). Acquire, extend, release, inspect and `advance_token` are one Lua script each, so
/// each is atomic and one round trip. Release publishes on `{prefix}:{<key>}:released`, which
/// [`wait_for_release`](LockBackend::wait_for_release) listens to over one shared pub/sub
/// connection. Clones share the connection and the subscriber.
///
/// Tokens survive a server restart only if the server persists every write
/// (`appendonly yes`, `appendfsync always`), and survive at all only if it never evicts keys
/// (`maxmemory-policy noeviction`, which `connect` insists on unless told otherwise);
/// [`Capabilities::tokens`] reports what the server said at connect time. After a counter was lost, [`advance_token`](LockBackend::advance_token)
/// restores liveness; data safety never depended on it (see the crate docs).
///
/// ```no_run
/// # async fn demo() -> fencelock_core::Result<()> {
/// use std::time::Duration;
/// use fencelock_core::{LockBackend, LockKey};
/// use fencelock_redis::RedisLockBackend;
///
/// let backend = RedisLockBackend::connect("redis://127.0.0.1:6379").await?;
/// let key = LockKey::new("reports/daily")?;
/// if let Some(lease) = backend.try_acquire(&key, Duration::from_secs(10)).await? {
///     // ... work, presenting lease.fence() to a FencedStorage ...
///     backend.release(&lease).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedisLockBackend {
    conn: Connection,
    waiters: Arc<Waiters>,
}

impl RedisLockBackend {
    pub(crate) fn new(conn: Connection) -> Self {
        RedisLockBackend {
            waiters: Arc::new(Waiters::new(conn.clone())),
            conn,
        }
    }

    /// Connects to `url` with the default [`RedisConfig`].
    pub async fn connect(url: &str) -> Result<Self> {
        RedisConfig::new(url).connect().await
    }

    /// A [`RedisStorage`] on the same connection and prefix, with the default rule and value
    /// limit.
    pub fn storage(&self) -> RedisStorage {
        RedisStorage::on(
            self.conn.clone(),
            fencelock_core::FenceRule::Monotonic,
            crate::config::DEFAULT_MAX_VALUE_LEN,
        )
    }

    /// A [`RedisFence`] on the same connection, key prefix and call timeout: fenced batches
    /// on keys of your own, guarded by the fences of this backend's grants.
    pub fn fence(&self) -> RedisFence<redis::aio::ConnectionManager> {
        RedisFence::new(self.conn.manager.clone())
            .prefix(self.conn.keys.prefix())
            .call_timeout(self.conn.call_timeout)
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        self.conn.keys.prefix()
    }
}

impl RedisConfig {
    /// Connects a [`RedisLockBackend`]. Reads the server's persistence and eviction settings
    /// for [`Capabilities`] on the way, and refuses a server that may evict keys unless
    /// [`allow_eviction`](Self::allow_eviction) is set. An unreachable server, refused
    /// credentials and a service that is not Redis are reported naming the server.
    pub async fn connect(&self) -> Result<RedisLockBackend> {
        let connection = Connection::open(self, BACKEND, "server").await?;
        Ok(RedisLockBackend::new(connection))
    }
}

#[async_trait]
impl LockBackend for RedisLockBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        let server_persists = self.conn.settings.persists();
        Capabilities::new(
            TokenGuarantee::DurableIfServerPersists { server_persists },
            TimeAuthority::Server,
            WakeUp::Notify,
            MAX_TTL,
        )
        .with_locks_survive_restart(server_persists == Some(true))
    }

    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        let span = tracing::debug_span!("try_acquire", backend = BACKEND, key = %key, ?ttl, token = Empty, outcome = Empty);
        let result = async {
            let owner = OwnerId::random();
            let mut invocation = SCRIPTS.acquire.prepare_invoke();
            invocation
                .key(self.conn.keys.lock(key))
                .key(self.conn.keys.token(key))
                .arg(owner.to_string())
                .arg(ttl_millis(ttl));
            let mut conn = self.conn.manager.clone();
            let sent_at = Instant::now();
            let reply: Option<String> = self
                .conn
                .call("acquire", invocation.invoke_async(&mut conn))
                .await?;
            let Some(token) = reply else {
                return Ok(None);
            };
            let token = parse_token(BACKEND, &token)?;
            Ok(Some(Lease {
                key: key.clone(),
                owner,
                token,
                ttl,
                valid_until: valid_until(sent_at, ttl),
            }))
        }
        .instrument(span.clone())
        .await;
        finish_grant(&span, result)
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        validate_ttl(ttl, &self.capabilities())?;
        let span = tracing::debug_span!("extend", backend = BACKEND, key = %lease.key, token = lease.token.get(), ?ttl, outcome = Empty);
        let result = async {
            let mut invocation = SCRIPTS.extend.prepare_invoke();
            invocation
                .key(self.conn.keys.lock(&lease.key))
                .arg(lock_value(lease.owner, lease.token))
                .arg(ttl_millis(ttl));
            let mut conn = self.conn.manager.clone();
            let sent_at = Instant::now();
            let reply: i64 = self
                .conn
                .call("extend", invocation.invoke_async(&mut conn))
                .await?;
            match reply {
                1 => Ok(Lease {
                    ttl,
                    valid_until: valid_until(sent_at, ttl),
                    ..lease.clone()
                }),
                0 => Err(Error::lease_lost(&lease.key, LostReason::NotHeld)),
                -1 => Err(Error::lease_lost(&lease.key, LostReason::Superseded)),
                other => Err(protocol(BACKEND, format!("extend script answered {other}"))),
            }
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let span = tracing::debug_span!("release", backend = BACKEND, key = %lease.key, token = lease.token.get(), outcome = Empty);
        let result = async {
            let mut invocation = SCRIPTS.release.prepare_invoke();
            invocation
                .key(self.conn.keys.lock(&lease.key))
                .arg(lock_value(lease.owner, lease.token))
                .arg(self.conn.keys.channel(&lease.key));
            let mut conn = self.conn.manager.clone();
            let reply: i64 = self
                .conn
                .call("release", invocation.invoke_async(&mut conn))
                .await?;
            match reply {
                1 => Ok(true),
                0 => Ok(false),
                other => Err(protocol(
                    BACKEND,
                    format!("release script answered {other}"),
                )),
            }
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }

    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        let span = tracing::debug_span!("wait_for_release", backend = BACKEND, key = %key, ?max);
        self.waiters.wait(key, max).instrument(span).await
    }

    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        let span = tracing::debug_span!("inspect", backend = BACKEND, key = %key, outcome = Empty);
        let result = async {
            let mut invocation = SCRIPTS.inspect.prepare_invoke();
            invocation
                .key(self.conn.keys.lock(key))
                .key(self.conn.keys.token(key));
            let mut conn = self.conn.manager.clone();
            let (value, pttl, last): (Option<String>, i64, Option<String>) = self
                .conn
                .call("inspect", invocation.invoke_async(&mut conn))
                .await?;
            let holder = value
                .as_deref()
                .map(|v| parse_lock_value(BACKEND, v))
                .transpose()?;
            let remaining = if holder.is_some() && pttl >= 0 {
                Some(Duration::from_millis(pttl.unsigned_abs()))
            } else {
                None
            };
            Ok(LockInfo {
                key: key.clone(),
                holder,
                remaining,
                last_token: last
                    .as_deref()
                    .map(|t| parse_token(BACKEND, t))
                    .transpose()?,
            })
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }

    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        if i64::try_from(floor.get()).is_err() {
            return Err(Error::config(format!(
                "token floor {floor} is above the range of a Redis counter ({})",
                i64::MAX
            )));
        }
        let span = tracing::debug_span!("advance_token", backend = BACKEND, key = %key, floor = floor.get(), outcome = Empty);
        let result = async {
            let mut invocation = SCRIPTS.advance_token.prepare_invoke();
            invocation
                .key(self.conn.keys.token(key))
                .arg(floor.get().to_string());
            let mut conn = self.conn.manager.clone();
            let reply: String = self
                .conn
                .call("advance_token", invocation.invoke_async(&mut conn))
                .await?;
            parse_token(BACKEND, &reply)
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }
}
