//! `PgFence`: the fence rule of DESIGN section 2 inside the application's own transactions and
//! on the application's own tables.

use std::time::Duration;

use fencelock_core::{Error, Fence, FenceRule, LockKey, Result};
use sqlx::{Acquire, Postgres};
use tracing::Instrument;

use crate::PgDatabase;
use crate::codec::{fence_from, owner_bytes};
use crate::error::{sqlstate, timed};
use crate::exec::Arg;

const BACKEND: &str = "pg-fence";

/// The SQLSTATE of a refused fence: `fencelock_admit` and the row guard raise it, and
/// [`map_sqlx_error`](crate::map_sqlx_error) turns it into [`Error::Stale`].
pub const STALE_SQLSTATE: &str = "FL001";

/// The SQLSTATE of a statement on a guarded table that presents no valid fence: an `UPDATE`
/// that leaves a `NULL` fence on the row, a `DELETE` without [`PgFence::present`].
pub const NO_FENCE_SQLSTATE: &str = "FL002";

/// The default names of a guarded table's fence columns.
pub const DEFAULT_FENCE_COLUMNS: (&str, &str) = ("fence_token", "fence_owner");

/// A fence as SQL parameters, for the application's own statements: bind
/// [`token`](Self::token) to a `bigint` and [`owner`](Self::owner) to a `bytea`, as the row
/// guard's fence columns hold them.
///
/// ```
/// use fencelock_core::{Fence, FencingToken, OwnerId};
/// use fencelock_postgres::FenceParams;
/// let fence = Fence::new(FencingToken::new(7).unwrap(), OwnerId::random());
/// let params = FenceParams::try_from(fence)?;
/// assert_eq!(params.token, 7);
/// assert_eq!(params.fence()?, fence);
/// // A token above i64::MAX has no bigint: refused, before any I/O.
/// let huge = Fence::new(FencingToken::new(u64::MAX).unwrap(), OwnerId::random());
/// assert!(FenceParams::try_from(huge).is_err());
/// # Ok::<(), fencelock_core::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FenceParams {
    /// The fencing token as a SQL `bigint`.
    pub token: i64,
    /// The owner as 16 big-endian bytes (a `bytea`).
    pub owner: [u8; 16],
}

impl TryFrom<Fence> for FenceParams {
    type Error = Error;

    /// Refuses a token above `i64::MAX` with [`Error::InvalidConfig`] naming it.
    fn try_from(fence: Fence) -> Result<Self> {
        Ok(FenceParams {
            token: i64::try_from(fence.token)?,
            owner: owner_bytes(fence.owner),
        })
    }
}

impl FenceParams {
    /// The fence these parameters stand for (for columns read back from a row).
    pub fn fence(&self) -> Result<Fence> {
        fence_from(BACKEND, self.token, &self.owner)
    }

    /// A fence read back from a row's `bigint` and `bytea` columns.
    pub fn from_columns(token: i64, owner: &[u8]) -> Result<Fence> {
        fence_from(BACKEND, token, owner)
    }
}

/// The fence rule inside the application's own transactions, on any sqlx connection or
/// transaction the application already has. Made by [`PgDatabase::fence`]; cheap to clone.
///
/// Two ways to fence one's own data, both applying [`FenceRule::admits`] exactly as
/// [`FencedStorage`](fencelock_core::FencedStorage) does, and both refusing with SQLSTATE
/// [`STALE_SQLSTATE`], which aborts the surrounding transaction and maps to [`Error::Stale`]:
///
/// - **Per resource**, [`admit`](Self::admit): `fencelock_admit(resource, token, owner)` in
///   the application's transaction admits the fence against the resource's fence record (a
///   row of `fencelock_fences`) and keeps that row locked until the transaction ends. The
///   application's statements after it, in the same transaction, are fenced: they commit
///   with the admitted fence or roll back with a refusal. Any tables, any statements.
/// - **Per row**, [`guard_table`](Self::guard_table): a trigger on the application's table
///   refuses every `UPDATE` whose new fence columns are not admitted after the row's current
///   ones, and every `DELETE` without an admitted [`present`](Self::present)ed fence. No extra
///   statement per write: `UPDATE accounts SET balance = $1, fence_token = $2,
///   fence_owner = $3 WHERE id = $4` is the fenced write.
///
/// ```no_run
/// # async fn demo(pool: sqlx::PgPool, guard: fencelock_core::LockGuard) -> fencelock_core::Result<()> {
/// use fencelock_postgres::{PgDatabase, map_sqlx_error};
/// let db = PgDatabase::from_pool(pool.clone(), "fencelock")?;
/// let fence = db.fence();
/// let sql = |e| map_sqlx_error("ledger", e);
///
/// let mut tx = pool.begin().await.map_err(sql)?;
/// fence.admit(&mut *tx, "account/10", guard.fence()).await?; // Error::Stale if superseded
/// sqlx::query("UPDATE accounts SET balance = balance - 100 WHERE id = 10")
///     .execute(&mut *tx).await.map_err(sql)?;
/// sqlx::query("INSERT INTO audit_log (account_id, amount) VALUES (10, -100)")
///     .execute(&mut *tx).await.map_err(sql)?;
/// tx.commit().await.map_err(sql)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct PgFence {
    db: PgDatabase,
    rule: FenceRule,
}

