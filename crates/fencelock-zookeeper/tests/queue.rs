//! The fair queue on real ZooKeeper: a waiter whose process vanished (its session alive, its
//! tries stopped) holds the next waiter up for about the place ttl, not its session timeout;
//! and a hand-off costs the server the release and one write.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{LockBackend, LockKey, Locker, OwnerId, QueueEntry};
use tokio::time::{Instant, sleep, timeout};

/// The backend's place ttl (`queue::PLACE_TTL`).
const PLACE_TTL: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_waiter_delays_the_next_by_about_the_place_ttl() {
    let server = common::spawn(1).await;
    let config = common::config(&server);
    let live = config.connect().await.unwrap();
    // The vanished process: a session of its own that stays open but never tries again.
    let vanished = config.connect().await.unwrap();
    let key = LockKey::new(format!("queue/vanished/{}", OwnerId::random())).unwrap();
    let ttl = Duration::from_secs(20);
    let held = live
        .try_acquire(&key, ttl)
        .await
        .unwrap()
        .expect("free key");
    let gone = OwnerId::random();
    assert!(
        vanished
            .try_acquire_queued(&key, ttl, gone)
            .await
            .unwrap()
            .is_none(),
        "a queued waiter got a held lock"
    );
    let locker = Locker::new(Arc::new(live.clone()));
    let next = tokio::spawn(
        locker
            .lock(key.as_str())
            .ttl(ttl)
            .wait(Duration::from_secs(30))
            .into_future(),
    );
    sleep(Duration::from_millis(300)).await;
    assert!(live.release(&held).await.unwrap());
    let released = Instant::now();
    // While the vanished waiter's place is live, a plain try does not overtake it.
    assert!(
        live.try_acquire(&key, ttl).await.unwrap().is_none(),
        "a plain try overtook a live queued waiter"
    );
    let guard = timeout(Duration::from_secs(15), next)
        .await
        .expect("the waiter behind a vanished one was not granted")
        .unwrap()
        .expect("the waiter behind a vanished one failed");
    let delay = released.elapsed();
    // The place was last written about 0.3 s before the release; it lapses PLACE_TTL after
    // that, and the next waiter tries at least every 0.75 s.
    assert!(
        delay <= PLACE_TTL + Duration::from_secs(2),
        "the vanished waiter held the queue up for {delay:?}"
    );
    assert!(
        delay >= Duration::from_secs(1),
        "the vanished waiter's place was passed over while live ({delay:?})"
    );
    assert_eq!(
        live.inspect(&key).await.unwrap().holder,
        Some(guard.fence())
    );
    // The vanished waiter, trying again, finds its place gone and queues at the back.
    assert!(
        vanished
            .try_acquire_queued(&key, ttl, gone)
            .await
            .unwrap()
            .is_none()
    );
    vanished.leave_queue(&key, gone).await.unwrap();
    assert!(guard.release().await.unwrap());
}

/// The waiter's side of [`a_hand_off_is_the_release_and_one_grant_write`]: waits its turn and
/// tries until granted.
async fn granted_after_waiting(
    backend: fencelock_zookeeper::ZkLockBackend,
    key: LockKey,
    waiter: OwnerId,
    ttl: Duration,
) -> fencelock_core::Lease {
    loop {
        backend
            .wait_for_turn(&key, waiter, Duration::from_secs(30))
            .await
            .unwrap();
        if let Some(lease) = backend.try_acquire_queued(&key, ttl, waiter).await.unwrap() {
            return lease;
        }
    }
}

/// A hand-off reaches the server as two requests: the holder's delete and the waiter's grant
/// write. The waiter saw the deletion of the only node below its place, so it does not list
/// the key again (which made three). Counted on the server (`srvr`'s packets received), the
/// fewest over a few hand-offs, so that a ping or a try that raced the release does not count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_is_the_release_and_one_grant_write() {
    let server = common::spawn(1).await;
    let config = common::config(&server);
    let holder_side = config.connect().await.unwrap();
    let waiter_side = config.connect().await.unwrap();
    let key = LockKey::new(format!("queue/handoff/{}", OwnerId::random())).unwrap();
    let ttl = Duration::from_secs(20);
    let received = || common::packets_received(&server, 0);
    let mut fewest = u64::MAX;
    for _ in 0..5 {
        let held = holder_side
            .try_acquire(&key, ttl)
            .await
            .unwrap()
            .expect("free key");
        let waiter = OwnerId::random();
        assert!(
            waiter_side
                .try_acquire_queued(&key, ttl, waiter)
                .await
                .unwrap()
                .is_none(),
            "a queued waiter got a held lock"
        );
        let woken = tokio::spawn(granted_after_waiting(
            waiter_side.clone(),
            key.clone(),
            waiter,
            ttl,
        ));
        // Time for the waiter to list the key and watch the holder's node.
        sleep(Duration::from_millis(200)).await;
        let before = received();
        assert!(holder_side.release(&held).await.unwrap());
        let lease = timeout(Duration::from_secs(10), woken)
            .await
            .expect("the waiter was not granted after the release")
            .unwrap();
        // The second `srvr` is a packet of its own.
        fewest = fewest.min(received() - before - 1);
        assert_eq!(
            holder_side.inspect(&key).await.unwrap().holder,
            Some(lease.fence())
        );
        assert!(waiter_side.release(&lease).await.unwrap());
    }
    assert!(
        fewest <= 2,
        "a hand-off took {fewest} requests (the holder's delete and the waiter's grant are 2)"
    );
}

