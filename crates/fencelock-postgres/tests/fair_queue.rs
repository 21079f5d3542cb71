//! The lease backend's fair queue (DESIGN 5.3, *Fair hand-off*), beyond the conformance
//! suite's arrival-order property: a release hands the lock to the first queued waiter in its
//! own statement, with the next token, and notifies that waiter alone; a free lock kept for
//! the queue's head is refused to plain tries and sets; a lock handed to a waiter that
//! vanished lapses after the hand-off ttl and goes to the next waiter.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use fencelock_conformance::queue_refused;
use fencelock_core::{FencingToken, LockBackend, LockKey, Locker, OwnerId, QueueRole};
use fencelock_postgres::PgBackendKind;
use fencelock_testkit::postgres::pg_options;
use sqlx::postgres::PgListener;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout};

use common::queue::{ADVISORY, LEASE, PATIENCE, key, places, until_places};

const TTL: Duration = Duration::from_secs(30);

fn next(token: FencingToken) -> FencingToken {
    FencingToken::new(token.get() + 1).unwrap()
}

/// Eight waiters queued on one key are handed it down in arrival order: each release (the
/// first holder's, then each waiter's) has already given the lock to the next waiter when it
/// returns, with the very next token (no grant was tried and lost in between, which would
/// leave a gap), and notifies that waiter and no key: the grant (its token and hand-off ttl),
/// then its name alone, as processes of earlier versions wait for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_waiters_are_handed_one_key_down_in_arrival_order() {
    let (_schema, db) = common::database().await;
    let backend = Arc::new(db.lease_backend());
    let key = key("hand-down", &db);
    let holder = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let locker = Locker::new(backend.clone());
    let (granted, mut grants) = mpsc::unbounded_channel();
    for place in 0..8 {
        let (locker, waited, granted) = (locker.clone(), key.clone(), granted.clone());
        tokio::spawn(async move {
            let guard = locker
                .lock(waited.as_str())
                .ttl(TTL)
                .wait(PATIENCE * 2)
                .await
                .expect("a queued waiter was not granted");
            granted.send((place, guard)).unwrap();
        });
        until_places(&db, LEASE, &key, place + 1).await;
    }
    let mut listener = PgListener::connect_with(db.pool()).await.unwrap();
    listener
        .listen(&format!("fencelock_{}", db.schema()))
        .await
        .unwrap();

    let mut token = holder.token;
    assert!(backend.release(&holder).await.unwrap());
    for place in 0..8 {
        // Handed by the release itself: held by the next waiter, with the next token.
        let info = backend.inspect(&key).await.unwrap();
        let handed = info.holder.expect("the release left the lock free");
        assert_eq!(handed.token, next(token), "waiter {place}'s token");
        let grant = timeout(PATIENCE, listener.recv())
            .await
            .expect("no notification of the hand-off")
            .unwrap();
        let told: Vec<&str> = grant.payload().split(' ').collect();
        assert_eq!(
            told.first().copied(),
            Some(format!("\n{:032x}", handed.owner.as_u128()).as_str()),
            "the hand-off to waiter {place} told someone else its grant: {:?}",
            grant.payload()
        );
        assert_eq!(told.get(1), Some(&handed.token.get().to_string().as_str()));
        assert_eq!(told.get(3), Some(&"2000000"), "the hand-off ttl, in µs");
        let name = timeout(PATIENCE, listener.recv())
            .await
            .expect("no notification of the hand-off by name")
            .unwrap();
        assert_eq!(
            name.payload(),
            format!("\t{:032x}", handed.owner.as_u128()),
            "the hand-off to waiter {place} notified someone else"
        );
        let (granted_place, guard) = timeout(PATIENCE, grants.recv())
            .await
            .expect("the handed waiter never took the lock up")
            .unwrap();
        assert_eq!(granted_place, place, "granted out of arrival order");
        assert_eq!(guard.fence().token, handed.token);
        assert_eq!(guard.fence().owner, handed.owner);
        assert_eq!(places(&db, LEASE, &key).await, 7 - place);
        token = handed.token;
        assert!(guard.release().await.unwrap());
    }
    // The last release found nobody queued: the key is free and its waiters (none) woken by
    // its name.
    let notification = timeout(PATIENCE, listener.recv()).await.unwrap().unwrap();
    assert_eq!(notification.payload(), key.as_str());
    assert!(backend.inspect(&key).await.unwrap().holder.is_none());
    // Nothing else was sent: no more than those per release.
    assert!(
        timeout(Duration::from_millis(200), listener.recv())
            .await
            .is_err(),
        "a release sent more notifications"
    );
}

