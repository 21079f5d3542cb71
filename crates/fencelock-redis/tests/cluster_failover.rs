//! What a failover does to locks and tokens on a Redis Cluster, on a real cluster of three
//! masters with one replica each.
//!
//! Replication is asynchronous: a master answers a grant before its replica has it. Here the
//! race is made certain rather than waited for: the replica of the key's master is frozen and
//! its link cut, a grant is made (the master answers, the replica never hears of it), the
//! master is killed, and the replica, thawed, is promoted. The grant and its counter
//! increment are gone. The test then shows what that means:
//!
//! - a second client is granted the same lock with the **same token** while the first still
//!   believes it holds it (two holders: the lock failed);
//! - the fenced storage still loses nothing: the first holder's write is admitted, the second
//!   holder's write with the repeated token is refused as stale (equal token, other owner),
//!   and the first holder's lease is reported lost at its next extend;
//! - `advance_token` past the storage's fence restores liveness: the next grant's token is
//!   above it and its writes are admitted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{
    Error, FencedStorage, HostPort, LockBackend, LockKey, TokenGuarantee, WakeUp,
};
use fencelock_redis::servers::RedisCluster;
use fencelock_redis::{RedisClusterBackend, RedisClusterConfig, hash_tag};
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(60);

/// Runs `op` until it succeeds, for the seconds a failover leaves the slot without a master
/// (the driver then answers `Unavailable`, `CLUSTERDOWN`, or a connection error).
async fn until_served<T, F, Fut>(what: &str, mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = fencelock_core::Result<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match op().await {
            Ok(value) => return value,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{what} still failing after the failover: {e}"),
        }
    }
}

/// The ports of the masters serving slots as node `observer` of `cluster` sees them, sorted.
fn master_ports(cluster: &RedisCluster, observer: usize) -> Vec<u16> {
    let mut ports: Vec<u16> = cluster
        .nodes(observer)
        .iter()
        .filter(|n| n.master && !n.failed && !n.slots.is_empty())
        .map(|n| n.port)
        .collect();
    ports.sort_unstable();
    ports
}

