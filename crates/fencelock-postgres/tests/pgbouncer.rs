//! fencelock through a real PgBouncer in transaction mode (Debian's package, started by the
//! testkit in front of the test server): the paused-holder story on `PgStorage` and on the
//! application's own tables, the transaction API, the ledger example's steps, detection, and
//! the advisory backend refused with an error that says what to do.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::bouncer::{bouncer, database, url};
use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, Locker, WakeUp};
use fencelock_postgres::{
    FenceParams, PgBackendKind, PgConfig, PgDatabase, PgPooler, map_sqlx_error,
};
use fencelock_testkit::postgres::{PgSchema, pg_url};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Executor, PgPool};

const SHORT_TTL: Duration = Duration::from_millis(300);
const PAST_SHORT_TTL: Duration = Duration::from_millis(900);
const LONG_TTL: Duration = Duration::from_secs(30);

fn sql(e: sqlx::Error) -> Error {
    map_sqlx_error("app", e)
}

/// The application's own pool through PgBouncer: nothing session-wide (no `search_path` at
/// connect, which PgBouncer refuses as a startup option anyway).
fn app_pool(bouncer: &fencelock_testkit::PgBouncer) -> PgPool {
    PgPoolOptions::new()
        .max_connections(5)
        .acquire_timeout(Duration::from_secs(5))
        .connect_lazy_with(bouncer.options().application_name("fencelock-test-app"))
}

/// The application's ledger tables in `schema`, written qualified (through a transaction
/// pooler a session's `search_path` is nobody's). Statements without parameters go as simple
/// queries: nothing prepared.
async fn create_ledger(pool: &PgPool, schema: &str) {
    let ddl = format!(
        "CREATE TABLE {schema}.accounts (id bigint PRIMARY KEY, \
             balance bigint NOT NULL CHECK (balance >= 0), fence_token bigint, fence_owner bytea);
         CREATE TABLE {schema}.audit_log (id bigserial PRIMARY KEY, account_id bigint NOT NULL,
             amount bigint NOT NULL, token bigint NOT NULL);
         INSERT INTO {schema}.accounts (id, balance) VALUES (10, 100);"
    );
    pool.execute(sqlx::raw_sql(&ddl)).await.unwrap();
}

async fn ledger_state(pool: &PgPool, schema: &str) -> (i64, Vec<i64>) {
    let balance = pool
        .fetch_one(sqlx::raw_sql(&format!(
            "SELECT balance FROM {schema}.accounts WHERE id = 10"
        )))
        .await
        .unwrap();
    let rows = pool
        .fetch_all(sqlx::raw_sql(&format!(
            "SELECT token FROM {schema}.audit_log ORDER BY id"
        )))
        .await
        .unwrap();
    (
        sqlx::Row::get(&balance, 0),
        rows.iter().map(|r| sqlx::Row::get(r, 0)).collect(),
    )
}

#[derive(Debug)]
enum DebitError {
    InsufficientFunds,
    Fenced(Error),
}

impl From<Error> for DebitError {
    fn from(e: Error) -> Self {
        DebitError::Fenced(e)
    }
}

impl From<sqlx::Error> for DebitError {
    fn from(e: sqlx::Error) -> Self {
        DebitError::Fenced(sql(e))
    }
}

/// The ledger example's `debit`, written for a transaction pooler: the statements with
/// parameters run inside the transaction (which keeps one server connection) and unprepared
/// (`persistent(false)`: no named statement outlives the transaction).
async fn debit(
    pool: &PgPool,
    schema: &str,
    amount: i64,
    fence: fencelock_core::Fence,
) -> Result<i64, DebitError> {
    let p = FenceParams::try_from(fence)?;
    let mut tx = pool.begin().await?;
    sqlx::query(&format!(
        "INSERT INTO {schema}.audit_log (account_id, amount, token) VALUES (10, $1, $2)"
    ))
    .bind(-amount)
    .bind(p.token)
    .persistent(false)
    .execute(&mut *tx)
    .await?;
    let balance: Option<i64> = sqlx::query_scalar(&format!(
        "UPDATE {schema}.accounts SET balance = balance - $1, fence_token = $2, fence_owner = $3
          WHERE id = 10 AND balance >= $1
         RETURNING balance"
    ))
    .bind(amount)
    .bind(p.token)
    .bind(p.owner)
    .persistent(false)
    .fetch_optional(&mut *tx)
    .await?;
    let balance = balance.ok_or(DebitError::InsufficientFunds)?;
    tx.commit().await?;
    Ok(balance)
}

