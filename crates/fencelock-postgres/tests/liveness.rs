//! Liveness: a holder's ended session is noticed at once, a paused transaction cannot keep
//! its lock, `close` never waits for holders, installations in two schemas do not contend, a
//! lease acquire never waits long behind a transaction.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, Locker, LostReason};
use tokio::time::{Instant, sleep, timeout};

const TTL: Duration = Duration::from_secs(30);
/// Generous: the machine is loaded.
const BOUND: Duration = Duration::from_secs(5);

/// Whether a plain session can take the advisory lock `id` (and lets it go again).
async fn free_elsewhere(id: i64) -> bool {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect_with(&fencelock_testkit::postgres::pg_options())
        .await
        .unwrap();
    let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(id)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    got
}

/// `pg_terminate_backend` on the holder's session, with the watchdog off and a 30 s ttl:
/// `lost()` fires and `is_held()` turns false within a few seconds, while another client can
/// already take the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_holder_session_fires_lost_at_once() {
    let (schema, db) = common::database().await;
    let locker = Locker::new(Arc::new(db.advisory_backend()));
    let key = LockKey::new(format!("watched/{}", schema.name())).unwrap();
    let guard = locker.lock(&key).ttl(TTL).watchdog(false).await.unwrap();
    let lost = guard.lost();
    // The holder's pid, as fencelock records it.
    let pid: i32 = sqlx::query_scalar(&format!(
        "SELECT pid FROM {}.fencelock_advisory_holders WHERE key = $1",
        schema.name()
    ))
    .bind(key.as_str())
    .fetch_one(schema.admin())
    .await
    .unwrap();
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(schema.admin())
        .await
        .unwrap();
    assert!(terminated);
    let ended = Instant::now();
    // Another client can take the lock as soon as the server has ended the session.
    let other = db.advisory_backend();
    let taken = loop {
        if let Some(lease) = other.try_acquire(&key, TTL).await.unwrap() {
            break lease;
        }
        assert!(ended.elapsed() < BOUND, "the lock was not freed");
        sleep(Duration::from_millis(20)).await;
    };
    let reason = timeout(BOUND, lost)
        .await
        .expect("lost() did not fire after the holder's session was terminated");
    assert_eq!(reason, LostReason::SessionEnded);
    assert!(!guard.is_held());
    assert!(taken.token > guard.token());
    assert!(other.release(&taken).await.unwrap());
    assert!(!guard.release().await.unwrap());
    schema.cleanup().await;
}

/// The session watch never keeps a silent holder's lock: a guard with the watchdog off loses
/// the lock at its ttl, the server ending the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_watch_does_not_prolong_an_unrenewed_lease() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    let key = LockKey::new("unrenewed").unwrap();
    let ttl = Duration::from_millis(1_500);
    let old = backend.try_acquire(&key, ttl).await.unwrap().unwrap();
    sleep(ttl + Duration::from_secs(1)).await;
    let new = backend
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .expect("the unrenewed lease outlived its ttl");
    assert!(new.token > old.token);
    assert!(backend.release(&new).await.unwrap());
    schema.cleanup().await;
}

