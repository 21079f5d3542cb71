//! `MySqlFence::admit` inside the caller's own transactions, on the caller's own tables and
//! pool: the storage properties of the conformance suite through a small `FencedStorage` over a
//! user table, the ledger (debit + audit row) with a paused holder, lost updates prevented
//! under overlapping leases, and what a refusal or a failure rolls back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use fencelock_conformance::Setup;
use fencelock_core::{
    Error, Fence, FenceRule, FencedStorage, FencingToken, LockBackend, LockKey, Locker, OwnerId,
    Result, Snapshot, async_trait, validate_value,
};
use fencelock_mysql::sqlx::mysql::{MySql, MySqlPool, MySqlPoolOptions};
use fencelock_mysql::sqlx::{self, Executor, Transaction};
use fencelock_mysql::{MySqlFence, map_sqlx_error};
use tokio::time::sleep;

fn db_error(error: sqlx::Error) -> Error {
    map_sqlx_error("user-table", error)
}

/// The application's own pool, separate from fencelock's.
async fn app_pool() -> MySqlPool {
    let config = fencelock_mysql::MySqlConfig::from_url(&common::url()).unwrap();
    MySqlPoolOptions::new()
        .max_connections(16)
        .connect_with(config.connect_options().unwrap())
        .await
        .unwrap()
}

/// A `FencedStorage` over a user table `(resource, value)`: each operation is one transaction
/// of the application's own pool that admits the fence first.
#[derive(Debug)]
struct UserTable {
    pool: MySqlPool,
    fence: MySqlFence,
    table: String,
}

impl UserTable {
    async fn begin(&self) -> Result<Transaction<'static, MySql>> {
        self.pool.begin().await.map_err(db_error)
    }
}

#[async_trait]
impl FencedStorage for UserTable {
    fn name(&self) -> &'static str {
        "user-table"
    }

    fn max_value_len(&self) -> usize {
        4 << 20
    }

    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        let mut tx = self.begin().await?;
        self.fence.admit(&mut tx, resource, fence).await?;
        let value: Option<Option<Vec<u8>>> = sqlx::query_scalar(&format!(
            "SELECT value FROM {} WHERE resource = ?",
            self.table
        ))
        .bind(resource.as_str().as_bytes())
        .fetch_optional(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)?;
        Ok(value.flatten())
    }

    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        validate_value(value, self.max_value_len())?;
        let mut tx = self.begin().await?;
        self.fence.admit(&mut tx, resource, fence).await?;
        sqlx::query(&format!(
            "INSERT INTO {} (resource, value) VALUES (?, ?) \
             ON DUPLICATE KEY UPDATE value = VALUES(value)",
            self.table
        ))
        .bind(resource.as_str().as_bytes())
        .bind(value)
        .execute(&mut *tx)
        .await
        .map_err(db_error)?;
        tx.commit().await.map_err(db_error)
    }

    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        let Some(fence) = self.fence.current(&self.pool, resource).await? else {
            return Ok(None);
        };
        let value: Option<Option<Vec<u8>>> = sqlx::query_scalar(&format!(
            "SELECT value FROM {} WHERE resource = ?",
            self.table
        ))
        .bind(resource.as_str().as_bytes())
        .fetch_optional(&self.pool)
        .await
        .map_err(db_error)?;
        Ok(Some(Snapshot {
            value: value.flatten(),
            fence,
        }))
    }
}

async fn user_table_setup() -> Setup {
    let (db, mut cleanup) = common::database("u").await;
    let pool = app_pool().await;
    let fence = MySqlFence::new(db.prefix()).unwrap();
    // Idempotent: the objects are there already; an application with its own pool calls it.
    fence.install(&pool).await.unwrap();
    let table = cleanup.table("user_values");
    pool.execute(
        format!(
            "CREATE TABLE {table} (resource VARBINARY(512) PRIMARY KEY, value LONGBLOB NULL) \
             ENGINE = InnoDB"
        )
        .as_str(),
    )
    .await
    .unwrap();
    let storage = UserTable { pool, fence, table };
    Setup::for_storage(Arc::new(db.lock_backend()), Arc::new(storage)).keep(cleanup)
}

