//! `MySqlLockBackend`: `GET_LOCK` session locks on connections held for the life of a lease,
//! expired on the server's clock, with tokens from a durable epoch over volatile counters.

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{
    Capabilities, Error, FencingToken, Lease, LockBackend, LockInfo, LockKey, LockKinds,
    LostReason, OwnerId, QueueEntry, QueueRole, ReadPhase, Result, TimeAuthority, WakeUp,
    async_trait, valid_until, validate_floor, validate_ttl,
};
use tokio::time::Instant;
use tracing::Instrument;

use crate::codec::{idle_seconds, micros, owner_bytes, owner_from, token_from, token_param};
use crate::database::MySqlDatabase;
use crate::epoch;
use crate::error::{BACKEND, protocol, timed};
use crate::lock_name::lock_name;
use crate::session::{Holder, Session, Sessions};
use crate::wakeups::{Next, PLACE_TTL, Wakeups, keep_places, watch_key};

mod read_phase;

/// The longest ttl: `wait_timeout`, which the server uses to end a silent holder's session,
/// takes at most 31,536,000 seconds.
const MAX_TTL: Duration = Duration::from_secs(31_536_000);

/// How long an acquire waits, on the server, for a session it ended with KILL to let go.
const KILL_WAIT: Duration = Duration::from_millis(500);

/// How long a queued try waits, on the server, for a holder of the lock without a lease: the
/// watcher sessions of waiters (`wait_v5`) hold it for an instant after each release.
const BUSY_WAIT: Duration = Duration::from_millis(50);

/// Room, beyond the operation time-out, for a grant that starts a new token epoch: the wait
/// for another session starting one (at most 10 s on the server) and a durable commit.
const EPOCH_WAIT: Duration = Duration::from_secs(1);

/// The server's refusal of a token floor (SQLSTATE `FL006`, for a floor the client's own
/// check let through) as the [`Error::InvalidConfig`] it is.
fn floor_refused(error: Error) -> Error {
    match error {
        Error::Backend {
            message, source, ..
        } if message.contains(epoch::FLOOR_SQLSTATE) => Error::InvalidConfig { message, source },
        other => other,
    }
}

/// Locks as MySQL/MariaDB user-level locks (`GET_LOCK`), with fencing tokens.
///
/// Each grant takes a connection out of the database's session pool and keeps it for the life
/// of the lease: the lock belongs to that session, and the server lets go of it when the
/// session ends for any reason (release, crash, `KILL`, network loss). One `CALL` per
/// operation does the rest on the server:
///
/// - **acquire**: `GET_LOCK(name, 0)`, then, on a grant, the key's next token is taken and
///   the lease is recorded until `UTC_TIMESTAMP(6) + ttl`, both in MEMORY tables, which a
///   restart empties as it ends every session. A token is `epoch << 32 | counter`: the
///   per-key counters need no log flush, and the epoch, one InnoDB row, is committed (and
///   flushed) once per loss of the counters, by the first grant after it.
/// - **expiry on the server's clock**: a holder that goes silent (paused, partitioned) keeps
///   its session, so the lock has to be taken from it. The next acquire that finds the lock
///   held by a fencelock session whose lease has run out on the server's clock claims that
///   lease (one conditional `UPDATE` that the holder's extend or release cannot also win), ends
///   the session with `KILL` and takes the lock. With no contender, the server itself ends the
///   session after `wait_timeout`, set to the ttl rounded up to whole seconds, so plain SQL
///   clients waiting in `GET_LOCK` get the lock too. Ending other sessions needs the same
///   MySQL account for every fencelock client of a key, or the `CONNECTION ADMIN` privilege.
/// - **extend** moves the expiry on the holding session (a lease that already ran out is never
///   revived); **release** deletes it and calls `RELEASE_LOCK`.
/// - **waiting**: one session per key and process blocks in `GET_LOCK` on the server, so a
///   release wakes waiters at once.
/// - **shared (reader) locks**: a reader is a row of a MEMORY table with the read phase's
///   fence and an expiry on the server's clock. Its grant takes `GET_LOCK` for the length of
///   its `CALL` only, which orders it with writers (a writer's acquire is refused while a
///   reader is live); readers hold no session, so plain SQL `GET_LOCK` callers are not
///   excluded by them. DESIGN.md section 5.4 has the safety argument.
///
/// Keys map to lock names with [`lock_name`](crate::lock_name): short keys are used as they
/// are, so a lock taken here excludes `SELECT GET_LOCK('the-key', 10)` in any client; long keys
/// are hashed. Tokens keep increasing across server restarts and crashes (the next grant
/// starts a new durable epoch); held locks do not survive them. A lease can be
/// extended and released only through the backend (or a clone of it) that granted it, where
/// its connection lives.
#[derive(Debug, Clone)]
pub struct MySqlLockBackend {
    db: MySqlDatabase,
    sessions: Arc<Sessions>,
    wakeups: Arc<Wakeups>,
}

