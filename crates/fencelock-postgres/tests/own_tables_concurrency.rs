//! Many holders doing read-modify-write of one `accounts` row under real leases that are made
//! to overlap (short ttl, no watchdog, holders that pause past it): every update the fence
//! admits is counted, and the final balance must be exactly their number (no lost update).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use fencelock_core::{Error, Fence, LockKey, Locker};
use fencelock_postgres::{FenceParams, PgFence, map_sqlx_error};
use sqlx::PgPool;
use tokio::time::{Instant, sleep};

const TASKS: usize = 8;
const ROUNDS: usize = 8;
const TTL: Duration = Duration::from_millis(150);
/// How long a pausing holder waits for a newer holder to read before giving up.
const PATIENCE: Duration = Duration::from_secs(60);

fn sql(e: sqlx::Error) -> Error {
    map_sqlx_error("app", e)
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    Admit,
    RowGuard,
}

#[derive(Debug, Clone)]
struct Ledger {
    pool: PgPool,
    fence: PgFence,
    mode: Mode,
    key: LockKey,
}

impl Ledger {
    /// The fenced read: from now on a holder with an older fence is refused.
    async fn read(&self, by: Fence) -> Result<i64, Error> {
        let p = FenceParams::try_from(by)?;
        match self.mode {
            Mode::Admit => {
                let mut tx = self.pool.begin().await.map_err(sql)?;
                self.fence.admit(&mut *tx, &self.key, by).await?;
                let balance = sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 1")
                    .fetch_one(&mut *tx)
                    .await
                    .map_err(sql)?;
                tx.commit().await.map_err(sql)?;
                Ok(balance)
            }
            Mode::RowGuard => sqlx::query_scalar(
                "UPDATE accounts SET fence_token = $1, fence_owner = $2 WHERE id = 1 \
                 RETURNING balance",
            )
            .bind(p.token)
            .bind(p.owner)
            .fetch_one(&self.pool)
            .await
            .map_err(sql),
        }
    }

    /// The write of a value computed in the application: an absolute balance.
    async fn write(&self, by: Fence, balance: i64) -> Result<(), Error> {
        let p = FenceParams::try_from(by)?;
        match self.mode {
            Mode::Admit => {
                let mut tx = self.pool.begin().await.map_err(sql)?;
                self.fence.admit(&mut *tx, &self.key, by).await?;
                sqlx::query("UPDATE accounts SET balance = $1 WHERE id = 1")
                    .bind(balance)
                    .execute(&mut *tx)
                    .await
                    .map_err(sql)?;
                tx.commit().await.map_err(sql)
            }
            Mode::RowGuard => sqlx::query(
                "UPDATE accounts SET balance = $1, fence_token = $2, fence_owner = $3 \
                 WHERE id = 1",
            )
            .bind(balance)
            .bind(p.token)
            .bind(p.owner)
            .execute(&self.pool)
            .await
            .map(drop)
            .map_err(sql),
        }
    }

    /// The token of the last admitted fence, unfenced.
    async fn current_token(&self) -> u64 {
        match self.mode {
            Mode::Admit => self
                .fence
                .current(&self.pool, &self.key)
                .await
                .unwrap()
                .map_or(0, |f| f.token.get()),
            Mode::RowGuard => {
                let token: Option<i64> =
                    sqlx::query_scalar("SELECT fence_token FROM accounts WHERE id = 1")
                        .fetch_one(&self.pool)
                        .await
                        .unwrap();
                token.map_or(0, |t| u64::try_from(t).unwrap())
            }
        }
    }
}

#[derive(Debug, Default)]
struct Outcomes {
    admitted: AtomicU64,
    refused_reads: AtomicU64,
    refused_writes: AtomicU64,
}

async fn no_lost_update(mode: Mode) {
    let s = common::split().await;
    sqlx::query(
        "CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, \
         fence_token bigint, fence_owner bytea)",
    )
    .execute(&s.pool)
    .await
    .unwrap();
    sqlx::query("INSERT INTO accounts (id, balance) VALUES (1, 0)")
        .execute(&s.pool)
        .await
        .unwrap();
    let fence = s.db.fence();
    if let Mode::RowGuard = mode {
        fence.guard_table(&s.pool, "accounts").await.unwrap();
    }
    let ledger = Ledger {
        pool: s.pool.clone(),
        fence,
        mode,
        key: LockKey::new("account/1").unwrap(),
    };
    let locker = Locker::new(s.db.lease_backend());
    let outcomes = Arc::new(Outcomes::default());
    let active = Arc::new(AtomicUsize::new(TASKS));
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let (ledger, locker) = (ledger.clone(), locker.clone());
        let (outcomes, active) = (outcomes.clone(), active.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..ROUNDS {
                let guard = locker
                    .lock(ledger.key.as_str())
                    .ttl(TTL)
                    .wait(PATIENCE)
                    .watchdog(false)
                    .await
                    .unwrap();
                let fence = guard.fence();
                let balance = match ledger.read(fence).await {
                    Ok(balance) => balance,
                    Err(Error::Stale { .. }) => {
                        outcomes.refused_reads.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Err(other) => panic!("read: {other}"),
                };
                if round % 4 == 1 {
                    // The paused holder: its lease runs out, and it only goes on once a newer
                    // holder has read (or nobody else is left to take over).
                    let deadline = Instant::now() + PATIENCE;
                    while ledger.current_token().await <= fence.token.get()
                        && active.load(Ordering::SeqCst) > 1
                    {
                        assert!(Instant::now() < deadline, "no newer holder took over");
                        sleep(Duration::from_millis(20)).await;
                    }
                } else {
                    // Think time of up to one ttl: some holders overrun their lease.
                    sleep(Duration::from_millis(((t * 37 + round * 53) % 150) as u64)).await;
                }
                match ledger.write(fence, balance + 1).await {
                    Ok(()) => outcomes.admitted.fetch_add(1, Ordering::Relaxed),
                    Err(Error::Stale { .. }) => {
                        outcomes.refused_writes.fetch_add(1, Ordering::Relaxed)
                    }
                    Err(other) => panic!("write: {other}"),
                };
                // Ok(false) when the lease ran out: nothing to release.
                guard.release().await.unwrap();
            }
            active.fetch_sub(1, Ordering::SeqCst);
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let balance: i64 = sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 1")
        .fetch_one(&s.pool)
        .await
        .unwrap();
    let admitted = outcomes.admitted.load(Ordering::Relaxed);
    let refused_writes = outcomes.refused_writes.load(Ordering::Relaxed);
    assert_eq!(
        u64::try_from(balance).unwrap(),
        admitted,
        "{mode:?}: lost update ({outcomes:?})"
    );
    assert!(admitted > 0, "{mode:?}: nothing admitted ({outcomes:?})");
    assert!(
        refused_writes > 0,
        "{mode:?}: the leases never overlapped ({outcomes:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_holders_lose_no_update_through_admit() {
    no_lost_update(Mode::Admit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_holders_lose_no_update_through_the_row_guard() {
    no_lost_update(Mode::RowGuard).await;
}
