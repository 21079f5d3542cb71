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

/// Ends the sessions holding the advisory lock `id`; how many there were.
async fn terminate_holder(admin: &sqlx::PgPool, id: i64) -> i64 {
    sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_locks \
         WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
           AND classid = (($1::bigint >> 32) & 4294967295)::oid \
           AND objid = ($1::bigint & 4294967295)::oid",
    )
    .bind(id)
    .fetch_one(admin)
    .await
    .unwrap()
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
