//! The Redis Cluster backend on real clusters: operations follow a slot that moves (`ASK`
//! while it migrates, `MOVED` once it has), scripts a node has not cached still run there,
//! every master is checked for eviction at connect, and connect errors name the seeds.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, TokenGuarantee};
use fencelock_redis::servers::RedisCluster;
use fencelock_redis::servers::RedisServer;
use fencelock_redis::{RedisClusterConfig, hash_tag};

const TTL: Duration = Duration::from_secs(60);

async fn spawn(masters: usize, replicas: usize) -> Arc<RedisCluster> {
    tokio::task::spawn_blocking(move || Arc::new(RedisCluster::spawn(masters, replicas)))
        .await
        .unwrap()
}

fn cli(cluster: &RedisCluster, index: usize, args: &[&str]) -> String {
    cluster
        .cli(index, args)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

/// A key's slot moves to another master while a lease on it is held: half way (the keys
/// migrated, the slot still MIGRATING, so the old master answers `ASK`) and then for good
/// (the old master answers `MOVED`). The lease renews, inspects and releases throughout, the
/// storage keeps its fence, and the next token follows on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_follow_a_slot_that_moves() {
    let cluster = spawn(3, 0).await;
    let backend = RedisClusterConfig::from_url(&cluster.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let storage = backend.storage();
    let key = LockKey::new("moving/slot").unwrap();
    let slot = cluster.key_slot(&hash_tag(&key));
    let source = cluster.master_of_slot(slot);
    let target = (0..cluster.len()).find(|&i| i != source).unwrap();
    let (source_id, target_id) = (cluster.id(source), cluster.id(target));
    let slot_text = slot.to_string();

    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    storage.write(&key, lease.fence(), b"before").await.unwrap();

    // Migrating: every key of the slot moves to the target, the slot stays with the source,
    // which now answers ASK for them.
    cli(
        &cluster,
        target,
        &["CLUSTER", "SETSLOT", &slot_text, "IMPORTING", &source_id],
    );
    cli(
        &cluster,
        source,
        &["CLUSTER", "SETSLOT", &slot_text, "MIGRATING", &target_id],
    );
    let keys = cli(
        &cluster,
        source,
        &["CLUSTER", "GETKEYSINSLOT", &slot_text, "100"],
    );
    let keys: Vec<&str> = keys
        .lines()
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .collect();
    assert_eq!(
        keys.len(),
        3,
        "lock, counter and data share the slot: {keys:?}"
    );
    let port = cluster.ports()[target].to_string();
    let mut migrate = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000", "KEYS"];
    migrate.extend(keys.iter().copied());
    cli(&cluster, source, &migrate);
    let lock_key = format!("fencelock:{}:lock", hash_tag(&key));
    let asked = cluster.cli(source, &["GET", &lock_key]);
    assert!(
        format!("{asked:?}").contains("ASK"),
        "the source redirects with ASK: {asked:?}"
    );

    let renewed = backend.extend(&lease, TTL).await.unwrap();
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(info.holder, Some(lease.fence()));
    assert_eq!(info.last_token, Some(lease.token));
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_none());

    // Moved for good: every master learns the slot's new owner; the source answers MOVED.
    for index in 0..cluster.len() {
        cli(
            &cluster,
            index,
            &["CLUSTER", "SETSLOT", &slot_text, "NODE", &target_id],
        );
    }
    let moved = cluster.cli(source, &["GET", &lock_key]);
    assert!(
        format!("{moved:?}").contains("MOVED"),
        "the source redirects with MOVED: {moved:?}"
    );
    let snapshot = storage.peek(&key).await.unwrap().unwrap();
    assert_eq!(snapshot.fence, lease.fence());
    storage
        .write(&key, renewed.fence(), b"moved")
        .await
        .unwrap();
    assert!(backend.release(&renewed).await.unwrap());
    let next = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert_eq!(next.token.get(), lease.token.get() + 1);
    storage.write(&key, next.fence(), b"next").await.unwrap();
    assert!(matches!(
        storage.write(&key, lease.fence(), b"late").await,
        Err(Error::Stale { .. })
    ));
    // The keys live on the target now.
    assert_eq!(cli(&cluster, target, &["EXISTS", &lock_key]).trim(), "1");
}