/// examples/ledger.rs, step by step, through PgBouncer: the application's pool and
/// fencelock's on it (`from_pool`, the pooler detected), the row guard, three debits (the
/// third refused for funds), then a holder paused past its lease whose debit is refused by
/// the guard, its audit row rolled back with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ledger_example_through_pgbouncer() {
    let bouncer = bouncer(4).await;
    let schema = PgSchema::create().await;
    let s = schema.name();
    let pool = app_pool(&bouncer);
    create_ledger(&pool, s).await;
    let db = PgDatabase::from_pool(pool.clone(), s).unwrap();
    db.migrate().await.unwrap();
    assert!(db.behind_transaction_pooler().await.unwrap());
    db.fence()
        .guard_table(&pool, &format!("{s}.accounts"))
        .await
        .unwrap();
    let locker = Locker::new(db.lease_backend());
    let mut tokens = Vec::new();
    let mut outcomes = Vec::new();
    for amount in [30, 50, 40] {
        let guard = locker.lock("account/10").ttl(LONG_TTL).await.unwrap();
        match debit(&pool, s, amount, guard.fence()).await {
            Ok(balance) => {
                tokens.push(i64::try_from(guard.token().get()).unwrap());
                outcomes.push(Some(balance));
            }
            Err(DebitError::InsufficientFunds) => outcomes.push(None),
            Err(other) => panic!("debit {amount}: {other:?}"),
        }
        guard.release().await.unwrap();
    }
    assert_eq!(outcomes, [Some(70), Some(20), None]);

    let paused = locker
        .lock("account/10")
        .ttl(SHORT_TTL)
        .watchdog(false)
        .await
        .unwrap();
    tokio::time::sleep(PAST_SHORT_TTL).await;
    let newer = locker.lock("account/10").ttl(LONG_TTL).await.unwrap();
    assert!(newer.token() > paused.token());
    assert_eq!(debit(&pool, s, 5, newer.fence()).await.unwrap(), 15);
    tokens.push(i64::try_from(newer.token().get()).unwrap());
    match debit(&pool, s, 5, paused.fence()).await {
        Err(DebitError::Fenced(Error::Stale {
            presented, current, ..
        })) => {
            assert_eq!(presented, paused.fence());
            assert_eq!(current, newer.fence());
        }
        other => panic!("the paused holder's debit: {other:?}"),
    }
    newer.release().await.unwrap();
    assert_eq!(ledger_state(&pool, s).await, (15, tokens));
}

/// DESIGN section 1 through PgBouncer: A's lease expires while it is paused, B takes the lock
/// and writes, A's fenced write and read are refused, by `PgStorage` and by `fencelock_admit`
/// in the application's own transaction on its own table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_holder_is_refused_through_pgbouncer() {
    let bouncer = bouncer(4).await;
    let (schema, db) = database(&bouncer, "transaction").await;
    let s = schema.name();
    let pool = app_pool(&bouncer);
    create_ledger(&pool, s).await;
    let storage = db.storage();
    let fence = db.fence();
    let locker = Locker::new(db.lease_backend());
    let key = LockKey::new("account/10").unwrap();

    let a = locker
        .lock(key.as_str())
        .ttl(SHORT_TTL)
        .watchdog(false)
        .await
        .unwrap();
    storage.write(&key, a.fence(), b"100").await.unwrap();
    tokio::time::sleep(PAST_SHORT_TTL).await; // A's pause
    assert!(!a.is_held());
    let b = locker.lock(key.as_str()).ttl(LONG_TTL).await.unwrap();
    assert!(b.token() > a.token());
    assert_eq!(
        storage.read(&key, b.fence()).await.unwrap().as_deref(),
        Some(&b"100"[..])
    );
    storage.write(&key, b.fence(), b"90").await.unwrap();
    // B's debit of the application's table, fenced by fencelock_admit.
    let admit_and_debit = |by: fencelock_core::Fence, amount: i64| {
        let (pool, fence, key) = (pool.clone(), fence.clone(), key.clone());
        let update = format!("UPDATE {s}.accounts SET balance = balance - $1 WHERE id = 10");
        async move {
            let mut tx = pool.begin().await.map_err(sql)?;
            fence.admit(&mut *tx, &key, by).await?;
            sqlx::query(&update)
                .bind(amount)
                .persistent(false)
                .execute(&mut *tx)
                .await
                .map_err(sql)?;
            tx.commit().await.map_err(sql)
        }
    };
    admit_and_debit(b.fence(), 10).await.unwrap();

    // A wakes up.
    for refused in [
        storage.write(&key, a.fence(), b"0").await,
        storage.read(&key, a.fence()).await.map(drop),
        admit_and_debit(a.fence(), 100).await,
    ] {
        match refused {
            Err(Error::Stale {
                presented, current, ..
            }) => {
                assert_eq!(presented, a.fence());
                assert_eq!(current, b.fence());
            }
            other => panic!("A's operation through PgBouncer: {other:?}"),
        }
    }
    assert_eq!(
        storage.peek(&key).await.unwrap().unwrap().value.as_deref(),
        Some(&b"90"[..])
    );
    assert_eq!(ledger_state(&pool, s).await.0, 90);
    assert_eq!(fence.current(&pool, &key).await.unwrap(), Some(b.fence()));
    b.release().await.unwrap();
}

