//! Fencing the application's own tables: the paused-holder story on `accounts` and
//! `audit_log`, the application's pool and `search_path`, rollbacks, bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::{
    Error, Fence, FenceRule, FencingToken, LockBackend, LockKey, Locker, OwnerId,
};
use fencelock_memory::MemoryLockBackend;
use fencelock_postgres::{FenceParams, PgConfig, PgFence, map_sqlx_error};
use fencelock_testkit::postgres::{PgSchema, pg_options};
use sqlx::PgPool;

const SHORT_TTL: Duration = Duration::from_millis(300);
const PAST_SHORT_TTL: Duration = Duration::from_millis(900);
const LONG_TTL: Duration = Duration::from_secs(30);

fn sql(e: sqlx::Error) -> Error {
    map_sqlx_error("app", e)
}

fn fence_of(token: u64) -> Fence {
    Fence::new(FencingToken::new(token).unwrap(), OwnerId::random())
}

/// The application's tables, as it would have them: the fence columns on `accounts` only.
async fn create_ledger(pool: &PgPool) {
    for statement in [
        "CREATE TABLE accounts (id bigint PRIMARY KEY, balance bigint NOT NULL, \
         fence_token bigint, fence_owner bytea)",
        "CREATE TABLE audit_log (id bigserial PRIMARY KEY, account_id bigint NOT NULL, \
         amount bigint NOT NULL, token bigint NOT NULL)",
        "INSERT INTO accounts (id, balance) VALUES (10, 1000)",
    ] {
        sqlx::query(statement).execute(pool).await.unwrap();
    }
}

