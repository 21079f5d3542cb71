//! `PgFence`: the fence rule of DESIGN section 2 inside the application's own transactions and
//! on the application's own tables.

use std::time::Duration;

use fencelock_core::{Error, Fence, FenceRule, FencingToken, LockKey, Result, admission_order};
use sqlx::{Acquire, Postgres};
use tracing::Instrument;

use crate::PgDatabase;
use crate::codec::{fence_from, millis_setting, owner_bytes};
use crate::error::{sqlstate, timed};
use crate::exec::Arg;

const BACKEND: &str = "pg-fence";

/// The SQLSTATE of a refused fence: `fencelock_admit` and the row guard raise it, and
/// [`map_sqlx_error`](crate::map_sqlx_error) turns it into [`Error::Stale`].
pub const STALE_SQLSTATE: &str = "FL001";

/// The SQLSTATE of a statement on a guarded table that presents no valid fence: an `UPDATE`
/// that leaves a `NULL` fence on the row, a `DELETE` without [`PgFence::present`].
pub const NO_FENCE_SQLSTATE: &str = "FL002";

/// The SQLSTATE of an admit whose token is above the last one this schema's counter granted
/// for the key of the resource's name (migration 12): no grant of this schema handed it out.
/// [`map_sqlx_error`](crate::map_sqlx_error) turns it into [`Error::InvalidConfig`] naming the
/// key and both tokens.
pub const UNGRANTED_SQLSTATE: &str = "FL008";

