//! The classic ledger: debit an account and write its audit row under one transaction lock.
//! Either both happen or neither does, and a holder whose fence was superseded changes nothing.
//!
//! ```text
//! cargo run --example ledger --features postgres [-- postgres://postgres@127.0.0.1:5432/test]
//! ```

use std::time::Duration;

use fencelock::postgres::{PgConfig, map_sqlx_error};
use fencelock::{Error, LockKey, Result};

/// What a debit can fail with: the ledger's own refusal, or fencelock's (a stale fence, a lock
/// not obtained in time, the database).
#[derive(Debug)]
enum DebitError {
    InsufficientFunds { balance: i64, amount: i64 },
    CorruptBalance,
    Lock(Error),
}

impl From<Error> for DebitError {
    fn from(e: Error) -> Self {
        DebitError::Lock(e)
    }
}

impl std::fmt::Display for DebitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DebitError::InsufficientFunds { balance, amount } => {
                write!(f, "insufficient funds: balance {balance}, debit {amount}")
            }
            DebitError::CorruptBalance => f.write_str("the stored balance is not 8 bytes"),
            DebitError::Lock(e) => e.fmt(f),
        }
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("FENCELOCK_PG_URL").ok())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into());
    let db = PgConfig::from_url(&url)?
        .schema("fencelock_ledger_example")
        .connect()
        .await?;
    let sql = |e| map_sqlx_error("ledger", e);
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS ledger_audit (
             id bigserial PRIMARY KEY, account text NOT NULL, amount bigint NOT NULL,
             balance bigint NOT NULL, token bigint NOT NULL, at timestamptz DEFAULT now())",
    )
    .execute(db.pool())
    .await
    .map_err(sql)?;

    let storage = db.storage();
    // A new account each run, so the example can be run again and again.
    let account = LockKey::new(format!("account/{}", fencelock::OwnerId::random()))?;
    for amount in [30_i64, 50, 40] {
        let key = account.clone();
        let outcome = storage
            .transaction(&account, Duration::from_secs(5), move |tx| {
                Box::pin(async move {
                    // A fenced read: any holder with an older token is now refused.
                    let balance = match tx.read(&key).await? {
                        Some(bytes) => i64::from_le_bytes(
                            bytes.try_into().map_err(|_| DebitError::CorruptBalance)?,
                        ),
                        None => 100, // a new account opens with 100
                    };
                    if balance < amount {
                        return Err(DebitError::InsufficientFunds { balance, amount });
                    }
                    let balance = balance - amount;
                    tx.write(&key, &balance.to_le_bytes()).await?;
                    let token = i64::try_from(tx.token().get())
                        .map_err(|_| Error::config("token out of range"))?;
                    sqlx::query(
                        "INSERT INTO ledger_audit (account, amount, balance, token)
                         VALUES ($1, $2, $3, $4)",
                    )
                    .bind(key.as_str())
                    .bind(-amount)
                    .bind(balance)
                    .bind(token)
                    .execute(tx.connection())
                    .await
                    .map_err(|e| map_sqlx_error("ledger", e))?;
                    Ok::<_, DebitError>((balance, token))
                })
            })
            .await;
        match outcome {
            Ok((balance, token)) => {
                show(&format!(
                    "debit {amount}: balance {balance} (token {token})"
                ));
            }
            // Rolled back: neither the balance nor the audit row changed.
            Err(e) => show(&format!("debit {amount} refused, nothing changed: {e}")),
        }
    }
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM ledger_audit WHERE account = $1")
        .bind(account.as_str())
        .fetch_one(db.pool())
        .await
        .map_err(sql)?;
    show(&format!("audit rows: {rows}"));
    db.close().await;
    Ok(())
}

#[allow(clippy::print_stdout)]
fn show(line: &str) {
    println!("{line}");
}