async fn balance(pool: &PgPool) -> i64 {
    sqlx::query_scalar("SELECT balance FROM accounts WHERE id = 10")
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn audit_tokens(pool: &PgPool) -> Vec<i64> {
    sqlx::query_scalar("SELECT token FROM audit_log ORDER BY id")
        .fetch_all(pool)
        .await
        .unwrap()
}

#[derive(Debug, Clone, Copy)]
enum Mode {
    /// `fencelock_admit` on the resource `account/10`, then plain SQL.
    Admit,
    /// The row guard on `accounts`: the UPDATE carries the fence.
    RowGuard,
}

/// Debits account 10 and writes its audit row, in one transaction, fenced by `mode`. The
/// audit row is written first, so a refusal visibly rolls back a statement that succeeded.
async fn debit(
    pool: &PgPool,
    fence: &PgFence,
    mode: Mode,
    by: Fence,
    amount: i64,
) -> Result<(), Error> {
    let p = FenceParams::try_from(by)?;
    let mut tx = pool.begin().await.map_err(sql)?;
    sqlx::query("INSERT INTO audit_log (account_id, amount, token) VALUES (10, $1, $2)")
        .bind(-amount)
        .bind(p.token)
        .execute(&mut *tx)
        .await
        .map_err(sql)?;
    match mode {
        Mode::Admit => {
            fence
                .admit(&mut *tx, &LockKey::new("account/10")?, by)
                .await?;
            sqlx::query("UPDATE accounts SET balance = balance - $1 WHERE id = 10")
                .bind(amount)
                .execute(&mut *tx)
                .await
                .map_err(sql)?;
        }
        Mode::RowGuard => {
            sqlx::query(
                "UPDATE accounts SET balance = balance - $1, fence_token = $2, fence_owner = $3 \
                 WHERE id = 10",
            )
            .bind(amount)
            .bind(p.token)
            .bind(p.owner)
            .execute(&mut *tx)
            .await
            .map_err(sql)?;
        }
    }
    tx.commit().await.map_err(sql)
}

/// DESIGN section 1 on the application's own tables: holder A pauses past its lease, B takes
/// the lock and debits, A wakes and debits: A's UPDATE is refused and its audit row rolls back.
async fn paused_holder_story(mode: Mode) {
    let s = common::split().await;
    create_ledger(&s.pool).await;
    let fence = s.db.fence();
    if let Mode::RowGuard = mode {
        fence.guard_table(&s.pool, "accounts").await.unwrap();
    }
    let locker = Locker::new(s.db.lease_backend());
    let a = locker
        .lock("account/10")
        .ttl(SHORT_TTL)
        .watchdog(false)
        .await
        .unwrap();
    tokio::time::sleep(PAST_SHORT_TTL).await; // A's pause
    assert!(!a.is_held());
    let b = locker.lock("account/10").ttl(LONG_TTL).await.unwrap();
    assert!(b.token() > a.token());
    debit(&s.pool, &fence, mode, b.fence(), 100).await.unwrap();
    match debit(&s.pool, &fence, mode, a.fence(), 500).await {
        Err(Error::Stale {
            resource,
            presented,
            current,
        }) => {
            assert_eq!(presented, a.fence());
            assert_eq!(current, b.fence());
            match mode {
                Mode::Admit => assert_eq!(resource, "account/10"),
                Mode::RowGuard => {
                    assert_eq!(resource, format!("{}.accounts (id=10)", s.app.name()));
                }
            }
        }
        other => panic!("{mode:?}: expected Stale, got {other:?}"),
    }
    assert_eq!(
        balance(&s.pool).await,
        900,
        "{mode:?}: A's debit was applied"
    );
    let b_token = i64::try_from(b.token()).unwrap();
    assert_eq!(
        audit_tokens(&s.pool).await,
        vec![b_token],
        "{mode:?}: A's audit row survived"
    );
    b.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_is_refused_by_admit_and_its_audit_row_rolls_back() {
    paused_holder_story(Mode::Admit).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_is_refused_by_the_row_guard_and_its_audit_row_rolls_back() {
    paused_holder_story(Mode::RowGuard).await;
}

/// A lease from another backend (here the in-process memory backend) fences a Postgres write:
/// the fence rule needs tokens that increase per key, not a lock in the same database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_lease_fences_a_postgres_write() {
    let s = common::split().await;
    create_ledger(&s.pool).await;
    let fence = s.db.fence();
    let locker = Locker::new(MemoryLockBackend::new());
    let a = locker
        .lock("account/10")
        .ttl(SHORT_TTL)
        .watchdog(false)
        .await
        .unwrap();
    tokio::time::sleep(PAST_SHORT_TTL).await;
    let b = locker.lock("account/10").ttl(LONG_TTL).await.unwrap();
    for mode in [Mode::Admit, Mode::RowGuard] {
        if let Mode::RowGuard = mode {
            fence.guard_table(&s.pool, "accounts").await.unwrap();
        }
        debit(&s.pool, &fence, mode, b.fence(), 10).await.unwrap();
        assert!(matches!(
            debit(&s.pool, &fence, mode, a.fence(), 10).await,
            Err(Error::Stale { .. })
        ));
    }
    assert_eq!(balance(&s.pool).await, 980);
    b.release().await.unwrap();
}

/// The transaction API keeps the caller's `search_path`: unqualified names in the caller's SQL
/// are the caller's tables, and fencelock's own objects stay out of sight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_keep_the_callers_search_path() {
    let s = common::split().await;
    create_ledger(&s.pool).await;
    let storage = s.db.storage();
    let key = LockKey::new("account/10").unwrap();
    let resource = key.clone();
    let path: String = storage
        .transaction(&key, LONG_TTL, move |tx| {
            Box::pin(async move {
                sqlx::query("UPDATE accounts SET balance = balance - 1 WHERE id = 10")
                    .execute(tx.connection())
                    .await
                    .map_err(sql)?;
                tx.write(&resource, b"debited").await?;
                sqlx::query_scalar("SELECT current_setting('search_path')")
                    .fetch_one(tx.connection())
                    .await
                    .map_err(sql)
            })
        })
        .await
        .unwrap();
    assert_eq!(path, s.app.name());
    assert_eq!(balance(&s.pool).await, 999);
    let hidden: Option<String> =
        sqlx::query_scalar("SELECT to_regclass('fencelock_storage')::text")
            .fetch_one(&s.pool)
            .await
            .unwrap();
    assert_eq!(hidden, None, "fencelock's table is visible unqualified");
    let stored: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {}.fencelock_storage",
        s.locks.name()
    ))
    .fetch_one(&s.pool)
    .await
    .unwrap();
    assert_eq!(stored, 1);
}

