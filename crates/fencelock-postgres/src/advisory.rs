//! `PgAdvisoryBackend`: session advisory locks on connections held for the life of a lease.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{
    Capabilities, Error, FencingToken, Lease, LockBackend, LockInfo, LockKey, LockKinds,
    LostReason, OwnerId, QueueEntry, ReadPhase, Result, TimeAuthority, TokenGuarantee, WakeUp,
    valid_until, validate_ttl,
};
use sqlx::PgConnection;
use tokio::time::Instant;
use tracing::Instrument;

use crate::codec::{micros, millis_setting, owner_bytes, token_param};
use crate::epoch::{self, Grant};
use crate::error::timed;
use crate::exec::{Arg, Protocol, Sql};
use crate::lease_table::{advance_token, lock_info, queue_entries};
use crate::wakeups::Kept;
use crate::{PgBackendKind, PgDatabase};

mod read_phase;
mod sessions;

use sessions::{Holder, Sessions, Slot, lease_id};

pub(crate) const BACKEND: &str = "pg-advisory";
/// The longest a queued waiter's place lives after its last try (DESIGN.md 5.3, "Fair
/// hand-off", the advisory paragraph), and how long a left waiter's `gone` row is kept.
const PLACE_TTL: Duration = crate::lease_table::PLACE_TTL;
/// The shortest place ttl, for waiters asking for shorter ttls.
const MIN_PLACE_TTL: Duration = Duration::from_millis(100);

/// The place ttl of a waiter that asks for `ttl`: that ttl, within [`MIN_PLACE_TTL`] and
/// [`PLACE_TTL`]. A head that vanished (or is paused) keeps a free lock from the others for
/// no longer than this after its last try, so no longer than a holder of its ttl would; the
/// waiter tries again within a quarter of it.
fn place_ttl(ttl: Duration) -> Duration {
    ttl.clamp(MIN_PLACE_TTL, PLACE_TTL)
}

/// The shortest place ttl the process's place keeper keeps (it runs every 500 ms, so twice
/// that): a waiter with a shorter one keeps its place with its own tries.
const MIN_KEPT_PLACE_TTL: Duration = Duration::from_secs(1);

/// Whether the process's place keeper keeps the place of a waiter asking for `ttl`
/// (DESIGN 5.3, *One refresh per process*), with its place ttl.
fn kept(ttl: Duration) -> Option<Kept> {
    let place_ttl = place_ttl(ttl);
    (place_ttl >= MIN_KEPT_PLACE_TTL).then_some(Kept::Advisory { place_ttl })
}

/// Which grant statement a try sends: the plain try's, a waiter's first queued try (the
/// plain grant on a key nobody queues for, else the queue's function), or a later one's (the
/// queue's function alone). The last two answer alike.
#[derive(Debug, Clone, Copy)]
enum Statement {
    Plain,
    Queued,
    Placed,
}

/// A row of `advisory_acquire.sql`: got, token, armed, live, exhausted, bound.
type PlainRow = (
    Option<bool>,
    Option<i64>,
    Option<String>,
    Option<i64>,
    bool,
    Option<String>,
);

/// A row of a queued try (`advisory_acquire_queued.sql`, `advisory_acquire_placed.sql`): got,
/// token, live, exhausted, bound, and the recorded holder's time left in microseconds.
type QueuedRow = (
    Option<bool>,
    Option<i64>,
    Option<i64>,
    bool,
    Option<String>,
    Option<i64>,
);

/// What one grant statement answered: whether the session took the lock, the token (or the
/// signals for a lock taken without one, [`Grant::from_columns`]), the schema's mechanism,
/// and for a refused queued try the recorded holder's time left in µs.
struct Try {
    got: bool,
    token: Option<i64>,
    live: Option<i64>,
    exhausted: bool,
    bound: Option<String>,
    held_us: Option<i64>,
}

impl Try {
    /// When a queued waiter this try refused should try again at the latest: by the recorded
    /// holder's deadline (a session the server ended sends no notification), and, unless the
    /// process's keeper keeps its place, in time to keep it (a quarter of its place ttl after
    /// the answer). With no fencelock holder recorded (the lock taken by plain SQL, or kept
    /// for another waiter), at that quarter in any case.
    fn retry_by(&self, ttl: Duration, replied_at: Instant) -> Instant {
        let refresh = replied_at + place_ttl(ttl) / 4;
        let left = self
            .held_us
            .and_then(|us| u64::try_from(us).ok())
            .map(|us| replied_at + Duration::from_micros(us));
        match (left, kept(ttl)) {
            (Some(left), Some(_)) => left,
            (Some(left), None) => left.min(refresh),
            (None, _) => refresh,
        }
    }
}

