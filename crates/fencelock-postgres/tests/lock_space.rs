//! One lock space per key in a schema: the lease backend, the advisory backend and the
//! transaction API never hold one key at once, and a lease grant never waits long behind a
//! transaction.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, LockBackend, LockKey, Locker};
use fencelock_postgres::{PgBackendKind, PgConfig};
use fencelock_testkit::postgres::pg_options;
use tokio::time::{Instant, sleep};

const TTL: Duration = Duration::from_secs(30);

fn refused(outcome: Result<impl std::fmt::Debug, Error>, schema: &str, bound: &str) {
    match outcome {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains(schema), "{message}");
            assert!(
                message.contains(&format!("bound to the {bound} lock mechanism")),
                "{message}"
            );
        }
        other => panic!("expected a refusal naming {schema} and {bound}: {other:?}"),
    }
}

/// The first grant binds the schema to its mechanism; the other backend refuses to grant
/// there, on the same database and on another connected with `?backend=` set to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_serves_one_mechanism() {
    for (first, second) in [
        (PgBackendKind::Lease, PgBackendKind::Advisory),
        (PgBackendKind::Advisory, PgBackendKind::Lease),
    ] {
        let (schema, db) = common::database().await;
        let key = LockKey::new("one-space").unwrap();
        let holder = db.lock_backend(first);
        let held = holder.try_acquire(&key, TTL).await.unwrap().unwrap();
        refused(
            db.lock_backend(second).try_acquire(&key, TTL).await,
            schema.name(),
            first.as_str(),
        );
        let other = PgConfig::from_options(pg_options())
            .schema(schema.name())
            .with_backend_kind(second)
            .connect()
            .await
            .unwrap();
        refused(
            other.backend().try_acquire(&key, TTL).await,
            schema.name(),
            first.as_str(),
        );
        // Every key of the schema: the binding is the schema's, not the key's.
        refused(
            other
                .backend()
                .try_acquire(&LockKey::new("another").unwrap(), TTL)
                .await,
            schema.name(),
            first.as_str(),
        );
        assert!(holder.release(&held).await.unwrap());
        other.close().await;
        schema.cleanup().await;
    }
}

/// In a lease schema, a transaction waits for a lease holder of its key (and times out within
/// its budget while the lease lives), and runs once the lease is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_exclude_lease_holders() {
    let (schema, db) = common::database().await;
    let backend = db.lease_backend();
    let storage = db.storage();
    let key = LockKey::new(format!("tx-vs-lease/{}", schema.name())).unwrap();
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let outcome = storage
        .transaction_with(
            &key,
            Duration::from_millis(300),
            async |_tx| -> Result<(), Error> { Ok(()) },
        )
        .await;
    assert!(matches!(outcome, Err(Error::Timeout { .. })), "{outcome:?}");
    // A waiting transaction runs as soon as the lease is released.
    let waiting = tokio::spawn({
        let (storage, key) = (storage.clone(), key.clone());
        async move {
            storage
                .transaction_with(&key, TTL, async |tx| -> Result<u64, Error> {
                    Ok(tx.token().get())
                })
                .await
        }
    });
    sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the transaction ran beside a live lease"
    );
    assert!(backend.release(&lease).await.unwrap());
    let token = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the transaction did not run after the release")
        .unwrap()
        .unwrap();
    assert!(token > lease.token.get());
    // The transaction's claim ended with it: the lease backend grants the key again.
    let again = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(again.token.get() > token);
    assert!(backend.release(&again).await.unwrap());
    schema.cleanup().await;
}

/// A lease grant of a key a transaction holds reports it held within its lock wait (it
/// neither waits for the transaction nor keeps waiting on the server), and a locker waiting
/// for the key gets it once the transaction commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_grant_behind_a_transaction_is_bounded() {
    let (schema, db) = common::database().await;
    let backend = db.lease_backend();
    // Bind the schema to leases first, as a lease user would.
    let warm_up = LockKey::new("warm-up").unwrap();
    let lease = backend.try_acquire(&warm_up, TTL).await.unwrap().unwrap();
    assert!(backend.release(&lease).await.unwrap());
    let key = LockKey::new(format!("lease-vs-tx/{}", schema.name())).unwrap();
    let storage = db.storage();
    let (entered_tx, entered) = tokio::sync::oneshot::channel();
    let holder = tokio::spawn({
        let (storage, key) = (storage.clone(), key.clone());
        async move {
            storage
                .transaction_with(&key, TTL, async |tx| -> Result<u64, Error> {
                    let _ = entered_tx.send(());
                    sleep(Duration::from_secs(3)).await;
                    Ok(tx.token().get())
                })
                .await
        }
    });
    entered.await.unwrap();
    let started = Instant::now();
    let tried = backend.try_acquire(&key, TTL).await.unwrap();
    assert!(tried.is_none(), "granted while a transaction held the key");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "the try waited {:?} behind the transaction",
        started.elapsed()
    );
    let waiting: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity \
         WHERE wait_event_type = 'Lock' AND query LIKE '%fencelock_leases%' \
           AND query LIKE $1",
    )
    .bind(format!("%{}%", schema.name()))
    .fetch_one(schema.admin())
    .await
    .unwrap();
    assert_eq!(waiting, 0, "a grant is still waiting on the server");
    let locker = Locker::new(Arc::new(backend.clone()));
    let guard = locker
        .lock(&key)
        .ttl(TTL)
        .wait(Duration::from_secs(20))
        .await
        .unwrap();
    let tx_token = holder.await.unwrap().unwrap();
    assert!(guard.token().get() > tx_token);
    guard.release().await.unwrap();
    schema.cleanup().await;
}

