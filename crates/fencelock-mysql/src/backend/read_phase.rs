//! Shared (reader) locks: the read phase of DESIGN section 4.1, as rows of the `readers` table
//! (one per reader, carrying the phase's fence and an expiry on the server's clock). A
//! reader's grant takes the key's `GET_LOCK` only for the length of its `CALL`, which is what
//! serialises it with writers; readers then hold no session (see `sql/acquire_shared.sql`).

use std::time::Duration;

use fencelock_core::{
    Error, Fence, FencingToken, Lease, LockBackend, LockKey, LostReason, OwnerId, ReadPhase,
    Result, valid_until, validate_ttl,
};
use tokio::time::Instant;
use tracing::Instrument;

use super::{EPOCH_WAIT, KILL_WAIT, MySqlLockBackend};
use crate::codec::{fence_from, micros, owner_bytes, token_from, token_param};
use crate::error::{BACKEND, protocol, timed};
use crate::lock_name::lock_name;
use crate::session::Holder;
use crate::wakeups::Next;

/// How long a reader's grant waits for the key's `GET_LOCK` while it is held by no fencelock
/// lease: another reader's grant or a writer's acquire under way (each a matter of a moment),
/// or a plain SQL client (then the reader is refused after this wait).
const BUSY_WAIT: Duration = Duration::from_millis(50);

/// What the server knows of a key: its counter, its writer's lease and its read phase.
#[derive(Debug)]
pub(super) struct KeyState {
    pub(super) last_token: FencingToken,
    /// The writer's fence and time left, while its session holds the lock and its lease runs.
    pub(super) lease: Option<(Fence, Duration)>,
    pub(super) phase: Option<ReadPhase>,
}

/// A row of `sql/inspect.sql`.
type StateRow = (
    i64,
    Option<i64>,
    Option<Vec<u8>>,
    Option<i64>,
    i64,
    Option<i64>,
    Option<Vec<u8>>,
    Option<i64>,
    Option<i64>,
    Option<i64>,
);

/// A positive number of microseconds as a duration; `None` for none left.
fn time_left(us: Option<i64>) -> Option<Duration> {
    us.filter(|us| *us > 0)
        .map(|us| Duration::from_micros(us.unsigned_abs()))
}

impl MySqlLockBackend {
    pub(super) async fn grant_reader(
        &self,
        key: &LockKey,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        let name = lock_name(key);
        let span =
            tracing::debug_span!("fencelock.mysql.acquire_shared", backend = BACKEND, key = %key);
        async {
            let conn = self.db.session(self.timeout()).await?;
            // The call holds GET_LOCK while it runs: on an error or a cancellation `holder` is
            // dropped, closing the connection and with it any lock the call may have kept.
            let mut holder = Holder::new(conn);
            let sent_at = Instant::now();
            let rows: Vec<(i64, Option<i64>, Option<Vec<u8>>)> = timed(
                self.timeout() + KILL_WAIT + BUSY_WAIT + EPOCH_WAIT,
                sqlx::query_as(&self.db.sql().acquire_shared)
                    .bind(key.as_str().as_bytes())
                    .bind(&name)
                    .bind(&owner_bytes(reader)[..])
                    .bind(&owner_bytes(OwnerId::random())[..])
                    .bind(micros(ttl))
                    .bind(KILL_WAIT.as_secs_f64())
                    .bind(BUSY_WAIT.as_secs_f64())
                    .fetch_all(holder.conn()?),
            )
            .await?;
            match rows.as_slice() {
                [(1, Some(token), Some(owner))] => {
                    // The procedure let go of GET_LOCK on its way out.
                    holder.give_back();
                    let fence = fence_from(*token, owner)?;
                    tracing::debug!(token = fence.token.get(), "reader granted");
                    Ok(Some(Lease {
                        key: key.clone(),
                        owner: fence.owner,
                        token: fence.token,
                        ttl,
                        valid_until: valid_until(sent_at, ttl),
                    }))
                }
                [(0, _, _)] => {
                    holder.give_back();
                    tracing::debug!("held by a writer");
                    Ok(None)
                }
                _ => Err(protocol(format!("acquire_shared answered {rows:?}"))),
            }
        }
        .instrument(span)
        .await
    }

