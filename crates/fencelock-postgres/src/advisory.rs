//! `PgAdvisoryBackend`: session advisory locks on connections held for the life of a lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{
    Capabilities, Error, FencingToken, Lease, LockBackend, LockInfo, LockKey, LostReason, OwnerId,
    Result, TimeAuthority, TokenGuarantee, WakeUp, valid_until, validate_ttl,
};
use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::codec::{micros, millis_setting, owner_bytes, token_param};
use crate::epoch::{self, Grant};
use crate::error::timed;
use crate::exec::{Arg, Protocol};
use crate::lease_table::{advance_token, lock_info};
use crate::{PgBackendKind, PgDatabase};

const BACKEND: &str = "pg-advisory";
/// `idle_session_timeout` is a 32-bit count of milliseconds (about 24.8 days).
const MAX_TTL: Duration = Duration::from_secs(24 * 24 * 3600);
/// How long after its last known deadline an abandoned lease's connection is closed.
const ABANDONED_GRACE: Duration = Duration::from_secs(1);
/// The longest pause of the session watch between two pings of a holding session.
const WATCH_EVERY: Duration = Duration::from_millis(500);
/// The shortest pause of the session watch (leases with a short ttl).
const WATCH_AT_LEAST: Duration = Duration::from_millis(50);

/// Locks as Postgres session advisory locks (`pg_try_advisory_lock(bigint)`).
///
/// Each grant takes a connection out of the database's holder pool and keeps it for the life
/// of the lease. The server enforces expiry: `idle_session_timeout` is set to the ttl on that
/// session, so a holder that goes silent (crashed, paused, partitioned) has its session ended
/// and its lock freed by the server. [`extend`](LockBackend::extend) is a ping on that
/// session that re-arms the time-out; [`release`](LockBackend::release) unlocks and hands the
/// connection back. Needs PostgreSQL 14 or newer.
///
/// Keys map to lock ids with [`PgDatabase::advisory_lock_id`]: `#402` is the raw id 402, any
/// other key is hashed together with the schema. So a lock taken here excludes `SELECT pg_advisory_lock(402)` in any other client,
/// and [`PgStorage::transaction`](crate::PgStorage::transaction) on the same key.
///
/// Tokens come from the same never-deleted counter rows as [`PgLeaseBackend`](crate::PgLeaseBackend),
/// with the same grant that waits for no WAL flush and the same durable epoch, so they keep
/// increasing across restarts and crashes (DESIGN.md section 5.3); held locks do not survive
/// a restart (it ends every session).
/// A lease can be extended and released only through the backend (or a clone of it) that
/// granted it, because that is where its connection lives.
///
/// Needs a direct connection (or a session-mode pooler): a transaction-mode pooler such as
/// PgBouncer in `pool_mode = transaction` hands the session to other clients between
/// transactions, so no lock could be held. Behind one (`?pooler=transaction`, or detected,
/// see [`PgPooler`](crate::PgPooler)) every acquire fails with [`Error::InvalidConfig`]
/// saying to use the lease backend or a direct connection.
#[derive(Debug, Clone)]
pub struct PgAdvisoryBackend {
    db: PgDatabase,
    held: Arc<Mutex<HashMap<LeaseId, Arc<Held>>>>,
}

type LeaseId = (LockKey, OwnerId, FencingToken);

#[derive(Debug)]
struct Held {
    holder: tokio::sync::Mutex<Option<Holder>>,
    /// When the server will end the session if nothing is sent on it.
    deadline: Mutex<Instant>,
    /// Cancelled when this process learns the lease is gone (the session ended, its deadline
    /// passed, the database was closed), for [`LockBackend::watch_lost`].
    lost: CancellationToken,
    reason: OnceLock<LostReason>,
}

impl Held {
    fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn mark_lost(&self, reason: LostReason) {
        let _ = self.reason.set(reason);
        self.lost.cancel();
    }
}

/// A connection holding (or about to hold) an advisory lock. Dropping it closes the
/// connection, which makes the server free every lock of the session; only
/// [`give_back`](Self::give_back), after a clean unlock, returns it to the pool.
#[derive(Debug)]
struct Holder(Option<PoolConnection<Postgres>>);

impl Holder {
    fn conn(&mut self) -> Result<&mut PgConnection> {
        match self.0.as_mut() {
            Some(conn) => Ok(&mut **conn),
            None => Err(crate::error::protocol(
                BACKEND,
                "holder connection already gone",
            )),
        }
    }

    fn give_back(mut self) {
        drop(self.0.take());
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            drop(conn.detach());
        }
    }
}

fn lease_id(lease: &Lease) -> LeaseId {
    (lease.key.clone(), lease.owner, lease.token)
}

