//! Advisory-lock specifics: interop with plain SQL clients, sessions ended by the server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, LostReason};
use fencelock_postgres::raw_lock_key;
use sqlx::{Connection, PgConnection};

const TTL: Duration = Duration::from_secs(30);

async fn plain_connection() -> PgConnection {
    PgConnection::connect_with(&fencelock_testkit::postgres::pg_options())
        .await
        .unwrap()
}

async fn try_lock_elsewhere(id: i64) -> bool {
    let mut conn = plain_connection().await;
    let got: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1)")
        .bind(id)
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    got
}

async fn interop(id: i64) {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    let key = raw_lock_key(id);
    assert_eq!(db.advisory_lock_id(&key), id);
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(
        !try_lock_elsewhere(id).await,
        "another client got id {id} while fencelock held it"
    );
    assert!(backend.release(&lease).await.unwrap());
    assert!(
        try_lock_elsewhere(id).await,
        "id {id} still locked after release"
    );
    schema.cleanup().await;
}

/// The literal id 402 of the design: fencelock and plain SQL exclude each other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_id_402_excludes_plain_sql_clients() {
    interop(402).await;
}

/// The same with an id no parallel test run uses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn raw_unique_id_excludes_plain_sql_clients() {
    let (schema, _db) = common::database().await;
    let id = schema.unique_id();
    interop(id).await;
    schema.cleanup().await;
}

/// A plain client holding the id keeps fencelock out until it unlocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_sql_holder_excludes_fencelock() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    let id = schema.unique_id() ^ 1;
    let mut other = plain_connection().await;
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(id)
        .execute(&mut other)
        .await
        .unwrap();
    assert!(
        backend
            .try_acquire(&raw_lock_key(id), TTL)
            .await
            .unwrap()
            .is_none()
    );
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(id)
        .execute(&mut other)
        .await
        .unwrap();
    let lease = backend
        .try_acquire(&raw_lock_key(id), TTL)
        .await
        .unwrap()
        .unwrap();
    assert!(backend.release(&lease).await.unwrap());
    other.close().await.unwrap();
    schema.cleanup().await;
}

/// `pg_terminate_backend` on the holder's session frees the lock; the next grant has a higher
/// token; the old holder's writes are refused and its extend reports the ended session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_holder_session_frees_the_lock() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    let storage = db.storage();
    let key = LockKey::new(format!("terminate/{}", schema.name())).unwrap();
    let id = db.advisory_lock_id(&key);

    let old = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    storage.write(&key, old.fence(), b"old").await.unwrap();
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_none());

    let terminated: i64 = sqlx::query_scalar(
        "SELECT count(pg_terminate_backend(pid)) FROM pg_locks \
         WHERE locktype = 'advisory' AND granted AND objsubid = 1 \
           AND classid = (($1::bigint >> 32) & 4294967295)::oid \
           AND objid = ($1::bigint & 4294967295)::oid",
    )
    .bind(id)
    .fetch_one(schema.admin())
    .await
    .unwrap();
    assert_eq!(terminated, 1, "exactly the holder's session is terminated");

    // The server frees the lock as the session ends.
    let new = loop {
        if let Some(lease) = backend.try_acquire(&key, TTL).await.unwrap() {
            break lease;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        new.token > old.token,
        "the next grant carries a higher token"
    );
    storage.read(&key, new.fence()).await.unwrap();
    match storage.write(&key, old.fence(), b"stale").await {
        Err(Error::Stale {
            presented, current, ..
        }) => {
            assert_eq!(presented, old.fence());
            assert_eq!(current, new.fence());
        }
        other => panic!("old holder's write was not refused: {other:?}"),
    }
    match backend.extend(&old, TTL).await {
        Err(Error::LeaseLost {
            reason: LostReason::SessionEnded | LostReason::NotHeld,
            ..
        }) => {}
        other => panic!("extend of a terminated session: {other:?}"),
    }
    assert!(!backend.release(&old).await.unwrap());
    assert_eq!(
        storage.peek(&key).await.unwrap().unwrap().value.as_deref(),
        Some(&b"old"[..])
    );
    assert!(backend.release(&new).await.unwrap());
    schema.cleanup().await;
}

