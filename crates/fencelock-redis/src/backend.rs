//! `RedisLockBackend`: one Redis node.

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{
    Capabilities, FencingToken, Lease, LockInfo, LockKey, LockKinds, LostReason, OwnerId,
    QueueEntry, QueueRole, Result, TimeAuthority, TokenGuarantee, WakeUp, valid_until,
    validate_floor, validate_ttl,
};
use redis::aio::ConnectionManager;
use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use crate::codec::{
    MAX_TTL, READ_PHASE_SUFFIX, lock_value, parse_lock_value, parse_token, ttl_millis,
};
use crate::config::RedisConfig;
use crate::connection::Connection;
use crate::error::{REDIS as BACKEND, protocol};
use crate::fence::RedisFence;
use crate::outcome::{extended, finish, finish_grant, released};
use crate::poll::poll_release;
use crate::scripts::SCRIPTS;
use crate::storage::RedisStorage;
use crate::waiters::{HANDOFF_TTL, PLACE_TTL, Waiters};

/// A [`LockBackend`](fencelock_core::LockBackend) on one Redis server.
///
/// Each key has a lock (`{prefix}:{<key>}:lock`, a string `<owner>:<token>` with a `PX`
/// expiry set by the server's clock), a counter (`{prefix}:{<key>}:token`, never expired or
/// deleted). While readers hold the key, the lock holds their read phase's fence instead
/// (`<owner>:<token>:read`, expiring with the phase) and `{prefix}:{<key>}:readers` each
/// reader's expiry by the server's clock. Acquire, extend,
/// release, inspect and `advance_token` are one Lua script each, and so are their shared
/// (reader) forms, so each is atomic and one round trip; a writer is refused while a read
/// phase lives and a reader while a writer holds ([`RwLocker`](fencelock_core::RwLocker)).
/// Releases (a writer's, a phase's last reader's) publish on `{prefix}:{<key>}:released`, which
/// [`wait_for_release`](fencelock_core::LockBackend::wait_for_release) listens to over one shared pub/sub
/// connection. Clones share the connection and the subscriber.
///
/// Tokens survive a server restart only if the server persists every write
/// (`appendonly yes`, `appendfsync always`), and survive at all only if it never evicts keys
/// (`maxmemory-policy noeviction`, which `connect` insists on unless told otherwise);
/// [`Capabilities::tokens`] reports what the server said at connect time. After a counter was lost, [`advance_token`](fencelock_core::LockBackend::advance_token)
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
    locks: Locks,
    manager: ConnectionManager,
}

impl RedisLockBackend {
    pub(crate) fn new(conn: Connection, manager: ConnectionManager) -> Self {
        let server_persists = conn.settings.persists();
        let capabilities = Capabilities::new(
            TokenGuarantee::DurableIfServerPersists { server_persists },
            TimeAuthority::Server,
            WakeUp::Notify,
            MAX_TTL,
        )
        .with_kinds(LockKinds::GENERIC.with_shared())
        .with_locks_survive_restart(server_persists == Some(true))
        .with_fair(true)
        .with_atomic_sets(true)
        .with_passes(true);
        RedisLockBackend {
            locks: Locks {
                wake: Wake::Notify(Arc::new(Waiters::with_grant_box(conn.clone()))),
                conn,
                capabilities,
            },
            manager,
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
            self.locks.conn.clone(),
            fencelock_core::FenceRule::Monotonic,
            crate::options::DEFAULT_MAX_VALUE_LEN,
        )
    }

    /// A [`RedisFence`] on the same connection, key prefix and call timeout: fenced batches
    /// on keys of your own, guarded by the fences of this backend's grants.
    pub fn fence(&self) -> RedisFence<ConnectionManager> {
        self.locks.fence(self.manager.clone())
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        self.locks.conn.keys.prefix()
    }
}

