//! `PgLeaseBackend`: leases in a table, expired by the server's clock.

use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{
    Capabilities, Error, FencingToken, Lease, LockBackend, LockInfo, LockKey, LockKinds,
    LostReason, OwnerId, QueueEntry, QueueRole, ReadPhase, Result, TimeAuthority, TokenGuarantee,
    WakeUp, valid_until, validate_floor, validate_ttl,
};
use sqlx::FromRow;
use sqlx::postgres::PgRow;
use tokio::time::Instant;
use tracing::Instrument;

use crate::codec::{
    fence_from, micros, millis_setting, owner_bytes, owner_from, remaining, token_param,
};
use crate::epoch::{self, Grant};
use crate::error::{map_sqlx_error, protocol as protocol_error, sqlstate, timed, timed_out};
use crate::exec::{Arg, Protocol, Sql};
use crate::wakeups::Kept;
use crate::{PgBackendKind, PgDatabase};

mod read_phase;

pub(super) const BACKEND: &str = "pg-lease";
const MAX_TTL: Duration = Duration::from_secs(365 * 24 * 3600);
/// The longest a grant waits for a row lock of its key (`lock_timeout`, set for that
/// statement only): a transaction of the transaction API holding the key, or a slow
/// concurrent grant. Past it the try reports the key held, and nothing is left waiting on the
/// server.
const LEASE_LOCK_WAIT: Duration = Duration::from_millis(500);
/// How long a queued waiter's place lives after its last try (DESIGN.md 5.3, "Fair
/// hand-off"): a waiter tries at least every [`TURN_REFRESH`](crate::wakeups::TURN_REFRESH),
/// so only a waiter that vanished (or is paused far longer) loses its place.
pub(super) const PLACE_TTL: Duration = Duration::from_secs(2);
/// The longest a lock handed to a waiter by a release lives before the waiter takes it up
/// (shorter when the waiter asked for a shorter ttl): a waiter that vanished keeps the lock
/// from the others for no longer.
pub(super) const HANDOFF_TTL: Duration = Duration::from_secs(2);
/// SQLSTATE of a lock wait cut short by `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// Locks as rows of a lease table, expired by the server's clock (`clock_timestamp()`).
///
/// Acquire, extend and release are one statement each, and no connection is held between
/// calls, so it works behind a transaction-mode pooler (see [`PgPooler`](crate::PgPooler):
/// there its statements go unprepared and waiters poll) and scales to many held locks.
///
/// A grant writes only UNLOGGED tables, so its commit waits for no WAL flush; tokens stay
/// strictly increasing per key across restarts and crashes through a durable epoch in their
/// high 32 bits (DESIGN.md section 5.3). Leases survive a clean restart of the server (a
/// `smart` or `fast` shutdown writes UNLOGGED tables out), which is what
/// [`Capabilities::locks_survive_restart`] says; a crash, a failover to a standby or a restore
/// from a physical backup drops them, and the next holder of each key gets a token above every
/// earlier one, so the storage refuses the holders of the lost leases.
///
/// Shared (reader) locks ([`RwLocker`](fencelock_core::RwLocker)) are offered too: a read
/// phase lives in the key's lease row, so writers, readers and the transaction API exclude
/// one another, each reader's expiry in the readers table beside it, by the server's clock.
/// Each reader call is one statement, as the exclusive ones are (DESIGN.md section 5.3).
///
/// A set of keys ([`Locker::lock_all`](fencelock_core::Locker::lock_all)) is granted in one
/// statement and one transaction, every key or none
/// ([`try_acquire_all`](LockBackend::try_acquire_all), [`Capabilities::atomic_sets`]).
///
/// ```no_run
/// # async fn demo() -> fencelock_core::Result<()> {
/// use std::{sync::Arc, time::Duration};
/// use fencelock_core::{FencedStorage, LockKey, Locker};
/// use fencelock_postgres::PgDatabase;
/// let db = PgDatabase::connect("postgres://postgres@127.0.0.1:5432/test").await?;
/// let locker = Locker::new(Arc::new(db.lease_backend()));
/// let guard = locker.lock("invoices/42").ttl(Duration::from_secs(10)).await?;
/// db.storage().write(&LockKey::new("invoices/42")?, guard.fence(), b"paid").await?;
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PgLeaseBackend {
    pub(super) db: PgDatabase,
}

