//! `PgAdvisoryBackend`: session advisory locks on connections held for the life of a lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{
    Capabilities, Error, Fence, FencingToken, Lease, LockBackend, LockInfo, LockKey, LockKinds,
    LostReason, OwnerId, ReadPhase, Result, TimeAuthority, TokenGuarantee, WakeUp, valid_until,
    validate_ttl,
};
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgArguments;
use sqlx::query::{QueryAs, QueryScalar};
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

mod read_phase;

const BACKEND: &str = "pg-advisory";
/// `idle_session_timeout` is a 32-bit count of milliseconds (about 24.8 days).
const MAX_TTL: Duration = Duration::from_secs(24 * 24 * 3600);
/// How long after its last known deadline an abandoned lease's connection is closed.
const ABANDONED_GRACE: Duration = Duration::from_secs(1);
/// The longest pause of the session watch between two pings of a holding session.
const WATCH_EVERY: Duration = Duration::from_millis(500);
/// The shortest pause of the session watch (leases with a short ttl).
const WATCH_AT_LEAST: Duration = Duration::from_millis(50);

/// Locks as Postgres session advisory locks (`pg_try_advisory_lock(bigint)`), and shared
/// (reader) locks as shared ones (`pg_try_advisory_lock_shared(bigint)`).
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
/// **Readers** ([`RwLocker`](fencelock_core::RwLocker), or
/// [`try_acquire_shared`](LockBackend::try_acquire_shared)) hold the key's advisory lock in
/// shared mode, each on a session of its own, held, timed out and watched exactly like an
/// exclusive holder's. Shared and exclusive advisory locks conflict on the server, so readers
/// and writers (this backend's exclusive grants, [`PgStorage::transaction`](crate::PgStorage::transaction),
/// a plain `pg_advisory_lock`) exclude each other there; a reader is refused while a writer
/// holds the lock *or waits for it* on the server. Overlapping readers share the read phase's
/// one fence (DESIGN.md section 5.3 has the rule and why it is safe). A plain
/// `pg_advisory_lock_shared` on the same id coexists with readers and keeps writers out; it
/// has no fence, and [`inspect`](LockBackend::inspect) reports it as an unfenced holder when
/// no fencelock reader is there.
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
    held: Arc<Mutex<Sessions>>,
}

type LeaseId = (LockKey, OwnerId, FencingToken);

/// Where a held session is filed: an exclusive lease, or one reader of a key.
#[derive(Debug, Clone)]
enum Slot {
    Lease(LeaseId),
    Reader(LockKey, OwnerId),
}

/// The sessions a backend (and its clones) holds.
#[derive(Debug, Default)]
struct Sessions {
    leases: HashMap<LeaseId, Arc<Held>>,
    /// Readers by key, then by reader id: a read phase's readers share one fence, so the
    /// fence does not tell them apart.
    readers: HashMap<LockKey, HashMap<OwnerId, Arc<Held>>>,
}

impl Sessions {
    fn get(&self, slot: &Slot) -> Option<Arc<Held>> {
        match slot {
            Slot::Lease(id) => self.leases.get(id).cloned(),
            Slot::Reader(key, reader) => self.readers.get(key)?.get(reader).cloned(),
        }
    }

    fn insert(&mut self, slot: Slot, held: Arc<Held>) {
        match slot {
            Slot::Lease(id) => {
                self.leases.insert(id, held);
            }
            Slot::Reader(key, reader) => {
                self.readers.entry(key).or_default().insert(reader, held);
            }
        }
    }

    /// Removes the entry of `slot`; with `only`, only if it is that very entry.
    fn remove(&mut self, slot: &Slot, only: Option<&Arc<Held>>) -> Option<Arc<Held>> {
        let same = |entry: &Arc<Held>| only.is_none_or(|held| Arc::ptr_eq(entry, held));
        match slot {
            Slot::Lease(id) => {
                if !self.leases.get(id).is_some_and(same) {
                    return None;
                }
                self.leases.remove(id)
            }
            Slot::Reader(key, reader) => {
                let readers = self.readers.get_mut(key)?;
                if !readers.get(reader).is_some_and(same) {
                    return None;
                }
                let removed = readers.remove(reader);
                if readers.is_empty() {
                    self.readers.remove(key);
                }
                removed
            }
        }
    }

