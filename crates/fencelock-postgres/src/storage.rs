//! `PgStorage`: the fence rule of DESIGN section 2 in one table.

use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{
    Error, Fence, FenceRule, FencedStorage, LockKey, Result, Snapshot, validate_value,
};
use sqlx::{Acquire, Postgres};
use tracing::Instrument;

use crate::PgDatabase;
use crate::codec::{fence_from, owner_bytes, token_param};
use crate::error::timed;
use crate::exec::Arg;

pub(crate) const BACKEND: &str = "pg-storage";
/// The default largest value: 16 MiB.
pub const DEFAULT_MAX_VALUE_LEN: usize = 16 << 20;
/// The largest value a `bytea` column holds.
const BYTEA_MAX: usize = (1 << 30) - 1;

/// A [`FencedStorage`] in the table `fencelock_storage`: one row per resource with its value
/// and last admitted fence.
///
/// Every fenced operation is one statement (the SQL function `fencelock_storage_apply`),
/// which locks the resource's row, applies [`FenceRule::admits`] exactly as the core defines
/// it, and either advances the fence (and stores the value) or changes nothing and answers
/// with the current fence, reported as [`Error::Stale`]. Values and fences are ordinary rows,
/// so they survive restarts and are as durable as the database.
///
/// Inside [`PgStorage::transaction`] the same operations run in the caller's transaction.
#[derive(Debug, Clone)]
pub struct PgStorage {
    db: PgDatabase,
    rule: FenceRule,
    max_value_len: usize,
}

impl PgStorage {
    /// A storage on `db` applying [`FenceRule::Monotonic`], values up to 16 MiB.
    pub fn new(db: &PgDatabase) -> Self {
        PgStorage {
            db: db.clone(),
            rule: FenceRule::Monotonic,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
        }
    }

    /// Applies `rule` instead of the default.
    pub fn with_rule(mut self, rule: FenceRule) -> Self {
        self.rule = rule;
        self
    }

    /// Accepts values up to `max` bytes (default 16 MiB, at most 1 GiB - 1, Postgres' limit).
    pub fn with_max_value_len(mut self, max: usize) -> Self {
        self.max_value_len = max.min(BYTEA_MAX);
        self
    }

    /// The rule this storage applies.
    pub fn rule(&self) -> FenceRule {
        self.rule
    }

    /// The database this storage uses.
    pub fn database(&self) -> &PgDatabase {
        &self.db
    }

    pub(crate) fn timeout(&self) -> Duration {
        self.db.operation_timeout()
    }

    /// One fenced operation on `executor`: a read when `value` is `None`.
    /// The unfenced snapshot of `resource`, on `executor` (the pool, or a transaction that
    /// sees its own writes).
    pub(crate) async fn peek_on<'e>(
        &self,
        executor: impl Acquire<'e, Database = Postgres> + Send,
        resource: &LockKey,
    ) -> Result<Option<Snapshot>> {
        let protocol = self.db.protocol().await?;
        let row: Option<(Option<Vec<u8>>, i64, Vec<u8>)> = timed(
            BACKEND,
            self.timeout(),
            self.db.sql().storage_peek.fetch_optional(
                protocol,
                executor,
                &[Arg::Text(resource.as_str())],
            ),
        )
        .await?;
        row.map(|(value, token, owner)| {
            Ok(Snapshot {
                value,
                fence: fence_from(BACKEND, token, &owner)?,
            })
        })
        .transpose()
    }

    pub(crate) async fn apply<'e>(
        &self,
        executor: impl Acquire<'e, Database = Postgres> + Send,
        resource: &LockKey,
        fence: Fence,
        value: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>> {
        if let Some(value) = value {
            validate_value(value, self.max_value_len)?;
        }
        let span = tracing::debug_span!(
            "fencelock.pg.storage",
            resource = %resource,
            token = fence.token.get(),
            op = if value.is_some() { "write" } else { "read" },
        );
        async {
            let token = token_param(BACKEND, fence.token)?;
            let protocol = self.db.protocol().await?;
            let (admitted, cur_token, cur_owner, cur_value): (bool, i64, Vec<u8>, Option<Vec<u8>>) =
                timed(
                    BACKEND,
                    self.timeout(),
                    self.db.sql().storage_apply.fetch_one(
                        protocol,
                        executor,
                        &[
                            Arg::Text(resource.as_str()),
                            Arg::Int8(token),
                            Arg::Bytea(&owner_bytes(fence.owner)),
                            Arg::Bool(self.rule == FenceRule::Strict),
                            Arg::Bool(value.is_some()),
                            Arg::OptBytea(value),
                        ],
                    ),
                )
                .await?;
            if admitted {
                tracing::debug!(outcome = "admitted");
                Ok(cur_value)
            } else {
                let current = fence_from(BACKEND, cur_token, &cur_owner)?;
                tracing::debug!(outcome = "stale", current = current.token.get());
                Err(Error::Stale {
                    resource: resource.to_string(),
                    presented: fence,
                    current,
                })
            }
        }
        .instrument(span)
        .await
    }
}

#[async_trait]
impl FencedStorage for PgStorage {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn max_value_len(&self) -> usize {
        self.max_value_len
    }

    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        self.apply(self.db.pool(), resource, fence, None).await
    }

    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        self.apply(self.db.pool(), resource, fence, Some(value))
            .await
            .map(drop)
    }

    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        self.peek_on(self.db.pool(), resource).await
    }
}