/// Deletes the schema's binding row, as the refusal's message says to do while no lock is
/// held.
async fn unbind(schema: &fencelock_testkit::postgres::PgSchema) {
    sqlx::query(&format!(
        "DELETE FROM \"{}\".fencelock_mechanism",
        schema.name()
    ))
    .execute(schema.admin())
    .await
    .unwrap();
}

/// The binding is checked by every grant, not once per process: process A grants with one
/// mechanism and releases, the binding row is deleted while no lock is held, process B binds
/// the schema to the other mechanism and holds the key; A's next grant (exclusive or shared)
/// is refused, never granted beside B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rebound_schema_is_refused_by_a_process_that_knew_the_old_binding() {
    for (first, second) in [
        (PgBackendKind::Lease, PgBackendKind::Advisory),
        (PgBackendKind::Advisory, PgBackendKind::Lease),
    ] {
        let (schema, process_a) = common::database().await;
        let process_b = PgConfig::from_options(pg_options())
            .schema(schema.name())
            .connect()
            .await
            .unwrap();
        let key = LockKey::new("rebound").unwrap();
        let a = process_a.lock_backend(first);
        let reader = fencelock_core::OwnerId::random();
        let first_lease = a.try_acquire(&key, TTL).await.unwrap().unwrap();
        assert!(a.release(&first_lease).await.unwrap());
        let shared = a
            .try_acquire_shared(&key, reader, TTL)
            .await
            .unwrap()
            .unwrap();
        assert!(a.release_shared(&shared, reader).await.unwrap());
        unbind(&schema).await;
        let b = process_b.lock_backend(second);
        let held = b.try_acquire(&key, TTL).await.unwrap().unwrap();
        refused(
            a.try_acquire(&key, TTL).await,
            schema.name(),
            second.as_str(),
        );
        refused(
            a.try_acquire_shared(&key, reader, TTL).await,
            schema.name(),
            second.as_str(),
        );
        let info = b.inspect(&key).await.unwrap();
        assert_eq!(info.holder.map(|f| f.token), Some(held.token), "{first:?}");
        // The refused grants ran nothing: no shared advisory lock of the key's id, no read
        // phase in the lease table.
        let id = process_a.advisory_lock_id(&key);
        let shared: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND mode = 'ShareLock' \
               AND classid::bigint = ($1 >> 32) & 4294967295 \
               AND objid::bigint = $1 & 4294967295 AND objsubid = 1",
        )
        .bind(id)
        .fetch_one(schema.admin())
        .await
        .unwrap();
        assert_eq!(
            shared, 0,
            "a refused reader holds a shared lock ({first:?})"
        );
        let phases: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM \"{}\".fencelock_leases WHERE key = $1 \
               AND octet_length(owner) = 20",
            schema.name()
        ))
        .bind(key.as_str())
        .fetch_one(schema.admin())
        .await
        .unwrap();
        assert_eq!(
            phases, 0,
            "a refused reader started a read phase ({first:?})"
        );
        assert!(b.release(&held).await.unwrap());
        process_b.close().await;
        schema.cleanup().await;
    }
}

/// A process whose transactions ran in a schema bound to advisory locks, after the binding
/// row was deleted and a lease holder bound the schema to leases, excludes that holder: its
/// transaction waits for the lease (and times out within its budget), never runs beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_excludes_a_lease_holder_after_the_schema_is_rebound() {
    let (schema, transactions) = common::database().await;
    let key = LockKey::new("rebound-tx").unwrap();
    let advisory = transactions.advisory_backend();
    let bound = advisory.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(advisory.release(&bound).await.unwrap());
    let storage = transactions.storage();
    let ran = storage
        .transaction_with(&key, TTL, async |tx| -> Result<u64, Error> {
            Ok(tx.token().get())
        })
        .await
        .unwrap();
    unbind(&schema).await;
    let leases = PgConfig::from_options(pg_options())
        .schema(schema.name())
        .connect()
        .await
        .unwrap();
    let lease = leases
        .lease_backend()
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .unwrap();
    assert!(lease.token.get() > ran);
    let outcome = storage
        .transaction_with(
            &key,
            Duration::from_millis(300),
            async |_tx| -> Result<(), Error> { Ok(()) },
        )
        .await;
    assert!(
        matches!(outcome, Err(Error::Timeout { .. })),
        "a transaction ran beside a live lease: {outcome:?}"
    );
    assert!(leases.lease_backend().release(&lease).await.unwrap());
    leases.close().await;
    schema.cleanup().await;
}
