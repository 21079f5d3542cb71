//! `MySqlFence`: the fence check inside the caller's own transaction.

use fencelock_core::{Error, Fence, FenceRule, LockKey, Result, admission_order};
use sqlx::mysql::{MySql, MySqlPool};
use sqlx::{Executor, Transaction};

use crate::codec::{fence_from, owner_bytes, owner_from, token_from, token_param};
use crate::error::{BACKEND, map_sqlx_error, protocol, sqlstate};
use crate::schema::Statements;

/// The SQLSTATE of a refused admission, raised by the `<prefix>admit_v1` procedure.
pub const STALE_SQLSTATE: &str = "FL001";

/// The fence check of DESIGN section 2, run inside **your own** transaction, on your own
/// tables: the admission and your statements commit or roll back together.
///
/// ```rust,no_run
/// # async fn demo(db: fencelock_mysql::MySqlDatabase, guard: fencelock_core::LockGuard)
/// # -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use fencelock_mysql::sqlx;
/// let mut tx = db.pool().begin().await?;
/// // Error::Stale: the transaction is rolled back, the debit never happens.
/// db.fence().admit(&mut tx, "accounts/10", guard.fence()).await?;
/// sqlx::query("UPDATE accounts SET balance = balance - 100 WHERE id = 10")
///     .execute(&mut *tx)
///     .await?;
/// tx.commit().await?;
/// # Ok(()) }
/// ```
///
/// # What it guarantees, and the isolation argument
///
/// [`admit`](Self::admit) calls the procedure `<prefix>admit_v1`, which locks the resource's
/// fence record (`<prefix>fences`) exclusively, compares the presented fence with the
/// recorded one by [`FenceRule`], and records the presented one. The lock is held until your
/// transaction ends, so transactions admitting the same resource run one after another, and
/// each compares against the fence the previous one *committed*: a locking read sees the
/// latest committed row under every isolation level, `REPEATABLE READ` included. An admitted
/// transaction that rolls back takes its fence with it.
///
/// - Call `admit` **first**, before reading what it guards. InnoDB's `REPEATABLE READ`
///   snapshot is taken at a transaction's first plain `SELECT`; taken after `admit`, it
///   includes everything the previous holder committed. Relative updates
///   (`SET balance = balance - 100`) and locking reads (`SELECT ... FOR UPDATE`) always see the
///   latest rows, wherever they stand.
/// - **A refusal rolls back your whole transaction** (as an error aborts a PostgreSQL
///   transaction) before it is reported as [`Error::Stale`], so nothing your transaction did
///   can be committed by mistake; afterwards the connection is out of any transaction.
///   The refusal is SQLSTATE [`STALE_SQLSTATE`] for clients in other languages calling the
///   procedure themselves.
/// - The admission guards data only against writers that admit the same resource.
#[derive(Debug, Clone)]
pub struct MySqlFence {
    sql: Statements,
    rule: FenceRule,
}

impl MySqlFence {
    /// The fence of the installation with table prefix `prefix` (checked like
    /// [`MySqlConfig::prefix`](crate::MySqlConfig::prefix)). Use it with your application's
    /// own pool; [`install`](Self::install) creates the objects if needed.
    pub fn new(prefix: &str) -> Result<Self> {
        Ok(Self::from_statements(Statements::new(prefix)?))
    }

    pub(crate) fn from_statements(sql: Statements) -> Self {
        MySqlFence {
            sql,
            rule: FenceRule::default(),
        }
    }

    /// The same fence applying `rule` ([`FenceRule::Strict`]: one admission per token).
    pub fn with_rule(mut self, rule: FenceRule) -> Self {
        self.rule = rule;
        self
    }

    /// Creates the tables and procedures of this prefix on `pool` where missing (the same
    /// objects [`MySqlConfig::connect`](crate::MySqlConfig::connect) installs).
    pub async fn install(&self, pool: &MySqlPool) -> Result<()> {
        self.sql.install(pool).await
    }