/// A silent holder's session is ended by the server after the ttl (`idle_session_timeout`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn silent_holder_is_ended_by_the_server() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    let key = LockKey::new("silent").unwrap();
    let ttl = Duration::from_millis(300);
    let old = backend.try_acquire(&key, ttl).await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(
        info.holder, None,
        "the server did not end the silent session"
    );
    let new = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(new.token > old.token);
    assert!(matches!(
        backend.extend(&old, ttl).await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(!backend.release(&old).await.unwrap());
    assert!(backend.release(&new).await.unwrap());
    schema.cleanup().await;
}

/// Released holder connections go back to the pool clean: no lock and no time-out stays on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn released_connections_are_reused_clean() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    for round in 0..50 {
        let key = LockKey::new(format!("reuse/{}", round % 3)).unwrap();
        let lease = backend
            .try_acquire(&key, Duration::from_millis(200))
            .await
            .unwrap()
            .unwrap();
        assert!(backend.release(&lease).await.unwrap());
    }
    assert_eq!(backend.held_count(), 0);
    // Idle past every ttl used above: a connection with a stale time-out would now be dead,
    // and the next grant would fail.
    tokio::time::sleep(Duration::from_millis(400)).await;
    let lease = backend
        .try_acquire(&LockKey::new("reuse/after").unwrap(), TTL)
        .await
        .unwrap()
        .unwrap();
    assert!(backend.extend(&lease, TTL).await.is_ok());
    assert!(backend.release(&lease).await.unwrap());
    schema.cleanup().await;
}

/// A waiter queued behind a plain SQL holder gets the lock once that client unlocks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiter_behind_plain_sql_holder_gets_the_lock() {
    let (schema, db) = common::database().await;
    let locker = fencelock_core::Locker::new(std::sync::Arc::new(db.advisory_backend()));
    let id = schema.unique_id() ^ 2;
    let mut other = plain_connection().await;
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(id)
        .execute(&mut other)
        .await
        .unwrap();
    let key = raw_lock_key(id);
    let waiting = tokio::spawn({
        let locker = locker.clone();
        async move {
            locker
                .lock(key.as_str())
                .ttl(TTL)
                .wait(Duration::from_secs(10))
                .await
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished());
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(id)
        .execute(&mut other)
        .await
        .unwrap();
    let guard = waiting.await.unwrap().unwrap();
    assert!(guard.release().await.unwrap());
    other.close().await.unwrap();
    schema.cleanup().await;
}

/// A lock taken with plain `pg_advisory_lock` on a key's id is reported by `inspect` as held
/// without a fence, with the holding session's pid; fencelock's own leases are not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_reports_a_plain_sql_holder_with_its_pid() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    for key in [
        raw_lock_key(schema.unique_id()),
        LockKey::new(format!("inspect-unfenced/{}", schema.unique_id())).unwrap(),
    ] {
        let id = db.advisory_lock_id(&key);
        let mut plain = plain_connection().await;
        let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
            .fetch_one(&mut plain)
            .await
            .unwrap();
        sqlx::query("SELECT pg_advisory_lock($1)")
            .bind(id)
            .execute(&mut plain)
            .await
            .unwrap();
        let info = backend.inspect(&key).await.unwrap();
        assert_eq!(info.holder, None);
        let who = info
            .unfenced_holder
            .clone()
            .expect("the plain holder is reported");
        assert!(who.contains(&format!("pid {pid}")), "{who}");
        assert!(info.is_held());
        assert!(backend.try_acquire(&key, TTL).await.unwrap().is_none());

        sqlx::query("SELECT pg_advisory_unlock($1)")
            .bind(id)
            .execute(&mut plain)
            .await
            .unwrap();
        plain.close().await.unwrap();
        let info = backend.inspect(&key).await.unwrap();
        assert!(!info.is_held(), "{info:?}");

        let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
        let info = backend.inspect(&key).await.unwrap();
        assert_eq!(info.holder, Some(lease.fence()));
        assert_eq!(
            info.unfenced_holder, None,
            "fencelock's own lease is fenced"
        );
        assert!(backend.release(&lease).await.unwrap());
    }
    schema.cleanup().await;
}

/// A release whose connection fails under it (the proxy closes the connection at the server's
/// first answer, so the release may or may not have run) is an error, its outcome unknown,
/// never `Ok(false)`, which says the lock was lost while held (`fencelock run` exits 76 on
/// it); closing the session frees the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_answer_is_lost_is_an_error_not_a_loss() {
    let (schema, proxy, db) = common::proxied_database().await;
    let backend = db.advisory_backend();
    let key = LockKey::new(format!("lost-answer/{}", schema.name())).unwrap();
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    proxy.set_lose_answers(true);
    let released = backend.release(&lease).await;
    proxy.heal();
    assert!(
        matches!(released, Err(Error::Unavailable { .. })),
        "a release whose answer was lost: {released:?}"
    );
    let direct =
        fencelock_postgres::PgConfig::from_options(fencelock_testkit::postgres::pg_options())
            .schema(schema.name())
            .connect()
            .await
            .unwrap();
    let started = std::time::Instant::now();
    while direct
        .advisory_backend()
        .inspect(&key)
        .await
        .unwrap()
        .is_held()
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the lock stayed held"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    direct.close().await;
}