/// A node that lost its script cache (`SCRIPT FLUSH`, as after a restart or a promotion)
/// still runs every operation, the backend's, the storage's and `RedisFence`'s, while
/// another master does not answer: the script is sent whole to the node that lacks it. (The
/// driver's own fallback, `SCRIPT LOAD` to every master, would wait for the frozen one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_missing_on_a_node_are_sent_to_that_node() {
    let cluster = spawn(3, 0).await;
    let backend = RedisClusterConfig::from_url(&cluster.url())
        .unwrap()
        .call_timeout(Duration::from_millis(800))
        .connect()
        .await
        .unwrap();
    let storage = backend.storage();
    let key = LockKey::new("flushed").unwrap();
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let master = cluster.master_of_slot(cluster.key_slot(&hash_tag(&key)));
    let other = (0..cluster.len()).find(|&i| i != master).unwrap();
    cli(&cluster, master, &["SCRIPT", "FLUSH"]);
    // Frozen for well under the cluster's node timeout (1 s), so the cluster stays up.
    cluster.pause(other);
    let started = std::time::Instant::now();
    let wrote = storage.write(&key, lease.fence(), b"v").await;
    let batch = backend
        .fence()
        .set(format!("user:{}", hash_tag(&key)), "mine")
        .commit(&key, lease.fence())
        .await;
    let extended = backend.extend(&lease, TTL).await;
    let elapsed = started.elapsed();
    cluster.resume(other);
    wrote.unwrap();
    batch.unwrap();
    let lease = extended.unwrap();
    assert!(elapsed < Duration::from_millis(700), "{elapsed:?}");
    assert!(backend.release(&lease).await.unwrap());
    // The release script is the token's and the queue's helpers followed by its own text
    // (src/scripts.rs).
    let text = format!(
        "{}\n{}\n{}",
        include_str!("../scripts/token.lua"),
        include_str!("../scripts/queue.lua"),
        include_str!("../scripts/release.lua")
    );
    let release = fencelock_redis::redis::Script::new(&text);
    let cached = cli(&cluster, master, &["SCRIPT", "EXISTS", release.get_hash()]);
    assert_eq!(
        cached.trim(),
        "1",
        "the release script is cached on that node again"
    );
}

/// Every master is asked for its eviction policy: one master that may evict fails the
/// connect, naming it; with eviction allowed the cluster is served and its tokens are
/// reported as not durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_that_may_evict_is_refused_by_name() {
    let cluster = spawn(3, 0).await;
    let master = cluster.master_of_slot(16383);
    cli(
        &cluster,
        master,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    );
    let config = RedisClusterConfig::from_url(&format!(
        "redis+cluster://:secret@{}",
        cluster.url().trim_start_matches("redis+cluster://")
    ))
    .unwrap();
    // The cluster has no password: use the plain URL for the checks that must connect.
    let config_plain = RedisClusterConfig::from_url(&cluster.url()).unwrap();
    match config_plain.connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            let port = cluster.ports()[master];
            assert!(
                message.contains(&format!("master 127.0.0.1:{port}")),
                "{message}"
            );
            assert!(message.contains("allkeys-lru"), "{message}");
            assert!(message.contains("noeviction"), "{message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert!(config_plain.connect_storage().await.is_err());
    let allowed = config_plain
        .clone()
        .allow_eviction(true)
        .connect()
        .await
        .unwrap();
    assert_eq!(
        allowed.capabilities().tokens,
        TokenGuarantee::DurableIfServerPersists {
            server_persists: Some(false)
        }
    );
    // A password the cluster does not have is refused as such, and never shown.
    match config.connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("refused the credentials"), "{message}");
            assert!(!message.contains("secret"), "{message}");
        }
        other => panic!("a password the cluster lacks must be refused, got {other:?}"),
    }
}

