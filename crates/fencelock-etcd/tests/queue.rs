//! The fair queue on real etcd: queued waiters write nothing while they wait, each release is
//! followed by one grant in arrival order (made by the release itself when the holder knows
//! the waiter behind it), and a waiter that vanished holds no one up past its place lease.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::EtcdServer;
use etcd_client::GetOptions;
use fencelock_core::{LockBackend, LockKey, Locker, OwnerId};
use fencelock_etcd::EtcdCluster;
use tokio::time::{sleep, timeout};

const TTL: Duration = Duration::from_secs(60);
const PATIENCE: Duration = Duration::from_secs(30);

fn key(name: &str) -> LockKey {
    LockKey::new(format!("queue/{name}")).unwrap()
}

/// The Raft proposals member `index` has seen committed, from etcd's `/metrics` (served on
/// the client port).
async fn proposals_committed(server: &Arc<EtcdServer>, index: usize) -> u64 {
    let port = server.client_port(index);
    tokio::task::spawn_blocking(move || {
        let mut stream = TcpStream::connect(("127.0.0.1", port))
            .unwrap_or_else(|e| panic!("etcd metrics on port {port}: {e}"));
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            .unwrap();
        let mut body = String::new();
        stream.read_to_string(&mut body).unwrap();
        let line = body
            .lines()
            .find_map(|line| line.strip_prefix("etcd_server_proposals_committed_total "))
            .unwrap_or_else(|| panic!("no etcd_server_proposals_committed_total in /metrics"));
        line.trim().parse::<f64>().unwrap() as u64
    })
    .await
    .unwrap()
}

/// How many places the key's queue holds, read under the cluster's prefix.
async fn places(cluster: &EtcdCluster, key: &LockKey) -> i64 {
    let prefix = format!(
        "{}/queue/{}:{key}/",
        cluster.config().prefix_name(),
        key.as_str().len()
    );
    cluster
        .client()
        .kv_client()
        .get(
            prefix,
            Some(GetOptions::new().with_prefix().with_count_only()),
        )
        .await
        .unwrap()
        .count()
}