/// A transaction whose closure sleeps past the idle bound: the server ends it, the lock is
/// free for another client meanwhile, and the sleeper's commit fails as a lost lease with
/// nothing committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_paused_past_the_idle_bound_loses_its_lock() {
    let (schema, db) = common::database().await;
    let db = db.with_idle_in_transaction_timeout(Duration::from_millis(500));
    let storage = db.storage();
    let key = LockKey::new(format!("paused/{}", schema.name())).unwrap();
    let sleeper = tokio::spawn({
        let storage = storage.clone();
        let key = key.clone();
        async move {
            storage
                .transaction_with(&key, BOUND, async |tx| -> Result<(), Error> {
                    tx.write(&key, b"paused").await?;
                    sleep(Duration::from_secs(3)).await;
                    Ok(())
                })
                .await
        }
    });
    sleep(Duration::from_millis(200)).await;
    // Another client gets the lock while the sleeper still sleeps.
    let started = Instant::now();
    let other = storage
        .transaction_with(&key, BOUND, async |tx| -> Result<u64, Error> {
            tx.write(&key, b"other").await?;
            Ok(tx.token().get())
        })
        .await
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "waited {:?}",
        started.elapsed()
    );
    match sleeper.await.unwrap() {
        Err(Error::LeaseLost {
            reason: LostReason::SessionEnded,
            ..
        }) => {}
        other => panic!("the paused transaction's commit: {other:?}"),
    }
    let stored = storage.peek(&key).await.unwrap().unwrap();
    assert_eq!(stored.value.as_deref(), Some(&b"other"[..]));
    assert_eq!(stored.fence.token.get(), other);
    schema.cleanup().await;
}

/// `close` with an advisory lease held returns at once and frees the lock; the guard learns
/// of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_with_a_lease_held_returns() {
    let schema = fencelock_testkit::postgres::PgSchema::create().await;
    let db = fencelock_postgres::PgConfig::from_options(fencelock_testkit::postgres::pg_options())
        .schema(schema.name())
        .operation_timeout(common::OP_TIMEOUT)
        .connect()
        .await
        .unwrap();
    let locker = Locker::new(Arc::new(db.advisory_backend()));
    let key = LockKey::new("closing").unwrap();
    let guard = locker.lock(&key).ttl(TTL).await.unwrap();
    let lost = guard.lost();
    timeout(BOUND, db.close())
        .await
        .expect("close() waited for the held lease");
    assert_eq!(
        timeout(BOUND, lost).await.unwrap(),
        LostReason::SessionEnded
    );
    assert!(!guard.is_held());
    let id = db.advisory_lock_id(&key);
    let freed = Instant::now();
    while !free_elsewhere(id).await {
        assert!(
            freed.elapsed() < BOUND,
            "the closed session still holds the lock"
        );
        sleep(Duration::from_millis(20)).await;
    }
    drop(guard);
    schema.cleanup().await;
}

/// A guard's supervisor may first look for its lease's session after `close` removed it:
/// the lease is then reported lost because its session ended, not as never held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_after_close_reports_the_ended_session() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    let key = LockKey::new("watched-late").unwrap();
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    timeout(BOUND, db.close())
        .await
        .expect("close() waited for the held lease");
    // Long enough for the session's watch to have closed it and forgotten the entry.
    sleep(Duration::from_millis(500)).await;
    assert_eq!(
        timeout(BOUND, backend.watch_lost(&lease)).await.unwrap(),
        LostReason::SessionEnded
    );
    schema.cleanup().await;
}

/// Two installations (schemas) in one database: the same hashed key is two locks, a raw id is
/// one lock everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_schemas_do_not_contend_but_raw_ids_do() {
    let (first_schema, first) = common::database().await;
    let (second_schema, second) = common::database().await;
    let (a, b) = (first.advisory_backend(), second.advisory_backend());
    let key = LockKey::new("shared-name").unwrap();
    let held = a.try_acquire(&key, TTL).await.unwrap().unwrap();
    let other = b
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .expect("the other installation's key of the same name was locked");
    assert_ne!(first.advisory_lock_id(&key), second.advisory_lock_id(&key));
    assert!(a.release(&held).await.unwrap());
    assert!(b.release(&other).await.unwrap());

    let raw = fencelock_postgres::raw_lock_key(first_schema.unique_id());
    assert_eq!(first.advisory_lock_id(&raw), second.advisory_lock_id(&raw));
    let held = a.try_acquire(&raw, TTL).await.unwrap().unwrap();
    assert!(b.try_acquire(&raw, TTL).await.unwrap().is_none());
    assert!(!free_elsewhere(first.advisory_lock_id(&raw)).await);
    assert!(a.release(&held).await.unwrap());
    first_schema.cleanup().await;
    second_schema.cleanup().await;
}

