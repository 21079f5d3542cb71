//! `MySqlStorage`: the fenced storage table, one `CALL` (one transaction) per operation.

use fencelock_core::{
    Error, Fence, FenceRule, FencedStorage, LockKey, Result, Snapshot, async_trait, validate_value,
};
use tracing::Instrument;

use crate::codec::{fence_from, owner_bytes, token_param};
use crate::database::MySqlDatabase;
use crate::error::{BACKEND, protocol, timed};

/// One row of `storage_apply_v1`: admitted, a read's value, the resource's fence afterwards.
type Outcome = (i64, Option<Vec<u8>>, i64, Vec<u8>);

/// A [`FencedStorage`] on the table `<prefix>storage`: per resource a value and the last
/// admitted fence.
///
/// Each `read` and `write` is one `CALL` running one transaction that locks the resource's row,
/// applies the rule of DESIGN section 2 ([`FenceRule`], [`Monotonic`](FenceRule::Monotonic) by
/// default, [`Strict`](FenceRule::Strict) with [`with_rule`](Self::with_rule)), and commits the
/// new fence (and value) or changes nothing and answers [`Error::Stale`] with the fence that
/// refused it. A fenced read of a resource without a value records its fence too. `peek` is a
/// plain `SELECT`. Values are `LONGBLOB`s of at most [`max_value_len`](FencedStorage::max_value_len)
/// bytes, which fits the server's `max_allowed_packet`.
#[derive(Debug, Clone)]
pub struct MySqlStorage {
    db: MySqlDatabase,
    rule: FenceRule,
}

impl MySqlStorage {
    /// The storage table of `db`, with the default rule.
    pub fn new(db: &MySqlDatabase) -> Self {
        MySqlStorage {
            db: db.clone(),
            rule: FenceRule::default(),
        }
    }

    /// The same storage applying `rule`: [`FenceRule::Strict`] admits one operation per token
    /// (write-once, replay protection).
    pub fn with_rule(mut self, rule: FenceRule) -> Self {
        self.rule = rule;
        self
    }

    /// The rule this storage applies.
    pub fn rule(&self) -> FenceRule {
        self.rule
    }

    async fn apply(
        &self,
        resource: &LockKey,
        fence: Fence,
        write: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>> {
        if let Some(value) = write {
            validate_value(value, self.max_value_len())?;
        }
        let token = token_param(fence.token)?;
        let rows: Vec<Outcome> = timed(
            self.db.operation_timeout(),
            sqlx::query_as(&self.db.sql().storage_apply)
                .bind(resource.as_str().as_bytes())
                .bind(token)
                .bind(&owner_bytes(fence.owner)[..])
                .bind(i8::from(self.rule == FenceRule::Strict))
                .bind(i8::from(write.is_some()))
                .bind(write)
                .fetch_all(self.db.pool()),
        )
        .await?;
        match rows.as_slice() {
            [(1, value, _, _)] => Ok(value.clone()),
            [(0, _, token, owner)] => Err(Error::Stale {
                resource: resource.to_string(),
                presented: fence,
                current: fence_from(*token, owner)?,
            }),
            _ => Err(protocol(format!(
                "storage answered {} rows, expected one",
                rows.len()
            ))),
        }
    }
}

#[async_trait]
impl FencedStorage for MySqlStorage {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn max_value_len(&self) -> usize {
        self.db.max_value_len()
    }

    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        let span = tracing::debug_span!(
            "fencelock.mysql.read",
            resource = %resource,
            token = fence.token.get()
        );
        self.apply(resource, fence, None).instrument(span).await
    }

    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        let span = tracing::debug_span!(
            "fencelock.mysql.write",
            resource = %resource,
            token = fence.token.get(),
            len = value.len()
        );
        self.apply(resource, fence, Some(value))
            .instrument(span)
            .await
            .map(drop)
    }

    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        let row: Option<(Option<Vec<u8>>, i64, Vec<u8>)> = timed(
            self.db.operation_timeout(),
            sqlx::query_as(&self.db.sql().storage_peek)
                .bind(resource.as_str().as_bytes())
                .fetch_optional(self.db.pool()),
        )
        .await?;
        row.map(|(value, token, owner)| {
            Ok(Snapshot {
                value,
                fence: fence_from(token, &owner)?,
            })
        })
        .transpose()
    }
}
