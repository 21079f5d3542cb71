//! The lease backend's shared (reader) locks: a read phase in the key's lease row, its
//! readers in `fencelock_lease_readers` (DESIGN.md section 5.3).

use std::time::Duration;

use fencelock_core::{
    Lease, LockBackend, LockKey, OwnerId, ReadPhase, Result, valid_until, validate_ttl,
};
use tokio::time::Instant;
use tracing::Instrument;

use super::{BACKEND, PgLeaseBackend, renewed};
use crate::codec::{
    fence_from, micros, millis_setting, owner_bytes, owner_from, remaining, token_param,
};
use crate::error::{protocol as protocol_error, timed};
use crate::exec::Arg;

/// `lease_read_acquire`'s row: the phase's token and owner, the live epoch, `exhausted`.
type ReadRow = (
    Option<i64>,
    Option<Vec<u8>>,
    Option<i64>,
    bool,
    Option<String>,
);

/// `lease_read_inspect`'s row: the phase's owner and token, its live readers, the longest
/// time left in microseconds.
type PhaseRow = (Vec<u8>, i64, i64, i64);

impl PgLeaseBackend {
    /// Joins (or starts) the read phase of `key`: [`LockBackend::try_acquire_shared`].
    pub(super) async fn join_read_phase(
        &self,
        key: &LockKey,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        let span =
            tracing::debug_span!("fencelock.pg.acquire_shared", backend = BACKEND, key = %key);
        async {
            let protocol = self.db.protocol().await?;
            let reader = owner_bytes(reader);
            // The owner of a new phase; a reader joining a live phase gets that phase's.
            let owner = owner_bytes(OwnerId::random());
            let lock_wait = millis_setting(self.lock_wait());
            let args = [
                Arg::Text(key.as_str()),
                Arg::Bytea(&reader),
                Arg::Float8(micros(ttl)),
                Arg::Text(&lock_wait),
                Arg::Bytea(&owner),
            ];
            let granted = self
                .grant(
                    protocol,
                    &self.db.sql().lease_read_acquire,
                    &args,
                    |row: &ReadRow| ((row.0, row.2, row.3), row.4.as_deref()),
                )
                .await?;
            let Some((token, (_, owner, _, _, _), sent_at)) = granted else {
                return Ok(None);
            };
            let Some(owner) = owner else {
                return Err(protocol_error(
                    BACKEND,
                    "a reader's grant without the phase's owner",
                ));
            };
            let owner = owner_from(BACKEND, &owner)?;
            tracing::debug!(token = token.get(), outcome = "granted", "acquired shared");
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

    /// Renews `reader` in the phase of `lease`: [`LockBackend::extend_shared`].
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
            let protocol = self.db.protocol().await?;
            let token = token_param(BACKEND, lease.token)?;
            let sent_at = Instant::now();
            let row: (bool, bool) = timed(
                BACKEND,
                self.timeout(),
                self.db.sql().lease_read_extend.fetch_one(
                    protocol,
                    self.db.checked(),
                    &[
                        Arg::Text(lease.key.as_str()),
                        Arg::Bytea(&owner_bytes(lease.owner)),
                        Arg::Int8(token),
                        Arg::Bytea(&owner_bytes(reader)),
                        Arg::Float8(micros(ttl)),
                    ],
                ),
            )
            .await?;
            renewed(lease, ttl, sent_at, row)
        }
        .instrument(span)
        .await
    }

    /// Removes `reader` from the phase of `lease`: [`LockBackend::release_shared`].
    pub(super) async fn release_reader(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
        let span = tracing::debug_span!(
            "fencelock.pg.release_shared",
            backend = BACKEND,
            key = %lease.key,
            token = lease.token.get()
        );
        async {
            let protocol = self.db.protocol().await?;
            let token = token_param(BACKEND, lease.token)?;
            timed(
                BACKEND,
                self.timeout(),
                self.db.sql().lease_read_release.scalar_one(
                    protocol,
                    self.db.checked(),
                    &[
                        Arg::Text(lease.key.as_str()),
                        Arg::Bytea(&owner_bytes(lease.owner)),
                        Arg::Int8(token),
                        Arg::Bytea(&owner_bytes(reader)),
                    ],
                ),
            )
            .await
        }
        .instrument(span)
        .await
    }

    /// The live read phase of `key`: [`LockBackend::inspect_shared`].
    pub(super) async fn read_phase(&self, key: &LockKey) -> Result<Option<ReadPhase>> {
        let protocol = self.db.protocol().await?;
        let row: Option<PhaseRow> = timed(
            BACKEND,
            self.timeout(),
            self.db.sql().lease_read_inspect.fetch_optional(
                protocol,
                self.db.checked(),
                &[Arg::Text(key.as_str())],
            ),
        )
        .await?;
        // A phase row without a live reader is a phase ending in this very microsecond.
        let Some((owner, token, readers, remaining_us)) = row.filter(|row| row.2 > 0) else {
            return Ok(None);
        };
        Ok(Some(ReadPhase {
            fence: fence_from(BACKEND, token, &owner)?,
            readers: usize::try_from(readers)
                .map_err(|_| protocol_error(BACKEND, format!("{readers} readers")))?,
            remaining: remaining(Some(remaining_us)).unwrap_or_default(),
        }))
    }
}