/// Waits until the key's queue holds `n` places.
async fn until_places(cluster: &EtcdCluster, key: &LockKey, n: i64) {
    timeout(PATIENCE, async {
        while places(cluster, key).await != n {
            sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("the queue of {key} never held {n} places"));
}

/// Starts a `Locker` request on `key` that records `index` in `order` when granted, then
/// releases.
fn waiter(
    locker: &Locker,
    key: &LockKey,
    index: usize,
    order: &Arc<Mutex<Vec<usize>>>,
) -> tokio::task::JoinHandle<()> {
    waiter_with(locker, key, index, order, false)
}

/// [`waiter`], with the watchdog on or off.
fn waiter_with(
    locker: &Locker,
    key: &LockKey,
    index: usize,
    order: &Arc<Mutex<Vec<usize>>>,
    watchdog: bool,
) -> tokio::task::JoinHandle<()> {
    let (locker, key, order) = (locker.clone(), key.clone(), order.clone());
    tokio::spawn(async move {
        let guard = locker
            .lock(key.as_str())
            .ttl(TTL)
            .wait(Duration::from_secs(300))
            .watchdog(watchdog)
            .await
            .expect("a queued waiter was not granted");
        order.lock().unwrap().push(index);
        assert!(guard.release().await.unwrap());
    })
}

/// Queues `waiters` `Locker` requests on `key` one after another (each in place before the
/// next starts), with the watchdog on or off; with the order they are granted in.
async fn queue_up(
    cluster: &EtcdCluster,
    locker: &Locker,
    key: &LockKey,
    waiters: usize,
    watchdog: bool,
) -> (Vec<tokio::task::JoinHandle<()>>, Arc<Mutex<Vec<usize>>>) {
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for index in 0..waiters {
        tasks.push(waiter_with(locker, key, index, &order, watchdog));
        until_places(cluster, key, i64::try_from(index).unwrap() + 1).await;
    }
    (tasks, order)
}

/// Waits for every task, at most [`PATIENCE`] each.
async fn all_granted(tasks: Vec<tokio::task::JoinHandle<()>>) {
    for task in tasks {
        timeout(PATIENCE, task)
            .await
            .expect("the queued waiters were not all granted")
            .unwrap();
    }
}

/// Releases `held`, with `tasks` queued behind it, and waits until each was granted and
/// released in turn: the proposals member 0 saw committed meanwhile.
async fn hand_down(
    server: &Arc<EtcdServer>,
    backend: &impl LockBackend,
    held: &fencelock_core::Lease,
    tasks: Vec<tokio::task::JoinHandle<()>>,
) -> u64 {
    let before = proposals_committed(server, 0).await;
    assert!(backend.release(held).await.unwrap());
    all_granted(tasks).await;
    proposals_committed(server, 0).await - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_waiters_write_nothing_and_each_release_grants_one() {
    let server = common::spawn(1).await;
    let cluster = common::connect(&server).await;
    let backend = cluster.backend();
    assert!(backend.capabilities().fair);
    let key = key("quiet");
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let locker = Locker::new(backend.clone());
    let waiters = 8;
    let (tasks, order) = queue_up(&cluster, &locker, &key, waiters, false).await;
    // Every waiter is queued; over several refresh intervals they keep their places with
    // keep-alives and reads, none of which is a Raft proposal. Waiters that retried the
    // grant would propose a transaction each on every try (at least every 500 ms).
    let before = proposals_committed(&server, 0).await;
    sleep(Duration::from_secs(3)).await;
    let waiting = proposals_committed(&server, 0).await - before;
    assert!(
        waiting <= 2,
        "{waiters} queued waiters made {waiting} proposals in 3 s while the lock was held"
    );
    assert!(
        backend.try_acquire(&key, TTL).await.unwrap().is_none(),
        "a plain try took a lock waited for"
    );
    let drained = hand_down(&server, &backend, &held, tasks).await;
    assert_eq!(*order.lock().unwrap(), (0..waiters).collect::<Vec<_>>());
    // One release of the holder, then a grant and a release per waiter: a release is
    // followed by the head's grant alone (slack for lease housekeeping in the background).
    let expected = 1 + 2 * u64::try_from(waiters).unwrap();
    assert!(
        drained <= expected + 4,
        "handing the lock down {waiters} waiters took {drained} proposals, expected {expected}"
    );
    assert_eq!(places(&cluster, &key).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_hands_the_lock_to_the_waiter_behind_in_one_write() {
    let server = common::spawn(1).await;
    let cluster = common::connect(&server).await;
    let backend = cluster.backend();
    let key = key("handed");
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let locker = Locker::new(backend.clone());
    let waiters = 8;
    // The watchdog on, as by default: a handed grant is held as it is, on the place lease the
    // waiter kept alive, and each waiter releases long before its first renewal.
    let (tasks, order) = queue_up(&cluster, &locker, &key, waiters, true).await;
    let token_before = backend.inspect(&key).await.unwrap().last_token.unwrap();
    // The first holder was granted with no queue behind it, so its release deletes the lock
    // key; the head's grant (a transaction at its place) reads the waiter behind it, and from
    // then on each release writes the next waiter's grant itself.
    let drained = hand_down(&server, &backend, &held, tasks).await;
    assert_eq!(*order.lock().unwrap(), (0..waiters).collect::<Vec<_>>());
    let info = backend.inspect(&key).await.unwrap();
    assert!(
        info.holder.is_none(),
        "the last waiter's release left {info:?}"
    );
    assert_eq!(
        info.last_token.unwrap().get(),
        token_before.get() + u64::try_from(waiters).unwrap(),
        "each waiter's grant drew one token"
    );
    // The first release, the head's grant, then one write per waiter: the release that hands
    // the lock to the next (the last one's deletes it). Without the hand-off every waiter
    // also proposes its own grant: 1 + 2 per waiter.
    let expected = 2 + u64::try_from(waiters).unwrap();
    assert!(
        drained <= expected + 3,
        "handing the lock down {waiters} waiters took {drained} proposals, expected {expected}"
    );
    assert_eq!(places(&cluster, &key).await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handed_grant_whose_waiter_vanished_lapses_with_its_place_lease() {
    let server = common::spawn(1).await;
    let config = common::config(&server);
    let cluster = config.connect().await.unwrap();
    let backend = cluster.backend();
    let key = key("handed-vanished");
    let vanished = OwnerId::random();
    let held = backend
        .try_acquire_queued(&key, TTL, OwnerId::random())
        .await
        .unwrap()
        .expect("a free lock with no queue is granted to a queued try at once");
    let locker = Locker::new(backend.clone());
    let head = tokio::spawn({
        let (locker, key) = (locker.clone(), key.clone());
        async move {
            locker
                .lock(key.as_str())
                .ttl(TTL)
                .wait(Duration::from_secs(300))
                .await
                .expect("the head was not granted")
        }
    });
    until_places(&cluster, &key, 1).await;
    // Another process queues behind the head, then stops trying without leaving.
    let other = config.connect().await.unwrap().backend();
    assert!(
        other
            .try_acquire_queued(&key, TTL, vanished)
            .await
            .unwrap()
            .is_none()
    );
    until_places(&cluster, &key, 2).await;
    // A third waiter, which must get the lock once the vanished one's hand-off lapses.
    let order = Arc::new(Mutex::new(Vec::new()));
    let last = waiter(&locker, &key, 2, &order);
    until_places(&cluster, &key, 3).await;
    // Free the lock (its grant saw no queue): the head is granted at its place and reads the
    // vanished waiter behind it.
    assert!(backend.release(&held).await.unwrap());
    let head = timeout(PATIENCE, head).await.unwrap().unwrap();
    // Its release hands the lock to the vanished waiter, on that waiter's place lease.
    let handed_at = tokio::time::Instant::now();
    assert!(head.release().await.unwrap());
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(
        info.holder.map(|h| h.owner),
        Some(vanished),
        "the release did not hand the lock to the waiter behind"
    );
    // Nobody keeps that place lease alive: the grant lapses with it (3 s, or the cluster's
    // minimum lease), and the waiter behind is granted.
    timeout(PATIENCE, last)
        .await
        .expect("the waiter behind a vanished one was never granted")
        .unwrap();
    let waited = handed_at.elapsed();
    let place_ttl = Duration::from_secs(3).max(backend.capabilities().min_ttl);
    assert!(
        waited < place_ttl * 4,
        "a handed grant nobody took up held the lock {waited:?} (place lease {place_ttl:?})"
    );
    assert_eq!(*order.lock().unwrap(), [2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_waiter_loses_its_place_when_its_lease_runs_out() {
    let server = common::spawn(1).await;
    let config = common::config(&server);
    let cluster = config.connect().await.unwrap();
    let backend = cluster.backend();
    let key = key("vanished");
    let held = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    // Another process queues, then stops trying without leaving (its place stays).
    let other = config.connect().await.unwrap().backend();
    let vanished = OwnerId::random();
    assert!(
        other
            .try_acquire_queued(&key, TTL, vanished)
            .await
            .unwrap()
            .is_none()
    );
    until_places(&cluster, &key, 1).await;
    let locker = Locker::new(backend.clone());
    let order = Arc::new(Mutex::new(Vec::new()));
    let next = waiter(&locker, &key, 1, &order);
    until_places(&cluster, &key, 2).await;
    assert!(backend.release(&held).await.unwrap());
    // The vanished waiter is the head, so the lock waits for it until its place lease (3 s,
    // or the cluster's minimum) runs out and the cluster deletes its place.
    timeout(PATIENCE, next)
        .await
        .expect("the waiter behind a vanished one was never granted")
        .unwrap();
    assert_eq!(*order.lock().unwrap(), [1]);
    assert_eq!(places(&cluster, &key).await, 0);
    // The vanished waiter's next try queues it again, at the back, and it is granted.
    let lease = loop {
        if let Some(lease) = other.try_acquire_queued(&key, TTL, vanished).await.unwrap() {
            break lease;
        }
        other
            .wait_for_turn(&key, vanished, Duration::from_secs(1))
            .await
            .unwrap();
    };
    assert!(other.release(&lease).await.unwrap());
}