/// A hand-off's notification only wakes its waiter: `wait_for_grant` returns no grant (what a
/// `NOTIFY` tells, anyone who may connect could have sent), and the woken waiter's next
/// queued try takes the handed lock up from the server's answer, with the next token and
/// renewed to the waiter's own ttl in the same statement.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_lock_is_taken_up_by_the_woken_waiters_try() {
    let (_schema, db) = common::database().await;
    let backend = db.lease_backend();
    let key = key("told", &db);
    let holder = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let waiter = OwnerId::random();
    assert!(
        backend
            .try_acquire_queued(&key, TTL, waiter)
            .await
            .unwrap()
            .is_none(),
        "a held lock was granted to a queued try"
    );
    assert!(backend.release(&holder).await.unwrap());
    let woken = timeout(
        PATIENCE / 2,
        backend.wait_for_grant(&key, waiter, TTL, PATIENCE),
    )
    .await
    .expect("the handed waiter was never woken")
    .unwrap();
    assert!(woken.is_none(), "a grant was taken from a notification");
    let info = backend.inspect(&key).await.unwrap();
    let handed = info.holder.expect("the release handed nothing");
    assert_eq!((handed.owner, handed.token), (waiter, next(holder.token)));
    let lease = backend
        .try_acquire_queued(&key, TTL, waiter)
        .await
        .unwrap()
        .expect("the handed lock was not taken up");
    assert_eq!((lease.owner, lease.token), (waiter, next(holder.token)));
    assert!(
        backend.inspect(&key).await.unwrap().remaining.unwrap() > Duration::from_secs(2),
        "the take-up did not renew the hand-off ttl into the waiter's"
    );
    assert!(backend.release(&lease).await.unwrap());
}

/// A lock handed to a waiter that queued with a raw queued try and never came back lapses
/// after the hand-off ttl (not the waiter's 30 s), and the waiter behind it is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_handed_to_a_vanished_waiter_lapses_to_the_next() {
    let (_schema, db) = common::database().await;
    let backend = Arc::new(db.lease_backend());
    let key = key("vanished", &db);
    let holder = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let vanished = OwnerId::random();
    queue_refused(&*backend, &key, TTL, &[vanished]).await;
    until_places(&db, LEASE, &key, 1).await;
    let locker = Locker::new(backend.clone());
    let next_waiter = {
        let key = key.clone();
        tokio::spawn(async move {
            locker
                .lock(key.as_str())
                .ttl(TTL)
                .wait(PATIENCE)
                .await
                .expect("the waiter behind a vanished one was not granted")
        })
    };
    until_places(&db, LEASE, &key, 2).await;
    let released_at = Instant::now();
    assert!(backend.release(&holder).await.unwrap());
    let info = backend.inspect(&key).await.unwrap();
    let handed = info.holder.expect("the release left the lock free");
    assert_eq!(handed.owner, vanished, "handed to the wrong waiter");
    assert_eq!(handed.token, next(holder.token));
    assert!(
        info.remaining.unwrap() <= Duration::from_secs(2),
        "a handed lock lives the hand-off ttl, not the waiter's ttl: {:?}",
        info.remaining
    );
    let guard = timeout(PATIENCE, next_waiter)
        .await
        .expect("the next waiter was never granted")
        .unwrap();
    assert_eq!(guard.fence().token, next(handed.token));
    // Not before the handed lock lapsed by the server's clock (2 s after the release).
    assert!(released_at.elapsed() >= Duration::from_secs(2));
    assert!(guard.release().await.unwrap());
}

/// A free lock kept for the head of its queue is held to everyone else: a plain try, a set of
/// keys and a queued waiter behind the head are refused, and the head is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_lock_is_kept_for_the_head_of_its_queue() {
    let (_schema, db) = common::database().await;
    let backend = db.lease_backend();
    let key = key("kept", &db);
    let other = LockKey::new(format!("{key}/other")).unwrap();
    let holder = backend
        .try_acquire(&key, Duration::from_millis(100))
        .await
        .unwrap()
        .unwrap();
    let (head, behind) = (OwnerId::random(), OwnerId::random());
    queue_refused(&backend, &key, TTL, &[head, behind]).await;
    // The holder's lease runs out without a release: the lock is free, and kept.
    let deadline = Instant::now() + PATIENCE;
    while backend.inspect(&key).await.unwrap().holder.is_some() {
        assert!(Instant::now() < deadline, "the holder never expired");
        sleep(Duration::from_millis(10)).await;
    }
    assert!(
        backend
            .try_acquire_queued(&key, TTL, behind)
            .await
            .unwrap()
            .is_none(),
        "the waiter behind the head took the lock"
    );
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_none());
    let mut set = [key.clone(), other.clone()];
    set.sort();
    assert!(backend.try_acquire_all(&set, TTL).await.unwrap().is_none());
    let lease = backend
        .try_acquire_queued(&key, TTL, head)
        .await
        .unwrap()
        .expect("the head of the queue was refused a free lock");
    assert_eq!(lease.owner, head);
    assert!(lease.token > holder.token);
    // The head leaves nothing behind; the waiter behind leaves its place, and the key is
    // free to a plain try once released.
    backend.leave_queue(&key, behind).await.unwrap();
    assert_eq!(places(&db, LEASE, &key).await, 0);
    assert!(backend.release(&lease).await.unwrap());
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_some());
}

