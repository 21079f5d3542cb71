//! The fair queue of the `GET_LOCK` backend on the real server (DESIGN 4.0.1, 5.4, *Fair
//! hand-off*): waiters are granted in arrival order, within one process and across two, a
//! release wakes only the first waiter, and a waiter that vanished keeps a free lock from the
//! others for its place ttl at most.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock_conformance::{CountingTries, queue_refused};
use fencelock_core::{LockBackend, LockKey, Locker, OwnerId, QueueRole};
use fencelock_mysql::MySqlLockBackend;
use tokio::time::{Instant, sleep};

const TTL: Duration = Duration::from_secs(30);

/// How long a queued waiter goes on trying at most between two tries (the backend's
/// `TURN_REFRESH`): each try a waiter sends besides its first and the one it is woken for.
const TURN_REFRESH: Duration = Duration::from_millis(500);

fn key(name: &str) -> LockKey {
    LockKey::new(format!("queue/{name}/{}", OwnerId::random())).unwrap()
}

/// Waits (without a bound: the test's own time-out ends a hang) until `backends` have sent
/// `tries` queued tries between them.
async fn until_queued(backends: &[Arc<CountingTries>], tries: usize) {
    while backends.iter().map(|b| b.queued_tries()).sum::<usize>() < tries {
        sleep(Duration::from_millis(5)).await;
    }
}

/// Eight waiters queue one after the other behind a holder, waiter `i` on `backends[i %
/// backends.len()]` (one backend is one process's: its own wake-ups and watcher); the
/// holder's release starts the hand-down, and each waiter releases as soon as it is granted.
/// Checks that they are granted in arrival order with increasing tokens, and that each
/// release woke the next waiter alone: every waiter sent its first try, the one it was woken
/// for, and at most one more per `TURN_REFRESH` it waited (the tries that keep its place).
/// When every release woke every waiter, the seven releases after the first would have cost
/// 7 + 6 + ... + 1 = 28 tries more.
async fn hand_down(tag: &str, processes: usize) {
    let (db, _cleanup) = common::database(tag).await;
    let backends: Vec<Arc<CountingTries>> = (0..processes)
        .map(|_| Arc::new(CountingTries::new(MySqlLockBackend::new(&db))))
        .collect();
    assert!(
        backends[0].capabilities().fair,
        "the GET_LOCK backend does not say it is fair"
    );
    let key = key(tag);
    let held = backends[0]
        .inner()
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .unwrap();
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for place in 0..8 {
        let locker = Locker::new(backends[place % processes].clone());
        let (key, order) = (key.clone(), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = locker
                .lock(key.as_str())
                .ttl(TTL)
                .wait(Duration::from_secs(120))
                .await
                .unwrap();
            order.lock().unwrap().push((place, guard.token()));
            assert!(guard.release().await.unwrap());
        }));
        // The waiter's first try, a queued one, was refused and queued it before the next
        // one arrives.
        until_queued(&backends, place + 1).await;
    }
    let queued_at = Instant::now();
    let queued_tries: usize = backends.iter().map(|b| b.tries()).sum();
    let released_at = Instant::now();
    assert!(backends[0].inner().release(&held).await.unwrap());
    for waiter in waiters {
        waiter.await.unwrap();
    }
    let elapsed = queued_at.elapsed();
    let order = order.lock().unwrap().clone();
    let places: Vec<_> = order.iter().map(|(place, _)| *place).collect();
    assert_eq!(
        places,
        (0..8).collect::<Vec<_>>(),
        "granted out of arrival order"
    );
    assert!(
        order.windows(2).all(|pair| pair[0].1 < pair[1].1),
        "tokens do not increase along the queue: {order:?}"
    );
    assert!(order[0].1 > held.token);
    // Each waiter: the try it is woken for, and one per TURN_REFRESH it waited at most.
    let refreshes = usize::try_from(elapsed.as_millis() / TURN_REFRESH.as_millis()).unwrap() + 1;
    let tries: usize = backends.iter().map(|b| b.tries()).sum::<usize>() - queued_tries;
    let bound = 8 + 8 * refreshes;
    assert!(
        tries <= bound,
        "{tries} tries after the first release for 8 grants handed down the queue in \
         {:?} (at most {bound}: each waiter woken once)",
        released_at.elapsed()
    );
}

