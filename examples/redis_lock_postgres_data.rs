//! The lock comes from Redis, the data lives in Postgres: paying an invoice at most once, with
//! `fencelock_admit` fencing the application's own `invoices` and `payments` tables. Any
//! backend's fencing tokens fence a Postgres transaction; the fence record lives next to the
//! data, so it commits or rolls back with it.
//!
//! ```text
//! cargo run --example redis_lock_postgres_data --features redis,postgres \
//!     [-- redis://127.0.0.1:6379 postgres://postgres@127.0.0.1:5432/test]
//! ```

use std::time::Duration;

use fencelock::postgres::sqlx::{self, PgPool};
use fencelock::postgres::{PgDatabase, PgFence, SqlxResultExt};
use fencelock::redis::RedisConfig;
use fencelock::{Error, Fence, Locker, OwnerId, Result};

/// Pays `invoice` as the holder of `fence`, unless it is paid already. One transaction: the
/// admit first (a fenced read: any holder with an older token is refused from here on), then
/// the read, the decision in the application, and the writes.
async fn pay(pool: &PgPool, fence: &PgFence, invoice: i64, by: Fence) -> Result<bool> {
    let mut tx = pool.begin().await.into_fencelock("invoices")?;
    fence
        .admit(&mut *tx, format!("invoice/{invoice}"), by)
        .await?;
    let status: String = sqlx::query_scalar("SELECT status FROM invoices WHERE id = $1")
        .bind(invoice)
        .fetch_one(&mut *tx)
        .await
        .into_fencelock("invoices")?;
    if status == "paid" {
        // Committing keeps the fenced read: older holders stay refused.
        tx.commit().await.into_fencelock("invoices")?;
        return Ok(false);
    }
    sqlx::query("UPDATE invoices SET status = 'paid' WHERE id = $1")
        .bind(invoice)
        .execute(&mut *tx)
        .await
        .into_fencelock("invoices")?;
    sqlx::query("INSERT INTO payments (invoice_id, token) VALUES ($1, $2)")
        .bind(invoice)
        // The token as a `bigint`: checked, a token above i64::MAX is refused, never wrapped.
        .bind(i64::try_from(by.token)?)
        .execute(&mut *tx)
        .await
        .into_fencelock("invoices")?;
    tx.commit().await.into_fencelock("invoices")?;
    Ok(true)
}

#[tokio::main]
async fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let redis_url = args
        .next()
        .unwrap_or_else(|| "redis://127.0.0.1:6379".into());
    let pg_url = args
        .next()
        .or_else(|| std::env::var("FENCELOCK_PG_URL").ok())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".into());

    let locker = Locker::new(
        RedisConfig::new(redis_url)
            .prefix("example")
            .connect()
            .await?,
    );

    let pool = PgPool::connect(&pg_url).await.into_fencelock("invoices")?;
    for statement in [
        "CREATE TABLE IF NOT EXISTS invoices (id bigint PRIMARY KEY, status text NOT NULL)",
        "CREATE TABLE IF NOT EXISTS payments (
             id bigserial PRIMARY KEY, invoice_id bigint NOT NULL, token bigint NOT NULL)",
    ] {
        sqlx::query(statement)
            .execute(&pool)
            .await
            .into_fencelock("invoices")?;
    }
    let db = PgDatabase::from_pool(pool.clone(), "fencelock")?;
    db.migrate().await?;
    let fence = db.fence();

    let invoice = i64::try_from(OwnerId::random().as_u128() >> 66).unwrap_or(1);
    sqlx::query("INSERT INTO invoices (id, status) VALUES ($1, 'open')")
        .bind(invoice)
        .execute(&pool)
        .await
        .into_fencelock("invoices")?;
    let key = format!("invoice/{invoice}");

    // Worker A takes the Redis lock, then stalls past its lease before paying.
    let a = locker
        .lock(&key)
        .ttl(Duration::from_millis(200))
        .watchdog(false)
        .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Worker B, another process (a `Locker` value of its own), takes over and pays.
    let b = locker
        .clone()
        .lock(&key)
        .ttl(Duration::from_secs(10))
        .await?;
    let paid = pay(&pool, &fence, invoice, b.fence()).await?;
    show(&format!("worker B (token {}): paid = {paid}", b.token()));
    // Worker A wakes up and tries to pay too: refused, nothing written.
    match pay(&pool, &fence, invoice, a.fence()).await {
        Err(Error::Stale { current, .. }) => show(&format!(
            "worker A (token {}) refused: invoice/{invoice} is fenced at token {}",
            a.token(),
            current.token
        )),
        other => show(&format!("worker A: unexpected {other:?}")),
    }
    b.release().await?;

    let payments: i64 = sqlx::query_scalar("SELECT count(*) FROM payments WHERE invoice_id = $1")
        .bind(invoice)
        .fetch_one(&pool)
        .await
        .into_fencelock("invoices")?;
    show(&format!("invoice {invoice}: {payments} payment(s)"));
    Ok(())
}

#[allow(clippy::print_stdout)]
fn show(line: &str) {
    println!("{line}");
}