/// Connect errors name the seeds: nothing listening, a server without cluster support.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_errors_name_the_seeds() {
    let port = fencelock_servers::port::free_port().unwrap();
    let config = RedisClusterConfig::from_url(&format!("redis+cluster://127.0.0.1:{port}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(1))
        .call_timeout(Duration::from_secs(1));
    match config.connect().await {
        Err(e) => assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}"),
        Ok(_) => panic!("nothing listens on {port}"),
    }
    let plain = RedisServer::spawn();
    let config =
        RedisClusterConfig::from_url(&format!("redis+cluster://127.0.0.1:{}", plain.port()))
            .unwrap()
            .connect_timeout(Duration::from_secs(2))
            .call_timeout(Duration::from_secs(2));
    match config.connect().await {
        Err(e) => {
            let text = e.to_string();
            assert!(
                text.contains(&format!("127.0.0.1:{}", plain.port())),
                "{text}"
            );
        }
        Ok(_) => panic!("a server without cluster support is no cluster"),
    }
}

/// A replica frozen with SIGSTOP (it accepts connections and answers nothing) does not make
/// connect wait out its time-out: the seed is skipped and the driver's per-node time-out
/// follows what the live seeds took, so the backend connects (well within the 60 s a stall
/// would take) and serves locks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frozen_replica_does_not_stall_connect() {
    let cluster = spawn(3, 1).await;
    let replica = cluster.replica_of(0).expect("master 0 has a replica");
    cluster.pause(replica);
    let started = std::time::Instant::now();
    let result = RedisClusterConfig::from_url(&cluster.url())
        .unwrap()
        .connect_timeout(Duration::from_secs(60))
        .connect()
        .await;
    let elapsed = started.elapsed();
    let backend = result.unwrap();
    let key = LockKey::new("frozen-replica").unwrap();
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(backend.release(&lease).await.unwrap());
    cluster.resume(replica);
    assert!(
        elapsed < Duration::from_secs(30),
        "connect waited {elapsed:?} for the frozen replica"
    );
}

/// An upgradeable reader's companion lock lives in its key's slot (DESIGN 5.2, *The
/// companion's slot*): so no failover of one master can lose the companion and keep the
/// key's read phase, which would let a writer in between the upgrader's read and its write.
/// Before, `{k/upgrader}` hashed to a slot of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgraders_companion_lives_in_its_keys_slot() {
    use fencelock_core::{Locker, RwLocker};

    let cluster = spawn(3, 0).await;
    let backend = RedisClusterConfig::from_url(&cluster.url())
        .unwrap()
        .connect()
        .await
        .unwrap();
    let locks = RwLocker::new(Locker::new(backend));
    // Keys whose own tags hash to many slots, so a companion elsewhere would show.
    for key in ["ledger", "orders/42", "a", "b", "c"] {
        let reader = locks.upgradeable_read(key).ttl(TTL).await.unwrap();
        let slot_of = |name: &str| cli(&cluster, 0, &["CLUSTER", "KEYSLOT", name]);
        let mut companion = None;
        let mut readers = None;
        for node in 0..cluster.len() {
            for name in cli(&cluster, node, &["KEYS", "*"]).lines() {
                if name.contains("/upgrader") && name.ends_with(":lock") {
                    companion = Some(name.to_owned());
                } else if name.ends_with(":readers") {
                    readers = Some(name.to_owned());
                }
            }
        }
        let companion = companion.expect("no companion lock key on any master");
        let readers = readers.expect("no read phase key on any master");
        assert_eq!(
            slot_of(&companion),
            slot_of(&readers),
            "{key}: the companion {companion} is not in the slot of {readers}"
        );
        reader.release().await.unwrap();
    }
}
