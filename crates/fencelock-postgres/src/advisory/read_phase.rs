//! Shared (reader) locks of [`PgAdvisoryBackend`]: each reader holds the key's advisory lock in
//! shared mode on a session of its own, and the read phase's one fence comes from
//! `fencelock_advisory_read` (migration 7), which joins the live phase or starts a new one
//! under the key's phase row lock. DESIGN.md section 5.3 has the rule and why it is safe.

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{
    Error, Lease, LockBackend, LockKey, LostReason, OwnerId, ReadPhase, Result, valid_until,
    validate_ttl,
};
use tokio::time::Instant;
use tracing::Instrument;

use super::sessions::{Held, Holder, Slot};
use super::{BACKEND, PgAdvisoryBackend};
use crate::PgBackendKind;
use crate::codec::{fence_from, micros, millis_setting, owner_bytes, remaining, token_param};
use crate::epoch::{self, Grant};
use crate::error::{map_sqlx_error, sqlstate, timed, timed_out};
use crate::exec::{Arg, Protocol};

/// The longest a reader's grant waits for its key's phase row or counter row (another
/// reader's grant, a writer's token): `lock_timeout` for that statement only. Past it the
/// try reports the key held, and nothing is left waiting on the server.
const READ_LOCK_WAIT: Duration = Duration::from_millis(500);
/// SQLSTATE of a lock wait cut short by `lock_timeout`.
const LOCK_NOT_AVAILABLE: &str = "55P03";

/// One row of `advisory_read_acquire.sql`: got, token, owner, armed, live, exhausted, and
/// the schema's mechanism.
type ReadGrant = (
    bool,
    Option<i64>,
    Option<Vec<u8>>,
    Option<String>,
    Option<i64>,
    bool,
    Option<String>,
);

/// One row of `advisory_read_inspect.sql`: owner, token, readers, remaining_us, plain_pid.
type PhaseRow = (Option<Vec<u8>>, Option<i64>, i64, Option<i64>, Option<i32>);

impl PgAdvisoryBackend {
    /// [`LockBackend::try_acquire_shared`].
    pub(super) async fn join_read_phase(
        &self,
        key: &LockKey,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        self.db.advisory_allowed().await?;
        self.sweep_abandoned();
        let lock_id = self.db.advisory_lock_id(key);
        let span = tracing::debug_span!(
            "fencelock.pg.acquire_shared",
            backend = BACKEND,
            key = %key,
            lock_id
        );
        async {
            let slot = Slot::Reader(key.clone(), reader);
            // A reader of this backend asking again renews its place in its phase.
            let existing = self.sessions().get(&slot);
            if let Some(held) = existing {
                let lease = Lease {
                    key: key.clone(),
                    owner: held.fence.owner,
                    token: held.fence.token,
                    ttl,
                    valid_until: Instant::now(),
                };
                match self.renew_reader(&slot, &held, &lease, reader, ttl).await {
                    Ok(renewed) => return Ok(Some(renewed)),
                    // Its session is gone: a grant of its own, as for a new reader.
                    Err(Error::LeaseLost { .. }) => {}
                    Err(error) => return Err(error),
                }
            }
            let conn = timed(BACKEND, self.timeout(), self.db.holders().acquire()).await?;
            let mut holder = Holder(Some(conn));
            let phase_owner = owner_bytes(OwnerId::random());
            let reader_bytes = owner_bytes(reader);
            let lock_wait = millis_setting(READ_LOCK_WAIT.min(self.timeout() / 2));
            for _ in 0..epoch::TRIES {
                let sent_at = Instant::now();
                // On error or cancellation `holder` is dropped, closing the connection and
                // with it the shared lock the statement may have taken.
                let outcome = tokio::time::timeout(
                    self.timeout(),
                    sqlx::query_as::<_, ReadGrant>(self.db.sql().advisory_read_acquire.text())
                        .bind(lock_id)
                        .bind(key.as_str())
                        .bind(&reader_bytes[..])
                        .bind(&phase_owner[..])
                        .bind(micros(ttl))
                        .bind(millis_setting(ttl))
                        .bind(&lock_wait)
                        .fetch_one(holder.conn()?),
                )
                .await;
                let (got, token, owner, _armed, live, exhausted, bound) = match outcome {
                    Ok(Ok(row)) => row,
                    // Another reader's grant (or a writer's token) held a row of the key for
                    // longer than the bound: report the key held. The session may hold the
                    // shared lock, so `holder` is dropped, closing it.
                    Ok(Err(e)) if sqlstate(&e).as_deref() == Some(LOCK_NOT_AVAILABLE) => {
                        tracing::debug!(outcome = "busy", "not acquired");
                        return Ok(None);
                    }
                    Ok(Err(e)) => return Err(map_sqlx_error(BACKEND, e)),
                    Err(_) => return Err(timed_out(BACKEND, self.timeout())),
                };
                let replied_at = Instant::now();
                if let Err(error) = self
                    .db
                    .check_bound(PgBackendKind::Advisory, bound.as_deref())
                {
                    // The function did not run: no shared lock was taken.
                    holder.give_back();
                    return Err(error);
                }
                if !got {
                    holder.give_back();
                    tracing::debug!(outcome = "held", "not acquired");
                    return Ok(None);
                }
                match Grant::from_columns(token, live, exhausted) {
                    Grant::Token(token) => {
                        let owner = owner.ok_or_else(|| {
                            crate::error::protocol(BACKEND, "a reader's grant without an owner")
                        })?;
                        let fence = fence_from(BACKEND, token, &owner)?;
                        let lease = Lease {
                            key: key.clone(),
                            owner: fence.owner,
                            token: fence.token,
                            ttl,
                            valid_until: valid_until(sent_at, ttl),
                        };
                        self.hold(slot, holder, &lease, replied_at + ttl);
                        tracing::debug!(token = token, outcome = "granted", "acquired");
                        return Ok(Some(lease));
                    }
                    // Without a token the statement gave the shared lock back and recorded
                    // no phase and no reader: the next try takes the lock once, not twice.
                    Grant::NewEpoch(seen) => {
                        epoch::start_new(
                            &self.db,
                            BACKEND,
                            Protocol::Prepared,
                            self.db.checked(),
                            seen,
                        )
                        .await?;
                    }
                    // Not expected from one function with fresh snapshots; ask again.
                    Grant::Refused => {}
                }
            }
            Err(epoch::no_token(BACKEND))
        }
        .instrument(span)
        .await
    }