impl PgLeaseBackend {
    /// A lease backend on `db`.
    pub fn new(db: &PgDatabase) -> Self {
        PgLeaseBackend { db: db.clone() }
    }

    /// Connects to `url` (schema `fencelock`) and returns a lease backend on it.
    pub async fn connect(url: &str) -> Result<Self> {
        Ok(Self::new(&PgDatabase::connect(url).await?))
    }

    /// The database this backend uses.
    pub fn database(&self) -> &PgDatabase {
        &self.db
    }

    pub(super) fn timeout(&self) -> Duration {
        self.db.operation_timeout()
    }

    /// How long a grant may wait for a row lock of its key ([`LEASE_LOCK_WAIT`], and never
    /// more than half the per-call time-out, so the server gives up before the client).
    pub(super) fn lock_wait(&self) -> Duration {
        LEASE_LOCK_WAIT.min(self.timeout() / 2)
    }

    /// Runs a grant statement (`lease_acquire`, `lease_read_acquire`) until it hands out a
    /// token, starting new epochs when it says to (at most [`epoch::TRIES`] times). Returns
    /// the token, the statement's row and when the granting try was sent; `None` when the
    /// key is held (or stays behind a row lock past the statement's `lock_timeout`).
    /// `columns` picks the token, live epoch and `exhausted` columns out of a row.
    pub(super) async fn grant<T>(
        &self,
        protocol: Protocol,
        statement: &Sql,
        args: &[Arg<'_>],
        columns: fn(&T) -> (GrantRow, Option<&str>),
    ) -> Result<Option<(FencingToken, T, Instant)>>
    where
        T: for<'r> FromRow<'r, PgRow> + Send + Unpin + 'static,
    {
        Ok(self
            .grant_or_refusal(protocol, statement, args, columns)
            .await?
            .ok())
    }

    /// [`grant`](Self::grant), answering a refusal with the refusing row (`None` when a row
    /// lock outlasted the statement's wait), when its try was sent and when it was received.
    pub(super) async fn grant_or_refusal<T>(
        &self,
        protocol: Protocol,
        statement: &Sql,
        args: &[Arg<'_>],
        columns: fn(&T) -> (GrantRow, Option<&str>),
    ) -> Result<std::result::Result<(FencingToken, T, Instant), Option<(T, Instant, Instant)>>>
    where
        T: for<'r> FromRow<'r, PgRow> + Send + Unpin + 'static,
    {
        for _ in 0..epoch::TRIES {
            let sent_at = Instant::now();
            let outcome = tokio::time::timeout(
                self.timeout(),
                statement.fetch_one::<T, _>(protocol, self.db.checked_try(), args),
            )
            .await;
            let row = match outcome {
                Ok(Ok(row)) => row,
                // Behind a transaction's (or a slow grant's) row lock on this key: held.
                Ok(Err(e)) if sqlstate(&e).as_deref() == Some(LOCK_NOT_AVAILABLE) => {
                    tracing::debug!(outcome = "row locked", "not acquired");
                    return Ok(Err(None));
                }
                Ok(Err(e)) => return Err(map_sqlx_error(BACKEND, e)),
                Err(_) => return Err(timed_out(BACKEND, self.timeout())),
            };
            let received_at = Instant::now();
            let ((token, live, exhausted), bound) = columns(&row);
            // Before anything else: with another mechanism the statement granted nothing.
            self.db.check_bound(PgBackendKind::Lease, bound)?;
            match Grant::from_columns(token, live, exhausted) {
                Grant::Token(token) => {
                    let token = FencingToken::from_backend(BACKEND, token)?;
                    return Ok(Ok((token, row, sent_at)));
                }
                Grant::Refused => {
                    tracing::debug!(outcome = "held", "not acquired");
                    return Ok(Err(Some((row, sent_at, received_at))));
                }
                Grant::NewEpoch(seen) => {
                    epoch::start_new(&self.db, BACKEND, protocol, self.db.pool(), seen).await?;
                }
            }
        }
        Err(epoch::no_token(BACKEND))
    }
}

impl PgLeaseBackend {
    /// Runs `lease_acquire_all` until it hands out the set's tokens, starting new epochs when
    /// it says to, as [`grant`](Self::grant) does for one key. Returns the tokens (in the
    /// order of the keys) and when the granting try was sent; `None` when some key is held
    /// (or a row lock outlasted the statement's wait).
    async fn grant_set(
        &self,
        protocol: Protocol,
        args: &[Arg<'_>],
    ) -> Result<Option<(Vec<i64>, Instant)>> {
        for _ in 0..epoch::TRIES {
            let sent_at = Instant::now();
            let outcome = tokio::time::timeout(
                self.timeout(),
                self.db.sql().lease_acquire_all.fetch_one::<SetRow, _>(
                    protocol,
                    self.db.checked_try(),
                    args,
                ),
            )
            .await;
            let (tokens, live, exhausted, bound) = match outcome {
                Ok(Ok(row)) => row,
                // A row lock of some key outlasted the wait: the statement rolled back whole.
                Ok(Err(e)) if sqlstate(&e).as_deref() == Some(LOCK_NOT_AVAILABLE) => {
                    tracing::debug!(outcome = "row locked", "set not acquired");
                    return Ok(None);
                }
                Ok(Err(e)) => return Err(map_sqlx_error(BACKEND, e)),
                Err(_) => return Err(timed_out(BACKEND, self.timeout())),
            };
            // Before anything else: with another mechanism the statement granted nothing.
            self.db
                .check_bound(PgBackendKind::Lease, bound.as_deref())?;
            // `Grant` reads one token; a set's array stands for it (present or not).
            match Grant::from_columns(tokens.as_ref().map(|_| 0), live, exhausted) {
                Grant::Token(_) => {
                    let tokens = tokens.unwrap_or_default();
                    return Ok(Some((tokens, sent_at)));
                }
                Grant::Refused => {
                    tracing::debug!(outcome = "held", "set not acquired");
                    return Ok(None);
                }
                Grant::NewEpoch(seen) => {
                    epoch::start_new(&self.db, BACKEND, protocol, self.db.pool(), seen).await?;
                }
            }
        }
        Err(epoch::no_token(BACKEND))
    }
}

/// Checks the keys of a set in one step: at least one, sorted and distinct (the order the
/// function locks rows in, which keeps concurrent sets from deadlocking).
fn check_set(keys: &[LockKey]) -> Result<()> {
    if keys.is_empty() {
        return Err(Error::config("a set in one step needs at least one key"));
    }
    if keys.windows(2).any(|pair| pair[0] >= pair[1]) {
        return Err(Error::config(
            "the keys of a set in one step must be sorted and distinct",
        ));
    }
    Ok(())
}

/// A row of `lease_acquire_all`: the tokens, live epoch, `exhausted`, and the schema's
/// mechanism.
type SetRow = (Option<Vec<i64>>, Option<i64>, bool, Option<String>);

/// The token, live epoch and `exhausted` columns of a grant statement (DESIGN.md 5.3,
/// *Tokens*); all of `lease_acquire`'s row.
type GrantRow = (Option<i64>, Option<i64>, bool);

/// A row of `lease_acquire`: token, live epoch, `exhausted`, and the schema's mechanism.
type AcquireRow = (Option<i64>, Option<i64>, bool, Option<String>);

/// A row of `lease_acquire_queued`: as [`AcquireRow`], then the holder's time left in µs.
type QueuedRow = (Option<i64>, Option<i64>, bool, Option<String>, Option<i64>);

/// A lease renewed by an extend statement's `(extended, superseded)` row, or why not.
pub(super) fn renewed(
    lease: &Lease,
    ttl: Duration,
    sent_at: Instant,
    row: (bool, bool),
) -> Result<Lease> {
    match row {
        (true, _) => Ok(Lease {
            ttl,
            valid_until: valid_until(sent_at, ttl),
            ..lease.clone()
        }),
        (false, true) => Err(Error::lease_lost(&lease.key, LostReason::Superseded)),
        (false, false) => Err(Error::lease_lost(&lease.key, LostReason::NotHeld)),
    }
}

#[async_trait]
impl LockBackend for PgLeaseBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        // Through a transaction pooler there is no LISTEN: waiters poll.
        let wake_up = match self.db.known_protocol() {
            Some(Protocol::Simple) => WakeUp::Poll,
            _ => WakeUp::Notify,
        };
        // Leases survive a clean restart, not a crash (see the type's docs): the flag speaks
        // of restarts, as for a Redis server that persists its data.
        Capabilities::new(
            TokenGuarantee::Durable,
            TimeAuthority::Server,
            wake_up,
            MAX_TTL,
        )
        .with_locks_survive_restart(true)
        .with_kinds(LockKinds::GENERIC.with_shared())
        .with_atomic_sets(true)
        // Fair where a release can wake the waiter it hands the lock to by name; through a
        // transaction pooler (no LISTEN) waiters poll, and none queues.
        .with_fair(wake_up == WakeUp::Notify)
        .with_passes(true)
    }

    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        let span = tracing::debug_span!("fencelock.pg.acquire", backend = BACKEND, key = %key);
        async {
            let protocol = self.db.protocol().await?;
            let owner = OwnerId::random();
            let owner_bytes = owner_bytes(owner);
            let lock_wait = millis_setting(self.lock_wait());
            let args = [
                Arg::Text(key.as_str()),
                Arg::Bytea(&owner_bytes),
                Arg::Float8(micros(ttl)),
                Arg::Text(&lock_wait),
            ];
            let granted = self
                .grant(
                    protocol,
                    &self.db.sql().lease_acquire,
                    &args,
                    |row: &AcquireRow| ((row.0, row.1, row.2), row.3.as_deref()),
                )
                .await?;
            let Some((token, _, sent_at)) = granted else {
                return Ok(None);
            };
            tracing::debug!(token = token.get(), outcome = "granted", "acquired");
            Ok(Some(Lease {
                key: key.clone(),
                owner,
                token,
                ttl,
                valid_until: valid_until(sent_at, ttl),
            }))
        }
        .instrument(span)
        .await
    }