/// The ports of the masters `backend` lists now, sorted; every one on 127.0.0.1, where the
/// cluster runs.
async fn listed_ports(backend: &RedisClusterBackend) -> fencelock_core::Result<Vec<u16>> {
    let addresses: Vec<HostPort> = backend.master_addresses().await?;
    assert!(
        addresses.iter().all(|a| a.host == "127.0.0.1"),
        "{addresses:?}"
    );
    let mut ports: Vec<u16> = addresses.iter().map(|a| a.port).collect();
    ports.sort_unstable();
    Ok(ports)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_can_lose_a_grant_and_the_fence_keeps_data_safe() {
    let cluster = tokio::task::spawn_blocking(|| Arc::new(RedisCluster::spawn(3, 1)))
        .await
        .unwrap();
    let backend = RedisClusterConfig::from_url(&cluster.url())
        .unwrap()
        .call_timeout(Duration::from_secs(3))
        .connect()
        .await
        .expect("connect to the spawned cluster");
    let storage = backend.storage();

    // Capabilities say what a failover may do: with replicas, counters are not durable.
    assert!(backend.replicated());
    assert_eq!(backend.masters(), 3);
    let caps = backend.capabilities();
    assert_eq!(
        caps.tokens,
        TokenGuarantee::DurableIfServerPersists {
            server_persists: Some(false)
        }
    );
    assert_eq!(caps.wake_up, WakeUp::Poll);
    assert!(!caps.locks_survive_restart);

    let key = LockKey::new("failover/account").unwrap();
    let tag = hash_tag(&key);
    let slot = cluster.key_slot(&tag);
    let master = cluster.master_of_slot(slot);
    let replica = cluster
        .replica_of(master)
        .expect("the key's master has a replica");

    // A first holder writes under its fence; everything so far reaches the replica.
    let first = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    storage.write(&key, first.fence(), b"first").await.unwrap();
    assert!(backend.release(&first).await.unwrap());
    let c = Arc::clone(&cluster);
    tokio::task::spawn_blocking(move || c.await_replicated(master, Duration::from_secs(10)))
        .await
        .unwrap();

    // The replica hears nothing more: frozen, and its link cut by the master.
    cluster.pause(replica);
    cluster
        .cli(master, &["CLIENT", "KILL", "TYPE", "replica"])
        .unwrap();

    // Holder A is granted the lock by the master alone.
    let a = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert_eq!(a.token.get(), first.token.get() + 1);
    assert_eq!(backend.inspect(&key).await.unwrap().holder, Some(a.fence()));

    // The master dies before the replica got the grant; the replica takes over.
    cluster.kill(master);
    cluster.resume(replica);
    let c = Arc::clone(&cluster);
    let promoted =
        tokio::task::spawn_blocking(move || c.await_failover(master, Duration::from_secs(60)))
            .await
            .unwrap();
    assert_eq!(promoted, replica, "the key's replica took over its slot");

    // The grant and its counter increment are gone from the new master.
    let info = until_served("inspect", || backend.inspect(&key)).await;
    assert_eq!(info.holder, None, "the grant to A was lost in the failover");
    assert_eq!(info.last_token, Some(first.token), "the increment was lost");

    // So B is granted the same lock, with A's token: two holders at once.
    let b = until_served("acquire", || backend.try_acquire(&key, TTL))
        .await
        .expect("the lock is free on the new master");
    assert_eq!(b.token, a.token, "the token was handed out again");
    assert_ne!(b.owner, a.owner);

    // The fence keeps the data safe: A writes first and is admitted (its token is above the
    // storage's fence); B, presenting the same token as another owner, is refused.
    storage.write(&key, a.fence(), b"A").await.unwrap();
    match storage.write(&key, b.fence(), b"B").await {
        Err(Error::Stale {
            presented, current, ..
        }) => {
            assert_eq!(presented, b.fence());
            assert_eq!(current, a.fence());
        }
        other => panic!("B's write with a repeated token must be stale, got {other:?}"),
    }
    let snapshot = storage.peek(&key).await.unwrap().unwrap();
    assert_eq!(snapshot.value.as_deref(), Some(b"A".as_slice()));
    assert_eq!(snapshot.fence, a.fence());
    // A learns it lost the lock at its next renewal.
    assert!(matches!(
        backend.extend(&a, TTL).await,
        Err(Error::LeaseLost { .. })
    ));

    // Liveness comes back with advance_token past the storage's fence.
    assert!(backend.release(&b).await.unwrap());
    let counter = backend
        .advance_token(&key, snapshot.fence.token)
        .await
        .unwrap();
    assert!(counter >= snapshot.fence.token);
    let c = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(
        c.token > snapshot.fence.token,
        "{} after {}",
        c.token,
        snapshot.fence.token
    );
    storage.read(&key, c.fence()).await.unwrap();
    storage.write(&key, c.fence(), b"C").await.unwrap();
    assert!(backend.release(&c).await.unwrap());
    assert_eq!(
        storage.peek(&key).await.unwrap().unwrap().value.as_deref(),
        Some(b"C".as_slice())
    );
}

/// A lease that reached the replica survives the failover: the new master has the lock and
/// the counter, so the holder renews and releases, and the next token follows on. The
/// backend's `master_addresses` follows the failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_lease_survives_failover() {
    let cluster = tokio::task::spawn_blocking(|| Arc::new(RedisCluster::spawn(3, 1)))
        .await
        .unwrap();
    let backend = RedisClusterConfig::from_url(&cluster.url())
        .unwrap()
        .call_timeout(Duration::from_secs(3))
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("failover/kept").unwrap();
    let master = cluster.master_of_slot(cluster.key_slot(&hash_tag(&key)));
    let before = master_ports(&cluster, 0);
    assert_eq!(before.len(), 3, "{before:?}");
    assert_eq!(listed_ports(&backend).await.unwrap(), before);
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let c = Arc::clone(&cluster);
    let promoted = tokio::task::spawn_blocking(move || {
        c.await_replicated(master, Duration::from_secs(10));
        c.kill(master);
        c.await_failover(master, Duration::from_secs(60))
    })
    .await
    .unwrap();
    // The masters are read anew on every call: the promoted replica is listed and the killed
    // master is not, while `masters` still counts those of connect time. The driver may
    // first send the call to the killed node, or learn the new slot map only from a
    // redirection: ask until the answer comes, within a bound.
    let after = master_ports(&cluster, promoted);
    let (killed_port, promoted_port) = (cluster.ports()[master], cluster.ports()[promoted]);
    assert!(
        after.contains(&promoted_port) && !after.contains(&killed_port),
        "{after:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = listed_ports(&backend).await;
        if seen.as_ref().is_ok_and(|seen| *seen == after) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "expected the masters {after:?} after the failover, got {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(backend.masters(), 3);
    let renewed = until_served("extend", || backend.extend(&lease, TTL)).await;
    assert_eq!(renewed.token, lease.token);
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_none());
    assert!(backend.release(&renewed).await.unwrap());
    let next = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert_eq!(next.token.get(), lease.token.get() + 1);
}