mod user_table {
    fencelock_conformance::storage_suite!(super::user_table_setup());
}

/// A ledger of the user's own: `accounts` and `audit_log`.
struct Ledger {
    pool: MySqlPool,
    fence: MySqlFence,
    accounts: String,
    audit: String,
    account: LockKey,
}

async fn ledger(tag: &str) -> (fencelock_mysql::MySqlDatabase, common::Cleanup, Ledger) {
    let (db, mut cleanup) = common::database(tag).await;
    let pool = app_pool().await;
    let accounts = cleanup.table("accounts");
    let audit = cleanup.table("audit_log");
    pool.execute(
        format!(
            "CREATE TABLE {accounts} (id INT PRIMARY KEY, balance BIGINT NOT NULL) ENGINE = InnoDB"
        )
        .as_str(),
    )
    .await
    .unwrap();
    pool.execute(
        format!(
            "CREATE TABLE {audit} (id BIGINT AUTO_INCREMENT PRIMARY KEY, account INT NOT NULL, \
             amount BIGINT NOT NULL, token BIGINT NOT NULL) ENGINE = InnoDB"
        )
        .as_str(),
    )
    .await
    .unwrap();
    sqlx::query(&format!("INSERT INTO {accounts} VALUES (10, 1000)"))
        .execute(&pool)
        .await
        .unwrap();
    let ledger = Ledger {
        pool,
        fence: db.fence(),
        accounts,
        audit,
        account: LockKey::new(format!("accounts/10/{}", OwnerId::random())).unwrap(),
    };
    (db, cleanup, ledger)
}

impl Ledger {
    async fn balance(&self) -> i64 {
        sqlx::query_scalar(&format!(
            "SELECT balance FROM {} WHERE id = 10",
            self.accounts
        ))
        .fetch_one(&self.pool)
        .await
        .unwrap()
    }

    async fn audit_tokens(&self) -> Vec<i64> {
        sqlx::query_scalar(&format!("SELECT token FROM {} ORDER BY id", self.audit))
            .fetch_all(&self.pool)
            .await
            .unwrap()
    }

    /// The debit and its audit row, in `tx`.
    async fn debit(&self, tx: &mut Transaction<'_, MySql>, amount: i64, fence: Fence) {
        sqlx::query(&format!(
            "UPDATE {} SET balance = balance - ? WHERE id = 10",
            self.accounts
        ))
        .bind(amount)
        .execute(&mut **tx)
        .await
        .unwrap();
        sqlx::query(&format!(
            "INSERT INTO {} (account, amount, token) VALUES (10, ?, ?)",
            self.audit
        ))
        .bind(-amount)
        .bind(i64::try_from(fence.token).unwrap())
        .execute(&mut **tx)
        .await
        .unwrap();
    }
}

/// Two fences of successive grants of `key`: as a paused client and its successor hold.
async fn successive(backend: &dyn LockBackend, key: &LockKey) -> (Fence, Fence) {
    let mut fences = Vec::new();
    for _ in 0..2 {
        let lease = backend
            .try_acquire(key, Duration::from_secs(30))
            .await
            .unwrap()
            .unwrap();
        fences.push(lease.fence());
        assert!(backend.release(&lease).await.unwrap());
    }
    (fences[0], fences[1])
}