impl PgFence {
    /// The fence of `db`'s schema, applying [`FenceRule::Monotonic`].
    pub fn new(db: &PgDatabase) -> Self {
        PgFence {
            db: db.clone(),
            rule: FenceRule::Monotonic,
        }
    }

    /// Applies `rule` instead of the default, to [`admit`](Self::admit) and to the guards
    /// [`guard_table`](Self::guard_table) installs from now on.
    pub fn with_rule(mut self, rule: FenceRule) -> Self {
        self.rule = rule;
        self
    }

    /// The rule this fence applies.
    pub fn rule(&self) -> FenceRule {
        self.rule
    }

    /// The database whose schema holds the fence records and functions.
    pub fn database(&self) -> &PgDatabase {
        &self.db
    }

    fn timeout(&self) -> Duration {
        self.db.operation_timeout()
    }

    fn strict(&self) -> bool {
        self.rule == FenceRule::Strict
    }

    /// Admits `fence` for `resource` inside the transaction of `executor` (`&mut *tx`, or
    /// `&mut conn` inside a transaction the application began) and records it, by the rule of
    /// DESIGN section 2. `Ok` means this transaction's statements from now on are fenced: the
    /// fence record stays locked until the transaction ends, so no other holder of `resource`
    /// is admitted in between, and the recorded fence commits or rolls back with them.
    ///
    /// `resource` is a name as [`Locker::lock`](fencelock_core::Locker::lock) takes it (a
    /// `&str`, a `String`, a [`LockKey`]); an invalid one is [`Error::InvalidKey`] before any
    /// I/O. A refusal is [`Error::Stale`] with the presented and the current fence; it changed
    /// nothing, and the server has aborted the transaction, so roll it back (dropping a sqlx
    /// `Transaction` does). A token above `i64::MAX` is [`Error::InvalidConfig`] before any
    /// I/O. Called on a pool or outside a transaction it still admits and records the fence,
    /// but fences nothing after it. Waiting for another transaction that holds the record
    /// counts against the [operation time-out](PgDatabase::operation_timeout); past it the
    /// call is [`Error::Unavailable`] and the transaction should be rolled back.
    ///
    /// **Fenced reads**: admit first, then `SELECT`, in the same transaction. The read then
    /// counts as the holder's (a holder with an older token is refused from then on), which
    /// is what a read-compute-write needs.
    pub async fn admit<'e>(
        &self,
        executor: impl Acquire<'e, Database = Postgres> + Send,
        resource: impl AsRef<str>,
        fence: Fence,
    ) -> Result<()> {
        let resource = &LockKey::new(resource)?;
        let params = FenceParams::try_from(fence)?;
        let span = tracing::debug_span!(
            "fencelock.pg.admit",
            resource = %resource,
            token = fence.token.get(),
        );
        async {
            let protocol = self.db.protocol().await?;
            let outcome = timed(
                BACKEND,
                self.timeout(),
                self.db.sql().fence_admit.execute(
                    protocol,
                    executor,
                    &[
                        Arg::Text(resource.as_str()),
                        Arg::Int8(params.token),
                        Arg::Bytea(&params.owner),
                        Arg::Bool(self.strict()),
                    ],
                ),
            )
            .await;
            match &outcome {
                Ok(_) => tracing::debug!(outcome = "admitted"),
                Err(Error::Stale { current, .. }) => {
                    tracing::debug!(outcome = "stale", current = current.token.get());
                }
                Err(_) => {}
            }
            outcome.map(drop)
        }
        .instrument(span)
        .await
    }

    /// The fence last admitted for `resource` by [`admit`](Self::admit) and committed (or
    /// written earlier in `executor`'s transaction): the unfenced observer read. `None` if
    /// none was. An invalid `resource` name is [`Error::InvalidKey`] before any I/O.
    pub async fn current<'e>(
        &self,
        executor: impl Acquire<'e, Database = Postgres> + Send,
        resource: impl AsRef<str>,
    ) -> Result<Option<Fence>> {
        let resource = &LockKey::new(resource)?;
        let protocol = self.db.protocol().await?;
        let row: Option<(i64, Vec<u8>)> = timed(
            BACKEND,
            self.timeout(),
            self.db.sql().fence_current.fetch_optional(
                protocol,
                executor,
                &[Arg::Text(resource.as_str())],
            ),
        )
        .await?;
        row.map(|(token, owner)| fence_from(BACKEND, token, &owner))
            .transpose()
    }

    /// Presents `fence` for the rest of `executor`'s transaction: the fence the row guard
    /// checks a `DELETE` against (a deleted row has no new fence columns to carry it). A
    /// `DELETE` of a guarded row in a transaction that presented no fence fails with SQLSTATE
    /// [`NO_FENCE_SQLSTATE`]. Transaction-local: nothing outlives the transaction.
    pub async fn present<'e>(
        &self,
        executor: impl Acquire<'e, Database = Postgres> + Send,
        fence: Fence,
    ) -> Result<()> {
        let params = FenceParams::try_from(fence)?;
        let protocol = self.db.protocol().await?;
        timed(
            BACKEND,
            self.timeout(),
            self.db.sql().fence_present.execute(
                protocol,
                executor,
                &[Arg::Int8(params.token), Arg::Bytea(&params.owner)],
            ),
        )
        .await
        .map(drop)
    }

    /// Installs the row guard on `table` with the fence columns `fence_token bigint` and
    /// `fence_owner bytea` ([`DEFAULT_FENCE_COLUMNS`]). See
    /// [`guard_table_with`](Self::guard_table_with).
    pub async fn guard_table<'e>(
        &self,
        executor: impl Acquire<'e, Database = Postgres> + Send,
        table: &str,
    ) -> Result<()> {
        let (token, owner) = DEFAULT_FENCE_COLUMNS;
        self.guard_table_with(executor, table, token, owner).await
    }

    /// Installs (or replaces) the row guard on `table` (a name as the caller's SQL would
    /// write it: `accounts`, `billing.accounts`), whose fence is in the columns
    /// `token_column bigint` and `owner_column bytea`:
    ///
    /// - an `UPDATE` (including `INSERT ... ON CONFLICT DO UPDATE`) is refused with SQLSTATE
    ///   [`STALE_SQLSTATE`] unless the fence it leaves on the row is admitted after the row's
    ///   current fence; a row whose fence columns are `NULL` admits any fence; an `UPDATE`
    ///   leaving a `NULL` fence is refused with [`NO_FENCE_SQLSTATE`];
    /// - a `DELETE` is refused unless the transaction [`present`](Self::present)ed a fence
    ///   admitted after the row's.
    ///
    /// Both checks run on the newest committed version of the row, under its row lock. An
    /// `UPDATE` that does not set the fence columns leaves the row's fence as it is, which the
    /// monotonic rule admits as its owner's: every writer of a guarded table must set them.
    /// `INSERT` is not checked (a new row has no fence to be older than), nor is `TRUNCATE`.
    ///
    /// A table that does not exist or lacks the columns, or columns of other types, is
    /// [`Error::InvalidConfig`] naming what is missing, and nothing changes.
    pub async fn guard_table_with<'e>(
        &self,
        executor: impl Acquire<'e, Database = Postgres> + Send,
        table: &str,
        token_column: &str,
        owner_column: &str,
    ) -> Result<()> {
        let protocol = self.db.protocol().await?;
        let outcome = timed_raw(
            self.timeout(),
            self.db.sql().guard_table.execute(
                protocol,
                executor,
                &[
                    Arg::Text(table),
                    Arg::Text(token_column),
                    Arg::Text(owner_column),
                    Arg::Bool(self.strict()),
                ],
            ),
        )
        .await;
        table_outcome(outcome, table)
    }

    /// Removes the row guard from `table` (nothing happens if it has none).
    pub async fn unguard_table<'e>(
        &self,
        executor: impl Acquire<'e, Database = Postgres> + Send,
        table: &str,
    ) -> Result<()> {
        let protocol = self.db.protocol().await?;
        let outcome = timed_raw(
            self.timeout(),
            self.db
                .sql()
                .unguard_table
                .execute(protocol, executor, &[Arg::Text(table)]),
        )
        .await;
        table_outcome(outcome, table)
    }
}

