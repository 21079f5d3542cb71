//! The advisory backend's fair queue (DESIGN 5.3, *Fair hand-off*, the advisory paragraph),
//! beyond the conformance suite's arrival-order property: a release wakes the first queued
//! waiter alone, by name (never every waiter of the key), and that waiter takes the lock with
//! its next try; a free lock kept for a head that vanished is free again once its place
//! lapses; a head that leaves wakes the place behind it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use fencelock_conformance::queue_refused;
use fencelock_core::QueueRole::Waiting;
use fencelock_core::{LockBackend, LockKey, Locker, OwnerId};
use fencelock_postgres::PgDatabase;
use sqlx::postgres::PgListener;
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep, timeout};

use common::queue::{ADVISORY, PATIENCE, key, places, until_places};

const TTL: Duration = Duration::from_secs(30);

async fn listen(db: &PgDatabase) -> PgListener {
    let mut listener = PgListener::connect_with(db.pool()).await.unwrap();
    listener
        .listen(&format!("fencelock_{}", db.schema()))
        .await
        .unwrap();
    listener
}

/// The payload that tells `waiter` its turn at `key` (`fencelock_turn_payload`).
fn turn(waiter: OwnerId, key: &LockKey) -> String {
    format!("\u{b}{:032x}{key}", waiter.as_u128())
}

/// Eight waiters queued on one key are granted it in arrival order, and each release sends
/// one notification: the turn of the next waiter, by name. The last release, with nobody
/// queued, wakes the key's waiters by the key's name as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_release_wakes_the_next_waiter_alone() {
    let (_schema, db) = common::database().await;
    let backend = Arc::new(db.advisory_backend());
    let key = key("wake-one", &db);
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
        until_places(&db, ADVISORY, &key, place + 1).await;
    }
    let mut listener = listen(&db).await;
    let mut token = holder.token;
    assert!(backend.release(&holder).await.unwrap());
    for place in 0..8 {
        let woken = timeout(PATIENCE, listener.recv())
            .await
            .expect("no notification of the release")
            .unwrap();
        let (granted_place, guard) = timeout(PATIENCE, grants.recv())
            .await
            .expect("the woken waiter never took the lock")
            .unwrap();
        assert_eq!(granted_place, place, "granted out of arrival order");
        assert_eq!(
            woken.payload(),
            turn(guard.fence().owner, &key),
            "the release before waiter {place}'s grant woke someone else"
        );
        assert!(guard.fence().token > token);
        token = guard.fence().token;
        assert_eq!(places(&db, ADVISORY, &key).await, 7 - place);
        assert!(guard.release().await.unwrap());
    }
    let last = timeout(PATIENCE, listener.recv()).await.unwrap().unwrap();
    assert_eq!(last.payload(), key.as_str());
    // Nothing else was sent: one notification per release.
    assert!(
        timeout(Duration::from_millis(200), listener.recv())
            .await
            .is_err(),
        "a release sent more notifications"
    );
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_some());
}

/// A free lock kept for the head of its queue is refused to a plain try and to the waiter
/// behind the head, listed by `inspect_queue` with the head first, and granted to the head;
/// a head that queued and never came back keeps it only until its place lapses (2 s after
/// its last try), and the waiter behind is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_free_lock_is_kept_for_the_head_until_its_place_lapses() {
    let (_schema, db) = common::database().await;
    let backend = Arc::new(db.advisory_backend());
    let key = key("kept", &db);
    let holder = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let (head, behind) = (OwnerId::random(), OwnerId::random());
    queue_refused(&*backend, &key, TTL, &[head, behind]).await;
    assert!(backend.release(&holder).await.unwrap());
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_none());
    // What an operator sees: no holder, and the head first in the queue it is kept for.
    assert_eq!(backend.inspect(&key).await.unwrap().holder, None);
    let listed = backend.inspect_queue(&key).await.unwrap().unwrap();
    let shown: Vec<_> = listed.iter().map(|e| (e.role, e.owner)).collect();
    assert_eq!(shown, [(Waiting, head), (Waiting, behind)], "{listed:?}");
    let behind_tried_at = Instant::now();
    assert!(
        backend
            .try_acquire_queued(&key, TTL, behind)
            .await
            .unwrap()
            .is_none(),
        "the waiter behind the head took the lock"
    );
    let lease = backend
        .try_acquire_queued(&key, TTL, head)
        .await
        .unwrap()
        .expect("the head of the queue was refused a free lock");
    assert_eq!(lease.owner, head);
    assert!(lease.token > holder.token);
    assert_eq!(
        places(&db, ADVISORY, &key).await,
        1,
        "only the waiter behind is queued"
    );

    // `behind` is now the head, and vanishes: its last try was just before this release.
    let locker = Locker::new(backend.clone());
    let next_waiter = {
        let key = key.clone();
        tokio::spawn(async move {
            locker
                .lock(key.as_str())
                .ttl(TTL)
                .wait(PATIENCE)
                .await
                .expect("the waiter behind a vanished head was not granted")
        })
    };
    until_places(&db, ADVISORY, &key, 2).await;
    assert!(backend.release(&lease).await.unwrap());
    let guard = timeout(PATIENCE, next_waiter)
        .await
        .expect("the waiter behind a vanished head was never granted")
        .unwrap();
    assert!(guard.fence().token > lease.token);
    // Not before the vanished head's place lapsed, 2 s after its last try.
    assert!(
        behind_tried_at.elapsed() >= Duration::from_secs(2),
        "granted {:?} after the vanished head's last try, inside its place ttl",
        behind_tried_at.elapsed()
    );
    assert!(guard.release().await.unwrap());
}