/// One process's waiters: the release wakes the next one through the process's own
/// wake-ups.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_one_process_are_granted_in_arrival_order_each_woken_once() {
    hand_down("order1", 1).await;
}

/// Two processes' waiters, alternating: a release wakes the next waiter in the other process
/// through that process's watcher, which keeps watching while the turn is a waiter's of the
/// releasing process.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_of_two_processes_are_granted_in_arrival_order_each_woken_once() {
    hand_down("order2", 2).await;
}

/// A waiter that queued and then vanished (it never tries again, and never leaves) keeps the
/// free lock from everyone else until its place lapses (2 s after its last try on the
/// server's clock): a plain try is refused meanwhile, and the waiter queued behind it is
/// granted once the place lapsed, with a later token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_waiter_keeps_a_free_lock_for_its_place_ttl_at_most() {
    let (db, _cleanup) = common::database("vanish").await;
    let backend = Arc::new(db.lock_backend());
    let key = key("vanished");
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let vanished = OwnerId::random();
    let vanished_sent_at = Instant::now();
    queue_refused(&*backend, &key, TTL, &[vanished]).await;
    let vanished_tried_at = Instant::now();
    let locker = Locker::new(backend.clone());
    let next = tokio::spawn({
        let (locker, key) = (locker.clone(), key.clone());
        async move {
            let guard = locker
                .lock(key.as_str())
                .ttl(TTL)
                .wait(Duration::from_secs(60))
                .await
                .unwrap();
            (guard, Instant::now())
        }
    });
    assert!(backend.release(&held).await.unwrap());

    // The lock is free, and the vanished waiter's place still live (its ttl is 2 s; a try
    // made later than that after its last one proves nothing and is skipped).
    let plain = backend.try_acquire(&key, TTL).await.unwrap();
    if vanished_sent_at.elapsed() < Duration::from_millis(1500) {
        assert!(
            plain.is_none(),
            "a plain try took a free lock while a waiter was queued for it"
        );
    }
    if let Some(lease) = plain {
        backend.release(&lease).await.unwrap();
    }

    let (guard, granted_at) = next.await.unwrap();
    assert!(guard.token() > held.token);
    // Not before the place lapsed: 2 s on the server's clock after the vanished waiter's
    // try, which ran on the server before `vanished_tried_at` and after that try was sent
    // (a generous margin for a slow round trip and the clocks' rates).
    assert!(
        granted_at.duration_since(vanished_tried_at) >= Duration::from_millis(1000),
        "the waiter behind a live place was granted after {:?}",
        granted_at.duration_since(vanished_tried_at)
    );
    assert!(guard.release().await.unwrap());
    // With the vanished waiter's place gone, a plain try is granted again.
    let again = backend.try_acquire(&key, TTL).await.unwrap();
    assert!(again.is_some(), "the queue still holds the free lock back");
}

/// A waiter that leaves the queue (its request timed out) lets the waiter behind it have a
/// free lock at once, without waiting for the place to lapse.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_that_leaves_lets_the_next_one_in() {
    let (db, _cleanup) = common::database("leave").await;
    let backend = Arc::new(db.lock_backend());
    let key = key("leave");
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let first = OwnerId::random();
    let second = OwnerId::random();
    queue_refused(&*backend, &key, TTL, &[first, second]).await;
    assert!(backend.release(&held).await.unwrap());
    assert!(
        backend
            .try_acquire_queued(&key, TTL, second)
            .await
            .unwrap()
            .is_none(),
        "the second waiter overtook the first"
    );
    backend.leave_queue(&key, first).await.unwrap();
    let granted = backend
        .try_acquire_queued(&key, TTL, second)
        .await
        .unwrap()
        .expect("the waiter behind one that left was refused a free lock");
    assert!(granted.token > held.token);
    assert!(backend.release(&granted).await.unwrap());
}