/// fencelock's own pool sets no session state: the server's default `search_path`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fencelocks_own_pool_sets_no_search_path() {
    let locks = PgSchema::create().await;
    let db = PgConfig::from_options(pg_options())
        .schema(locks.name())
        .connect()
        .await
        .unwrap();
    let path: String = sqlx::query_scalar("SELECT current_setting('search_path')")
        .fetch_one(db.pool())
        .await
        .unwrap();
    // What a connection without startup options gets from the server for this role.
    let default: String = sqlx::query_scalar("SELECT current_setting('search_path')")
        .fetch_one(locks.admin())
        .await
        .unwrap();
    assert_eq!(path, default);
    let key = LockKey::new("no-search-path").unwrap();
    let lease = db
        .lease_backend()
        .try_acquire(&key, LONG_TTL)
        .await
        .unwrap()
        .unwrap();
    assert!(db.lease_backend().release(&lease).await.unwrap());
    db.close().await;
}

/// `from_pool` adopts the application's pool; migrating again is harmless; closing fencelock
/// leaves the application's pool open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_applications_pool_is_used_and_left_open() {
    let s = common::split().await;
    s.db.migrate().await.unwrap();
    s.db.close().await;
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&s.pool)
        .await
        .unwrap();
    assert_eq!(one, 1);
    let versions: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT version FROM {}._sqlx_migrations ORDER BY version",
        s.locks.name()
    ))
    .fetch_all(&s.pool)
    .await
    .unwrap();
    // Every embedded migration, by the version its file name starts with.
    let mut embedded: Vec<i64> =
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
            .unwrap()
            .map(|file| {
                let name = file.unwrap().file_name().into_string().unwrap();
                name.split('_').next().unwrap().parse().unwrap()
            })
            .collect();
    embedded.sort_unstable();
    assert_eq!(versions, embedded);
}

/// A failure after the admit rolls everything back, the fence record included: a holder the
/// failed transaction would have superseded is still admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_after_admit_rolls_back_the_fence_too() {
    let s = common::split().await;
    create_ledger(&s.pool).await;
    let fence = s.db.fence();
    let key = LockKey::new("account/10").unwrap();
    let (first, failed, middle) = (fence_of(5), fence_of(9), fence_of(7));
    fence.admit(&s.pool, &key, first).await.unwrap();
    let mut tx = s.pool.begin().await.unwrap();
    fence.admit(&mut *tx, &key, failed).await.unwrap();
    sqlx::query("UPDATE accounts SET balance = 0 WHERE id = 10")
        .execute(&mut *tx)
        .await
        .unwrap();
    // The application's own statement fails: amount is NOT NULL.
    let failure =
        sqlx::query("INSERT INTO audit_log (account_id, amount, token) VALUES (10, NULL, 9)")
            .execute(&mut *tx)
            .await;
    assert!(failure.is_err());
    drop(tx); // rolls back
    assert_eq!(fence.current(&s.pool, &key).await.unwrap(), Some(first));
    assert_eq!(balance(&s.pool).await, 1000);
    assert!(audit_tokens(&s.pool).await.is_empty());
    debit(&s.pool, &fence, Mode::Admit, middle, 1)
        .await
        .unwrap();
    assert_eq!(fence.current(&s.pool, &key).await.unwrap(), Some(middle));
}