    /// [`LockBackend::extend_shared`].
    pub(super) async fn extend_reader(
        &self,
        lease: &Lease,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Lease> {
        validate_ttl(ttl, &self.capabilities())?;
        let span = tracing::debug_span!(
            "fencelock.pg.extend_shared",
            backend = BACKEND,
            key = %lease.key,
            token = lease.token.get()
        );
        async {
            let slot = Slot::Reader(lease.key.clone(), reader);
            let held = self
                .sessions()
                .get(&slot)
                .filter(|held| held.fence == lease.fence());
            let Some(held) = held else {
                return Err(Error::lease_lost(&lease.key, LostReason::NotHeld));
            };
            self.renew_reader(&slot, &held, lease, reader, ttl).await
        }
        .instrument(span)
        .await
    }

    async fn renew_reader(
        &self,
        slot: &Slot,
        held: &Arc<Held>,
        lease: &Lease,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Lease> {
        let reader = owner_bytes(reader);
        let owner = owner_bytes(lease.owner);
        let renewal = sqlx::query_scalar(self.db.sql().advisory_read_extend.text())
            .bind(lease.key.as_str())
            .bind(&reader[..])
            .bind(&owner[..])
            .bind(token_param(BACKEND, lease.token)?)
            .bind(micros(ttl))
            .bind(millis_setting(ttl));
        self.renew(slot, held, lease, ttl, renewal).await
    }

    /// [`LockBackend::release_shared`].
    pub(super) async fn leave_read_phase(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
        let span = tracing::debug_span!(
            "fencelock.pg.release_shared",
            backend = BACKEND,
            key = %lease.key,
            token = lease.token.get()
        );
        async {
            let slot = Slot::Reader(lease.key.clone(), reader);
            let held = {
                let mut sessions = self.sessions();
                match sessions.get(&slot) {
                    Some(held) if held.fence == lease.fence() => {
                        sessions.remove(&slot, Some(&held))
                    }
                    _ => None,
                }
            };
            let Some(held) = held else {
                return Ok(false);
            };
            let reader = owner_bytes(reader);
            let owner = owner_bytes(lease.owner);
            let unlock = sqlx::query_as(self.db.sql().advisory_read_release.text())
                .bind(self.db.advisory_lock_id(&lease.key))
                .bind(lease.key.as_str())
                .bind(&reader[..])
                .bind(&owner[..])
                .bind(token_param(BACKEND, lease.token)?);
            self.unlock(held, unlock).await
        }
        .instrument(span)
        .await
    }

    /// The live read phase of `key` as the server has it, and a session holding the key's
    /// lock in shared mode without being a fencelock reader (plain SQL), if any.
    pub(super) async fn read_phase(
        &self,
        key: &LockKey,
        protocol: Protocol,
    ) -> Result<(Option<ReadPhase>, Option<i32>)> {
        let (owner, token, readers, remaining_us, plain_pid): PhaseRow = timed(
            BACKEND,
            self.timeout(),
            self.db.sql().advisory_read_inspect.fetch_one(
                protocol,
                self.db.checked(),
                &[
                    Arg::Text(key.as_str()),
                    Arg::Int8(self.db.advisory_lock_id(key)),
                ],
            ),
        )
        .await?;
        let phase = match (token, owner) {
            (Some(token), Some(owner)) if readers > 0 => Some(ReadPhase {
                fence: fence_from(BACKEND, token, &owner)?,
                readers: usize::try_from(readers).unwrap_or(usize::MAX),
                remaining: remaining(remaining_us).unwrap_or(Duration::ZERO),
            }),
            _ => None,
        };
        Ok((phase, plain_pid))
    }
}