/// A call under the time-out, its sqlx error kept for the caller to map.
async fn timed_raw<T>(
    timeout: Duration,
    call: impl Future<Output = Result<T, sqlx::Error>>,
) -> Result<Result<T, sqlx::Error>> {
    tokio::time::timeout(timeout, call)
        .await
        .map_err(|_| crate::error::timed_out(BACKEND, timeout))
}

/// Errors of installing a guard: a table or column that is not there, or not of the right
/// kind, is the caller's configuration.
fn table_outcome(
    outcome: Result<Result<sqlx::postgres::PgQueryResult, sqlx::Error>>,
    table: &str,
) -> Result<()> {
    match outcome? {
        Ok(_) => Ok(()),
        Err(e) => match sqlstate(&e).as_deref() {
            // undefined table / column, wrong object type, datatype mismatch, bad argument,
            // invalid name syntax.
            Some("42P01" | "42703" | "42809" | "42804" | "22023" | "42602" | "3F000") => {
                let message = match &e {
                    sqlx::Error::Database(db) => db.message().to_owned(),
                    other => other.to_string(),
                };
                Err(Error::InvalidConfig {
                    message: format!("cannot guard table {table:?}: {message}"),
                    source: Some(Box::new(e)),
                })
            }
            _ => Err(crate::map_sqlx_error(BACKEND, e)),
        },
    }
}