/// A guard needs a table with the fence columns: anything else is a clear error and changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guarding_a_table_without_fence_columns_is_refused() {
    let s = common::split().await;
    for statement in [
        "CREATE TABLE plain (id bigint PRIMARY KEY, balance bigint NOT NULL)",
        "CREATE TABLE half (id bigint PRIMARY KEY, fence_token bigint)",
        "CREATE TABLE small (id bigint PRIMARY KEY, fence_token integer, fence_owner bytea)",
        "CREATE VIEW plain_view AS SELECT * FROM plain",
    ] {
        sqlx::query(statement).execute(&s.pool).await.unwrap();
    }
    let fence = s.db.fence();
    let cases = [
        ("plain", "has no column fence_token"),
        ("half", "has no column fence_owner"),
        (
            "small",
            "must be fence_token bigint and fence_owner bytea, not integer and bytea",
        ),
        ("plain_view", "is not a table"),
        ("no_such_table", "does not exist"),
        ("not a name!", "invalid name syntax"),
    ];
    for (table, expected) in cases {
        match fence.guard_table(&s.pool, table).await {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(message.contains(expected), "{table}: {message}");
                assert!(message.contains(table), "{table}: {message}");
            }
            other => panic!("{table}: expected InvalidConfig, got {other:?}"),
        }
    }
    let triggers: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid \
         JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1",
    )
    .bind(s.app.name())
    .fetch_one(&s.pool)
    .await
    .unwrap();
    assert_eq!(triggers, 0, "a refused guard left a trigger behind");
    // Columns of other names are fine when named.
    sqlx::query("ALTER TABLE plain ADD COLUMN lock_token bigint, ADD COLUMN lock_owner bytea")
        .execute(&s.pool)
        .await
        .unwrap();
    fence
        .guard_table_with(&s.pool, "plain", "lock_token", "lock_owner")
        .await
        .unwrap();
    // The condition is the rule written out on the row's columns, not a function call (a
    // trigger's condition is prepared for every statement).
    let condition: String = sqlx::query_scalar(
        "SELECT pg_get_triggerdef(t.oid) FROM pg_trigger t \
         WHERE t.tgrelid = 'plain'::regclass AND t.tgname = 'fencelock_guard_update'",
    )
    .fetch_one(&s.pool)
    .await
    .unwrap();
    assert!(
        condition.contains("old.lock_token") && !condition.contains("fencelock_admits"),
        "{condition}"
    );
}

/// A token above `i64::MAX` has no bigint: refused before any I/O, nothing recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_above_i64_max_is_refused() {
    let s = common::split().await;
    let fence = s.db.fence();
    let key = LockKey::new("huge").unwrap();
    let huge = Fence::new(
        FencingToken::new(i64::MAX as u64 + 1).unwrap(),
        OwnerId::random(),
    );
    for outcome in [
        fence.admit(&s.pool, &key, huge).await,
        fence.present(&s.pool, huge).await,
        FenceParams::try_from(huge).map(drop),
    ] {
        match outcome {
            Err(Error::InvalidConfig { message, .. }) => {
                assert!(message.contains("9223372036854775808"), "{message}");
            }
            other => panic!("expected InvalidConfig, got {other:?}"),
        }
    }
    assert_eq!(fence.current(&s.pool, &key).await.unwrap(), None);
}

/// Resource names follow `LockKey`'s rules on both sides: Rust refuses them before any I/O,
/// and `fencelock_admit` refuses them when called from plain SQL. Nothing is recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_resource_names_and_fences_are_refused() {
    let s = common::split().await;
    for name in ["", "a\u{1}b", &"x".repeat(513)] {
        assert!(matches!(LockKey::new(name), Err(Error::InvalidKey { .. })));
    }
    let admit = format!("SELECT {}.fencelock_admit($1, $2, $3)", s.locks.name());
    let owner = vec![7u8; 16];
    let cases: [(&str, i64, &[u8], &str); 6] = [
        ("", 1, &owner, "invalid resource name"),
        ("a\u{1}b", 1, &owner, "invalid resource name"),
        (&"x".repeat(513), 1, &owner, "invalid resource name"),
        ("ok", 0, &owner, "0 is not a fencing token"),
        ("ok", -5, &owner, "-5 is not a fencing token"),
        (
            "ok",
            1,
            &[1, 2, 3],
            "a fence owner is 16 bytes, got 3 bytes",
        ),
    ];
    for (resource, token, owner, expected) in cases {
        let error = sqlx::query(&admit)
            .bind(resource)
            .bind(token)
            .bind(owner)
            .execute(&s.pool)
            .await
            .unwrap_err();
        let message = sql(error).to_string();
        assert!(
            message.contains("22023") && message.contains(expected),
            "{message}"
        );
    }
    let recorded: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {}.fencelock_fences",
        s.locks.name()
    ))
    .fetch_one(&s.pool)
    .await
    .unwrap();
    assert_eq!(recorded, 0);
}