/// The SQLSTATE of a statement that waited for a row lock past `lock_timeout`: an admit whose
/// resource's fence record another transaction held for longer than the admit's wait.
const LOCK_WAIT_ENDED: &str = "55P03";

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

    /// How long an admit waits for another transaction holding the fence record: nine tenths
    /// of the operation time-out, so the server gives up first and says why.
    fn admit_wait(&self) -> Duration {
        let timeout = self.timeout();
        timeout
            .saturating_sub(timeout / 10)
            .max(Duration::from_millis(1))
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
    /// I/O. A token above the last one this schema's counter granted for the key named like
    /// `resource` (a lock of this schema's lease or advisory backend, or a transaction) was
    /// never granted: [`Error::InvalidConfig`] naming the key and both tokens (SQLSTATE
    /// [`UNGRANTED_SQLSTATE`]); a resource fenced by another service's tokens has no counter
    /// here and is not checked (see [`lower_fence`](Self::lower_fence)). Called on a pool or
    /// outside a transaction it still admits and records the fence, but fences nothing after
    /// it.
    ///
    /// **Bounds.** The fence record stays locked until the transaction ends, so a holder that
    /// pauses inside its transaction would hold its successor up for as long as it pauses.
    /// The admit therefore ends the transaction's idle time: from the admit on, a transaction
    /// that sits idle for longer than
    /// [`PgDatabase::idle_in_transaction_timeout`] (`?idle_in_transaction_timeout=`, default
    /// 30 s, zero: none; a smaller bound already set on the session is kept) has its session
    /// ended by the server, which rolls it back: its commit fails and nothing of it is
    /// written. And the admit waits for another transaction holding the record at most nine
    /// tenths of the [operation time-out](PgDatabase::operation_timeout) (a server-side
    /// `lock_timeout` for this statement only): past it the call is [`Error::Conflict`]
    /// naming the resource (retryable: roll back, then try again), and the server has aborted
    /// the transaction.
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
            let idle = interval(self.db.idle_in_transaction_timeout());
            let wait = self.admit_wait();
            let outcome = timed_raw(
                self.timeout(),
                self.db.sql().fence_admit.execute(
                    protocol,
                    executor,
                    &[
                        Arg::Text(resource.as_str()),
                        Arg::Int8(params.token),
                        Arg::Bytea(&params.owner),
                        Arg::Bool(self.strict()),
                        Arg::Text(&idle),
                        Arg::Text(&interval(wait)),
                    ],
                ),
            )
            .await
            .and_then(|outcome| admit_outcome(outcome, resource, wait));
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

    /// Admits every `(resource, fence)` pair inside the transaction of `conn` (`&mut tx`),
    /// in [`admission_order`] (by name, each once), as [`admit`](Self::admit) does one: a
    /// set lock's members in one call, `fence.admit_all(&mut tx, guard.fences())`. The
    /// order is the same in every transaction that uses it, so two of them admitting
    /// overlapping sets never deadlock on each other's fence records. The first refusal ends
    /// the call with its error, and the server has aborted the transaction (roll it back);
    /// names are checked before any I/O.
    pub async fn admit_all<K: AsRef<str>>(
        &self,
        conn: &mut sqlx::PgConnection,
        fences: impl IntoIterator<Item = (K, Fence)>,
    ) -> Result<()> {
        for (resource, fence) in admission_order(fences)? {
            self.admit(&mut *conn, resource, fence).await?;
        }
        Ok(())
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

    /// The healing step for a resource whose fence record holds a token no lock service
    /// granted (admitted before fencelock checked tokens against this schema's counters, or
    /// from another lock service, whose tokens cannot be checked here): sets the record of
    /// `resource` to `token` with an owner no holder has, so that from now on exactly the
    /// tokens above `token` are admitted. Give it the last token the lock service granted
    /// for the key (`fencelock inspect K` shows it): every holder granted so far is refused,
    /// the next grant is admitted. Returns the token it replaced, `None` when `resource` has
    /// no fence record.
    ///
    /// Only lowers: a `token` at or above the recorded one, or below the last token this
    /// schema's counter granted for the key of that name (its holders would be admitted
    /// again), is [`Error::InvalidConfig`] saying which, and nothing changes. Waits for a
    /// transaction that admitted the resource (the record's row lock). Runs as one statement
    /// of `executor` (`fencelock_lower_fence(resource, token)` from plain SQL).
    pub async fn lower_fence<'e>(
        &self,
        executor: impl Acquire<'e, Database = Postgres> + Send,
        resource: &LockKey,
        token: FencingToken,
    ) -> Result<Option<FencingToken>> {
        let token = i64::try_from(token)?;
        let protocol = self.db.protocol().await?;
        let outcome = timed_raw(
            self.timeout(),
            self.db.sql().fence_lower.scalar_one::<Option<i64>, _>(
                protocol,
                executor,
                &[Arg::Text(resource.as_str()), Arg::Int8(token)],
            ),
        )
        .await?;
        let was = match outcome {
            Ok(was) => was,
            Err(e) if sqlstate(&e).as_deref() == Some("22023") => {
                return Err(Error::InvalidConfig {
                    message: format!(
                        "cannot lower the fence of {resource}: {}",
                        server_message(&e)
                    ),
                    source: Some(Box::new(e)),
                });
            }
            Err(e) => return Err(crate::map_sqlx_error(BACKEND, e)),
        };
        was.map(|was| {
            FencingToken::try_from(was).map_err(|_| {
                crate::error::protocol(BACKEND, format!("a fence record holds token {was}"))
            })
        })
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

/// A duration as an interval's text, whole milliseconds rounded up.
fn interval(duration: Duration) -> String {
    format!("{} ms", millis_setting(duration))
}

/// The server's own message of a database error.
fn server_message(error: &sqlx::Error) -> String {
    match error {
        sqlx::Error::Database(db) => db.message().to_owned(),
        other => other.to_string(),
    }
}

/// An admit's outcome: a wait for the fence record past `lock_timeout` is a retryable
/// [`Error::Conflict`] naming the resource; everything else maps as usual.
fn admit_outcome(
    outcome: Result<sqlx::postgres::PgQueryResult, sqlx::Error>,
    resource: &LockKey,
    wait: Duration,
) -> Result<()> {
    match outcome {
        Ok(_) => Ok(()),
        Err(e) if sqlstate(&e).as_deref() == Some(LOCK_WAIT_ENDED) => Err(Error::Conflict {
            backend: BACKEND,
            message: format!(
                "the fence record of {resource} is held by another transaction that admitted \
                 it and has not ended; not obtained within {wait:?} (or the transaction's own \
                 smaller lock_timeout): roll back and try again"
            ),
            source: Some(Box::new(e)),
        }),
        Err(e) => Err(crate::map_sqlx_error(BACKEND, e)),
    }
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
                Err(Error::InvalidConfig {
                    message: format!("cannot guard table {table:?}: {}", server_message(&e)),
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