    pub(super) async fn renew_reader(
        &self,
        lease: &Lease,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Lease> {
        validate_ttl(ttl, &self.capabilities())?;
        let span = tracing::debug_span!(
            "fencelock.mysql.extend_shared",
            backend = BACKEND,
            key = %lease.key,
            token = lease.token.get()
        );
        async {
            let sent_at = Instant::now();
            let rows: Vec<(i64,)> = timed(
                self.timeout(),
                sqlx::query_as(&self.db.sql().extend_shared)
                    .bind(lease.key.as_str().as_bytes())
                    .bind(&owner_bytes(reader)[..])
                    .bind(token_param(lease.token)?)
                    .bind(&owner_bytes(lease.owner)[..])
                    .bind(micros(ttl))
                    .fetch_all(self.db.pool()),
            )
            .await?;
            match rows.as_slice() {
                [(1,)] => Ok(Lease {
                    ttl,
                    valid_until: valid_until(sent_at, ttl),
                    ..lease.clone()
                }),
                [(0,)] => Err(Error::lease_lost(&lease.key, LostReason::NotHeld)),
                _ => Err(protocol(format!("extend_shared answered {rows:?}"))),
            }
        }
        .instrument(span)
        .await
    }

    pub(super) async fn release_reader(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
        let span = tracing::debug_span!(
            "fencelock.mysql.release_shared",
            backend = BACKEND,
            key = %lease.key,
            token = lease.token.get()
        );
        async {
            let rows: Vec<(i64,)> = timed(
                self.timeout(),
                sqlx::query_as(&self.db.sql().release_shared)
                    .bind(lease.key.as_str().as_bytes())
                    .bind(&owner_bytes(reader)[..])
                    .bind(token_param(lease.token)?)
                    .bind(&owner_bytes(lease.owner)[..])
                    .fetch_all(self.db.pool()),
            )
            .await?;
            let released = match rows.as_slice() {
                [(released,)] => *released == 1,
                _ => return Err(protocol(format!("release_shared answered {rows:?}"))),
            };
            // Waiters of this process look again; those of other processes see the phase end
            // when their watcher next looks at the readers.
            // A reader's release says nothing of the writers' queue: every queued waiter of
            // this process tries, and the server grants only the first.
            self.wakeups.released(&lock_name(&lease.key), Next::Anyone);
            tracing::debug!(released, "reader released");
            Ok(released)
        }
        .instrument(span)
        .await
    }

    /// The key's state in one query; `None` for a key never granted.
    pub(super) async fn key_state(&self, key: &LockKey) -> Result<Option<KeyState>> {
        let bytes = key.as_str().as_bytes();
        let row: Option<StateRow> = timed(
            self.timeout(),
            sqlx::query_as(&self.db.sql().inspect)
                .bind(lock_name(key))
                .bind(bytes)
                .bind(bytes)
                .fetch_optional(self.db.pool()),
        )
        .await?;
        let Some((
            token,
            holder_token,
            holder_owner,
            remaining_us,
            live,
            phase_token,
            phase_owner,
            readers,
            phases,
            phase_remaining_us,
        )) = row
        else {
            return Ok(None);
        };
        let lease = match (holder_token, holder_owner, time_left(remaining_us)) {
            (Some(token), Some(owner), Some(left)) if live == 1 => {
                Some((fence_from(token, &owner)?, left))
            }
            _ => None,
        };
        let phase = match (phase_token, phase_owner, readers, phases) {
            (Some(_), Some(_), _, Some(phases)) if phases != 1 => {
                return Err(protocol(format!(
                    "the live readers of {key} carry {phases} phase fences, not one"
                )));
            }
            (Some(token), Some(owner), Some(readers), _) => {
                match time_left(phase_remaining_us) {
                    Some(remaining) => Some(ReadPhase {
                        fence: fence_from(token, &owner)?,
                        readers: usize::try_from(readers).unwrap_or(usize::MAX),
                        remaining,
                    }),
                    // Its last reader runs out in this very microsecond.
                    None => None,
                }
            }
            _ => None,
        };
        Ok(Some(KeyState {
            last_token: token_from(token)?,
            lease,
            phase,
        }))
    }
}
