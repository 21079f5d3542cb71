//! The bench kits of the three configs on real servers: the names, baselines, peers and
//! cleanup that `fencelock bench` measures and runs, as the bench crate's `Suite`
//! constructors built them before the kits moved here.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::tools::{BenchKit, Peer};
use fencelock_core::{BackendConfig, Connected, LockKey};
use fencelock_redis::servers::RedisCluster;
use fencelock_redis::servers::RedisServer;
use fencelock_redis::{RedisClusterConfig, RedisConfig, RedlockConfig};
use redis::cluster::ClusterClientBuilder;

const TTL: Duration = Duration::from_secs(30);

/// Every key on the server at `url` (a test server of its own, so no other run's).
async fn keys_on(url: &str) -> Vec<String> {
    let client = redis::Client::open(url).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    keys
}

/// Takes and releases the fenced lock on `key`: leaves its token counter behind.
async fn lock_once(fenced: &Connected, key: &str) {
    let key = LockKey::new(key).unwrap();
    let lease = fenced
        .backend
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .unwrap();
    assert!(fenced.backend.release(&lease).await.unwrap());
}

/// The raw baseline's every operation, once; afterwards it has left no key.
async fn exercise_baseline(kit: &BenchKit, run: &str) {
    let baseline = &kit.baseline;
    assert_eq!(baseline.label(), "raw SET NX PX + DEL");
    assert_eq!(baseline.round_trip_label(), "raw PING");
    assert_eq!(baseline.write_label(), "raw SET");
    baseline.round_trip().await.unwrap();
    let key = LockKey::new(format!("{run}raw-a")).unwrap();
    baseline.acquire_release(&key).await.unwrap();
    baseline
        .lock_release(&key, Duration::from_secs(1))
        .await
        .unwrap();
    let writer = baseline
        .writer(&LockKey::new(format!("{run}raw-w")).unwrap())
        .await
        .unwrap();
    assert_eq!(writer.once().await.unwrap(), None);
    writer.finish().await.unwrap();
    baseline.close().await.unwrap();
}

/// The kit's peers but the `rslock` crate's, which the `rslock` feature adds to the one-node
/// and Redlock kits (and only then): that one takes and releases a key of `run` once.
async fn peers_but_rslock<'a>(kit: &'a BenchKit, run: &str, label: &str) -> Vec<&'a Peer> {
    let mut others = Vec::new();
    let mut rslock = 0;
    for peer in &kit.peers {
        match peer {
            Peer::Raw(subject) if subject.label().starts_with("rslock") => {
                assert_eq!(subject.label(), label);
                let key = LockKey::new(format!("{run}rslock-a")).unwrap();
                subject.acquire_release(&key).await.unwrap();
                subject
                    .lock_release(&key, Duration::from_secs(1))
                    .await
                    .unwrap();
                rslock += 1;
            }
            other => others.push(other),
        }
    }
    assert_eq!(
        rslock,
        usize::from(cfg!(feature = "rslock")),
        "{:?}",
        kit.peers
    );
    others
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_one_node_kit_measures_raw_commands_and_sweeps_the_run() {
    let server = RedisServer::spawn();
    let config = RedisConfig::from_url(&server.url()).unwrap();
    let kit = config.bench_kit().await.unwrap().unwrap();
    assert_eq!(kit.name, "redis");
    assert!(
        peers_but_rslock(&kit, "run-1/", "rslock lock + unlock")
            .await
            .is_empty()
    );
    exercise_baseline(&kit, "run-1/").await;
    assert!(
        keys_on(&server.url()).await.is_empty(),
        "the baseline (and rslock) clean up"
    );

    lock_once(&kit.fenced, "run-1/a").await;
    lock_once(&kit.fenced, "run-2/a").await;
    assert_eq!(keys_on(&server.url()).await.len(), 2);
    kit.cleanup.unwrap().clean("run-1/").await.unwrap();
    assert_eq!(
        keys_on(&server.url()).await,
        ["fencelock:{run-2/a}:token"],
        "only the run's keys go"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redlock_kit_has_the_one_node_backend_as_a_peer() {
    let servers = [
        RedisServer::spawn(),
        RedisServer::spawn(),
        RedisServer::spawn(),
    ];
    let urls: Vec<String> = servers.iter().map(RedisServer::url).collect();
    let config = RedlockConfig::new(urls.clone()).prefix("kit");
    let kit = config.bench_kit().await.unwrap().unwrap();
    assert_eq!(kit.name, "redlock-3");
    assert_eq!(kit.fenced.backend.name(), "redlock");
    let [Peer::Fenced(peer)] =
        peers_but_rslock(&kit, "run/", "rslock lock + unlock (3 nodes)").await[..]
    else {
        panic!("one fenced peer: {:?}", kit.peers);
    };
    assert_eq!(peer.backend.name(), "redis");
    exercise_baseline(&kit, "run/").await;

    lock_once(&kit.fenced, "run/a").await;
    lock_once(peer, "run/b").await;
    assert_eq!(
        keys_on(&urls[0]).await,
        ["kit:{run/a}:token", "kit:{run/b}:token"]
    );
    assert_eq!(keys_on(&urls[2]).await, ["kit:{run/a}:token"]);
    kit.cleanup.unwrap().clean("run/").await.unwrap();
    for url in &urls {
        assert!(keys_on(url).await.is_empty(), "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cluster_kit_sweeps_every_master() {
    let cluster = tokio::task::spawn_blocking(|| Arc::new(RedisCluster::spawn(3, 0)))
        .await
        .unwrap();
    let config = RedisClusterConfig::from_url(&cluster.url()).unwrap();
    let kit = config.bench_kit().await.unwrap().unwrap();
    assert_eq!(kit.name, "redis-cluster");
    assert!(kit.peers.is_empty());
    exercise_baseline(&kit, "run/").await;

    let keys = ["run/a", "run/b", "run/c", "run/d", "run/e", "run/f"];
    for key in keys {
        lock_once(&kit.fenced, key).await;
    }
    let client = ClusterClientBuilder::new(config.seed_urls())
        .build()
        .unwrap();
    let mut conn = client.get_async_connection().await.unwrap();
    let exists = |conn: &mut redis::cluster_async::ClusterConnection, key: &str| {
        let mut conn = conn.clone();
        let name = format!("fencelock:{{{key}}}:token");
        async move {
            redis::cmd("EXISTS")
                .arg(name)
                .query_async::<i64>(&mut conn)
                .await
                .unwrap()
        }
    };
    for key in keys {
        assert_eq!(exists(&mut conn, key).await, 1, "{key}");
    }
    kit.cleanup.unwrap().clean("run/").await.unwrap();
    for key in keys {
        assert_eq!(exists(&mut conn, key).await, 0, "{key}");
    }
}
