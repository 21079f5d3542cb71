//! The held sessions of [`PgAdvisoryBackend`]: a connection per lease (exclusive or a
//! reader's), filed by lease or by reader, renewed, released and watched the same way.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};
use std::time::Duration;

use fencelock_core::{
    Error, Fence, FencingToken, Lease, LockKey, LostReason, OwnerId, Result, valid_until,
};
use sqlx::pool::PoolConnection;
use sqlx::postgres::PgArguments;
use sqlx::query::{QueryAs, QueryScalar};
use sqlx::{PgConnection, Postgres};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{BACKEND, PgAdvisoryBackend};
use crate::codec::millis_setting;
use crate::error::timed;

/// How long after its last known deadline an abandoned lease's connection is closed.
const ABANDONED_GRACE: Duration = Duration::from_secs(1);
/// The longest pause of the session watch between two pings of a holding session.
const WATCH_EVERY: Duration = Duration::from_millis(500);
/// The shortest pause of the session watch (leases with a short ttl).
const WATCH_AT_LEAST: Duration = Duration::from_millis(50);

pub(super) type LeaseId = (LockKey, OwnerId, FencingToken);

/// Where a held session is filed: an exclusive lease, or one reader of a key.
#[derive(Debug, Clone)]
pub(super) enum Slot {
    Lease(LeaseId),
    Reader(LockKey, OwnerId),
}

/// The sessions a backend (and its clones) holds.
#[derive(Debug, Default)]
pub(super) struct Sessions {
    leases: HashMap<LeaseId, Arc<Held>>,
    /// Readers by key, then by reader id: a read phase's readers share one fence, so the
    /// fence does not tell them apart.
    readers: HashMap<LockKey, HashMap<OwnerId, Arc<Held>>>,
}

impl Sessions {
    pub(super) fn get(&self, slot: &Slot) -> Option<Arc<Held>> {
        match slot {
            Slot::Lease(id) => self.leases.get(id).cloned(),
            Slot::Reader(key, reader) => self.readers.get(key)?.get(reader).cloned(),
        }
    }