/// The head of a queue that leaves while the lock is free (it was kept for it) wakes the
/// waiter behind it by name, which takes the lock at once instead of at its next refresh.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_that_leaves_a_free_lock_wakes_the_next() {
    let (_schema, db) = common::database().await;
    let backend = Arc::new(db.advisory_backend());
    let key = key("leave", &db);
    let holder = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let head = OwnerId::random();
    queue_refused(&*backend, &key, TTL, &[head]).await;
    let locker = Locker::new(backend.clone());
    let next_waiter = {
        let key = key.clone();
        tokio::spawn(async move {
            locker
                .lock(key.as_str())
                .ttl(TTL)
                .wait(PATIENCE)
                .await
                .expect("the waiter behind a head that left was not granted")
        })
    };
    until_places(&db, ADVISORY, &key, 2).await;
    let mut listener = listen(&db).await;
    assert!(backend.release(&holder).await.unwrap());
    let woken = timeout(PATIENCE, listener.recv()).await.unwrap().unwrap();
    assert_eq!(woken.payload(), turn(head, &key));
    backend.leave_queue(&key, head).await.unwrap();
    let woken = timeout(PATIENCE, listener.recv()).await.unwrap().unwrap();
    let guard = timeout(PATIENCE, next_waiter)
        .await
        .expect("the waiter behind a head that left was never granted")
        .unwrap();
    assert_eq!(woken.payload(), turn(guard.fence().owner, &key));
    // A try of the head still in flight when it left takes nothing and queues nothing.
    assert!(guard.release().await.unwrap());
    assert!(
        backend
            .try_acquire_queued(&key, TTL, head)
            .await
            .unwrap()
            .is_none(),
        "a try of a waiter that left took the lock"
    );
    assert_eq!(places(&db, ADVISORY, &key).await, 0);
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_some());
}

/// A waiter whose queue, holder rows and counters were lost (crash recovery empties the
/// UNLOGGED tables) is granted by its next queued try, the queue's function, which takes
/// the lock without a token, gives it back, starts a new epoch and is granted a greater
/// token than any before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queued_try_after_lost_volatile_state_starts_a_new_epoch() {
    let (_schema, db) = common::database().await;
    let backend = db.advisory_backend();
    let key = key("lost", &db);
    let holder = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let waiter = OwnerId::random();
    queue_refused(&backend, &key, TTL, &[waiter]).await;
    assert!(backend.release(&holder).await.unwrap());
    let s = db.schema();
    common::lose_volatile_state(
        db.pool(),
        s,
        &[
            "fencelock_epoch_live",
            "fencelock_counters",
            "fencelock_advisory_holders",
            "fencelock_advisory_places",
        ],
    )
    .await;
    let lease = backend
        .try_acquire_queued(&key, TTL, waiter)
        .await
        .unwrap()
        .expect("the waiter was refused after the queue was lost");
    assert!(
        lease.token > holder.token,
        "{} after {}",
        lease.token,
        holder.token
    );
    assert!(backend.release(&lease).await.unwrap());
    // The session gave the lock back before the epoch's retry: it holds it once, so the
    // release freed it.
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_some());
}

/// A place lasts as long as its waiter's ttl, within 100 ms and 2 s: a head that asked for a
/// short ttl and vanished (or is paused) keeps a free lock from the others no longer than a
/// holder of that ttl would, and the waiter behind it is granted once it lapsed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_place_lasts_its_waiters_ttl() {
    let (_schema, db) = common::database().await;
    let backend = db.advisory_backend();
    let key = key("short", &db);
    let holder = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let (head, behind) = (OwnerId::random(), OwnerId::random());
    let short = Duration::from_millis(200);
    queue_refused(&backend, &key, short, &[head]).await;
    queue_refused(&backend, &key, TTL, &[behind]).await;
    let left_ms = |waiter: OwnerId| {
        let sql = format!(
            "SELECT (extract(epoch FROM lapses_at - clock_timestamp()) * 1000)::float8 \
               FROM \"{}\".fencelock_advisory_places WHERE key = $1 AND waiter = $2",
            db.schema()
        );
        let pool = db.pool().clone();
        let key = key.clone();
        async move {
            sqlx::query_scalar::<_, f64>(&sql)
                .bind(key.as_str())
                .bind(waiter.as_u128().to_be_bytes().to_vec())
                .fetch_one(&pool)
                .await
                .expect("reading a place")
        }
    };
    let head_left = left_ms(head).await;
    assert!(
        head_left <= 200.0,
        "a 200 ms waiter's place lasts {head_left} ms"
    );
    let behind_left = left_ms(behind).await;
    assert!(
        behind_left > 1_000.0,
        "a 30 s waiter's place lasts {behind_left} ms, not the 2 s cap"
    );
    assert!(backend.release(&holder).await.unwrap());
    // The head never tries again: once its place lapsed, the waiter behind it takes the lock.
    sleep(Duration::from_millis(300)).await;
    let lease = backend
        .try_acquire_queued(&key, TTL, behind)
        .await
        .unwrap()
        .expect("a lapsed head still kept the lock");
    assert_eq!(lease.owner, behind);
    assert!(backend.release(&lease).await.unwrap());
}
