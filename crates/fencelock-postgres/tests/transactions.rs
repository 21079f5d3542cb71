//! The transaction API: many concurrent ledger transfers, rollbacks, fences inside transactions.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::{Error, Fence, FencedStorage, FencingToken, LockKey, OwnerId};
use fencelock_postgres::{PgStorage, map_sqlx_error};

const ACCOUNTS: u64 = 8;
const INITIAL: u64 = 1_000;
const WAIT: Duration = Duration::from_secs(30);

fn account(i: u64) -> LockKey {
    LockKey::new(format!("account/{i}")).unwrap()
}

fn decode(value: Option<Vec<u8>>) -> u64 {
    value.map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()))
}

async fn create_audit_table(storage: &PgStorage) {
    sqlx::query(
        "CREATE TABLE audit (id bigserial PRIMARY KEY, source bigint NOT NULL, \
         target bigint NOT NULL, amount bigint NOT NULL, token bigint NOT NULL)",
    )
    .execute(storage.database().pool())
    .await
    .unwrap();
}

/// Moves `amount` from `from` to `to` under the ledger's lock; refused (rolled back) when the
/// source would go negative.
async fn transfer(storage: &PgStorage, from: u64, to: u64, amount: u64) -> Result<bool, Error> {
    let ledger = LockKey::new("ledger").unwrap();
    storage
        .transaction(&ledger, WAIT, move |tx| {
            Box::pin(async move {
                let source = decode(tx.read(&account(from)).await?);
                let target = decode(tx.read(&account(to)).await?);
                if source < amount {
                    return Ok(false);
                }
                tx.write(&account(from), &(source - amount).to_le_bytes())
                    .await?;
                tx.write(&account(to), &(target + amount).to_le_bytes())
                    .await?;
                let token = i64::try_from(tx.token().get()).unwrap();
                sqlx::query(
                    "INSERT INTO audit (source, target, amount, token) VALUES ($1, $2, $3, $4)",
                )
                .bind(from as i64)
                .bind(to as i64)
                .bind(amount as i64)
                .bind(token)
                .execute(tx.connection())
                .await
                .map_err(|e| map_sqlx_error("ledger", e))?;
                Ok(true)
            })
        })
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transfers_add_up() {
    let (schema, db) = common::database().await;
    let storage = db.storage();
    create_audit_table(&storage).await;
    let seed = Fence::new(FencingToken::MIN, OwnerId::random());
    for i in 0..ACCOUNTS {
        storage
            .write(&account(i), seed, &INITIAL.to_le_bytes())
            .await
            .unwrap();
    }
    // Raise the ledger's counter past the seeding fence.
    fencelock_core::LockBackend::advance_token(
        &db.lease_backend(),
        &LockKey::new("ledger").unwrap(),
        seed.token,
    )
    .await
    .unwrap();
    let tasks = 8;
    let rounds = 25;
    let mut handles = Vec::new();
    for t in 0..tasks {
        let storage = storage.clone();
        handles.push(tokio::spawn(async move {
            let mut done = 0u64;
            for r in 0..rounds {
                let from = (t * 7 + r * 3) % ACCOUNTS;
                let to = (from + 1 + r % (ACCOUNTS - 1)) % ACCOUNTS;
                let amount = 1 + (t * 13 + r * 5) % 300;
                if transfer(&storage, from, to, amount).await.unwrap() {
                    done += 1;
                }
            }
            done
        }));
    }
    let mut committed = 0;
    for h in handles {
        committed += h.await.unwrap();
    }
    let mut total = 0;
    let mut balances = Vec::new();
    for i in 0..ACCOUNTS {
        let b = decode(storage.peek(&account(i)).await.unwrap().unwrap().value);
        balances.push(b);
        total += b;
    }
    assert_eq!(total, ACCOUNTS * INITIAL, "money was created or destroyed");
    let rows: Vec<(i64, i64, i64, i64)> =
        sqlx::query_as("SELECT source, target, amount, token FROM audit ORDER BY token")
            .fetch_all(db.pool())
            .await
            .unwrap();
    assert_eq!(
        rows.len() as u64,
        committed,
        "audit rows do not match the transfers"
    );
    let mut expected = vec![INITIAL as i64; ACCOUNTS as usize];
    for (source, target, amount, _) in &rows {
        expected[*source as usize] -= amount;
        expected[*target as usize] += amount;
    }
    let expected: Vec<u64> = expected.into_iter().map(|b| b as u64).collect();
    assert_eq!(balances, expected, "balances do not follow the audit trail");
    let tokens: Vec<i64> = rows.iter().map(|r| r.3).collect();
    assert!(tokens.windows(2).all(|w| w[0] < w[1]), "tokens repeat");
    schema.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_in_closure_rolls_everything_back() {
    let (schema, db) = common::database().await;
    let storage = db.storage();
    create_audit_table(&storage).await;
    let key = LockKey::new("rollback").unwrap();
    let resource = account(1);
    let outcome: Result<(), Error> = storage
        .transaction(&key, WAIT, move |tx| {
            Box::pin(async move {
                tx.write(&resource, b"written").await?;
                sqlx::query(
                    "INSERT INTO audit (source, target, amount, token) VALUES (1, 2, 3, 4)",
                )
                .execute(tx.connection())
                .await
                .map_err(|e| map_sqlx_error("ledger", e))?;
                assert!(tx.peek(&resource).await?.is_some());
                Err(Error::config("the caller changed its mind"))
            })
        })
        .await;
    assert!(matches!(outcome, Err(Error::InvalidConfig { .. })));
    assert_eq!(storage.peek(&account(1)).await.unwrap(), None);
    let audit: i64 = sqlx::query_scalar("SELECT count(*) FROM audit")
        .fetch_one(db.pool())
        .await
        .unwrap();
    assert_eq!(audit, 0);
    schema.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_write_inside_a_transaction_rolls_back() {
    let (schema, db) = common::database().await;
    let storage = db.storage();
    let key = LockKey::new("stale-in-tx").unwrap();
    let resource = LockKey::new("stale-in-tx/data").unwrap();
    let newer = Fence::new(FencingToken::new(1_000).unwrap(), OwnerId::random());
    storage.write(&resource, newer, b"newer").await.unwrap();
    let other = LockKey::new("stale-in-tx/other").unwrap();
    let (r, o) = (resource.clone(), other.clone());
    let outcome: Result<(), Error> = storage
        .transaction(&key, WAIT, move |tx| {
            Box::pin(async move {
                tx.write(&o, b"first").await?;
                tx.write(&r, b"older").await?;
                Ok(())
            })
        })
        .await;
    match outcome {
        Err(Error::Stale { current, .. }) => assert_eq!(current, newer),
        other => panic!("expected Stale, got {other:?}"),
    }
    assert_eq!(
        storage.peek(&other).await.unwrap(),
        None,
        "half a transaction survived"
    );
    assert_eq!(
        storage
            .peek(&resource)
            .await
            .unwrap()
            .unwrap()
            .value
            .as_deref(),
        Some(&b"newer"[..])
    );
    schema.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_waits_at_most_its_budget() {
    let (schema, db) = common::database().await;
    let storage = db.storage();
    let key = LockKey::new(format!("busy/{}", schema.name())).unwrap();
    // An advisory-backend holder of the same key excludes the transaction.
    let backend = db.advisory_backend();
    let lease = fencelock_core::LockBackend::try_acquire(&backend, &key, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    let started = tokio::time::Instant::now();
    let outcome: Result<(), Error> = storage
        .transaction(&key, Duration::from_millis(200), |_tx| {
            Box::pin(async { Ok(()) })
        })
        .await;
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert!(
        fencelock_core::LockBackend::release(&backend, &lease)
            .await
            .unwrap()
    );
    let token: u64 = storage
        .transaction(&key, WAIT, |tx| {
            Box::pin(async move { Ok::<_, Error>(tx.token().get()) })
        })
        .await
        .unwrap();
    assert!(
        token > lease.token.get(),
        "the transaction's token follows the lease's"
    );
    schema.cleanup().await;
}

/// `transaction_with` takes an `async` closure: commits on `Ok` (the value written, a token
/// taken), rolls back on `Err`, and runs inside a spawned task (its future is `Send`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn async_closure_transactions_commit_and_roll_back() {
    let (schema, db) = common::database().await;
    let storage = db.storage();
    let key = LockKey::new("async-closure").unwrap();
    let resource = account(3);
    let spawned = {
        let storage = storage.clone();
        let key = key.clone();
        let resource = resource.clone();
        tokio::spawn(async move {
            storage
                .transaction_with(&key, WAIT, async |tx| -> Result<Fence, Error> {
                    tx.write(&resource, b"committed").await?;
                    Ok(tx.fence())
                })
                .await
        })
    };
    let fence = spawned.await.unwrap().unwrap();
    let snapshot = storage.peek(&resource).await.unwrap().unwrap();
    assert_eq!(snapshot.value.as_deref(), Some(&b"committed"[..]));
    assert_eq!(snapshot.fence, fence);

    let outcome = storage
        .transaction_with(&key, WAIT, async |tx| -> Result<(), Error> {
            tx.write(&resource, b"rolled back").await?;
            Err(Error::config("the caller changed its mind"))
        })
        .await;
    assert!(matches!(outcome, Err(Error::InvalidConfig { .. })));
    let after = storage.peek(&resource).await.unwrap().unwrap();
    assert_eq!(after.value.as_deref(), Some(&b"committed"[..]));
    schema.cleanup().await;
}
