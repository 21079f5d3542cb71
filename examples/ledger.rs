//! The classic ledger on the application's own tables: debit `accounts` and write `audit_log`
//! in one transaction under a lock, with the fence on the row itself (the row guard), so a
//! holder whose lock was superseded changes nothing, its audit row included.
//!
//! ```text
//! cargo run --example ledger --features postgres [-- postgres://postgres@127.0.0.1:5432/test]
//! ```

use std::time::Duration;

use fencelock::postgres::sqlx::{self, PgPool};
use fencelock::postgres::{FenceParams, PgDatabase, SqlxResultExt};
use fencelock::{Error, Fence, Locker, OwnerId, Result};

/// What a debit can fail with: the ledger's own refusal, or fencelock's (a stale fence, the
/// database).
#[derive(Debug)]
enum DebitError {
    InsufficientFunds { amount: i64 },
    Fenced(Error),
}

impl From<Error> for DebitError {
    fn from(e: Error) -> Self {
        DebitError::Fenced(e)
    }
}

impl std::fmt::Display for DebitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DebitError::InsufficientFunds { amount } => {
                write!(f, "insufficient funds for {amount}")
            }
            DebitError::Fenced(e) => e.fmt(f),
        }
    }
}

/// Debits `account` by `amount` and records it, as the holder of `fence`. One transaction:
/// the relative `UPDATE` carries the fence, so it needs no read before it, and a refused
/// `UPDATE` rolls the audit row back with it.
async fn debit(pool: &PgPool, account: i64, amount: i64, fence: Fence) -> Result<i64, DebitError> {
    let p = FenceParams::try_from(fence)?;
    // `into_fencelock` types each sqlx error by meaning: a refusal by the row guard
    // (SQLSTATE FL001) is Error::Stale.
    let mut tx = pool.begin().await.into_fencelock("ledger")?;
    sqlx::query("INSERT INTO audit_log (account_id, amount, token) VALUES ($1, $2, $3)")
        .bind(account)
        .bind(-amount)
        .bind(p.token)
        .execute(&mut *tx)
        .await
        .into_fencelock("ledger")?;
    let balance: Option<i64> = sqlx::query_scalar(
        "UPDATE accounts SET balance = balance - $2, fence_token = $3, fence_owner = $4
          WHERE id = $1 AND balance >= $2
         RETURNING balance",
    )
    .bind(account)
    .bind(amount)
    .bind(p.token)
    .bind(p.owner)
    .fetch_optional(&mut *tx)
    .await
    .into_fencelock("ledger")?;
    // No row: not enough money. Dropping `tx` rolls the audit row back.
    let balance = balance.ok_or(DebitError::InsufficientFunds { amount })?;
    tx.commit().await.into_fencelock("ledger")?;
    Ok(balance)
}

#[tokio::main]
async fn main() -> Result<()> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("FENCELOCK_PG_URL").ok())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into());

    // The application's own pool and tables.
    let pool = PgPool::connect(&url).await.into_fencelock("ledger")?;
    for statement in [
        "CREATE TABLE IF NOT EXISTS accounts (
             id bigint PRIMARY KEY, balance bigint NOT NULL CHECK (balance >= 0),
             fence_token bigint, fence_owner bytea)",
        "CREATE TABLE IF NOT EXISTS audit_log (
             id bigserial PRIMARY KEY, account_id bigint NOT NULL, amount bigint NOT NULL,
             token bigint NOT NULL, at timestamptz NOT NULL DEFAULT now())",
    ] {
        sqlx::query(statement)
            .execute(&pool)
            .await
            .into_fencelock("ledger")?;
    }

    // fencelock on the same pool: its tables in the schema `fencelock`, migrated explicitly,
    // and the row guard on `accounts` (installing it again is harmless).
    let db = PgDatabase::from_pool(pool.clone(), "fencelock")?;
    db.migrate().await?;
    db.fence().guard_table(&pool, "accounts").await?;
    let locker = Locker::new(db.lease_backend());

    // A new account each run, so the example can be run again and again.
    let account = i64::try_from(OwnerId::random().as_u128() >> 66).unwrap_or(1);
    sqlx::query("INSERT INTO accounts (id, balance) VALUES ($1, 100)")
        .bind(account)
        .execute(&pool)
        .await
        .into_fencelock("ledger")?;
    let key = format!("account/{account}");

    for amount in [30, 50, 40] {
        let guard = locker.lock(&key).ttl(Duration::from_secs(10)).await?;
        match debit(&pool, account, amount, guard.fence()).await {
            Ok(balance) => show(&format!(
                "debit {amount}: balance {balance} (token {})",
                guard.token()
            )),
            Err(e) => show(&format!("debit {amount} refused, nothing changed: {e}")),
        }
        guard.release().await?;
    }

    // A holder that pauses past its lease: a newer holder debits meanwhile, and the paused
    // holder's debit is refused, its audit row rolled back with it.
    let paused = locker
        .lock(&key)
        .ttl(Duration::from_millis(200))
        .watchdog(false)
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // The newer holder is another process: a `Locker` value of its own.
    let newer = locker
        .clone()
        .lock(&key)
        .ttl(Duration::from_secs(10))
        .await?;
    if let Ok(balance) = debit(&pool, account, 5, newer.fence()).await {
        show(&format!(
            "debit 5 by token {}: balance {balance}",
            newer.token()
        ));
    }
    match debit(&pool, account, 5, paused.fence()).await {
        Ok(_) => show("the paused holder's debit went through: this must not happen"),
        Err(e) => show(&format!(
            "debit 5 by paused token {} refused: {e}",
            paused.token()
        )),
    }
    newer.release().await?;

    let (balance, rows): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT balance FROM accounts WHERE id = $1),
                (SELECT count(*) FROM audit_log WHERE account_id = $1)",
    )
    .bind(account)
    .fetch_one(&pool)
    .await
    .into_fencelock("ledger")?;
    show(&format!(
        "account {account}: balance {balance}, audit rows {rows}"
    ));
    Ok(())
}

#[allow(clippy::print_stdout)]
fn show(line: &str) {
    println!("{line}");
}