/// A waiter that leaves the queue after the lock was handed to it gives the lock up: it is
/// handed on to the next waiter at once, never left to lapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_with_a_handed_lock_hands_it_on() {
    let (_schema, db) = common::database().await;
    let backend = db.lease_backend();
    let key = key("leave-handed", &db);
    let holder = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let (first, second) = (OwnerId::random(), OwnerId::random());
    queue_refused(&backend, &key, TTL, &[first, second]).await;
    assert!(backend.release(&holder).await.unwrap());
    let handed = backend.inspect(&key).await.unwrap().holder.unwrap();
    assert_eq!(handed.owner, first);
    backend.leave_queue(&key, first).await.unwrap();
    let handed_on = backend.inspect(&key).await.unwrap().holder.unwrap();
    assert_eq!(handed_on.owner, second);
    assert_eq!(handed_on.token, next(handed.token));
    let lease = backend
        .try_acquire_queued(&key, TTL, second)
        .await
        .unwrap()
        .expect("the waiter handed the lock could not take it up");
    assert_eq!(lease.token, handed_on.token);
    assert!(backend.release(&lease).await.unwrap());
    assert_eq!(places(&db, LEASE, &key).await, 0);
}

/// A queued try after the volatile tables were lost (a crash, a failover) starts a new epoch
/// as a plain grant does: its token is above every token granted before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_try_after_lost_volatile_state_starts_a_new_epoch() {
    let (_schema, db) = common::database().await;
    let backend = db.lease_backend();
    let key = key("queued-epoch", &db);
    let first = backend
        .try_acquire_queued(&key, TTL, OwnerId::random())
        .await
        .unwrap()
        .expect("a queued try was refused a free lock");
    common::lose_volatile_state(
        db.pool(),
        db.schema(),
        &[
            "fencelock_epoch_live",
            "fencelock_counters",
            "fencelock_leases",
            "fencelock_lease_readers",
            "fencelock_lease_places",
        ],
    )
    .await;
    let second = backend
        .try_acquire_queued(&key, TTL, OwnerId::random())
        .await
        .unwrap()
        .expect("a queued try was refused after the volatile state was lost");
    assert!(second.token > first.token);
    assert!(
        second.token.get() >> 32 > first.token.get() >> 32,
        "no new epoch"
    );
    assert!(!backend.release(&first).await.unwrap());
    assert!(backend.release(&second).await.unwrap());
}

/// A hand-off is announced by `NOTIFY`, which any role that may connect can send: a forged
/// grant (token 999999 for 60 s) and name, from a role with no right but CONNECT, told to a
/// queued waiter while another client holds the lock, wake the waiter at most. It is not
/// granted, the counter does not move, and the holder's release gives the waiter the next
/// real token (DESIGN 4.0.1: a grant comes only from a try's answer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_hand_off_notify_grants_nothing() {
    let (schema, db) = common::database().await;
    let backend = Arc::new(db.lease_backend());
    let key = key("forged", &db);
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let locker = Locker::new(backend.clone());
    let waiting = {
        let (locker, key) = (locker.clone(), key.clone());
        tokio::spawn(async move { locker.lock(key.as_str()).ttl(TTL).wait(PATIENCE * 2).await })
    };
    until_places(&db, LEASE, &key, 1).await;
    let queue = backend.inspect_queue(&key).await.unwrap().unwrap();
    let waiter = queue
        .iter()
        .find(|entry| entry.role == QueueRole::Waiting)
        .expect("the waiter's place")
        .owner;
    // Time for the refused try's answer to reach the waiter, which then sleeps.
    sleep(Duration::from_millis(300)).await;

    let role = format!("{}_forger", schema.name());
    sqlx::query(&format!("CREATE ROLE {role} LOGIN"))
        .execute(schema.admin())
        .await
        .unwrap();
    let forger = sqlx::PgPool::connect_with(pg_options().username(&role))
        .await
        .expect("the forger connects with CONNECT alone");
    let hex = format!("{:032x}", waiter.as_u128());
    sqlx::query(
        "SELECT pg_notify($1, E'\\n' || $2 || ' 999999 ' \
           || floor(extract(epoch FROM clock_timestamp()) * 1000000)::bigint || ' 60000000'), \
           pg_notify($1, E'\\t' || $2)",
    )
    .bind(format!("fencelock_{}", db.schema()))
    .bind(&hex)
    .execute(&forger)
    .await
    .unwrap();
    forger.close().await;
    sleep(Duration::from_secs(1)).await;
    assert!(
        !waiting.is_finished(),
        "the forged NOTIFY granted the waiter the lock"
    );
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(
        info.holder.map(|h| h.token),
        Some(held.token),
        "the holder changed"
    );
    assert_eq!(info.last_token, Some(held.token), "the counter moved");

    assert!(backend.release(&held).await.unwrap());
    let guard = timeout(PATIENCE, waiting)
        .await
        .expect("the waiter was not granted after the release")
        .unwrap()
        .unwrap();
    assert_eq!(guard.fence().token, next(held.token));
    assert!(guard.release().await.unwrap());
    sqlx::query(&format!("DROP ROLE {role}"))
        .execute(schema.admin())
        .await
        .unwrap();
}