    async fn try_acquire_all(&self, keys: &[LockKey], ttl: Duration) -> Result<Option<Vec<Lease>>> {
        validate_ttl(ttl, &self.capabilities())?;
        check_set(keys)?;
        let span = tracing::debug_span!(
            "fencelock.pg.acquire_all",
            backend = BACKEND,
            keys = keys.len()
        );
        async {
            let protocol = self.db.protocol().await?;
            let owner = OwnerId::random();
            let owner_bytes = owner_bytes(owner);
            let names: Vec<&str> = keys.iter().map(LockKey::as_str).collect();
            let lock_wait = i64::try_from(self.lock_wait().as_millis())
                .unwrap_or(i64::MAX)
                .max(1);
            let args = [
                Arg::TextArray(&names),
                Arg::Bytea(&owner_bytes),
                Arg::Float8(micros(ttl)),
                Arg::Int8(lock_wait),
            ];
            let granted = self.grant_set(protocol, &args).await?;
            let Some((tokens, sent_at)) = granted else {
                return Ok(None);
            };
            if tokens.len() != keys.len() {
                return Err(crate::error::protocol(
                    BACKEND,
                    "a set in one step was answered with another number of tokens than keys",
                ));
            }
            let valid_until = valid_until(sent_at, ttl);
            let leases = keys
                .iter()
                .zip(tokens)
                .map(|(key, token)| {
                    Ok(Lease {
                        key: key.clone(),
                        owner,
                        token: FencingToken::from_backend(BACKEND, token)?,
                        ttl,
                        valid_until,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            tracing::debug!(outcome = "granted", "acquired a set");
            Ok(Some(leases))
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
            let protocol = self.db.protocol().await?;
            let token = token_param(BACKEND, lease.token)?;
            let sent_at = Instant::now();
            let (extended, superseded): (bool, bool) = timed(
                BACKEND,
                self.timeout(),
                self.db.sql().lease_extend.fetch_one(
                    protocol,
                    self.db.checked(),
                    &[
                        Arg::Text(lease.key.as_str()),
                        Arg::Bytea(&owner_bytes(lease.owner)),
                        Arg::Int8(token),
                        Arg::Float8(micros(ttl)),
                    ],
                ),
            )
            .await?;
            renewed(lease, ttl, sent_at, (extended, superseded))
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
            let protocol = self.db.protocol().await?;
            let token = token_param(BACKEND, lease.token)?;
            let live: Option<bool> = timed(
                BACKEND,
                self.timeout(),
                self.db.sql().lease_release.scalar_one(
                    protocol,
                    self.db.checked(),
                    &[
                        Arg::Text(lease.key.as_str()),
                        Arg::Bytea(&owner_bytes(lease.owner)),
                        Arg::Int8(token),
                        Arg::Float8(micros(HANDOFF_TTL)),
                    ],
                ),
            )
            .await?;
            Ok(live.unwrap_or(false))
        }
        .instrument(span)
        .await
    }

    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        let waiter = crate::wakeups::subscribe(&self.db, BACKEND, key).await;
        // Subscribed before looking, so a release in between still wakes us.
        let info = self.inspect(key).await?;
        let Some(left) = info.remaining.filter(|_| info.holder.is_some()) else {
            return Ok(());
        };
        // Also wake near the holder's deadline: an expiry (or a session ended by the server)
        // sends no notification.
        let bound = max.min(left + Duration::from_millis(1));
        match waiter {
            Some(mut waiter) => waiter.released(bound).await,
            None => tokio::time::sleep(bound).await,
        }
        Ok(())
    }

    async fn try_acquire_queued(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: OwnerId,
    ) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        let span =
            tracing::debug_span!("fencelock.pg.acquire_queued", backend = BACKEND, key = %key);
        async {
            let protocol = self.db.protocol().await?;
            // Registered before the try, so a hand-off right after it wakes this waiter.
            let wakeups = match protocol {
                Protocol::Simple => None,
                _ => self.db.wakeups(BACKEND).await.ok(),
            };
            // A first try may find the key free and unqueued, which the queued statement
            // grants as the plain try does; a waiter that tried before most likely holds a
            // place, or was handed the lock, and goes to the function at once (DESIGN 5.3).
            let first = wakeups
                .as_ref()
                .is_none_or(|wakeups| wakeups.enqueue(key, waiter, Some(Kept::Lease)));
            let statement = if first {
                &self.db.sql().lease_acquire_queued
            } else {
                &self.db.sql().lease_acquire_placed
            };
            let waiter_bytes = owner_bytes(waiter);
            let lock_wait = millis_setting(self.lock_wait());
            let args = [
                Arg::Text(key.as_str()),
                Arg::Bytea(&waiter_bytes),
                Arg::Float8(micros(ttl)),
                Arg::Text(&lock_wait),
                Arg::Float8(micros(PLACE_TTL)),
            ];
            let granted = self
                .grant_or_refusal(protocol, statement, &args, |row: &QueuedRow| {
                    ((row.0, row.1, row.2), row.3.as_deref())
                })
                .await?;
            let (token, sent_at) = match granted {
                Ok((token, _, sent_at)) => (token, sent_at),
                Err(refusal) => {
                    if let (Some(wakeups), Some(((.., held_us), _, received_at))) =
                        (wakeups, refusal)
                    {
                        // Wake by the holder's deadline: an expiry sends no notification.
                        // Counted from the answer, which the server sent after it read its
                        // clock.
                        let left = remaining(held_us).map(|left| received_at + left);
                        wakeups.refused(waiter, left);
                    }
                    return Ok(None);
                }
            };
            if let Some(wakeups) = wakeups {
                wakeups.dequeue(waiter);
            }
            tracing::debug!(token = token.get(), outcome = "granted", "acquired");
            // Granted, or a lock handed to this waiter renewed, by this statement: its
            // lease runs `ttl` from a moment after `sent_at`.
            Ok(Some(Lease {
                key: key.clone(),
                owner: waiter,
                token,
                ttl,
                valid_until: valid_until(sent_at, ttl),
            }))
        }
        .instrument(span)
        .await
    }

    async fn wait_for_turn(&self, key: &LockKey, waiter: OwnerId, max: Duration) -> Result<()> {
        crate::wakeups::turn(&self.db, BACKEND, key, waiter, max).await
    }

    async fn leave_queue(&self, key: &LockKey, waiter: OwnerId) -> Result<()> {
        let protocol = self.db.protocol().await?;
        if protocol != Protocol::Simple
            && let Ok(wakeups) = self.db.wakeups(BACKEND).await
        {
            wakeups.dequeue(waiter);
        }
        timed(
            BACKEND,
            self.timeout(),
            self.db.sql().lease_leave.execute(
                protocol,
                self.db.checked(),
                &[
                    Arg::Text(key.as_str()),
                    Arg::Bytea(&owner_bytes(waiter)),
                    Arg::Float8(micros(HANDOFF_TTL)),
                    Arg::Float8(micros(PLACE_TTL)),
                ],
            ),
        )
        .await?;
        Ok(())
    }

    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        let protocol = self.db.protocol().await?;
        let row: InspectRow = timed(
            BACKEND,
            self.timeout(),
            self.db.sql().lease_inspect.fetch_one(
                protocol,
                self.db.checked(),
                &[Arg::Text(key.as_str())],
            ),
        )
        .await?;
        lock_info(BACKEND, key, row)
    }

    async fn inspect_queue(&self, key: &LockKey) -> Result<Option<Vec<QueueEntry>>> {
        let protocol = self.db.protocol().await?;
        let rows = timed(
            BACKEND,
            self.timeout(),
            self.db.sql().lease_inspect_queue.fetch_all(
                protocol,
                self.db.checked(),
                &[Arg::Text(key.as_str())],
            ),
        )
        .await?;
        queue_entries(BACKEND, rows).map(Some)
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

    async fn pass(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        let span = tracing::debug_span!(
            "fencelock.pg.pass",
            backend = BACKEND,
            key = %lease.key,
            token = lease.token.get()
        );
        async {
            let protocol = self.db.protocol().await?;
            let token = token_param(BACKEND, lease.token)?;
            let owner = OwnerId::random();
            let lock_wait = millis_setting(self.lock_wait());
            let sent_at = Instant::now();
            let passed: std::result::Result<Option<i64>, sqlx::Error> = match tokio::time::timeout(
                self.timeout(),
                self.db.sql().lease_pass.scalar_one(
                    protocol,
                    self.db.checked(),
                    &[
                        Arg::Text(lease.key.as_str()),
                        Arg::Bytea(&owner_bytes(lease.owner)),
                        Arg::Int8(token),
                        Arg::Bytea(&owner_bytes(owner)),
                        Arg::Float8(micros(ttl)),
                        Arg::Text(&lock_wait),
                    ],
                ),
            )
            .await
            {
                Ok(passed) => passed,
                Err(_) => return Err(timed_out(BACKEND, self.timeout())),
            };
            let passed = match passed {
                Ok(passed) => passed,
                // Behind another transaction's lock on the key's rows past the statement's
                // wait: rolled back, nothing changed; the holder releases as usual.
                Err(e) if sqlstate(&e).as_deref() == Some(LOCK_NOT_AVAILABLE) => return Ok(None),
                Err(e) => return Err(map_sqlx_error(BACKEND, e)),
            };
            let Some(passed) = passed else {
                return Ok(None);
            };
            let token = FencingToken::from_backend(BACKEND, passed)?;
            tracing::debug!(token = token.get(), outcome = "passed", "passed");
            Ok(Some(Lease {
                key: lease.key.clone(),
                owner,
                token,
                ttl,
                valid_until: valid_until(sent_at, ttl),
            }))
        }
        .instrument(span)
        .await
    }

    async fn release_shared(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
        self.release_reader(lease, reader).await
    }

    async fn inspect_shared(&self, key: &LockKey) -> Result<Option<ReadPhase>> {
        self.read_phase(key).await
    }

    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        advance_token(&self.db, BACKEND, key, floor).await
    }
}

/// The columns of an inspect query: the key's last token, the holder's owner and token, the
/// time left in microseconds, and what may have been granted when the last token is unknown.
pub(crate) type InspectRow = (
    Option<i64>,
    Option<Vec<u8>>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// A [`LockInfo`] from the columns of an inspect query.
pub(crate) fn lock_info(
    backend: &'static str,
    key: &LockKey,
    (last_token, owner, token, remaining_us, granted_at_most): InspectRow,
) -> Result<LockInfo> {
    let holder = match (token, owner) {
        (Some(token), Some(owner)) => Some(fence_from(backend, token, &owner)?),
        _ => None,
    };
    let token = |t| FencingToken::from_backend(backend, t);
    let mut info = LockInfo::new(key.clone());
    info.remaining = holder.and(remaining(remaining_us));
    info.holder = holder;
    info.last_token = last_token.map(token).transpose()?;
    info.granted_at_most = granted_at_most.map(token).transpose()?;
    Ok(info)
}

/// One row of an `inspect_queue` statement: the entry's kind (0 the exclusive holder, 1 a
/// reader, 2 a queued waiter), its owner, its token (none for a waiter) and the time left in
/// microseconds.
pub(crate) type QueueRow = (i32, Vec<u8>, Option<i64>, i64);

/// The queue listed by [`LockBackend::inspect_queue`], from its statement's rows in order.
pub(crate) fn queue_entries(backend: &'static str, rows: Vec<QueueRow>) -> Result<Vec<QueueEntry>> {
    rows.into_iter()
        .map(|(kind, who, token, left_us)| {
            let role = match kind {
                0 => QueueRole::Holder,
                1 => QueueRole::Reader,
                2 => QueueRole::Waiting,
                other => {
                    return Err(protocol_error(
                        backend,
                        format!("queue entry of kind {other}"),
                    ));
                }
            };
            Ok(QueueEntry {
                owner: owner_from(backend, &who)?,
                role,
                token: token
                    .map(|t| FencingToken::from_backend(backend, t))
                    .transpose()?,
                remaining: remaining(Some(left_us)).unwrap_or_default(),
            })
        })
        .collect()
}

/// Raises the shared counter of `key` to at least `floor`.
pub(crate) async fn advance_token(
    db: &PgDatabase,
    backend: &'static str,
    key: &LockKey,
    floor: FencingToken,
) -> Result<FencingToken> {
    validate_floor(
        floor,
        i64::MAX.unsigned_abs(),
        "a Postgres token (a bigint)",
    )?;
    epoch::check_floor(floor)?;
    let floor = token_param(backend, floor)?;
    let protocol = db.protocol().await?;
    let value: i64 = timed(
        backend,
        db.operation_timeout(),
        db.sql().advance_token.scalar_one(
            protocol,
            db.pool(),
            &[Arg::Text(key.as_str()), Arg::Int8(floor)],
        ),
    )
    .await?;
    FencingToken::from_backend(backend, value)
}