fn assert_stale(outcome: Result<()>, presented: Fence, current: Fence) {
    match outcome {
        Err(Error::Stale {
            presented: p,
            current: c,
            ..
        }) => assert_eq!((p, c), (presented, current)),
        other => panic!("expected Stale (presented {presented}, current {current}), got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_rolls_back_everything_the_transaction_did() {
    let (db, _cleanup, ledger) = ledger("refuse").await;
    let (old, new) = successive(&db.lock_backend(), &ledger.account).await;

    let mut tx = ledger.pool.begin().await.unwrap();
    ledger
        .fence
        .admit(&mut tx, &ledger.account, new)
        .await
        .unwrap();
    ledger.debit(&mut tx, 100, new).await;
    tx.commit().await.unwrap();

    // The older holder debits and writes its audit row first, then asks: refused.
    let mut tx = ledger.pool.begin().await.unwrap();
    ledger.debit(&mut tx, 100, old).await;
    assert_stale(
        ledger.fence.admit(&mut tx, &ledger.account, old).await,
        old,
        new,
    );
    // Even a commit after the refusal commits nothing: the transaction was rolled back.
    tx.commit().await.unwrap();
    assert_eq!(ledger.balance().await, 900);
    assert_eq!(
        ledger.audit_tokens().await,
        [i64::try_from(new.token).unwrap()]
    );
    assert_eq!(
        ledger
            .fence
            .current(&ledger.pool, &ledger.account)
            .await
            .unwrap(),
        Some(new)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_cannot_debit_the_users_own_table() {
    let (db, _cleanup, ledger) = ledger("pause").await;
    let locker = Locker::new(db.lock_backend());
    let ttl = Duration::from_millis(500);

    // A takes the lock, starts its transaction with the audit row, and pauses past its lease.
    let a = locker
        .lock(&ledger.account)
        .ttl(ttl)
        .watchdog(false)
        .await
        .unwrap();
    let mut a_tx = ledger.pool.begin().await.unwrap();
    sqlx::query(&format!(
        "INSERT INTO {} (account, amount, token) VALUES (10, -100, ?)",
        ledger.audit
    ))
    .bind(i64::try_from(a.token()).unwrap())
    .execute(&mut *a_tx)
    .await
    .unwrap();
    sleep(ttl * 2).await;

    // B takes the lock over and debits.
    let b = locker
        .lock(&ledger.account)
        .ttl(Duration::from_secs(30))
        .wait(Duration::from_secs(10))
        .await
        .unwrap();
    let mut b_tx = ledger.pool.begin().await.unwrap();
    ledger
        .fence
        .admit(&mut b_tx, &ledger.account, b.fence())
        .await
        .unwrap();
    ledger.debit(&mut b_tx, 100, b.fence()).await;
    b_tx.commit().await.unwrap();

    // A wakes: its admit is refused, and its audit row goes with the rollback.
    assert_stale(
        ledger
            .fence
            .admit(&mut a_tx, &ledger.account, a.fence())
            .await,
        a.fence(),
        b.fence(),
    );
    drop(a_tx);
    assert_eq!(ledger.balance().await, 900);
    assert_eq!(
        ledger.audit_tokens().await,
        [i64::try_from(b.token()).unwrap()],
        "the paused holder's audit row survived"
    );
    assert!(!a.release().await.unwrap());
    assert!(b.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_fence_the_same_interleaving_loses_an_update_and_with_it_none() {
    let (db, _cleanup, ledger) = ledger("interleave").await;
    let read = format!("SELECT balance FROM {} WHERE id = 10", ledger.accounts);
    let write = format!("UPDATE {} SET balance = ? WHERE id = 10", ledger.accounts);

    // The hazard, unfenced: T1 reads, T2 reads, T2 writes, T1 writes. One credit is lost.
    let mut t1 = ledger.pool.begin().await.unwrap();
    let mut t2 = ledger.pool.begin().await.unwrap();
    let r1: i64 = sqlx::query_scalar(&read).fetch_one(&mut *t1).await.unwrap();
    let r2: i64 = sqlx::query_scalar(&read).fetch_one(&mut *t2).await.unwrap();
    sqlx::query(&write)
        .bind(r2 + 10)
        .execute(&mut *t2)
        .await
        .unwrap();
    t2.commit().await.unwrap();
    sqlx::query(&write)
        .bind(r1 + 10)
        .execute(&mut *t1)
        .await
        .unwrap();
    t1.commit().await.unwrap();
    assert_eq!(
        ledger.balance().await,
        1010,
        "the unfenced interleaving lost nothing"
    );

    // Fenced: T2's admit waits for T1, then reads what T1 committed.
    let (f1, f2) = successive(&db.lock_backend(), &ledger.account).await;
    let mut t1 = ledger.pool.begin().await.unwrap();
    ledger
        .fence
        .admit(&mut t1, &ledger.account, f1)
        .await
        .unwrap();
    let r1: i64 = sqlx::query_scalar(&read).fetch_one(&mut *t1).await.unwrap();
    let t2 = {
        let (pool, fence, account, read, write) = (
            ledger.pool.clone(),
            ledger.fence.clone(),
            ledger.account.clone(),
            read.clone(),
            write.clone(),
        );
        tokio::spawn(async move {
            let mut t2 = pool.begin().await.unwrap();
            fence.admit(&mut t2, &account, f2).await.unwrap();
            let r2: i64 = sqlx::query_scalar(&read).fetch_one(&mut *t2).await.unwrap();
            sqlx::query(&write)
                .bind(r2 + 10)
                .execute(&mut *t2)
                .await
                .unwrap();
            t2.commit().await.unwrap();
        })
    };
    sleep(Duration::from_millis(300)).await;
    assert!(!t2.is_finished(), "T2 was admitted while T1 held the fence");
    sqlx::query(&write)
        .bind(r1 + 10)
        .execute(&mut *t1)
        .await
        .unwrap();
    t1.commit().await.unwrap();
    t2.await.unwrap();
    assert_eq!(
        ledger.balance().await,
        1030,
        "the fenced interleaving lost an update"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_leases_lose_no_update_through_admit() {
    const TASKS: usize = 4;
    const ROUNDS: usize = 8;
    let (db, _cleanup, ledger) = ledger("overlap").await;
    let ledger = Arc::new(ledger);
    let locker = Locker::new(db.lock_backend());
    let admitted = Arc::new(AtomicU64::new(0));
    let refused = Arc::new(AtomicU64::new(0));
    let ttl = Duration::from_millis(60);
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let (ledger, locker, admitted, refused) = (
            ledger.clone(),
            locker.clone(),
            admitted.clone(),
            refused.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let read = format!("SELECT balance FROM {} WHERE id = 10", ledger.accounts);
            let write = format!("UPDATE {} SET balance = ? WHERE id = 10", ledger.accounts);
            for _ in 0..ROUNDS {
                let guard = locker
                    .lock(&ledger.account)
                    .ttl(ttl)
                    .watchdog(false)
                    .wait(Duration::from_secs(60))
                    .await
                    .unwrap();
                // Some holders are slow to start, so that a newer holder may admit first.
                let jitter = OwnerId::random().as_u128() % 120;
                sleep(Duration::from_millis(u64::try_from(jitter).unwrap())).await;
                let mut tx = ledger.pool.begin().await.unwrap();
                match ledger
                    .fence
                    .admit(&mut tx, &ledger.account, guard.fence())
                    .await
                {
                    Ok(()) => {}
                    Err(Error::Stale { .. }) => {
                        refused.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                    Err(other) => panic!("admit failed: {other}"),
                }
                let balance: i64 = sqlx::query_scalar(&read).fetch_one(&mut *tx).await.unwrap();
                // Work past the lease, so that the next holder is granted meanwhile.
                sleep(ttl * 2).await;
                sqlx::query(&write)
                    .bind(balance + 1)
                    .execute(&mut *tx)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                admitted.fetch_add(1, Ordering::Relaxed);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let admitted = admitted.load(Ordering::Relaxed);
    assert_eq!(
        admitted + refused.load(Ordering::Relaxed),
        (TASKS * ROUNDS) as u64
    );
    assert!(admitted > 0);
    assert_eq!(
        ledger.balance().await,
        1000 + i64::try_from(admitted).unwrap(),
        "an admitted increment was lost"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_the_admit_rolls_the_fence_back_too() {
    let (db, _cleanup, ledger) = ledger("fail").await;
    let (old, new) = successive(&db.lock_backend(), &ledger.account).await;
    let mut tx = ledger.pool.begin().await.unwrap();
    ledger
        .fence
        .admit(&mut tx, &ledger.account, new)
        .await
        .unwrap();
    let duplicate = sqlx::query(&format!("INSERT INTO {} VALUES (10, 0)", ledger.accounts))
        .execute(&mut *tx)
        .await;
    assert!(duplicate.is_err(), "the failing statement did not fail");
    drop(tx);
    assert_eq!(
        ledger
            .fence
            .current(&ledger.pool, &ledger.account)
            .await
            .unwrap(),
        None,
        "the fence of a rolled-back transaction stayed"
    );
    // So the older fence is still admitted.
    let mut tx = ledger.pool.begin().await.unwrap();
    ledger
        .fence
        .admit(&mut tx, &ledger.account, old)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        ledger
            .fence
            .current(&ledger.pool, &ledger.account)
            .await
            .unwrap(),
        Some(old)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_strict_rule_admits_one_transaction_per_token() {
    let (db, _cleanup, ledger) = ledger("strict").await;
    let strict = ledger.fence.clone().with_rule(FenceRule::Strict);
    let (_, fence) = successive(&db.lock_backend(), &ledger.account).await;
    let mut tx = ledger.pool.begin().await.unwrap();
    strict.admit(&mut tx, &ledger.account, fence).await.unwrap();
    tx.commit().await.unwrap();
    let mut tx = ledger.pool.begin().await.unwrap();
    assert_stale(
        strict.admit(&mut tx, &ledger.account, fence).await,
        fence,
        fence,
    );
    // The default rule admits the same fence again.
    let mut tx = ledger.pool.begin().await.unwrap();
    ledger
        .fence
        .admit(&mut tx, &ledger.account, fence)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_above_i64_max_is_refused_before_anything_is_sent() {
    let (_db, _cleanup, ledger) = ledger("huge").await;
    let huge = Fence::new(
        FencingToken::new(i64::MAX as u64 + 1).unwrap(),
        OwnerId::random(),
    );
    let mut tx = ledger.pool.begin().await.unwrap();
    match ledger.fence.admit(&mut tx, &ledger.account, huge).await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("9223372036854775808"), "{message}")
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    drop(tx);
    assert_eq!(
        ledger
            .fence
            .current(&ledger.pool, &ledger.account)
            .await
            .unwrap(),
        None
    );
    assert!(MySqlFence::new("Not a prefix").is_err());
}

/// A set lock's members admitted in one call: every member's fence recorded with the
/// transaction, whatever order they come in; an older member refuses the whole transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_admitted_in_one_call() {
    let (db, _cleanup) = common::database("set").await;
    let pool = app_pool().await;
    let fence = db.fence();
    let locker = Locker::new(db.lock_backend());
    let set = locker
        .lock_all(["account/2", "account/1"])
        .ttl(Duration::from_secs(30))
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    fence.admit_all(&mut tx, set.fences()).await.unwrap();
    tx.commit().await.unwrap();
    for (key, member) in set.fences() {
        assert_eq!(
            fence.current(&pool, &key).await.unwrap(),
            Some(member),
            "{key}"
        );
    }
    let older: Vec<(LockKey, Fence)> = set
        .fences()
        .map(|(key, f)| {
            let token = FencingToken::new(f.token.get() - 1).unwrap_or(f.token);
            (key, Fence::new(token, OwnerId::random()))
        })
        .collect();
    let mut tx = pool.begin().await.unwrap();
    assert!(matches!(
        fence.admit_all(&mut tx, older).await,
        Err(Error::Stale { .. })
    ));
    drop(tx);
    for (key, member) in set.fences() {
        assert_eq!(
            fence.current(&pool, &key).await.unwrap(),
            Some(member),
            "{key}"
        );
    }
    set.release().await.unwrap();
}