/// Calls of queue function `function` in `db`'s schema the server has counted
/// (`track_functions` is on for the pool's connections).
async fn queue_function_calls(db: &fencelock_postgres::PgDatabase, function: &str) -> i64 {
    sqlx::query_scalar(
        "SELECT COALESCE(sum(calls), 0)::bigint FROM pg_stat_user_functions \
          WHERE schemaname = $1 AND funcname = $2",
    )
    .bind(db.schema())
    .bind(function)
    .fetch_one(db.pool())
    .await
    .unwrap()
}

/// Waiters queued behind a held lock do not each send a statement to keep their place: the
/// process's place keeper keeps them all with one statement per refresh interval (DESIGN
/// 5.3, *One refresh per process*). 48 waiters queued for 4 s called the queue function about
/// twice a second each before it (about 380 calls on the lease backend; on the advisory
/// backend, 48 waiters called it 370 times in 4 s before its keeper); now none of them tries
/// while nothing happens to the lock, their places stay live, and the release still hands the
/// lock down the queue.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiters_keep_their_places_without_a_statement_each() {
    for kind in [PgBackendKind::Lease, PgBackendKind::Advisory] {
        waiters_are_kept(kind).await;
    }
}

async fn waiters_are_kept(kind: PgBackendKind) {
    const WAITERS: i64 = 48;
    let (table, function) = match kind {
        PgBackendKind::Lease => (LEASE, "fencelock_lease_acquire_queued"),
        _ => (ADVISORY, "fencelock_advisory_acquire_queued"),
    };
    let schema = fencelock_testkit::postgres::PgSchema::create().await;
    let pool = common::app_pool_on(
        pg_options().options([("track_functions", "pl")]),
        schema.name(),
    );
    let db = fencelock_postgres::PgDatabase::from_pool(pool, schema.name()).unwrap();
    db.migrate().await.unwrap();
    let backend = db.lock_backend(kind);
    let key = key("kept", &db);
    let holder = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let locker = Locker::new(backend.clone());
    let (granted, mut grants) = mpsc::unbounded_channel();
    for _ in 0..WAITERS {
        let (locker, waited, granted) = (locker.clone(), key.clone(), granted.clone());
        tokio::spawn(async move {
            let guard = locker
                .lock(waited.as_str())
                .ttl(TTL)
                .wait(PATIENCE * 2)
                .await
                .expect("a queued waiter was not granted");
            granted.send(guard).unwrap();
        });
    }
    until_places(&db, table, &key, WAITERS).await;
    // The first tries' counts reach the statistics (a backend reports at most every second).
    sleep(Duration::from_secs(2)).await;
    let before = queue_function_calls(&db, function).await;
    sleep(Duration::from_secs(4)).await;
    let during = queue_function_calls(&db, function).await - before;
    assert_eq!(
        places(&db, table, &key).await,
        WAITERS,
        "{kind:?}: queued waiters lost their places"
    );
    assert!(
        during < WAITERS,
        "{kind:?}: {WAITERS} waiters called the queue function {during} times in 4 s while \
         the lock stayed held: each keeps its own place"
    );
    assert!(backend.release(&holder).await.unwrap());
    let mut last = holder.token;
    for _ in 0..WAITERS {
        let guard = timeout(PATIENCE, grants.recv()).await.unwrap().unwrap();
        assert!(guard.token() > last);
        last = guard.token();
        assert!(guard.release().await.unwrap());
    }
    schema.cleanup().await;
}