/// `inspect_queue` lists the holder, then the queued waiters in arrival order, each with the
/// time before its place lapses; a waiter that left is gone from the list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_queue_lists_the_holder_then_the_waiters_in_arrival_order() {
    let (db, _cleanup) = common::database("list").await;
    let backend = db.lock_backend();
    let key = key("list");
    assert_eq!(backend.inspect_queue(&key).await.unwrap(), Some(Vec::new()));
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let waiters = [OwnerId::random(), OwnerId::random(), OwnerId::random()];
    queue_refused(&backend, &key, TTL, &waiters).await;
    backend.leave_queue(&key, waiters[1]).await.unwrap();
    let queue = backend.inspect_queue(&key).await.unwrap().unwrap();
    let listed: Vec<_> = queue
        .iter()
        .map(|entry| (entry.owner, entry.role))
        .collect();
    assert_eq!(
        listed,
        [
            (held.owner, QueueRole::Holder),
            (waiters[0], QueueRole::Waiting),
            (waiters[2], QueueRole::Waiting),
        ]
    );
    assert_eq!(queue[0].token, Some(held.token));
    for entry in &queue[1..] {
        assert_eq!(entry.token, None);
        // The place ttl (2 s) bounds the time left.
        assert!(entry.remaining <= Duration::from_secs(2), "{entry:?}");
    }
    assert!(backend.release(&held).await.unwrap());
}

/// The live places of `key` in `db`'s queue table, on the server's clock.
async fn live_places(db: &fencelock_mysql::MySqlDatabase, key: &LockKey) -> i64 {
    fencelock_mysql::sqlx::query_scalar(&format!(
        "SELECT COUNT(*) FROM {}queue WHERE lock_key = ? AND lapses_at > UTC_TIMESTAMP(6)",
        db.prefix()
    ))
    .bind(key.as_str().as_bytes())
    .fetch_one(db.pool())
    .await
    .unwrap()
}

/// Waiters queued behind a held lock do not each send a try to keep their place: the
/// process's place keeper keeps them all with one statement per refresh interval (DESIGN
/// 5.4, *One refresh per process*). Before it, 48 waiters queued for 4 s sent a queued try
/// twice a second each (about 380 tries); now none of them tries while nothing happens to
/// the lock, their places stay live past the place ttl, and the release still hands the lock
/// down the queue in arrival order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiters_keep_their_places_without_a_try_each() {
    const WAITERS: usize = 48;
    let (db, _cleanup) = common::database("kept").await;
    let backend = Arc::new(CountingTries::new(MySqlLockBackend::new(&db)));
    let key = key("kept");
    let holder = backend
        .inner()
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .unwrap();
    let locker = Locker::new(backend.clone());
    let (granted, mut grants) = tokio::sync::mpsc::unbounded_channel();
    for place in 0..WAITERS {
        let (locker, waited, granted) = (locker.clone(), key.clone(), granted.clone());
        tokio::spawn(async move {
            let guard = locker
                .lock(waited.as_str())
                .ttl(TTL)
                .wait(Duration::from_secs(120))
                .await
                .expect("a queued waiter was not granted");
            granted.send((place, guard)).unwrap();
        });
        until_queued(std::slice::from_ref(&backend), place + 1).await;
    }
    let before = backend.queued_tries();
    sleep(Duration::from_secs(4)).await;
    let during = backend.queued_tries() - before;
    assert_eq!(
        live_places(&db, &key).await,
        i64::try_from(WAITERS).unwrap(),
        "queued waiters lost their places"
    );
    assert!(
        during < WAITERS,
        "{WAITERS} waiters sent {during} queued tries in 4 s while the lock stayed held: \
         each keeps its own place"
    );
    assert!(backend.inner().release(&holder).await.unwrap());
    let mut last = holder.token;
    for expected in 0..WAITERS {
        let (place, guard) = tokio::time::timeout(Duration::from_secs(60), grants.recv())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(place, expected, "granted out of arrival order");
        assert!(guard.token() > last);
        last = guard.token();
        assert!(guard.release().await.unwrap());
    }
}