/// [`Error::Stale`] from the DETAIL of an FL001 error:
/// `presented fence <token>/<owner hex>, current fence <token>/<owner hex>, resource <name>`.
pub(crate) fn stale_from_detail(detail: &str) -> Option<Error> {
    let rest = detail.strip_prefix("presented fence ")?;
    let (presented, rest) = fence_prefix(rest)?;
    let rest = rest.strip_prefix(", current fence ")?;
    let (current, rest) = fence_prefix(rest)?;
    let resource = rest.strip_prefix(", resource ")?;
    Some(Error::Stale {
        resource: resource.to_owned(),
        presented,
        current,
    })
}

/// `<token>/<32 hex digits>` at the start of `text`, and what follows it.
fn fence_prefix(text: &str) -> Option<(Fence, &str)> {
    let (token, rest) = text.split_once('/')?;
    let hex = rest.get(..32)?;
    let owner = u128::from_str_radix(hex, 16).ok()?.to_be_bytes();
    let fence = fence_from(BACKEND, token.parse().ok()?, &owner).ok()?;
    Some((fence, &rest[32..]))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use fencelock_core::{FencingToken, OwnerId};

    #[test]
    fn parses_the_stale_detail() {
        let detail = "presented fence 5/000000000000000000000000000000ff, current fence \
                      6/0102030405060708090a0b0c0d0e0f10, resource public.accounts (id=10)";
        match stale_from_detail(detail).unwrap() {
            Error::Stale {
                resource,
                presented,
                current,
            } => {
                assert_eq!(resource, "public.accounts (id=10)");
                assert_eq!(
                    presented,
                    Fence::new(FencingToken::new(5).unwrap(), OwnerId::from_u128(0xff))
                );
                assert_eq!(current.token.get(), 6);
                assert_eq!(
                    current.owner,
                    OwnerId::from_u128(0x0102030405060708090a0b0c0d0e0f10)
                );
            }
            other => panic!("{other:?}"),
        }
        for bad in [
            "",
            "presented fence 5/00ff, current fence 6/00, resource r",
            "presented fence 0/000000000000000000000000000000ff, current fence \
             6/0102030405060708090a0b0c0d0e0f10, resource r",
            "presented fence 5/000000000000000000000000000000ff, current fence \
             6/, resource r",
        ] {
            assert!(stale_from_detail(bad).is_none(), "{bad}");
        }
    }
}