    /// The reader whose session carries `lease`; else `Err(Some(NotHeld))` when no reader of
    /// its phase is held here, `Err(None)` when several could be the one.
    fn reader_carrying(&self, lease: &Lease) -> Result<Arc<Held>, Option<LostReason>> {
        let mut carrying = self
            .readers
            .get(&lease.key)
            .into_iter()
            .flat_map(HashMap::values)
            .filter(|held| held.carries(lease));
        match (carrying.next(), carrying.next()) {
            (Some(held), None) => Ok(held.clone()),
            (Some(_), Some(_)) => Err(None),
            (None, _) => Err(Some(LostReason::NotHeld)),
        }
    }

    fn count(&self) -> usize {
        self.leases.len() + self.readers.values().map(HashMap::len).sum::<usize>()
    }

    /// Every entry past its deadline by more than [`ABANDONED_GRACE`].
    fn abandoned(&self, now: Instant) -> Vec<Slot> {
        let gone = |held: &Arc<Held>| held.deadline() + ABANDONED_GRACE < now;
        let leases = self
            .leases
            .iter()
            .filter(|(_, held)| gone(held))
            .map(|(id, _)| Slot::Lease(id.clone()));
        let readers = self.readers.iter().flat_map(|(key, readers)| {
            readers
                .iter()
                .filter(|(_, held)| gone(held))
                .map(|(reader, _)| Slot::Reader(key.clone(), *reader))
        });
        leases.chain(readers).collect()
    }
}

/// One held session: its connection, and the lease it carries.
#[derive(Debug)]
struct Held {
    holder: tokio::sync::Mutex<Option<Holder>>,
    /// The fence of the lease (for a reader, its phase's).
    fence: Fence,
    /// The `valid_until` of the lease as granted, and as last renewed: a reader's lease is
    /// told from the other readers of its phase by them in [`LockBackend::watch_lost`], which
    /// gets the lease and not the reader id.
    valid_until: Mutex<(Instant, Instant)>,
    /// When the server will end the session if nothing is sent on it.
    deadline: Mutex<Instant>,
    /// Cancelled when this process learns the lease is gone (the session ended, its deadline
    /// passed, the database was closed), for [`LockBackend::watch_lost`].
    lost: CancellationToken,
    reason: OnceLock<LostReason>,
}

impl Held {
    fn new(holder: Holder, lease: &Lease, deadline: Instant) -> Self {
        Held {
            holder: tokio::sync::Mutex::new(Some(holder)),
            fence: lease.fence(),
            valid_until: Mutex::new((lease.valid_until, lease.valid_until)),
            deadline: Mutex::new(deadline),
            lost: CancellationToken::new(),
            reason: OnceLock::new(),
        }
    }

    fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn renewed(&self, deadline: Instant, valid_until: Instant) {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner) = deadline;
        self.valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .1 = valid_until;
    }

    /// Whether `lease` is the one this entry handed out (as granted or as last renewed).
    fn carries(&self, lease: &Lease) -> bool {
        let (granted, renewed) = *self
            .valid_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        lease.fence() == self.fence
            && (lease.valid_until == granted || lease.valid_until == renewed)
    }

    fn mark_lost(&self, reason: LostReason) {
        let _ = self.reason.set(reason);
        self.lost.cancel();
    }

    /// Waits until the lease is lost, and says why.
    async fn lost(&self) -> LostReason {
        self.lost.cancelled().await;
        self.reason
            .get()
            .copied()
            .unwrap_or(LostReason::SessionEnded)
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

/// A renewal statement on a holding session: one row (`armed`) while the session still
/// records the lease, none when its record was taken over.
type Renewal<'q> = QueryScalar<'q, Postgres, Option<String>, PgArguments>;

/// A release statement on a holding session: `unlocked`, `forgotten`, `disarmed`.
type Unlock<'q> = QueryAs<'q, Postgres, (bool, bool, String), PgArguments>;

impl PgAdvisoryBackend {
    /// An advisory-lock backend on `db`.
    pub fn new(db: &PgDatabase) -> Self {
        PgAdvisoryBackend {
            db: db.clone(),
            held: Arc::new(Mutex::new(Sessions::default())),
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

    /// How many leases (exclusive and readers') this backend and its clones currently keep a
    /// connection for.
    pub fn held_count(&self) -> usize {
        self.sessions().count()
    }

    fn timeout(&self) -> Duration {
        self.db.operation_timeout()
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        // The map stays consistent under a panic elsewhere: every update is a single insert or
        // remove.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Closes the connections of leases whose holders dropped them without releasing: past
    /// their deadline the server has ended (or is about to end) those sessions anyway.
    fn sweep_abandoned(&self) {
        let abandoned: Vec<Arc<Held>> = {
            let mut sessions = self.sessions();
            let slots = sessions.abandoned(Instant::now());
            slots
                .iter()
                .filter_map(|slot| sessions.remove(slot, None))
                .collect()
        };
        // Dropping the last reference closes the connection.
        drop(abandoned);
    }

    /// Forgets `slot` if it is still `held`'s entry.
    fn forget(&self, slot: &Slot, held: &Arc<Held>) {
        self.sessions().remove(slot, Some(held));
    }

    /// Files a session that was just granted `lease` under `slot` and starts its watch.
    fn hold(&self, slot: Slot, holder: Holder, lease: &Lease, deadline: Instant) {
        let held = Arc::new(Held::new(holder, lease, deadline));
        let watch = self.clone().watch_session(
            slot.clone(),
            Arc::downgrade(&held),
            (lease.ttl / 4).clamp(WATCH_AT_LEAST, WATCH_EVERY),
        );
        self.sessions().insert(slot, held);
        tokio::spawn(watch.in_current_span());
    }

    /// Runs `renewal` on the session of `held` (filed under `slot`): the lease is renewed for
    /// `ttl` and returned when the statement finds the session's record, and lost otherwise
    /// (closing the session, which frees the lock either way).
    async fn renew(
        &self,
        slot: &Slot,
        held: &Arc<Held>,
        lease: &Lease,
        ttl: Duration,
        renewal: Renewal<'_>,
    ) -> Result<Lease> {
        let mut session = held.holder.lock().await;
        let Some(holder) = session.as_mut() else {
            let reason = held.reason.get().copied().unwrap_or(LostReason::NotHeld);
            return Err(Error::lease_lost(&lease.key, reason));
        };
        let sent_at = Instant::now();
        let outcome: Result<Option<Option<String>>> = async {
            timed(
                BACKEND,
                self.timeout(),
                renewal.fetch_optional(holder.conn()?),
            )
            .await
        }
        .await;
        let reason = match outcome {
            Ok(Some(_)) => {
                let renewed = Lease {
                    ttl,
                    valid_until: valid_until(sent_at, ttl),
                    ..lease.clone()
                };
                held.renewed(Instant::now() + ttl, renewed.valid_until);
                return Ok(renewed);
            }
            // The session lives but no longer records this lease.
            Ok(None) => LostReason::Superseded,
            Err(error) => {
                tracing::debug!(%error, "holder session failed");
                LostReason::SessionEnded
            }
        };
        session.take();
        self.forget(slot, held);
        held.mark_lost(reason);
        Err(Error::lease_lost(&lease.key, reason))
    }

    /// Runs `unlock` on the session of `held`, already taken out of the map: `Ok(true)` when
    /// it gave the lock back (the connection returns to the pool), `Ok(false)` when the
    /// session no longer held it.
    async fn unlock(&self, held: Arc<Held>, unlock: Unlock<'_>) -> Result<bool> {
        let Some(mut holder) = held.holder.lock().await.take() else {
            return Ok(false);
        };
        let outcome: Result<(bool, bool, String)> =
            async { timed(BACKEND, self.timeout(), unlock.fetch_one(holder.conn()?)).await }.await;
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
    async fn watch_session(self, slot: Slot, held: Weak<Held>, every: Duration) {
        let closing = self.db.closing();
        let key = match &slot {
            Slot::Lease((key, ..)) | Slot::Reader(key, _) => key.clone(),
        };
        loop {
            let closed = tokio::select! {
                _ = tokio::time::sleep(every) => false,
                _ = closing.cancelled() => true,
            };
            let Some(held) = held.upgrade() else { return };
            if held.lost.is_cancelled() {
                return;
            }
            let mut session = if closed {
                held.holder.lock().await
            } else {
                match held.holder.try_lock() {
                    Ok(session) => session,
                    // An extend or a release is using the session: it finds out for itself.
                    Err(_) => continue,
                }
            };
            let Some(holder) = session.as_mut() else {
                return;
            };
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
                        tracing::debug!(key = %key, %error, "holder session ended");
                        LostReason::SessionEnded
                    }
                }
            };
            // Closing the connection frees the lock if the session still had it.
            session.take();
            drop(session);
            self.forget(&slot, &held);
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
        .with_kinds(LockKinds::GENERIC.with_shared())
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
                        let slot = Slot::Lease(lease_id(&lease));
                        self.hold(slot, holder, &lease, replied_at + ttl);
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
            let slot = Slot::Lease(lease_id(lease));
            let Some(held) = self.sessions().get(&slot) else {
                return Err(Error::lease_lost(&lease.key, LostReason::NotHeld));
            };
            let owner = owner_bytes(lease.owner);
            let renewal = sqlx::query_scalar(self.db.sql().advisory_extend.text())
                .bind(lease.key.as_str())
                .bind(&owner[..])
                .bind(token_param(BACKEND, lease.token)?)
                .bind(micros(ttl))
                .bind(millis_setting(ttl));
            self.renew(&slot, &held, lease, ttl, renewal).await
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
            let Some(held) = self.sessions().remove(&Slot::Lease(lease_id(lease)), None) else {
                return Ok(false);
            };
            let owner = owner_bytes(lease.owner);
            let unlock = sqlx::query_as(self.db.sql().advisory_release.text())
                .bind(self.db.advisory_lock_id(&lease.key))
                .bind(lease.key.as_str())
                .bind(&owner[..])
                .bind(token_param(BACKEND, lease.token)?);
            self.unlock(held, unlock).await
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
        if info.holder.is_some() {
            return Ok(info);
        }
        if let Some(pid) = lock_pid {
            // The lock is taken, but not through a lease of this backend: a plain
            // `pg_advisory_lock` on the same id, or a fencelock transaction.
            info.unfenced_holder = Some(format!(
                "PostgreSQL session pid {pid} (no fencelock lease: a plain pg_advisory_lock or a fencelock transaction)"
            ));
            return Ok(info);
        }
        // Not held exclusively: a read phase, or plain SQL shared holders, may hold it.
        let (phase, plain_pid) = self.read_phase(key, protocol).await?;
        if let Some(phase) = phase {
            info.holder = Some(phase.fence);
            info.remaining = Some(phase.remaining);
        } else if let Some(pid) = plain_pid {
            info.unfenced_holder = Some(format!(
                "PostgreSQL session pid {pid} (a shared lock without a fencelock reader: a plain pg_advisory_lock_shared)"
            ));
        }
        Ok(info)
    }

    /// Completes when the session watch (or a failed extend) finds the lease's session gone:
    /// see [`PgAdvisoryBackend`]'s session watch. A reader's lease (which carries its phase's
    /// fence, not the reader id) is found by the `valid_until` it was granted or last renewed
    /// with; should two readers of one phase in this process carry the very same lease, the
    /// watch cannot tell them apart and leaves their loss to the renewals and the deadline.
    async fn watch_lost(&self, lease: &Lease) -> LostReason {
        let watched = {
            let sessions = self.sessions();
            match sessions.get(&Slot::Lease(lease_id(lease))) {
                Some(held) => Ok(held),
                None => sessions.reader_carrying(lease),
            }
        };
        match watched {
            Ok(held) => held.lost().await,
            Err(Some(reason)) => reason,
            Err(None) => std::future::pending().await,
        }
    }

    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        advance_token(&self.db, BACKEND, key, floor).await
    }

    async fn try_acquire_shared(
        &self,
        key: &LockKey,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        self.join_read_phase(key, reader, ttl).await
    }

    async fn extend_shared(&self, lease: &Lease, reader: OwnerId, ttl: Duration) -> Result<Lease> {
        self.extend_reader(lease, reader, ttl).await
    }

    async fn release_shared(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
        self.leave_read_phase(lease, reader).await
    }

    async fn inspect_shared(&self, key: &LockKey) -> Result<Option<ReadPhase>> {
        let protocol = self.db.protocol().await?;
        Ok(self.read_phase(key, protocol).await?.0)
    }
}