impl RedisConfig {
    /// Connects a [`RedisLockBackend`]. Reads the server's persistence and eviction settings
    /// for [`Capabilities`] on the way, and refuses a server that may evict keys unless
    /// [`allow_eviction`](Self::allow_eviction) is set. An unreachable server, refused
    /// credentials and a service that is not Redis are reported naming the server.
    pub async fn connect(&self) -> Result<RedisLockBackend> {
        let (connection, manager) = Connection::open_node(self, BACKEND, "server").await?;
        Ok(RedisLockBackend::new(connection, manager))
    }
}

crate::delegate::delegate_lock_backend!(RedisLockBackend);

/// How waiters learn of a release: one server's pub/sub, or polling the lock's ttl (a
/// cluster).
#[derive(Debug, Clone)]
pub(crate) enum Wake {
    Notify(Arc<Waiters>),
    Poll,
}

/// The lock operations on one connection, each one Lua script (one server's, or a cluster's,
/// where every key of a lock shares the slot its hash tag names).
#[derive(Debug, Clone)]
pub(crate) struct Locks {
    pub(crate) conn: Connection,
    pub(crate) wake: Wake,
    pub(crate) capabilities: Capabilities,
}

impl Locks {
    /// A [`RedisFence`] on `conn` with this connection's key prefix and call timeout.
    pub(crate) fn fence<C>(&self, conn: C) -> RedisFence<C>
    where
        C: redis::aio::ConnectionLike + Send,
    {
        RedisFence::new(conn)
            .prefix(self.conn.keys.prefix())
            .call_timeout(self.conn.call_timeout)
            .server_checked()
    }