    /// Admits `fence` for `resource` inside `tx`, or rolls `tx` back and fails with
    /// [`Error::Stale`] naming the presented and the current fence. `resource` is a name as
    /// [`Locker::lock`](fencelock_core::Locker::lock) takes it; an invalid one is
    /// [`Error::InvalidKey`] and a token above `i64::MAX` is [`Error::InvalidConfig`], and
    /// neither sends anything.
    pub async fn admit(
        &self,
        tx: &mut Transaction<'_, MySql>,
        resource: impl AsRef<str>,
        fence: Fence,
    ) -> Result<()> {
        let resource = &LockKey::new(resource)?;
        let token = token_param(fence.token)?;
        let outcome = sqlx::query(&self.sql.admit)
            .bind(resource.as_str().as_bytes())
            .bind(token)
            .bind(&owner_bytes(fence.owner)[..])
            .bind(i8::from(self.rule == FenceRule::Strict))
            .execute(&mut **tx)
            .await;
        match outcome {
            Ok(_) => Ok(()),
            Err(error) if sqlstate(&error).as_deref() == Some(STALE_SQLSTATE) => {
                let current = match &error {
                    sqlx::Error::Database(db) => current_fence(db.message())?,
                    _ => return Err(map_sqlx_error(BACKEND, error)),
                };
                Err(Error::Stale {
                    resource: resource.to_string(),
                    presented: fence,
                    current,
                })
            }
            Err(error) => Err(map_sqlx_error(BACKEND, error)),
        }
    }

    /// Admits every `(resource, fence)` pair inside `tx`, in [`admission_order`] (by name,
    /// each once), as [`admit`](Self::admit) does one: a set lock's members in one call,
    /// `fence.admit_all(&mut tx, guard.fences())`. The order is the same in every
    /// transaction that uses it, so two of them admitting overlapping sets never deadlock on
    /// each other's fence rows. The first refusal ends the call with its error, `tx` rolled
    /// back; names are checked before anything is sent.
    pub async fn admit_all<K: AsRef<str>>(
        &self,
        tx: &mut Transaction<'_, MySql>,
        fences: impl IntoIterator<Item = (K, Fence)>,
    ) -> Result<()> {
        for (resource, fence) in admission_order(fences)? {
            self.admit(tx, resource, fence).await?;
        }
        Ok(())
    }

    /// The last fence admitted for `resource` and committed, if any; a plain read. An
    /// invalid `resource` name is [`Error::InvalidKey`] and sends nothing.
    pub async fn current<'e>(
        &self,
        executor: impl Executor<'e, Database = MySql>,
        resource: impl AsRef<str>,
    ) -> Result<Option<Fence>> {
        let resource = &LockKey::new(resource)?;
        let row: Option<(i64, Vec<u8>)> = sqlx::query_as(&self.sql.fence_peek)
            .bind(resource.as_str().as_bytes())
            .fetch_optional(executor)
            .await
            .map_err(|e| map_sqlx_error(BACKEND, e))?;
        row.map(|(token, owner)| fence_from(token, &owner))
            .transpose()
    }
}

/// The current fence named by a refusal's message:
/// `fencelock: stale fence; current token <token> owner <32 hex digits>`.
fn current_fence(message: &str) -> Result<Fence> {
    let unexpected = || protocol(format!("unexpected refusal message {message:?}"));
    let rest = message
        .split_once("current token ")
        .map(|(_, rest)| rest)
        .ok_or_else(unexpected)?;
    let mut words = rest.split_whitespace();
    let token: i64 = words
        .next()
        .and_then(|t| t.parse().ok())
        .ok_or_else(unexpected)?;
    let owner = match (words.next(), words.next()) {
        (Some("owner"), Some(hex)) => parse_hex(hex).ok_or_else(unexpected)?,
        _ => return Err(unexpected()),
    };
    Ok(Fence::new(token_from(token)?, owner_from(&owner)?))
}

fn parse_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use fencelock_core::{FencingToken, OwnerId};

    #[test]
    fn refusal_messages_parse() {
        let owner = OwnerId::random();
        let message = format!("fencelock: stale fence; current token 42 owner {owner}");
        let fence = current_fence(&message).unwrap();
        assert_eq!(fence, Fence::new(FencingToken::new(42).unwrap(), owner));
        for bad in [
            "fencelock: stale fence",
            "fencelock: stale fence; current token x owner 00",
            "fencelock: stale fence; current token 4 owner abc",
            "fencelock: stale fence; current token 0 owner 00000000000000000000000000000000",
        ] {
            assert!(current_fence(bad).is_err(), "{bad}");
        }
    }
}