/// Whether `error` means the holding session is gone (and with it the lock).
fn session_gone(error: &Error) -> bool {
    match error {
        Error::Unavailable { source, .. } => source.is_some(),
        _ => false,
    }
}

impl PgAdvisoryBackend {
    /// An advisory-lock backend on `db`.
    pub fn new(db: &PgDatabase) -> Self {
        PgAdvisoryBackend {
            db: db.clone(),
            held: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Connects to `url` (schema `fencelock`) and returns an advisory-lock backend on it.
    pub async fn connect(url: &str) -> Result<Self> {
        Ok(Self::new(&PgDatabase::connect(url).await?))
    }

    /// The database this backend uses.
    pub fn database(&self) -> &PgDatabase {
        &self.db
    }

    /// How many leases this backend (and its clones) currently keeps a connection for.
    pub fn held_count(&self) -> usize {
        self.held_map().len()
    }

    fn timeout(&self) -> Duration {
        self.db.operation_timeout()
    }

    fn held_map(&self) -> std::sync::MutexGuard<'_, HashMap<LeaseId, Arc<Held>>> {
        // The map stays consistent under a panic elsewhere: every update is a single insert or
        // remove.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the connections of leases whose holders dropped them without releasing: past
    /// their deadline the server has ended (or is about to end) those sessions anyway.
    fn sweep_abandoned(&self) {
        let now = Instant::now();
        let abandoned: Vec<Arc<Held>> = {
            let mut map = self.held_map();
            let expired: Vec<LeaseId> = map
                .iter()
                .filter(|(_, held)| held.deadline() + ABANDONED_GRACE < now)
                .map(|(id, _)| id.clone())
                .collect();
            expired.iter().filter_map(|id| map.remove(id)).collect()
        };
        // Dropping the last reference closes the connection.
        drop(abandoned);
    }

    /// Forgets `id` if it is still `held`'s entry.
    fn forget(&self, id: &LeaseId, held: &Arc<Held>) {
        let mut map = self.held_map();
        if map.get(id).is_some_and(|entry| Arc::ptr_eq(entry, held)) {
            map.remove(id);
        }
    }

    /// The session watch of one lease: until the lease is released or lost, pings its session
    /// every `every` (the pause is a quarter of the ttl, within [`WATCH_AT_LEAST`] and
    /// [`WATCH_EVERY`]) and, the moment a ping fails, closes the connection and reports the
    /// lease lost, so the guard learns within a pause and a round trip that the session ended
    /// (`pg_terminate_backend`, a reset connection, a server restart). Also closes the session
    /// past its deadline, and at once when the database is closed.
    ///
    /// Each ping sets `idle_session_timeout` to the time left until the deadline, so watching
    /// never prolongs the lease: a silent or paused holder's session still ends when its ttl
    /// runs out.
    async fn watch_session(self, id: LeaseId, held: Weak<Held>, every: Duration) {
        let closing = self.db.closing();
        loop {
            let closed = tokio::select! {
                _ = tokio::time::sleep(every) => false,
                _ = closing.cancelled() => true,
            };
            let Some(held) = held.upgrade() else { return };
            if held.lost.is_cancelled() {
                return;
            }
            let mut slot = if closed {
                held.holder.lock().await
            } else {
                match held.holder.try_lock() {
                    Ok(slot) => slot,
                    // An extend or a release is using the session: it finds out for itself.
                    Err(_) => continue,
                }
            };
            let Some(holder) = slot.as_mut() else { return };
            let left = held.deadline().saturating_duration_since(Instant::now());
            let reason = if closed {
                LostReason::SessionEnded
            } else if left.is_zero() {
                LostReason::DeadlinePassed
            } else {
                let ping: Result<Option<String>> = async {
                    timed(
                        BACKEND,
                        self.timeout(),
                        sqlx::query_scalar(self.db.sql().advisory_ping.text())
                            .bind(millis_setting(left))
                            .fetch_one(holder.conn()?),
                    )
                    .await
                }
                .await;
                match ping {
                    Ok(_) => continue,
                    Err(error) => {
                        tracing::debug!(key = %id.0, %error, "holder session ended");
                        LostReason::SessionEnded
                    }
                }
            };
            // Closing the connection frees the lock if the session still had it.
            slot.take();
            drop(slot);
            self.forget(&id, &held);
            held.mark_lost(reason);
            return;
        }
    }
}

#[async_trait]
impl LockBackend for PgAdvisoryBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(
            TokenGuarantee::Durable,
            TimeAuthority::Server,
            WakeUp::Notify,
            MAX_TTL,
        )
        .with_locks_survive_restart(false)
    }

    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        self.db.advisory_allowed().await?;
        self.db.serves(PgBackendKind::Advisory).await?;
        self.sweep_abandoned();
        let lock_id = self.db.advisory_lock_id(key);
        let span = tracing::debug_span!(
            "fencelock.pg.acquire",
            backend = BACKEND,
            key = %key,
            lock_id
        );
        async {
            let owner = OwnerId::random();
            let conn = timed(BACKEND, self.timeout(), self.db.holders().acquire()).await?;
            let mut holder = Holder(Some(conn));
            let owner_bytes = owner_bytes(owner);
            for _ in 0..epoch::TRIES {
                let sent_at = Instant::now();
                // On error or cancellation `holder` is dropped, closing the connection and
                // with it any lock the statement may have taken.
                let (got, token, _armed, live, exhausted): (
                    Option<bool>,
                    Option<i64>,
                    Option<String>,
                    Option<i64>,
                    bool,
                ) = timed(
                    BACKEND,
                    self.timeout(),
                    sqlx::query_as(self.db.sql().advisory_acquire.text())
                        .bind(lock_id)
                        .bind(key.as_str())
                        .bind(&owner_bytes[..])
                        .bind(micros(ttl))
                        .bind(millis_setting(ttl))
                        .fetch_one(holder.conn()?),
                )
                .await?;
                let replied_at = Instant::now();
                if got != Some(true) {
                    holder.give_back();
                    tracing::debug!(outcome = "held", "not acquired");
                    return Ok(None);
                }
                match Grant::from_columns(token, live, exhausted) {
                    Grant::Token(token) => {
                        let token = FencingToken::from_backend(BACKEND, token)?;
                        let lease = Lease {
                            key: key.clone(),
                            owner,
                            token,
                            ttl,
                            valid_until: valid_until(sent_at, ttl),
                        };
                        let held = Arc::new(Held {
                            holder: tokio::sync::Mutex::new(Some(holder)),
                            deadline: Mutex::new(replied_at + ttl),
                            lost: CancellationToken::new(),
                            reason: OnceLock::new(),
                        });
                        let id = lease_id(&lease);
                        let watch = self.clone().watch_session(
                            id.clone(),
                            Arc::downgrade(&held),
                            (ttl / 4).clamp(WATCH_AT_LEAST, WATCH_EVERY),
                        );
                        self.held_map().insert(id, held);
                        tokio::spawn(watch.in_current_span());
                        tracing::debug!(token = token.get(), outcome = "granted", "acquired");
                        return Ok(Some(lease));
                    }
                    // The lock was taken without a token: the live epoch is gone or the
                    // key's counter used up (or, `Refused`, used up by a racing grant of
                    // another mechanism since this statement's snapshot). Give the lock back
                    // before trying again, so that the retry takes it once, not twice.
                    grant @ (Grant::NewEpoch(_) | Grant::Refused) => {
                        let _: bool = timed(
                            BACKEND,
                            self.timeout(),
                            sqlx::query_scalar("SELECT pg_advisory_unlock($1)")
                                .bind(lock_id)
                                .fetch_one(holder.conn()?),
                        )
                        .await?;
                        if let Grant::NewEpoch(seen) = grant {
                            epoch::start_new(
                                &self.db,
                                BACKEND,
                                Protocol::Prepared,
                                self.db.pool(),
                                seen,
                            )
                            .await?;
                        }
                    }
                }
            }
            Err(epoch::no_token(BACKEND))
        }
        .instrument(span)
        .await
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        validate_ttl(ttl, &self.capabilities())?;
        let span = tracing::debug_span!(
            "fencelock.pg.extend",
            backend = BACKEND,
            key = %lease.key,
            token = lease.token.get()
        );
        async {
            let id = lease_id(lease);
            let Some(held) = self.held_map().get(&id).cloned() else {
                return Err(Error::lease_lost(&lease.key, LostReason::NotHeld));
            };
            let mut slot = held.holder.lock().await;
            let Some(holder) = slot.as_mut() else {
                let reason = held.reason.get().copied().unwrap_or(LostReason::NotHeld);
                return Err(Error::lease_lost(&lease.key, reason));
            };
            let sent_at = Instant::now();
            let outcome: Result<Option<Option<String>>> = async {
                timed(
                    BACKEND,
                    self.timeout(),
                    sqlx::query_scalar(self.db.sql().advisory_extend.text())
                        .bind(lease.key.as_str())
                        .bind(&owner_bytes(lease.owner)[..])
                        .bind(token_param(BACKEND, lease.token)?)
                        .bind(micros(ttl))
                        .bind(millis_setting(ttl))
                        .fetch_optional(holder.conn()?),
                )
                .await
            }
            .await;
            match outcome {
                Ok(Some(_)) => {
                    *held.deadline.lock().unwrap_or_else(PoisonError::into_inner) =
                        Instant::now() + ttl;
                    Ok(Lease {
                        ttl,
                        valid_until: valid_until(sent_at, ttl),
                        ..lease.clone()
                    })
                }
                Ok(None) => {
                    // The session lives but no longer records this lease as holder.
                    slot.take();
                    self.forget(&id, &held);
                    held.mark_lost(LostReason::Superseded);
                    Err(Error::lease_lost(&lease.key, LostReason::Superseded))
                }
                Err(error) => {
                    tracing::debug!(%error, "holder session failed");
                    // Closing the session frees the lock, so the lease is gone either way.
                    slot.take();
                    self.forget(&id, &held);
                    held.mark_lost(LostReason::SessionEnded);
                    Err(Error::lease_lost(&lease.key, LostReason::SessionEnded))
                }
            }
        }
        .instrument(span)
        .await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let span = tracing::debug_span!(
            "fencelock.pg.release",
            backend = BACKEND,
            key = %lease.key,
            token = lease.token.get()
        );
        async {
            let Some(held) = self.held_map().remove(&lease_id(lease)) else {
                return Ok(false);
            };
            let Some(mut holder) = held.holder.lock().await.take() else {
                return Ok(false);
            };
            let outcome: Result<(bool, bool, String)> = async {
                timed(
                    BACKEND,
                    self.timeout(),
                    sqlx::query_as(self.db.sql().advisory_release.text())
                        .bind(self.db.advisory_lock_id(&lease.key))
                        .bind(lease.key.as_str())
                        .bind(&owner_bytes(lease.owner)[..])
                        .bind(token_param(BACKEND, lease.token)?)
                        .fetch_one(holder.conn()?),
                )
                .await
            }
            .await;
            match outcome {
                Ok((unlocked, _forgotten, _)) => {
                    if unlocked {
                        holder.give_back();
                    }
                    Ok(unlocked)
                }
                // The session ended on its own (time-out, termination): the lock went with it.
                Err(error) if session_gone(&error) => Ok(false),
                // Dropping `holder` closes the session, which frees the lock.
                Err(error) => Err(error),
            }
        }
        .instrument(span)
        .await
    }

    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        let waiter = crate::wakeups::subscribe(&self.db, BACKEND, key).await;
        // Subscribed before looking, so a release in between still wakes us.
        let info = self.inspect(key).await?;
        let bound = match info.remaining.filter(|_| info.holder.is_some()) {
            // Also wake near a fencelock holder's deadline: a session ended by the server
            // sends no notification.
            Some(left) => max.min(left + Duration::from_millis(5)),
            None => {
                let protocol = self.db.protocol().await?;
                let held: bool = timed(
                    BACKEND,
                    self.timeout(),
                    self.db.sql().advisory_held.scalar_one(
                        protocol,
                        self.db.pool(),
                        &[Arg::Int8(self.db.advisory_lock_id(key))],
                    ),
                )
                .await?;
                if !held {
                    return Ok(());
                }
                // Held by a plain SQL client: its unlock is not announced, so wait it out.
                max
            }
        };
        match waiter {
            Some(mut waiter) => waiter.released(bound).await,
            None => tokio::time::sleep(bound).await,
        }
        Ok(())
    }

    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        let protocol = self.db.protocol().await?;
        let (last_token, owner, token, remaining_us, lock_pid): (
            Option<i64>,
            Option<Vec<u8>>,
            Option<i64>,
            Option<i64>,
            Option<i32>,
        ) = timed(
            BACKEND,
            self.timeout(),
            self.db.sql().advisory_inspect.fetch_one(
                protocol,
                self.db.pool(),
                &[
                    Arg::Text(key.as_str()),
                    Arg::Int8(self.db.advisory_lock_id(key)),
                ],
            ),
        )
        .await?;
        let mut info = lock_info(BACKEND, key, (last_token, owner, token, remaining_us))?;
        if info.holder.is_none() {
            // The lock is taken, but not through a lease of this backend: a plain
            // `pg_advisory_lock` on the same id, or a fencelock transaction.
            info.unfenced_holder = lock_pid.map(|pid| {
                format!("PostgreSQL session pid {pid} (no fencelock lease: a plain pg_advisory_lock or a fencelock transaction)")
            });
        }
        Ok(info)
    }

    /// Completes when the session watch (or a failed extend) finds the lease's session gone:
    /// see [`PgAdvisoryBackend`]'s session watch.
    async fn watch_lost(&self, lease: &Lease) -> LostReason {
        let Some(held) = self.held_map().get(&lease_id(lease)).cloned() else {
            return LostReason::NotHeld;
        };
        held.lost.cancelled().await;
        held.reason
            .get()
            .copied()
            .unwrap_or(LostReason::SessionEnded)
    }

    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        advance_token(&self.db, BACKEND, key, floor).await
    }
}