    pub(super) fn insert(&mut self, slot: Slot, held: Arc<Held>) {
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
    pub(super) fn remove(&mut self, slot: &Slot, only: Option<&Arc<Held>>) -> Option<Arc<Held>> {
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

    pub(super) fn count(&self) -> usize {
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
pub(super) struct Held {
    pub(super) holder: tokio::sync::Mutex<Option<Holder>>,
    /// The fence of the lease (for a reader, its phase's).
    pub(super) fence: Fence,
    /// When the server will end the session if nothing is sent on it.
    deadline: Mutex<Instant>,
    /// Cancelled when this process learns the lease is gone (the session ended, its deadline
    /// passed, the database was closed), for [`LockBackend::watch_lost`].
    pub(super) lost: CancellationToken,
    pub(super) reason: OnceLock<LostReason>,
}

impl Held {
    pub(super) fn new(holder: Holder, lease: &Lease, deadline: Instant) -> Self {
        Held {
            holder: tokio::sync::Mutex::new(Some(holder)),
            fence: lease.fence(),
            deadline: Mutex::new(deadline),
            lost: CancellationToken::new(),
            reason: OnceLock::new(),
        }
    }

    fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(super) fn renewed(&self, deadline: Instant) {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner) = deadline;
    }

    pub(super) fn mark_lost(&self, reason: LostReason) {
        let _ = self.reason.set(reason);
        self.lost.cancel();
    }

    /// Waits until the lease is lost, and says why.
    pub(super) async fn lost(&self) -> LostReason {
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
pub(super) struct Holder(pub(super) Option<PoolConnection<Postgres>>);

impl Holder {
    pub(super) fn conn(&mut self) -> Result<&mut PgConnection> {
        match self.0.as_mut() {
            Some(conn) => Ok(&mut **conn),
            None => Err(crate::error::protocol(
                BACKEND,
                "holder connection already gone",
            )),
        }
    }

    pub(super) fn give_back(mut self) {
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

pub(super) fn lease_id(lease: &Lease) -> LeaseId {
    (lease.key.clone(), lease.owner, lease.token)
}

/// Whether `error` is the server saying it ended the session before running the statement:
/// terminated by an administrator or a crash shutdown, or timed out idle (SQLSTATE 57P01,
/// 57P02, 57P05, 25P03).
fn ended_by_server(error: &Error) -> bool {
    let (Error::Unavailable { source, .. } | Error::Backend { source, .. }) = error else {
        return false;
    };
    source
        .as_deref()
        .and_then(|source| source.downcast_ref::<sqlx::Error>())
        .and_then(sqlx::Error::as_database_error)
        .and_then(|db| db.code())
        .is_some_and(|code| matches!(&*code, "57P01" | "57P02" | "57P05" | "25P03"))
}

/// Whether `error` is the holding session's connection failing: the session may have ended
/// (and with it the lock), or a request have run and its answer been lost.
pub(super) fn session_gone(error: &Error) -> bool {
    match error {
        Error::Unavailable { source, .. } => source.is_some(),
        _ => false,
    }
}

/// A renewal statement on a holding session: one row (`armed`) while the session still
/// records the lease, none when its record was taken over.
pub(super) type Renewal<'q> = QueryScalar<'q, Postgres, Option<String>, PgArguments>;

/// A pass statement on a holding session: the new token (none: not passed), `armed`.
pub(super) type Pass<'q> = QueryAs<'q, Postgres, (Option<i64>, Option<String>), PgArguments>;

/// A release statement on a holding session: `unlocked`, `forgotten`, `disarmed`.
pub(super) type Unlock<'q> = QueryAs<'q, Postgres, (bool, bool, String), PgArguments>;

impl PgAdvisoryBackend {
    /// Closes the connections of leases whose holders dropped them without releasing: past
    /// their deadline the server has ended (or is about to end) those sessions anyway.
    pub(super) fn sweep_abandoned(&self) {
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
    pub(super) fn forget(&self, slot: &Slot, held: &Arc<Held>) {
        self.sessions().remove(slot, Some(held));
    }

    /// Files a session that was just granted `lease` under `slot` and starts its watch.
    pub(super) fn hold(&self, slot: Slot, holder: Holder, lease: &Lease, deadline: Instant) {
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
    pub(super) async fn renew(
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
                held.renewed(Instant::now() + ttl);
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

    /// Passes `lease` to `owner` on its own session, by `pass` (`advisory_pass.sql`; DESIGN
    /// 4.0.2): the session keeps the advisory lock and is filed under the new lease, with a
    /// watch of its own; the old lease's entry ends as released. `None` when nothing was
    /// passed: the session is filed under `lease` as it was. On an error the session is
    /// closed, which frees the lock whether or not the pass ran.
    pub(super) async fn pass_session(
        &self,
        lease: &Lease,
        owner: OwnerId,
        ttl: Duration,
        pass: Pass<'_>,
    ) -> Result<Option<Lease>> {
        let slot = Slot::Lease(lease_id(lease));
        let Some(held) = self.sessions().remove(&slot, None) else {
            return Ok(None);
        };
        let mut session = held.holder.lock().await;
        let Some(mut holder) = session.take() else {
            return Ok(None);
        };
        let sent_at = Instant::now();
        let outcome: Result<(Option<i64>, Option<String>)> =
            async { timed(BACKEND, self.timeout(), pass.fetch_one(holder.conn()?)).await }.await;
        let token = match outcome {
            Ok((None, _)) => {
                *session = Some(holder);
                drop(session);
                self.sessions().insert(slot, held);
                return Ok(None);
            }
            Ok((Some(token), _)) => FencingToken::from_backend(BACKEND, token),
            Err(error) => Err(error),
        };
        drop(session);
        let token = match token {
            Ok(token) => token,
            Err(error) => {
                // Dropping `holder` closes the session.
                held.mark_lost(LostReason::SessionEnded);
                return Err(error);
            }
        };
        held.mark_lost(LostReason::Released);
        let passed = Lease {
            key: lease.key.clone(),
            owner,
            token,
            ttl,
            valid_until: valid_until(sent_at, ttl),
        };
        self.hold(
            Slot::Lease(lease_id(&passed)),
            holder,
            &passed,
            Instant::now() + ttl,
        );
        Ok(Some(passed))
    }

    /// Runs `unlock` on the session of `held`, already taken out of the map: `Ok(true)` when
    /// it gave the lock back (the connection returns to the pool), `Ok(false)` when the
    /// session no longer held it.
    pub(super) async fn unlock(&self, held: Arc<Held>, unlock: Unlock<'_>) -> Result<bool> {
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
            // The server said it ended the session (terminated, timed out), or the connection
            // failed after the lease's deadline, when the server has ended the session (its
            // idle timeout is the deadline): the lock went with it.
            Err(error)
                if ended_by_server(&error)
                    || (session_gone(&error) && held.deadline() <= Instant::now()) =>
            {
                Ok(false)
            }
            // Before it, the release may have run and its answer been lost, or the session
            // may have ended first: unknown, so said as the error it is, never as a lock
            // that was no longer held. Dropping `holder` closes the session, which frees the
            // lock if it still held it.
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