/// A paused holder (its whole runtime frozen, so its session watch too) is still ended by the
/// server at its ttl: the pings before the pause never pushed the server's deadline past the
/// lease's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_is_still_ended_at_its_ttl() {
    let (schema, db) = common::database().await;
    let key = LockKey::new("paused-holder").unwrap();
    let ttl = Duration::from_millis(1_500);
    let (granted_tx, granted) = std::sync::mpsc::channel();
    let paused = std::thread::spawn({
        let (db, key) = (db.clone(), key.clone());
        move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async {
                let backend = db.advisory_backend();
                let lease = backend.try_acquire(&key, ttl).await.unwrap().unwrap();
                // Let the session watch ping a few times, then freeze the whole runtime.
                sleep(Duration::from_millis(800)).await;
                granted_tx.send(lease.token).unwrap();
                std::thread::sleep(ttl + Duration::from_secs(3));
            });
        }
    });
    let old = tokio::task::spawn_blocking(move || granted.recv().unwrap())
        .await
        .unwrap();
    let frozen = Instant::now();
    let backend = db.advisory_backend();
    let new = loop {
        if let Some(lease) = backend.try_acquire(&key, TTL).await.unwrap() {
            break lease;
        }
        assert!(
            frozen.elapsed() < ttl + Duration::from_millis(1_500),
            "the paused holder's session outlived its ttl"
        );
        sleep(Duration::from_millis(20)).await;
    };
    assert!(new.token > old);
    assert!(backend.release(&new).await.unwrap());
    tokio::task::spawn_blocking(move || paused.join().unwrap())
        .await
        .unwrap();
    schema.cleanup().await;
}

/// A connection of fencelock's own pools that the server ended while it sat idle (a restart,
/// a failover, `pg_terminate_backend`) is found and replaced when it is next taken out, not
/// handed out dead: after a pause, a grant on either backend succeeds. (The pools test a
/// connection on its way out only after such a pause, so that a busy pool pays no round trip
/// per statement: DESIGN.md section 5.3.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_the_server_ended_is_replaced() {
    for kind in ["lease", "advisory"] {
        let schema = fencelock_testkit::postgres::PgSchema::create().await;
        let app = format!("fencelock-idle-{}", schema.unique_id());
        let db = fencelock_postgres::PgConfig::from_url(&format!(
            "{}?schema={}&backend={kind}",
            schema.url(),
            schema.name()
        ))
        .unwrap()
        .application_name(&app)
        .connect()
        .await
        .unwrap();
        let backend: Arc<dyn LockBackend> = match kind {
            "lease" => Arc::new(db.lease_backend()),
            _ => Arc::new(db.advisory_backend()),
        };
        let key = LockKey::new(format!("idle/{}", schema.name())).unwrap();
        // The pool has a connection, idle now.
        let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
        assert!(backend.release(&held).await.unwrap());
        // sqlx tests a connection on its way back in, in a task of its own: let that finish,
        // so that the sessions ended below are idle ones.
        sleep(Duration::from_millis(300)).await;
        let ended: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE application_name = $1) t",
        )
        .bind(&app)
        .fetch_one(schema.admin())
        .await
        .unwrap();
        assert!(ended >= 1, "{kind}: none of fencelock's sessions was found");
        // Longer than the pause after which a connection is tested.
        sleep(Duration::from_secs(1)).await;
        let again = backend
            .try_acquire(&key, TTL)
            .await
            .unwrap_or_else(|e| panic!("{kind}: a grant after the idle session was ended: {e}"))
            .unwrap_or_else(|| panic!("{kind}: the lock is free"));
        assert!(again.token > held.token, "{kind}");
        assert!(backend.release(&again).await.unwrap());
        db.close().await;
        schema.cleanup().await;
    }
}