/// `idle_session_timeout` is a 32-bit count of milliseconds (about 24.8 days).
const MAX_TTL: Duration = Duration::from_secs(24 * 24 * 3600);

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

    /// Waits for the loss of a held session; with none held here, the lease is already gone:
    /// the session ended with the database's `close` when that was called (the guard's
    /// supervisor may first look after `close` removed it), else it was never, or no longer,
    /// held.
    async fn watch(&self, held: Option<Arc<sessions::Held>>) -> LostReason {
        match held {
            Some(held) => held.lost().await,
            None if self.db.closing().is_cancelled() => LostReason::SessionEnded,
            None => LostReason::NotHeld,
        }
    }

    /// A try for `key`: plain (`waiter` none: refused while a waiter holds a live place), or
    /// queued for `waiter` (tried only when it heads the key's queue or none waits, its place
    /// kept when refused). Each try takes a connection out of the holder pool; a grant keeps
    /// it for the lease.
    async fn grant(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: Option<OwnerId>,
    ) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        self.db.advisory_allowed().await?;
        self.sweep_abandoned();
        let lock_id = self.db.advisory_lock_id(key);
        let span = tracing::debug_span!(
            "fencelock.pg.acquire",
            backend = BACKEND,
            key = %key,
            lock_id,
            queued = waiter.is_some()
        );
        async {
            // Registered before the try, so a release right after it wakes this waiter.
            let wakeups = match waiter {
                Some(_) => self.db.wakeups(BACKEND).await.ok(),
                None => None,
            };
            // A first try may find the key free and unqueued, which the queued statement
            // grants as the plain try does; a waiter that tried before most likely holds a
            // place and goes to the queue's function at once (DESIGN 5.3).
            let statement = match (waiter, wakeups) {
                (None, _) => Statement::Plain,
                (Some(waiter), Some(wakeups)) if !wakeups.enqueue(key, waiter, kept(ttl)) => {
                    Statement::Placed
                }
                (Some(_), _) => Statement::Queued,
            };
            let owner = waiter.unwrap_or_else(OwnerId::random);
            let conn = self.db.checkout(self.db.holders(), self.timeout()).await?;
            let mut holder = Holder(Some(conn));
            let owner_bytes = owner_bytes(owner);
            for _ in 0..epoch::TRIES {
                let sent_at = Instant::now();
                // On error or cancellation `holder` is dropped, closing the connection and
                // with it any lock the statement may have taken.
                let try_ = timed(
                    BACKEND,
                    self.timeout(),
                    self.try_once(holder.conn()?, lock_id, key, &owner_bytes, ttl, statement),
                )
                .await?;
                let replied_at = Instant::now();
                if let Err(error) = self
                    .db
                    .check_bound(PgBackendKind::Advisory, try_.bound.as_deref())
                {
                    // The lock was not tried: the session is as it was.
                    holder.give_back();
                    return Err(error);
                }
                if !try_.got {
                    holder.give_back();
                    if let (Some(wakeups), Some(waiter)) = (wakeups, waiter) {
                        wakeups.refused(waiter, Some(try_.retry_by(ttl, replied_at)));
                    }
                    tracing::debug!(outcome = "held", "not acquired");
                    return Ok(None);
                }
                match Grant::from_columns(try_.token, try_.live, try_.exhausted) {
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
                        if let (Some(wakeups), Some(waiter)) = (wakeups, waiter) {
                            wakeups.dequeue(waiter);
                        }
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
                                self.db.checked(),
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

    /// One grant statement on the holding session `conn`.
    async fn try_once(
        &self,
        conn: &mut PgConnection,
        lock_id: i64,
        key: &LockKey,
        owner: &[u8],
        ttl: Duration,
        statement: Statement,
    ) -> sqlx::Result<Try> {
        let sql = self.db.sql();
        let (got, token, live, exhausted, bound, held_us) = match statement {
            Statement::Plain => {
                let (got, token, _armed, live, exhausted, bound): PlainRow =
                    sqlx::query_as(sql.advisory_acquire.text())
                        .bind(lock_id)
                        .bind(key.as_str())
                        .bind(owner)
                        .bind(micros(ttl))
                        .bind(millis_setting(ttl))
                        .fetch_one(conn)
                        .await?;
                (got, token, live, exhausted, bound, None)
            }
            Statement::Queued => {
                self.try_queued(conn, &sql.advisory_acquire_queued, lock_id, key, owner, ttl)
                    .await?
            }
            Statement::Placed => {
                self.try_queued(conn, &sql.advisory_acquire_placed, lock_id, key, owner, ttl)
                    .await?
            }
        };
        Ok(Try {
            got: got == Some(true),
            token,
            live,
            exhausted,
            bound,
            held_us,
        })
    }

    /// One queued try by `statement` (the first or a later one): its row.
    async fn try_queued(
        &self,
        conn: &mut PgConnection,
        statement: &Sql,
        lock_id: i64,
        key: &LockKey,
        owner: &[u8],
        ttl: Duration,
    ) -> sqlx::Result<QueuedRow> {
        sqlx::query_as(statement.text())
            .bind(lock_id)
            .bind(key.as_str())
            .bind(owner)
            .bind(micros(ttl))
            .bind(millis_setting(ttl))
            .bind(micros(place_ttl(ttl)))
            .fetch_one(conn)
            .await
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        // The map stays consistent under a panic elsewhere: every update is a single insert or
        // remove.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
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
        // Waiters queue by arrival, and a release wakes the first (DESIGN 5.3). The backend
        // needs a session of its own, so a `LISTEN` is always possible.
        .with_fair(true)
        // Each held lock keeps a session of the holder pool.
        .with_max_held(self.db.holder_pool_size())
        // A session passes its lock on to a new owner of this process without unlocking.
        .with_passes(true)
    }

    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        self.grant(key, ttl, None).await
    }

    async fn try_acquire_queued(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: OwnerId,
    ) -> Result<Option<Lease>> {
        self.grant(key, ttl, Some(waiter)).await
    }

    async fn wait_for_turn(&self, key: &LockKey, waiter: OwnerId, max: Duration) -> Result<()> {
        crate::wakeups::turn(&self.db, BACKEND, key, waiter, max).await
    }

    async fn leave_queue(&self, key: &LockKey, waiter: OwnerId) -> Result<()> {
        if let Ok(wakeups) = self.db.wakeups(BACKEND).await {
            wakeups.dequeue(waiter);
        }
        let protocol = self.db.protocol().await?;
        timed(
            BACKEND,
            self.timeout(),
            self.db.sql().advisory_leave.execute(
                protocol,
                self.db.checked(),
                &[
                    Arg::Text(key.as_str()),
                    Arg::Bytea(&owner_bytes(waiter)),
                    Arg::Float8(micros(PLACE_TTL)),
                ],
            ),
        )
        .await?;
        Ok(())
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

    async fn pass(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        let span = tracing::debug_span!(
            "fencelock.pg.pass",
            backend = BACKEND,
            key = %lease.key,
            token = lease.token.get()
        );
        async {
            let owner = OwnerId::random();
            let (old, new) = (owner_bytes(lease.owner), owner_bytes(owner));
            let pass = sqlx::query_as(self.db.sql().advisory_pass.text())
                .bind(lease.key.as_str())
                .bind(&old[..])
                .bind(token_param(BACKEND, lease.token)?)
                .bind(&new[..])
                .bind(micros(ttl))
                .bind(millis_setting(ttl));
            self.pass_session(lease, owner, ttl, pass).await
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
                        self.db.checked(),
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
        let (last_token, owner, token, remaining_us, lock_pid, granted_at_most): (
            Option<i64>,
            Option<Vec<u8>>,
            Option<i64>,
            Option<i64>,
            Option<i32>,
            Option<i64>,
        ) = timed(
            BACKEND,
            self.timeout(),
            self.db.sql().advisory_inspect.fetch_one(
                protocol,
                self.db.checked(),
                &[
                    Arg::Text(key.as_str()),
                    Arg::Int8(self.db.advisory_lock_id(key)),
                ],
            ),
        )
        .await?;
        let mut info = lock_info(
            BACKEND,
            key,
            (last_token, owner, token, remaining_us, granted_at_most),
        )?;
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

    async fn inspect_queue(&self, key: &LockKey) -> Result<Option<Vec<QueueEntry>>> {
        let protocol = self.db.protocol().await?;
        let rows = timed(
            BACKEND,
            self.timeout(),
            self.db.sql().advisory_inspect_queue.fetch_all(
                protocol,
                self.db.checked(),
                &[
                    Arg::Text(key.as_str()),
                    Arg::Int8(self.db.advisory_lock_id(key)),
                ],
            ),
        )
        .await?;
        queue_entries(BACKEND, rows).map(Some)
    }

    /// Completes when the session watch (or a failed extend) finds the lease's session gone:
    /// see [`PgAdvisoryBackend`]'s session watch.
    async fn watch_lost(&self, lease: &Lease) -> LostReason {
        let held = self.sessions().get(&Slot::Lease(lease_id(lease)));
        self.watch(held).await
    }

    /// The same watch for a reader: its own session, found by the reader id.
    async fn watch_lost_shared(&self, lease: &Lease, reader: OwnerId) -> LostReason {
        let held = self
            .sessions()
            .get(&Slot::Reader(lease.key.clone(), reader))
            .filter(|held| held.fence == lease.fence());
        self.watch(held).await
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
