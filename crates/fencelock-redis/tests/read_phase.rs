//! Shared (reader) locks on a real server and a real cluster, beyond the conformance suite's
//! rwlock group: readers and writers trying at once never overlap, a phase lasts exactly as
//! long as its longest live reader, the exclusive calls never take a phase for their grant,
//! and a writer waiting for a phase waits (no busy loop) and is woken when the last reader
//! leaves.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock_core::{LockBackend, LockKey, OwnerId};
use fencelock_redis::servers::RedisServer;
use fencelock_redis::{RedisClusterConfig, RedisConfig, redis};

mod stats;
use fencelock_redis::servers::RedisCluster;
use tokio::time::{Instant, sleep};

const LONG: Duration = Duration::from_secs(30);

async fn node(server: &RedisServer) -> Arc<dyn LockBackend> {
    Arc::new(
        RedisConfig::new(server.url())
            .prefix("read-phase")
            .connect()
            .await
            .expect("connect to the spawned redis-server"),
    )
}

async fn cluster() -> (Arc<RedisCluster>, Arc<dyn LockBackend>) {
    let cluster = tokio::task::spawn_blocking(|| Arc::new(RedisCluster::spawn(3, 0)))
        .await
        .unwrap();
    let backend = RedisClusterConfig::from_url(&cluster.url())
        .unwrap()
        .prefix("read-phase")
        .connect()
        .await
        .expect("connect to the spawned cluster");
    (cluster, Arc::new(backend))
}

/// Who holds the key as the tasks see it: counted after a grant, uncounted before the
/// release is sent, so whatever the server granted at once is counted at once here too.
#[derive(Debug, Default)]
struct Holders {
    readers: usize,
    writers: usize,
    reader_grants: usize,
    writer_grants: usize,
    /// Grants that found readers beside them, so readers did overlap.
    shared_grants: usize,
}