/// A DELETE of a guarded row needs a presented fence that the row's admits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_guarded_row_needs_a_newer_fence() {
    let s = common::split().await;
    create_ledger(&s.pool).await;
    let fence = s.db.fence();
    fence.guard_table(&s.pool, "accounts").await.unwrap();
    let (older, newer) = (fence_of(3), fence_of(4));
    debit(&s.pool, &fence, Mode::RowGuard, newer, 1)
        .await
        .unwrap();
    let delete = "DELETE FROM accounts WHERE id = 10";
    let unfenced = sqlx::query(delete).execute(&s.pool).await.unwrap_err();
    let message = sql(unfenced).to_string();
    assert!(
        message.contains("FL002") && message.contains("fencelock_present"),
        "{message}"
    );
    let mut tx = s.pool.begin().await.unwrap();
    fence.present(&mut *tx, older).await.unwrap();
    let stale = sqlx::query(delete).execute(&mut *tx).await.unwrap_err();
    assert!(matches!(sql(stale), Error::Stale { current, .. } if current == newer));
    drop(tx);
    let mut tx = s.pool.begin().await.unwrap();
    fence.present(&mut *tx, newer).await.unwrap();
    let deleted = sqlx::query(delete).execute(&mut *tx).await.unwrap();
    assert_eq!(deleted.rows_affected(), 1);
    tx.commit().await.unwrap();
    // The presented fence ended with its transaction.
    sqlx::query("INSERT INTO accounts (id, balance) VALUES (11, 1)")
        .execute(&s.pool)
        .await
        .unwrap();
    let later = sqlx::query("DELETE FROM accounts WHERE id = 11")
        .execute(&s.pool)
        .await
        .unwrap_err();
    assert!(sql(later).to_string().contains("FL002"));
}

/// An UPDATE must leave a fence on a guarded row; one that leaves the fence as it was is the
/// row's own fence again, which the monotonic rule admits (so every writer must set it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_must_leave_a_fence_on_a_guarded_row() {
    let s = common::split().await;
    create_ledger(&s.pool).await;
    let fence = s.db.fence();
    fence.guard_table(&s.pool, "accounts").await.unwrap();
    let unfenced = sqlx::query("UPDATE accounts SET balance = 0 WHERE id = 10")
        .execute(&s.pool)
        .await
        .unwrap_err();
    assert!(sql(unfenced).to_string().contains("FL002"));
    debit(&s.pool, &fence, Mode::RowGuard, fence_of(2), 1)
        .await
        .unwrap();
    let cleared = sqlx::query("UPDATE accounts SET fence_token = NULL WHERE id = 10")
        .execute(&s.pool)
        .await
        .unwrap_err();
    assert!(sql(cleared).to_string().contains("FL002"));
    sqlx::query("UPDATE accounts SET balance = balance + 1 WHERE id = 10")
        .execute(&s.pool)
        .await
        .unwrap();
    assert_eq!(balance(&s.pool).await, 1000);
    fence.unguard_table(&s.pool, "accounts").await.unwrap();
    sqlx::query("UPDATE accounts SET fence_token = NULL WHERE id = 10")
        .execute(&s.pool)
        .await
        .unwrap();
}

/// The strict rule: one operation per token, on both mechanisms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_strict_rule_admits_each_token_once() {
    let s = common::split().await;
    create_ledger(&s.pool).await;
    let fence = s.db.fence().with_rule(FenceRule::Strict);
    let (once, next) = (fence_of(1), fence_of(2));
    for mode in [Mode::Admit, Mode::RowGuard] {
        if let Mode::RowGuard = mode {
            fence.guard_table(&s.pool, "accounts").await.unwrap();
        }
        debit(&s.pool, &fence, mode, once, 1).await.unwrap();
        match debit(&s.pool, &fence, mode, once, 1).await {
            Err(Error::Stale {
                presented, current, ..
            }) => {
                assert_eq!((presented, current), (once, once), "{mode:?}");
            }
            other => panic!("{mode:?}: expected Stale, got {other:?}"),
        }
        debit(&s.pool, &fence, mode, next, 1).await.unwrap();
    }
    assert_eq!(balance(&s.pool).await, 996);
    let monotonic = s.db.fence();
    let key = LockKey::new("monotonic").unwrap();
    monotonic.admit(&s.pool, &key, once).await.unwrap();
    monotonic.admit(&s.pool, &key, once).await.unwrap();
}