impl MySqlLockBackend {
    /// A `GET_LOCK` backend on `db`.
    pub fn new(db: &MySqlDatabase) -> Self {
        MySqlLockBackend {
            db: db.clone(),
            sessions: Arc::default(),
            wakeups: Arc::default(),
        }
    }

    /// The database this backend uses.
    pub fn database(&self) -> &MySqlDatabase {
        &self.db
    }

    /// How many leases this backend (and its clones) currently holds a session for.
    pub fn held_count(&self) -> usize {
        self.sessions.len()
    }

    /// The connection ids (`CONNECTION_ID()`, as `SHOW PROCESSLIST` and `IS_USED_LOCK` show
    /// them) of the sessions holding this backend's leases.
    pub fn session_ids(&self) -> Vec<u64> {
        self.sessions.ids()
    }

    fn timeout(&self) -> Duration {
        self.db.operation_timeout()
    }

    /// A try, queued as `waiter` or not (`None`): one `acquire_v6` call.
    async fn acquire(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: Option<OwnerId>,
    ) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        self.sessions.sweep_abandoned();
        let name = lock_name(key);
        let span = tracing::debug_span!(
            "fencelock.mysql.acquire",
            backend = BACKEND,
            key = %key,
            queued = waiter.is_some()
        );
        async {
            let owner = OwnerId::random();
            let conn = self.db.session(self.timeout()).await?;
            // On an error or a cancellation `holder` is dropped, closing the connection and
            // with it any lock the call may have taken.
            let mut holder = Holder::new(conn);
            let sent_at = Instant::now();
            let rows: Vec<(i64, Option<i64>, i64)> = timed(
                self.timeout() + KILL_WAIT + BUSY_WAIT + EPOCH_WAIT,
                sqlx::query_as(&self.db.sql().acquire)
                    .bind(key.as_str().as_bytes())
                    .bind(&name)
                    .bind(&owner_bytes(owner)[..])
                    .bind(micros(ttl))
                    .bind(idle_seconds(ttl))
                    .bind(KILL_WAIT.as_secs_f64())
                    .bind(waiter.map(|waiter| owner_bytes(waiter).to_vec()))
                    .bind(waiter.map(|_| micros(PLACE_TTL)))
                    .bind(BUSY_WAIT.as_secs_f64())
                    .fetch_all(holder.conn()?),
            )
            .await?;
            let replied_at = Instant::now();
            match rows.first() {
                Some(&(1, Some(token), session)) => {
                    let token = token_from(token)?;
                    let lease = Lease {
                        key: key.clone(),
                        owner,
                        token,
                        ttl,
                        valid_until: valid_until(sent_at, ttl),
                    };
                    let id = u64::try_from(session).unwrap_or_default();
                    self.sessions
                        .insert(&lease, Session::new(holder, id, replied_at + ttl));
                    tracing::debug!(token = token.get(), session = id, "granted");
                    Ok(Some(lease))
                }
                Some(&(0, _, _)) => {
                    holder.give_back();
                    tracing::debug!("held by another session");
                    Ok(None)
                }
                _ => Err(protocol(format!("acquire answered {rows:?}"))),
            }
        }
        .instrument(span)
        .await
    }
}