/// `inspect_queue` lists the holder, then the waiting places in the order they will be
/// granted with the tokens they will hold; in a read phase the readers, then a writer's place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_queue_shows_holder_waiters_and_readers_in_order() {
    use fencelock_zookeeper::QueueRole::{Holder, Reader, Waiting};
    let server = common::spawn(1).await;
    let backend = common::config(&server).connect().await.unwrap();
    let key = LockKey::new(format!("queue/inspect/{}", OwnerId::random())).unwrap();
    let ttl = Duration::from_secs(20);
    assert!(queue_of(&backend, &key).await.is_empty());
    let held = backend
        .try_acquire(&key, ttl)
        .await
        .unwrap()
        .expect("free key");
    let (first, second) = (OwnerId::random(), OwnerId::random());
    for waiter in [first, second] {
        assert!(
            backend
                .try_acquire_queued(&key, ttl, waiter)
                .await
                .unwrap()
                .is_none()
        );
    }
    let queue = queue_of(&backend, &key).await;
    let shown: Vec<_> = queue
        .iter()
        .map(|entry| (entry.role, entry.owner))
        .collect();
    assert_eq!(
        shown,
        vec![(Holder, held.owner), (Waiting, first), (Waiting, second)]
    );
    assert_eq!(queue[0].token, Some(held.token));
    assert!(queue[1].token > Some(held.token) && queue[2].token > queue[1].token);
    assert!(
        queue[0].remaining > Duration::from_secs(10) && queue[0].remaining <= ttl,
        "{:?}",
        queue[0].remaining
    );
    assert!(
        queue[1].remaining > Duration::ZERO && queue[1].remaining <= PLACE_TTL,
        "{:?}",
        queue[1].remaining
    );
    // The first waiter is granted the token the queue showed for it.
    assert!(backend.release(&held).await.unwrap());
    let granted = backend
        .try_acquire_queued(&key, ttl, first)
        .await
        .unwrap()
        .expect("the first waiter's turn");
    assert_eq!(Some(granted.token), queue[1].token);
    backend.leave_queue(&key, second).await.unwrap();
    assert!(backend.release(&granted).await.unwrap());

    let (r1, r2, writer) = (OwnerId::random(), OwnerId::random(), OwnerId::random());
    let read1 = backend
        .try_acquire_shared(&key, r1, ttl)
        .await
        .unwrap()
        .expect("a free key's read phase");
    let read2 = backend
        .try_acquire_shared(&key, r2, ttl)
        .await
        .unwrap()
        .expect("a join of the read phase");
    assert!(
        backend
            .try_acquire_queued(&key, ttl, writer)
            .await
            .unwrap()
            .is_none()
    );
    let queue = queue_of(&backend, &key).await;
    let shown: Vec<_> = queue
        .iter()
        .map(|entry| (entry.role, entry.owner))
        .collect();
    assert_eq!(shown, vec![(Reader, r1), (Reader, r2), (Waiting, writer)]);
    assert_eq!(
        (queue[0].token, queue[1].token),
        (Some(read1.token), Some(read1.token))
    );
    assert!(queue[2].token > Some(read1.token));
    backend.leave_queue(&key, writer).await.unwrap();
    assert!(backend.release_shared(&read1, r1).await.unwrap());
    assert!(backend.release_shared(&read2, r2).await.unwrap());
    assert!(queue_of(&backend, &key).await.is_empty());
}

/// The queue through the trait, as `fencelock inspect` reads it: ZooKeeper always lists one.
async fn queue_of(backend: &dyn LockBackend, key: &LockKey) -> Vec<QueueEntry> {
    backend
        .inspect_queue(key)
        .await
        .unwrap()
        .expect("ZooKeeper lists its queue")
}