/// The transaction API through PgBouncer: the lock, the token, fenced writes and the
/// application's own SQL commit together, or roll back together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_api_through_pgbouncer() {
    let bouncer = bouncer(2).await;
    let (_schema, db) = database(&bouncer, "transaction").await;
    let storage = db.storage();
    let key = LockKey::new("ledger/7").unwrap();
    let mut tokens = Vec::new();
    for round in 0..5u64 {
        let resource = key.clone();
        let token = storage
            .transaction(&key, Duration::from_secs(5), move |tx| {
                Box::pin(async move {
                    let old = tx.read(&resource).await?.unwrap_or_default();
                    let n = u64::from_le_bytes(old.try_into().unwrap_or_default());
                    assert_eq!(n, round);
                    tx.write(&resource, &(n + 1).to_le_bytes()).await?;
                    Ok::<_, Error>(tx.token())
                })
            })
            .await
            .unwrap();
        tokens.push(token);
    }
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "{tokens:?}");
    // A closure that fails rolls its write back.
    let resource = key.clone();
    let failed: Result<(), Error> = storage
        .transaction(&key, Duration::from_secs(5), move |tx| {
            Box::pin(async move {
                tx.write(&resource, &99u64.to_le_bytes()).await?;
                Err(Error::config("the caller gives up"))
            })
        })
        .await;
    assert!(failed.is_err());
    let value = storage.peek(&key).await.unwrap().unwrap().value.unwrap();
    assert_eq!(value, 5u64.to_le_bytes());
}

/// Detection: two sessions through PgBouncer share a server process; two direct sessions
/// never do. The lease backend then polls instead of listening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_pooler_is_detected_and_a_direct_connection_is_not() {
    let bouncer = bouncer(4).await;
    let (_through, db) = database(&bouncer, "detect").await;
    assert_eq!(db.pooler(), PgPooler::Detect);
    assert!(db.behind_transaction_pooler().await.unwrap());
    assert_eq!(db.lease_backend().capabilities().wake_up, WakeUp::Poll);

    let direct = PgSchema::create().await;
    let db = PgConfig::from_url(&format!("{}?schema={}", pg_url(), direct.name()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    assert!(!db.behind_transaction_pooler().await.unwrap());
    assert_eq!(db.lease_backend().capabilities().wake_up, WakeUp::Notify);
}

fn assert_advisory_refused(outcome: Result<impl std::fmt::Debug, Error>, how: &str) {
    match outcome {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("backend=lease"), "{how}: {message}");
            assert!(
                message.contains("directly to PostgreSQL"),
                "{how}: {message}"
            );
            assert!(
                message.contains("transaction-mode pooler"),
                "{how}: {message}"
            );
        }
        other => panic!("{how}: expected InvalidConfig, got {other:?}"),
    }
}

/// The advisory backend holds its locks in sessions: through a transaction pooler it is
/// refused, said in the URL or detected, at connect and at every acquire, with an error that
/// says to use the lease backend or a direct connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advisory_backend_is_refused_through_pgbouncer() {
    let bouncer = bouncer(4).await;
    let schema = PgSchema::create().await;
    for pooler in ["transaction", "detect"] {
        let config = PgConfig::from_url(&url(
            &bouncer,
            &format!("backend=advisory&pooler={pooler}&schema={}", schema.name()),
        ))
        .unwrap();
        assert_eq!(config.backend_kind(), PgBackendKind::Advisory);
        assert_advisory_refused(config.connect().await, pooler);
    }
    let (_schema, db) = database(&bouncer, "detect").await;
    let advisory = db.advisory_backend();
    let key = LockKey::new("job/1").unwrap();
    assert_advisory_refused(advisory.try_acquire(&key, LONG_TTL).await, "try_acquire");
    assert_advisory_refused(
        Locker::new(advisory.clone())
            .lock("job/1")
            .wait(Duration::from_secs(1))
            .await,
        "Locker",
    );
    assert_eq!(advisory.held_count(), 0);
    // The lease backend on the same database works.
    let lease = db
        .lease_backend()
        .try_acquire(&key, LONG_TTL)
        .await
        .unwrap();
    assert!(db.lease_backend().release(&lease.unwrap()).await.unwrap());
}