/// Concurrent admits of one resource wait for each other: the second is decided against what
/// the first committed (refused after a newer fence committed, admitted after a rollback).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_admits_of_one_resource_wait_for_each_other() {
    let s = common::split().await;
    let fence = s.db.fence();
    let key = LockKey::new("account/10").unwrap();
    for (round, commit_first) in [(0, true), (1, false)] {
        let (older, newer) = (fence_of(10 * round + 3), fence_of(10 * round + 4));
        let before = fence.current(&s.pool, &key).await.unwrap();
        let mut first = s.pool.begin().await.unwrap();
        fence.admit(&mut *first, &key, newer).await.unwrap();
        let mut second = s.pool.acquire().await.unwrap();
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut *second)
            .await
            .unwrap();
        let (f, k) = (fence.clone(), key.clone());
        let waiting = tokio::spawn(async move {
            let mut tx = sqlx::Connection::begin(&mut *second).await.unwrap();
            let outcome = f.admit(&mut *tx, &k, older).await;
            if outcome.is_ok() {
                tx.commit().await.unwrap();
            }
            outcome
        });
        // The second admit is blocked on the fence record's row lock.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let blocked: bool = sqlx::query_scalar(
                "SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity \
                 WHERE pid = $1",
            )
            .bind(pid)
            .fetch_one(s.locks.admin())
            .await
            .unwrap();
            if blocked {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the second admit never waited"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(!waiting.is_finished());
        if commit_first {
            first.commit().await.unwrap();
            match waiting.await.unwrap() {
                Err(Error::Stale { current, .. }) => assert_eq!(current, newer),
                other => panic!("expected Stale after the newer fence committed, got {other:?}"),
            }
        } else {
            first.rollback().await.unwrap();
            waiting.await.unwrap().unwrap();
            assert_eq!(fence.current(&s.pool, &key).await.unwrap(), Some(older));
            assert!(before.is_some(), "the first round committed a fence");
        }
    }
}

/// A set lock's members admitted in one call: every member's fence recorded with the
/// transaction, in name order whatever order they come in; an older member refuses the whole
/// transaction; a resource named twice with two fences is refused before any I/O.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_is_admitted_in_one_call() {
    let s = common::split().await;
    let fence = s.db.fence();
    let locker = Locker::new(MemoryLockBackend::new());
    let set = locker
        .lock_all(["account/2", "account/1"])
        .ttl(LONG_TTL)
        .await
        .unwrap();
    let mut tx = s.pool.begin().await.unwrap();
    fence.admit_all(&mut tx, set.fences()).await.unwrap();
    tx.commit().await.unwrap();
    for (key, member) in set.fences() {
        assert_eq!(
            fence.current(&s.pool, &key).await.unwrap(),
            Some(member),
            "{key}"
        );
    }

    let older: Vec<(LockKey, Fence)> = set.fences().map(|(key, _)| (key, fence_of(1))).collect();
    let mut tx = s.pool.begin().await.unwrap();
    assert!(matches!(
        fence.admit_all(&mut tx, older).await,
        Err(Error::Stale { .. })
    ));
    drop(tx);
    for (key, member) in set.fences() {
        assert_eq!(fence.current(&s.pool, &key).await.unwrap(), Some(member));
    }

    let mut tx = s.pool.begin().await.unwrap();
    assert!(matches!(
        fence
            .admit_all(&mut tx, [("a", fence_of(5)), ("a", fence_of(6))])
            .await,
        Err(Error::InvalidConfig { .. })
    ));
    set.release().await.unwrap();
}