#[async_trait]
impl LockBackend for MySqlLockBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities::new(
            self.db.tokens(),
            TimeAuthority::Server,
            WakeUp::Notify,
            MAX_TTL,
        )
        .with_locks_survive_restart(false)
        .with_kinds(LockKinds::GENERIC.with_shared())
        .with_fair(true)
        .with_max_held(self.db.session_pool_size())
    }

    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        self.acquire(key, ttl, None).await
    }

    async fn try_acquire_queued(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: OwnerId,
    ) -> Result<Option<Lease>> {
        // Registered before the try, so a release right after it that names this waiter
        // wakes its next wait.
        self.wakeups.turn(key, &lock_name(key), waiter);
        let granted = self.acquire(key, ttl, Some(waiter)).await?;
        if granted.is_some() {
            self.wakeups.forget(waiter);
        }
        Ok(granted)
    }

    async fn wait_for_turn(&self, key: &LockKey, waiter: OwnerId, max: Duration) -> Result<()> {
        if max.is_zero() {
            return Ok(());
        }
        let name = lock_name(key);
        // Registered before the watcher can start, so its wake-up cannot be missed; one sent
        // since the waiter's last try is kept, and this wait returns at once.
        let turn = self.wakeups.turn(key, &name, waiter);
        let watch = self.wakeups.watch(&name);
        if watch.claim() {
            tokio::spawn(watch_key(
                self.db.clone(),
                Arc::downgrade(&self.wakeups),
                key.clone(),
                name,
                Arc::downgrade(&watch),
            ));
        }
        if self.wakeups.claim_keeper() {
            tokio::spawn(keep_places(self.db.clone(), Arc::downgrade(&self.wakeups)));
        }
        // The keeper keeps the place while the waiter waits; while it fails, the waiter is
        // back in time for its own next try to keep it.
        let (_parked, sleep) = self.wakeups.park(waiter);
        let _ = tokio::time::timeout(max.min(sleep), turn.notified()).await;
        drop(watch);
        Ok(())
    }

    async fn leave_queue(&self, key: &LockKey, waiter: OwnerId) -> Result<()> {
        self.wakeups.forget(waiter);
        let name = lock_name(key);
        let rows: Vec<(i64, Option<Vec<u8>>, i64)> = timed(
            self.timeout(),
            sqlx::query_as(&self.db.sql().leave)
                .bind(key.as_str().as_bytes())
                .bind(&name)
                .bind(&owner_bytes(waiter)[..])
                .fetch_all(self.db.pool()),
        )
        .await?;
        match rows.as_slice() {
            [(had, head, free)] => {
                tracing::debug!(had = *had == 1, "left the queue");
                if *free == 1 {
                    // The lock is free: the waiter that is first now may be the one that was
                    // behind the leaver, so it is its turn.
                    self.wakeups
                        .wake_turn(&name, Next::from_head(head.as_deref())?);
                }
                Ok(())
            }
            _ => Err(protocol(format!("leave answered {rows:?}"))),
        }
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        validate_ttl(ttl, &self.capabilities())?;
        let span = tracing::debug_span!(
            "fencelock.mysql.extend",
            backend = BACKEND,
            key = %lease.key,
            token = lease.token.get()
        );
        async {
            let Some(session) = self.sessions.get(lease) else {
                return Err(Error::lease_lost(&lease.key, LostReason::NotHeld));
            };
            let mut slot = session.holder.lock().await;
            let Some(holder) = slot.as_mut() else {
                return Err(Error::lease_lost(&lease.key, LostReason::NotHeld));
            };
            let sent_at = Instant::now();
            let outcome: Result<Vec<(i64,)>> = async {
                timed(
                    self.timeout(),
                    sqlx::query_as(&self.db.sql().extend)
                        .bind(lease.key.as_str().as_bytes())
                        .bind(lock_name(&lease.key))
                        .bind(&owner_bytes(lease.owner)[..])
                        .bind(token_param(lease.token)?)
                        .bind(micros(ttl))
                        .bind(idle_seconds(ttl))
                        .fetch_all(holder.conn()?),
                )
                .await
            }
            .await;
            let lost = |reason| {
                // Closing the session lets go of the lock, so the lease is over either way.
                self.sessions.remove(lease);
                Error::lease_lost(&lease.key, reason)
            };
            match outcome.as_deref() {
                Ok([(1,)]) => {
                    session.set_deadline(Instant::now() + ttl);
                    Ok(Lease {
                        ttl,
                        valid_until: valid_until(sent_at, ttl),
                        ..lease.clone()
                    })
                }
                Ok(_) => {
                    slot.take();
                    Err(lost(LostReason::NotHeld))
                }
                Err(error) => {
                    tracing::debug!(%error, "holding session failed");
                    slot.take();
                    Err(lost(LostReason::SessionEnded))
                }
            }
        }
        .instrument(span)
        .await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let span = tracing::debug_span!(
            "fencelock.mysql.release",
            backend = BACKEND,
            key = %lease.key,
            token = lease.token.get()
        );
        async {
            let Some(session) = self.sessions.remove(lease) else {
                return Ok(false);
            };
            let Some(mut holder) = session.holder.lock().await.take() else {
                return Ok(false);
            };
            let name = lock_name(&lease.key);
            let outcome: Result<Vec<(i64, i64, Option<Vec<u8>>)>> = async {
                timed(
                    self.timeout(),
                    sqlx::query_as(&self.db.sql().release)
                        .bind(lease.key.as_str().as_bytes())
                        .bind(&name)
                        .bind(&owner_bytes(lease.owner)[..])
                        .bind(token_param(lease.token)?)
                        .fetch_all(holder.conn()?),
                )
                .await
            }
            .await;
            // Whose turn it is once the lock is let go: unknown when the call failed.
            let mut next = Next::Anyone;
            let released = match outcome {
                Ok(rows) => match rows.as_slice() {
                    [(1, 1, head)] => {
                        next = Next::from_head(head.as_deref()).unwrap_or(Next::Anyone);
                        holder.give_back();
                        true
                    }
                    // Expired on the server, or no longer this session's: closing the
                    // connection (dropping `holder`) makes sure it holds nothing.
                    [(_, _, head)] => {
                        next = Next::from_head(head.as_deref()).unwrap_or(Next::Anyone);
                        false
                    }
                    _ => return Err(protocol(format!("release answered {rows:?}"))),
                },
                // The connection failed after the lease's deadline: the server has ended the
                // session (its `wait_timeout` is the deadline), and the lock went with it.
                Err(Error::Unavailable {
                    source: Some(_), ..
                }) if session.deadline() <= Instant::now() => false,
                // Before it, the release may have run and its answer been lost, or the session
                // may have ended first (a KILL): unknown, so said as the error it is, never as
                // a lock that was no longer held. Dropping `holder` closes the session, which
                // lets go of the lock if it still held it.
                Err(error) => return Err(error),
            };
            self.wakeups.released(&name, next);
            tracing::debug!(released, "released");
            Ok(released)
        }
        .instrument(span)
        .await
    }

    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        if max.is_zero() {
            return Ok(());
        }
        let name = lock_name(key);
        let watch = self.wakeups.watch(&name);
        let woken = watch.notify.notified();
        tokio::pin!(woken);
        // Registered before the watcher can start, so its first wake-up cannot be missed.
        woken.as_mut().enable();
        if watch.claim() {
            tokio::spawn(watch_key(
                self.db.clone(),
                Arc::downgrade(&self.wakeups),
                key.clone(),
                name,
                Arc::downgrade(&watch),
            ));
        }
        let _ = tokio::time::timeout(max, woken).await;
        Ok(())
    }

    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        let state = self.key_state(key).await?;
        let holder = state.as_ref().and_then(|state| {
            let phase = state.phase.as_ref().map(|p| (p.fence, p.remaining));
            state.lease.or(phase)
        });
        // No live lease or read phase: the name may still be held by a plain `GET_LOCK`
        // (which the lock excludes), and then the lock is not free.
        let unfenced_holder = match holder {
            Some(_) => None,
            None => timed(
                self.timeout(),
                sqlx::query_as::<_, (Option<i64>,)>("SELECT CAST(IS_USED_LOCK(?) AS SIGNED)")
                    .bind(lock_name(key))
                    .fetch_one(self.db.pool()),
            )
            .await?
            .0
            .map(|id| {
                format!(
                    "MySQL connection id {id} (no fencelock lease: a plain GET_LOCK on the \
                     same name)"
                )
            }),
        };
        let mut info = LockInfo::new(key.clone());
        info.holder = holder.map(|(fence, _)| fence);
        info.remaining = holder.map(|(_, left)| left);
        info.last_token = state.map(|state| state.last_token);
        info.unfenced_holder = unfenced_holder;
        Ok(info)
    }

    async fn inspect_queue(&self, key: &LockKey) -> Result<Option<Vec<QueueEntry>>> {
        let holder = self.key_state(key).await?.and_then(|state| state.lease);
        let bytes = key.as_str().as_bytes();
        let rows: Vec<(i64, Vec<u8>, Option<i64>, i64)> = timed(
            self.timeout(),
            sqlx::query_as(&self.db.sql().inspect_queue)
                .bind(bytes)
                .bind(bytes)
                .fetch_all(self.db.pool()),
        )
        .await?;
        let left = |us: i64| Duration::from_micros(us.max(0).unsigned_abs());
        let mut entries = Vec::with_capacity(rows.len() + 1);
        if let Some((fence, remaining)) = holder {
            entries.push(QueueEntry {
                owner: fence.owner,
                role: QueueRole::Holder,
                token: Some(fence.token),
                remaining,
            });
        }
        for (kind, who, token, left_us) in rows {
            let role = match kind {
                0 => QueueRole::Reader,
                1 => QueueRole::Waiting,
                other => return Err(protocol(format!("queue entry of kind {other}"))),
            };
            entries.push(QueueEntry {
                owner: owner_from(&who)?,
                role,
                token: token.map(token_from).transpose()?,
                remaining: left(left_us),
            });
        }
        Ok(Some(entries))
    }

    async fn try_acquire_shared(
        &self,
        key: &LockKey,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        self.sessions.sweep_abandoned();
        self.grant_reader(key, reader, ttl).await
    }

    async fn extend_shared(&self, lease: &Lease, reader: OwnerId, ttl: Duration) -> Result<Lease> {
        self.renew_reader(lease, reader, ttl).await
    }

    async fn release_shared(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
        self.release_reader(lease, reader).await
    }

    async fn inspect_shared(&self, key: &LockKey) -> Result<Option<ReadPhase>> {
        Ok(self.key_state(key).await?.and_then(|state| state.phase))
    }

    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        validate_floor(floor, i64::MAX.unsigned_abs(), "a MySQL bigint counter")?;
        epoch::check_floor(floor)?;
        let floor = token_param(floor)?;
        let rows: Vec<(i64,)> = timed(
            // A floor in a later epoch makes that epoch durable first: one commit's flush.
            self.timeout() + EPOCH_WAIT,
            sqlx::query_as(&self.db.sql().advance_token)
                .bind(key.as_str().as_bytes())
                .bind(floor)
                .fetch_all(self.db.pool()),
        )
        .await
        .map_err(floor_refused)?;
        match rows.as_slice() {
            [(token,)] => token_from(*token),
            _ => Err(protocol(format!("advance_token answered {rows:?}"))),
        }
    }
}