/// Without the pooler setting (`?pooler=none` through PgBouncer) sqlx's named statements meet
/// each other on PgBouncer's one server connection, and the error says what to set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn named_statements_through_pgbouncer_fail_with_a_hint() {
    let bouncer = bouncer(1).await;
    let schema = PgSchema::create().await;
    // Migrated directly, and the first token epoch started by a grant there, so that the two
    // clients below send nothing but their own statements.
    let direct = PgConfig::from_url(&format!("{}?schema={}", pg_url(), schema.name()))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let warm_up = LockKey::new("warm-up").unwrap();
    let started = direct.lease_backend().try_acquire(&warm_up, LONG_TTL).await;
    assert!(started.unwrap().is_some());
    direct.close().await;
    let connect = || async {
        PgConfig::from_url(&url(
            &bouncer,
            &format!("pooler=none&schema={}", schema.name()),
        ))
        .unwrap()
        .run_migrations(false)
        .connect()
        .await
        .unwrap()
    };
    let (first, second) = (connect().await, connect().await);
    let key = LockKey::new("job/2").unwrap();
    let lease = first.lease_backend().try_acquire(&key, LONG_TTL).await;
    let lease = lease.unwrap().expect("a free lock");
    match second.lease_backend().inspect(&key).await {
        Err(Error::Backend { message, .. }) => {
            assert!(message.contains("sqlx_s_1"), "{message}");
            assert!(message.contains("?pooler=transaction"), "{message}");
        }
        other => panic!("expected the prepared-statement clash, got {other:?}"),
    }
    // The same through `?pooler=transaction` works from both clients.
    let fixed = PgConfig::from_url(&url(
        &bouncer,
        &format!("pooler=transaction&schema={}", schema.name()),
    ))
    .unwrap()
    .run_migrations(false)
    .connect()
    .await
    .unwrap();
    let info = fixed.lease_backend().inspect(&key).await.unwrap();
    assert_eq!(info.holder.map(|h| h.token), Some(lease.token));
    assert!(fixed.lease_backend().release(&lease).await.unwrap());
}

/// What the simple protocol guards against, shown on sqlx itself: an unprepared statement
/// with parameters (`persistent(false)`) outside a transaction is parsed in one round trip
/// and bound in the next, which PgBouncer may route to another server connection. Many
/// clients doing so at once through a small pool see errors or other clients' statements;
/// fencelock's simple-protocol statements, under the same load, never do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unnamed_statements_cross_server_connections_but_simple_queries_do_not() {
    let bouncer = bouncer(2).await;
    let pool = PgPoolOptions::new()
        .max_connections(16)
        .connect_with(bouncer.options())
        .await
        .unwrap();
    let run = |simple: bool| {
        let pool = pool.clone();
        async move {
            let mut tasks = Vec::new();
            for task in 0..16i64 {
                let pool = pool.clone();
                tasks.push(tokio::spawn(async move {
                    let mut wrong = 0;
                    for round in 0..100i64 {
                        let n = task * 1000 + round;
                        // A distinct statement text per task, so a crossed statement shows.
                        let text = format!("SELECT $1::bigint + {task}");
                        let got: Result<i64, sqlx::Error> = if simple {
                            pool.fetch_one(sqlx::raw_sql(&format!("SELECT {n}::bigint + {task}")))
                                .await
                                .map(|row| sqlx::Row::get(&row, 0))
                        } else {
                            sqlx::query_scalar(&text)
                                .bind(n)
                                .persistent(false)
                                .fetch_one(&pool)
                                .await
                        };
                        if got.ok() != Some(n + task) {
                            wrong += 1;
                        }
                    }
                    wrong
                }));
            }
            let mut wrong = 0;
            for task in tasks {
                wrong += task.await.unwrap();
            }
            wrong
        }
    };
    assert_eq!(run(true).await, 0, "a simple query went wrong");
    let crossed = run(false).await;
    assert!(
        crossed > 0,
        "1600 unprepared extended-protocol statements through a 2-connection PgBouncer all \
         came back right: the hazard the simple protocol avoids did not show"
    );
}