    pub(crate) async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities)?;
        self.acquire(key, ttl, None).await
    }

    /// Every lock of `keys` or none, in one script (one server; on a cluster the keys of
    /// different locks are in different slots, and the capability is off): the set's one
    /// owner holds each grant, with a token of the lock's own counter.
    pub(crate) async fn try_acquire_all(
        &self,
        keys: &[LockKey],
        ttl: Duration,
    ) -> Result<Option<Vec<Lease>>> {
        if !self.capabilities.atomic_sets {
            return Err(fencelock_core::Error::unsupported(
                self.conn.backend,
                "sets of keys granted in one atomic step (the keys of different locks are in different slots)",
            ));
        }
        validate_ttl(ttl, &self.capabilities)?;
        let backend = self.conn.backend;
        let span = tracing::debug_span!(
            "try_acquire_all",
            backend,
            keys = keys.len(),
            ?ttl,
            outcome = Empty
        );
        let result = async {
            let owner = OwnerId::random();
            let mut invocation = SCRIPTS.acquire_all.prepare_invoke();
            for key in keys {
                invocation
                    .key(self.conn.keys.lock(key))
                    .key(self.conn.keys.token(key))
                    .key(self.conn.keys.queue(key))
                    .key(self.conn.keys.places(key))
                    .key(self.conn.keys.asks(key));
            }
            invocation.arg(owner.to_string()).arg(ttl_millis(ttl));
            let mut conn = self.conn.link.clone();
            let sent_at = Instant::now();
            let reply: Option<Vec<String>> = self
                .conn
                .call("acquire_all", invocation.invoke_async(&mut conn))
                .await?;
            let Some(tokens) = reply else {
                return Ok(None);
            };
            if tokens.len() != keys.len() {
                return Err(fencelock_core::Error::Backend {
                    backend,
                    message: format!(
                        "the set script answered {} tokens for {} keys",
                        tokens.len(),
                        keys.len()
                    ),
                    source: None,
                });
            }
            let valid_until = valid_until(sent_at, ttl);
            keys.iter()
                .zip(tokens)
                .map(|(key, token)| {
                    Ok(Lease {
                        key: key.clone(),
                        owner,
                        token: parse_token(backend, &token)?,
                        ttl,
                        valid_until,
                    })
                })
                .collect::<Result<Vec<_>>>()
                .map(Some)
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }

    /// A try that keeps `waiter`'s place in the key's queue (one server), with `waiter` as
    /// the grant's owner, so that a release can hand the lock to it and this try (or the
    /// next) finds a grant handed to it as its own; on a cluster, a plain try.
    pub(crate) async fn try_acquire_queued(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: OwnerId,
    ) -> Result<Option<Lease>> {
        // Checked before the waiter is registered: a refused ttl leaves nothing behind.
        validate_ttl(ttl, &self.capabilities)?;
        match &self.wake {
            Wake::Notify(waiters) => {
                let grant_box = waiters.before_try(key, waiter);
                let granted = self
                    .acquire(key, ttl, Some((waiters, waiter, grant_box)))
                    .await;
                if matches!(granted, Ok(Some(_))) {
                    waiters.forget(waiter);
                }
                granted
            }
            Wake::Poll => self.acquire(key, ttl, None).await,
        }
    }

    /// The acquire script: on one server with the key's queue (a plain try never overtakes a
    /// queued waiter), as `waiter` when given. The callers have checked `ttl`.
    async fn acquire(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: Option<(&Arc<Waiters>, OwnerId, Option<&str>)>,
    ) -> Result<Option<Lease>> {
        let backend = self.conn.backend;
        let span = tracing::debug_span!("try_acquire", backend, key = %key, ?ttl, token = Empty, outcome = Empty);
        let result = async {
            // A request draws its waiter id once and is granted at most once: the id is a
            // fresh owner for that grant.
            let owner = waiter.map_or_else(OwnerId::random, |(_, waiter, _)| waiter);
            let mut invocation = SCRIPTS.acquire.prepare_invoke();
            invocation
                .key(self.conn.keys.lock(key))
                .key(self.conn.keys.token(key))
                .arg(owner.to_string())
                .arg(ttl_millis(ttl));
            if matches!(self.wake, Wake::Notify(_)) {
                invocation
                    .key(self.conn.keys.queue(key))
                    .key(self.conn.keys.places(key))
                    .key(self.conn.keys.asks(key))
                    .arg(waiter.map(|(_, w, _)| w.to_string()).unwrap_or_default())
                    .arg(PLACE_TTL.as_millis() as u64)
                    .arg(
                        waiter
                            .and_then(|(_, _, grant_box)| grant_box)
                            .unwrap_or_default(),
                    );
            }
            let mut conn = self.conn.link.clone();
            let sent_at = Instant::now();
            let reply: redis::Value = self
                .conn
                .call("acquire", invocation.invoke_async(&mut conn))
                .await?;
            let token = match reply {
                redis::Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                redis::Value::SimpleString(text) => text,
                redis::Value::Nil | redis::Value::Int(_) => return Ok(None),
                redis::Value::Array(refusal) => {
                    if let (Some((waiters, waiter, _)), Some(holder_ms)) =
                        (waiter, parse_refusal(&refusal))
                    {
                        waiters.refused(waiter, holder_ms);
                        return Ok(None);
                    }
                    return Err(fencelock_core::Error::Backend {
                        backend: self.conn.backend,
                        message: format!("the acquire script answered {refusal:?}"),
                        source: None,
                    });
                }
                other => {
                    return Err(fencelock_core::Error::Backend {
                        backend: self.conn.backend,
                        message: format!("the acquire script answered {other:?}"),
                        source: None,
                    });
                }
            };
            let token = parse_token(self.conn.backend, &token)?;
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

    /// Waits for `waiter`'s turn like [`wait_for_turn`](Self::wait_for_turn), and returns the
    /// grant a release handed to `waiter` meanwhile, as the grant box's pop delivered it (one
    /// server): a lease of `ttl` valid for the hand-off ttl counted from the grant's floor
    /// (see [`crate::grant_box`]). A grant whose validity so counted is mostly gone is left to
    /// the waiter's next try, which takes it up renewed from its own send.
    pub(crate) async fn wait_for_grant(
        &self,
        key: &LockKey,
        waiter: OwnerId,
        ttl: Duration,
        max: Duration,
    ) -> Result<Option<Lease>> {
        self.wait_for_turn(key, waiter, max).await?;
        let Wake::Notify(waiters) = &self.wake else {
            return Ok(None);
        };
        let Some(handed) = waiters.take_grant(waiter) else {
            return Ok(None);
        };
        // The box holds what the release script wrote; a token it cannot parse is left to
        // the next try, whose answer reports it.
        let Ok(token) = parse_token(self.conn.backend, &handed.token) else {
            return Ok(None);
        };
        let valid_until = valid_until(handed.floor, handed.ttl);
        if valid_until.saturating_duration_since(Instant::now()) < handed.ttl / 3 {
            return Ok(None);
        }
        waiters.forget(waiter);
        Ok(Some(Lease {
            key: key.clone(),
            owner: waiter,
            token,
            ttl,
            valid_until,
        }))
    }

    /// Waits for `waiter`'s turn (one server), or polls the lock (a cluster).
    pub(crate) async fn wait_for_turn(
        &self,
        key: &LockKey,
        waiter: OwnerId,
        max: Duration,
    ) -> Result<()> {
        let span =
            tracing::debug_span!("wait_for_turn", backend = self.conn.backend, key = %key, ?max);
        match &self.wake {
            Wake::Notify(waiters) => waiters.wait_turn(key, waiter, max).instrument(span).await,
            Wake::Poll => poll_release(&self.conn, key, max).instrument(span).await,
        }
    }

    /// Gives up `waiter`'s place in the key's queue, and a grant handed to it that it never
    /// took up (one server).
    pub(crate) async fn leave_queue(&self, key: &LockKey, waiter: OwnerId) -> Result<()> {
        let Wake::Notify(waiters) = &self.wake else {
            return Ok(());
        };
        waiters.forget(waiter);
        let mut invocation = SCRIPTS.leave.prepare_invoke();
        invocation
            .key(self.conn.keys.lock(key))
            .key(self.conn.keys.queue(key))
            .key(self.conn.keys.places(key))
            .key(self.conn.keys.token(key))
            .key(self.conn.keys.asks(key))
            .arg(waiter.to_string())
            .arg(self.conn.keys.channel(key))
            .arg(ttl_millis(HANDOFF_TTL));
        let mut conn = self.conn.link.clone();
        let _: i64 = self
            .conn
            .call("leave", invocation.invoke_async(&mut conn))
            .await?;
        Ok(())
    }

    pub(crate) async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        validate_ttl(ttl, &self.capabilities)?;
        let span = tracing::debug_span!("extend", backend = self.conn.backend, key = %lease.key, token = lease.token.get(), ?ttl, outcome = Empty);
        let result = async {
            let mut invocation = SCRIPTS.extend.prepare_invoke();
            invocation
                .key(self.conn.keys.lock(&lease.key))
                .arg(lock_value(lease.owner, lease.token))
                .arg(ttl_millis(ttl));
            let mut conn = self.conn.link.clone();
            let sent_at = Instant::now();
            let reply: i64 = self
                .conn
                .call("extend", invocation.invoke_async(&mut conn))
                .await?;
            extended(self.conn.backend, "extend", reply, (lease, ttl, sent_at))
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }

    pub(crate) async fn release(&self, lease: &Lease) -> Result<bool> {
        let span = tracing::debug_span!("release", backend = self.conn.backend, key = %lease.key, token = lease.token.get(), outcome = Empty);
        let result = async {
            let mut invocation = SCRIPTS.release.prepare_invoke();
            invocation.key(self.conn.keys.lock(&lease.key));
            let queued = matches!(self.wake, Wake::Notify(_));
            if queued {
                invocation
                    .key(self.conn.keys.queue(&lease.key))
                    .key(self.conn.keys.places(&lease.key))
                    .key(self.conn.keys.token(&lease.key))
                    .key(self.conn.keys.asks(&lease.key));
            }
            invocation
                .arg(lock_value(lease.owner, lease.token))
                .arg(self.conn.keys.channel(&lease.key));
            if queued {
                invocation.arg(ttl_millis(HANDOFF_TTL));
            }
            let mut conn = self.conn.link.clone();
            let reply: i64 = self
                .conn
                .call("release", invocation.invoke_async(&mut conn))
                .await?;
            released(self.conn.backend, "release", reply)
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }

    /// Passes the lock from `lease`'s holder to a new owner in one script, with the key's
    /// next token (DESIGN 4.0.2): `None`, with nothing changed, when `lease` is no longer
    /// held or a waiter is queued for the key (one server).
    pub(crate) async fn pass(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities)?;
        let span = tracing::debug_span!("pass", backend = self.conn.backend, key = %lease.key, token = lease.token.get(), ?ttl, outcome = Empty);
        let result = async {
            let owner = OwnerId::random();
            let mut invocation = SCRIPTS.pass.prepare_invoke();
            invocation
                .key(self.conn.keys.lock(&lease.key))
                .key(self.conn.keys.token(&lease.key));
            if matches!(self.wake, Wake::Notify(_)) {
                invocation
                    .key(self.conn.keys.queue(&lease.key))
                    .key(self.conn.keys.places(&lease.key))
                    .key(self.conn.keys.asks(&lease.key));
            }
            invocation
                .arg(lock_value(lease.owner, lease.token))
                .arg(owner.to_string())
                .arg(ttl_millis(ttl));
            let mut conn = self.conn.link.clone();
            let sent_at = Instant::now();
            let reply: redis::Value = self
                .conn
                .call("pass", invocation.invoke_async(&mut conn))
                .await?;
            let token = match reply {
                redis::Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                redis::Value::SimpleString(text) => text,
                redis::Value::Nil | redis::Value::Int(0) => return Ok(None),
                other => {
                    return Err(fencelock_core::Error::Backend {
                        backend: self.conn.backend,
                        message: format!("the pass script answered {other:?}"),
                        source: None,
                    });
                }
            };
            let token = parse_token(self.conn.backend, &token)?;
            Ok(Some(Lease {
                key: lease.key.clone(),
                owner,
                token,
                ttl,
                valid_until: valid_until(sent_at, ttl),
            }))
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "passed")
    }

    pub(crate) async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        let span =
            tracing::debug_span!("wait_for_release", backend = self.conn.backend, key = %key, ?max);
        match &self.wake {
            Wake::Notify(waiters) => waiters.wait(key, max).instrument(span).await,
            Wake::Poll => poll_release(&self.conn, key, max).instrument(span).await,
        }
    }

    pub(crate) async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        let span = tracing::debug_span!("inspect", backend = self.conn.backend, key = %key, outcome = Empty);
        let result = async {
            let mut invocation = SCRIPTS.inspect.prepare_invoke();
            invocation
                .key(self.conn.keys.lock(key))
                .key(self.conn.keys.token(key));
            let mut conn = self.conn.link.clone();
            let (value, pttl, last): (Option<String>, i64, Option<String>) = self
                .conn
                .call("inspect", invocation.invoke_async(&mut conn))
                .await?;
            let holder = value
                .as_deref()
                .map(|v| parse_lock_value(self.conn.backend, v))
                .transpose()?;
            let remaining = if holder.is_some() && pttl >= 0 {
                Some(Duration::from_millis(pttl.unsigned_abs()))
            } else {
                None
            };
            let mut info = LockInfo::new(key.clone());
            info.holder = holder;
            info.remaining = remaining;
            info.last_token = last
                .as_deref()
                .map(|t| parse_token(self.conn.backend, t))
                .transpose()?;
            Ok(info)
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }

    /// The key's queue in grant order (one server): the holder, or the read phase's live
    /// readers, then the live queued waiters by arrival, each with its time left by the
    /// server's clock. A waiter's token is drawn at its grant, so it has none yet. `None` on a
    /// cluster, which keeps no queue.
    pub(crate) async fn inspect_queue(&self, key: &LockKey) -> Result<Option<Vec<QueueEntry>>> {
        if !matches!(self.wake, Wake::Notify(_)) {
            return Ok(None);
        }
        let backend = self.conn.backend;
        let span = tracing::debug_span!("inspect_queue", backend, key = %key, outcome = Empty);
        let result = async {
            let mut invocation = SCRIPTS.inspect_queue.prepare_invoke();
            invocation
                .key(self.conn.keys.lock(key))
                .key(self.conn.keys.readers(key))
                .key(self.conn.keys.queue(key))
                .key(self.conn.keys.places(key));
            let mut conn = self.conn.link.clone();
            type Reply = (i64, Option<String>, i64, Vec<String>, Vec<String>);
            let (now, held, pttl, readers, waiters): Reply = self
                .conn
                .call("inspect_queue", invocation.invoke_async(&mut conn))
                .await?;
            let left = |until: &str| -> Result<Duration> {
                let until = until.parse::<i64>().map_err(|_| {
                    protocol(backend, format!("queue time {until:?} is not a number"))
                })?;
                Ok(Duration::from_millis(
                    until.saturating_sub(now).max(0).unsigned_abs(),
                ))
            };
            let owner = |id: &str| -> Result<OwnerId> {
                id.parse::<OwnerId>().map_err(|_| {
                    protocol(backend, format!("queue entry {id:?} is not an owner id"))
                })
            };
            let mut entries = Vec::new();
            if let Some(held) = held {
                let fence = parse_lock_value(backend, &held)?;
                if held.ends_with(READ_PHASE_SUFFIX) {
                    for pair in readers.chunks(2) {
                        let [reader, expiry] = pair else {
                            return Err(protocol(backend, "an odd list of readers"));
                        };
                        entries.push(QueueEntry {
                            owner: owner(reader)?,
                            role: QueueRole::Reader,
                            token: Some(fence.token),
                            remaining: left(expiry)?,
                        });
                    }
                } else {
                    entries.push(QueueEntry {
                        owner: fence.owner,
                        role: QueueRole::Holder,
                        token: Some(fence.token),
                        remaining: Duration::from_millis(pttl.max(0).unsigned_abs()),
                    });
                }
            }
            for pair in waiters.chunks(2) {
                let [waiter, lapse] = pair else {
                    return Err(protocol(backend, "an odd list of waiters"));
                };
                entries.push(QueueEntry {
                    owner: owner(waiter)?,
                    role: QueueRole::Waiting,
                    token: None,
                    remaining: left(lapse)?,
                });
            }
            Ok(Some(entries))
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }

    /// Never completes, as the trait's default: Redis sends no news of a lost lock between
    /// renewals (a lock is a key that expires, no session holds it), so loss is left to the
    /// renewals and the lease's deadline. Spelled out so that the delegating impls forward
    /// every method to `Locks` and none runs a default unseen.
    pub(crate) async fn watch_lost(&self, lease: &Lease) -> LostReason {
        let _ = lease;
        std::future::pending().await
    }

    /// Never completes, as [`watch_lost`](Self::watch_lost) and for the same reason: a
    /// reader's entry expires on the server, and nothing tells of it between renewals.
    pub(crate) async fn watch_lost_shared(&self, lease: &Lease, reader: OwnerId) -> LostReason {
        let _ = (lease, reader);
        std::future::pending().await
    }

    pub(crate) async fn advance_token(
        &self,
        key: &LockKey,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        validate_floor(floor, i64::MAX.unsigned_abs(), "a Redis counter")?;
        let span = tracing::debug_span!("advance_token", backend = self.conn.backend, key = %key, floor = floor.get(), outcome = Empty);
        let result = async {
            let mut invocation = SCRIPTS.advance_token.prepare_invoke();
            invocation
                .key(self.conn.keys.token(key))
                .arg(floor.get().to_string());
            let mut conn = self.conn.link.clone();
            let reply: String = self
                .conn
                .call("advance_token", invocation.invoke_async(&mut conn))
                .await?;
            parse_token(self.conn.backend, &reply)
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }
}

/// A queued try's refusal, `{ holder's ms left or -1, the server's clock in µs as text }`.
fn parse_refusal(reply: &[redis::Value]) -> Option<i64> {
    // The server's clock (the second element) told a hand-off's start when a publish told
    // its grant; a grant is now only ever read from a try's answer, so it goes unused.
    let [redis::Value::Int(holder_ms), time] = reply else {
        return None;
    };
    match time {
        redis::Value::BulkString(bytes) => std::str::from_utf8(bytes).ok()?.parse::<u64>().ok()?,
        redis::Value::SimpleString(text) => text.parse::<u64>().ok()?,
        _ => return None,
    };
    Some(*holder_ms)
}