/// Eight tasks, each 40 rounds, try a reader or the writer on one key at once (half of
/// them readers, which rest a little after each release, so that read phases end and
/// writers get their turns: readers have no writer preference to leave them one); each grant
/// checks the counts, holds a moment and checks again. A writer beside anyone, or a reader
/// beside a writer, fails.
async fn readers_and_writer_never_overlap(backend: Arc<dyn LockBackend>) {
    let key = LockKey::new("overlap").unwrap();
    let holders = Arc::new(Mutex::new(Holders::default()));
    let mut tasks = Vec::new();
    for task in 0..8_usize {
        let (backend, key, holders) = (backend.clone(), key.clone(), holders.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..40_u64 {
                let writer = task % 2 == 0;
                let reader = OwnerId::random();
                let lease = if writer {
                    backend.try_acquire(&key, LONG).await.unwrap()
                } else {
                    backend
                        .try_acquire_shared(&key, reader, LONG)
                        .await
                        .unwrap()
                };
                let Some(lease) = lease else {
                    sleep(Duration::from_millis(1)).await;
                    continue;
                };
                {
                    let mut h = holders.lock().unwrap();
                    assert_eq!(h.writers, 0, "granted beside a writer: {h:?}");
                    if writer {
                        assert_eq!(h.readers, 0, "a writer granted beside readers: {h:?}");
                        h.writers += 1;
                        h.writer_grants += 1;
                    } else {
                        if h.readers > 0 {
                            h.shared_grants += 1;
                        }
                        h.readers += 1;
                        h.reader_grants += 1;
                    }
                }
                sleep(Duration::from_millis(2)).await;
                {
                    let mut h = holders.lock().unwrap();
                    if writer {
                        assert_eq!((h.writers, h.readers), (1, 0), "{h:?}");
                        h.writers -= 1;
                    } else {
                        assert_eq!(h.writers, 0, "a writer came in beside a reader: {h:?}");
                        h.readers -= 1;
                    }
                }
                let released = if writer {
                    backend.release(&lease).await.unwrap()
                } else {
                    backend.release_shared(&lease, reader).await.unwrap()
                };
                assert!(released, "a lease held {LONG:?} was lost within moments");
                if !writer {
                    sleep(Duration::from_millis(10 + round % 4)).await;
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    {
        let h = holders.lock().unwrap();
        // Without grants of both kinds, and readers side by side, the run proved nothing.
        assert!(h.writer_grants > 0 && h.reader_grants > 0, "{h:?}");
        assert!(h.shared_grants > 0, "readers never overlapped: {h:?}");
    }
    assert!(backend.inspect(&key).await.unwrap().holder.is_none());
}

/// The phase lasts as long as its longest live reader: a reader renewed to a short ttl, and
/// a long one released, leave the phase to end with the short one (a writer is then granted
/// without any release), and a reader that joins meanwhile gets the same fence.
async fn phase_ends_with_its_last_live_reader(backend: Arc<dyn LockBackend>) {
    let b = &*backend;
    let key = LockKey::new("phase-end").unwrap();
    let short = Duration::from_millis(300);
    let (ra, rb) = (OwnerId::random(), OwnerId::random());
    let a = b.try_acquire_shared(&key, ra, LONG).await.unwrap().unwrap();
    let c = b.try_acquire_shared(&key, rb, LONG).await.unwrap().unwrap();
    assert_eq!(a.fence(), c.fence());
    let phase = b.inspect_shared(&key).await.unwrap().unwrap();
    assert_eq!((phase.fence, phase.readers), (a.fence(), 2));
    assert!(
        phase.remaining > LONG / 2 && phase.remaining <= LONG,
        "{phase:?}"
    );
    b.extend_shared(&a, ra, short).await.unwrap();
    assert!(b.release_shared(&c, rb).await.unwrap());
    let phase = b.inspect_shared(&key).await.unwrap().unwrap();
    assert_eq!(phase.readers, 1);
    assert!(
        phase.remaining <= short,
        "the phase outlasts its readers: {phase:?}"
    );
    assert!(
        b.try_acquire(&key, LONG).await.unwrap().is_none(),
        "a writer beside a reader"
    );
    sleep(short * 3).await;
    assert!(
        b.inspect_shared(&key).await.unwrap().is_none(),
        "the phase outlived its reader"
    );
    let writer = b
        .try_acquire(&key, LONG)
        .await
        .unwrap()
        .expect("no writer after the phase");
    assert!(writer.token > a.token);
    assert!(
        !b.release_shared(&a, ra).await.unwrap(),
        "an expired reader released"
    );
    assert!(b.release(&writer).await.unwrap());
    // A new phase, a new token.
    let next = b.try_acquire_shared(&key, ra, LONG).await.unwrap().unwrap();
    assert!(next.token > writer.token);
    assert_ne!(next.owner, a.owner);
    assert!(b.release_shared(&next, ra).await.unwrap());
}

/// A reader's lease carries the phase's fence, which the key's lock holds while the phase
/// lives; handed to the exclusive calls by mistake it still releases and renews nothing.
async fn exclusive_calls_never_take_a_phase_for_their_grant(backend: Arc<dyn LockBackend>) {
    let b = &*backend;
    let key = LockKey::new("not-a-writer").unwrap();
    let reader = OwnerId::random();
    let lease = b
        .try_acquire_shared(&key, reader, LONG)
        .await
        .unwrap()
        .unwrap();
    assert!(
        !b.release(&lease).await.unwrap(),
        "a writer's release ended a read phase"
    );
    assert!(
        matches!(
            b.extend(&lease, Duration::from_millis(300)).await,
            Err(fencelock_core::Error::LeaseLost { .. })
        ),
        "a writer's extend renewed a read phase"
    );
    let info = b.inspect(&key).await.unwrap();
    assert_eq!(info.holder, Some(lease.fence()));
    assert!(info.remaining.is_some_and(|r| r > LONG / 2), "{info:?}");
    assert!(b.try_acquire(&key, LONG).await.unwrap().is_none());
    assert!(b.release_shared(&lease, reader).await.unwrap());
    assert!(b.inspect(&key).await.unwrap().holder.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_exclusive_calls_never_take_a_phase_for_their_grant() {
    let server = RedisServer::spawn();
    exclusive_calls_never_take_a_phase_for_their_grant(node(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_exclusive_calls_never_take_a_phase_for_their_grant() {
    let (_cluster, backend) = cluster().await;
    exclusive_calls_never_take_a_phase_for_their_grant(backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_readers_and_writer_never_overlap() {
    let server = RedisServer::spawn();
    readers_and_writer_never_overlap(node(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_readers_and_writer_never_overlap() {
    let (_cluster, backend) = cluster().await;
    readers_and_writer_never_overlap(backend).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_phase_ends_with_its_last_live_reader() {
    let server = RedisServer::spawn();
    phase_ends_with_its_last_live_reader(node(&server).await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_phase_ends_with_its_last_live_reader() {
    let (_cluster, backend) = cluster().await;
    phase_ends_with_its_last_live_reader(backend).await;
}

/// On one server: `wait_for_release` on a key held by readers waits for them (it does not
/// return at once as for a free key, which would make a waiting writer spin), and returns
/// as soon as the last reader leaves (the release publishes), long before the readers' ttl
/// or its own bound; a writer waiting through `Locker` asks the server only a few times.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_wait_for_the_phase_and_wake_when_it_ends() {
    let server = RedisServer::spawn();
    let backend = node(&server).await;
    let key = LockKey::new("wake").unwrap();
    let (ra, rb) = (OwnerId::random(), OwnerId::random());
    let a = backend
        .try_acquire_shared(&key, ra, LONG)
        .await
        .unwrap()
        .unwrap();
    let b = backend
        .try_acquire_shared(&key, rb, LONG)
        .await
        .unwrap()
        .unwrap();
    let releaser = {
        let backend = backend.clone();
        tokio::spawn(async move {
            sleep(Duration::from_millis(300)).await;
            assert!(backend.release_shared(&a, ra).await.unwrap());
            sleep(Duration::from_millis(300)).await;
            assert!(backend.release_shared(&b, rb).await.unwrap());
        })
    };
    let started = Instant::now();
    backend.wait_for_release(&key, LONG).await.unwrap();
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(550),
        "returned while readers held: {waited:?}"
    );
    assert!(
        waited < LONG / 3,
        "not woken by the last reader's release: {waited:?}"
    );
    releaser.await.unwrap();

    // A writer waiting through the locker for a phase of 1.5 s.
    let mut raw = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let short = Duration::from_millis(1500);
    let reader = OwnerId::random();
    backend
        .try_acquire_shared(&key, reader, short)
        .await
        .unwrap()
        .unwrap();
    let before = stats::script_calls(&mut raw).await;
    let locker = fencelock_core::Locker::new(backend.clone());
    let started = Instant::now();
    let writer = locker.lock("wake").ttl(LONG).wait(LONG).await.unwrap();
    assert!(started.elapsed() < LONG / 3, "{:?}", started.elapsed());
    let asked = stats::script_calls(&mut raw).await - before;
    assert!(
        asked < 200,
        "a waiting writer ran {asked} scripts in 1.5 s: a busy loop"
    );
    writer.release().await.unwrap();
}

/// An upgrader whose companion the server lost (a failover to a replica that missed its
/// grant or its renewals; here deleted by hand) while its local deadline still counts it
/// held: a writer takes the companion and queues for the key, and the upgrade must then be
/// refused, since that writer may be granted between the upgrader's read and its write.
/// Before the upgrade asked the server, its local check passed and the upgrade was granted
/// after the writer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_asks_the_server_for_its_companion() {
    use fencelock_core::{Error, Locker, RwLocker};

    let server = RedisServer::spawn();
    let upgrader = RwLocker::new(Locker::new(node(&server).await));
    let writer = RwLocker::new(Locker::new(node(&server).await));
    let reader = upgrader.upgradeable_read("ledger").ttl(LONG).await.unwrap();
    let lost: i64 = redis::cmd("DEL")
        .arg("read-phase:{ledger/upgrader}:lock")
        .query_async(&mut server_connection(&server).await)
        .await
        .unwrap();
    assert_eq!(lost, 1, "the companion's key was not where the test looked");
    assert!(
        reader.is_held(),
        "the upgrader's local view still counts it held"
    );

    let writes = tokio::spawn(async move {
        let guard = writer
            .write("ledger")
            .ttl(LONG)
            .wait(LONG)
            .await
            .expect("the writer was not granted");
        guard.release().await.unwrap();
    });
    // The writer holds the companion and waits for the read phase to end.
    sleep(Duration::from_millis(500)).await;
    match reader.upgrade(LONG).await {
        Err(Error::LeaseLost { .. }) => {}
        Ok(upgraded) => {
            upgraded.release().await.unwrap();
            panic!("the upgrade was granted though a writer took its companion");
        }
        Err(e) => panic!("the upgrade failed otherwise: {e}"),
    }
    tokio::time::timeout(LONG, writes).await.unwrap().unwrap();
}

async fn server_connection(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}
