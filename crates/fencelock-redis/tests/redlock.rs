//! Redlock on real, independent `redis-server` processes: the conformance suite on 3 and on 5
//! nodes, counters set apart on purpose, nodes killed, frozen, restarted and slowed.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_conformance::Setup;
use fencelock_core::{
    Error, FencedStorage, FencingToken, Lease, LockBackend, LockKey, OwnerId, TokenGuarantee,
};
use fencelock_redis::servers::{RedisServer, RedisServerOptions};
use fencelock_redis::{RedisConfig, Redlock, RedlockConfig};
use fencelock_testkit::proxy::FaultProxy;

mod stats;
use tokio::time::Instant;

const TTL: Duration = Duration::from_secs(30);
const NODE_TIMEOUT: Duration = Duration::from_millis(500);

fn key(name: &str) -> LockKey {
    LockKey::new(format!("redlock/{name}/{}", OwnerId::random())).unwrap()
}

/// `n` independent servers, spawned in parallel.
fn spawn_nodes(n: usize, options: &RedisServerOptions) -> Vec<Arc<RedisServer>> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|_| scope.spawn(|| Arc::new(RedisServer::spawn_with(options.clone()))))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn urls(nodes: &[Arc<RedisServer>]) -> Vec<String> {
    nodes.iter().map(|s| s.url()).collect()
}

async fn connect(urls: Vec<String>, node_timeout: Duration) -> Redlock {
    RedlockConfig::new(urls)
        .node_timeout(node_timeout)
        .connect_timeout(Duration::from_secs(2))
        .connect()
        .await
        .expect("connect to the spawned redis-servers")
}

async fn blocking(f: impl FnOnce() + Send + 'static) {
    tokio::task::spawn_blocking(f).await.unwrap();
}

async fn kill(server: &Arc<RedisServer>) {
    let server = Arc::clone(server);
    blocking(move || server.kill()).await;
}

async fn restart(server: &Arc<RedisServer>) {
    let server = Arc::clone(server);
    blocking(move || server.restart()).await;
}

/// Tries until granted: right after a node restarts, the first call may still meet the dropped
/// connection.
async fn acquire(redlock: &Redlock, key: &LockKey) -> Lease {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        match redlock.try_acquire(key, TTL).await {
            Ok(Some(lease)) => return lease,
            Ok(None) => panic!("{key} is held by someone else"),
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("acquire failed: {e}"),
        }
    }
}

/// A fresh Redlock over `n` nodes for one property. The storage has a server of its own, which
/// the outage leaves alone: the outage kills a majority of the lock nodes.
async fn setup(n: usize) -> Setup {
    let mut servers = spawn_nodes(n + 1, &RedisServerOptions::default());
    let data = servers.pop().unwrap();
    let redlock = connect(urls(&servers), Duration::from_secs(1)).await;
    let storage = RedisConfig::new(data.url())
        .connect_storage()
        .await
        .expect("connect the storage");
    let doomed: Vec<Arc<RedisServer>> = servers.iter().take(n / 2 + 1).cloned().collect();
    Setup::new(
        Arc::new(redlock),
        Arc::new(storage),
        Box::new(move || {
            let doomed = doomed.clone();
            Box::pin(async move {
                blocking(move || doomed.iter().for_each(|s| s.kill())).await;
            })
        }),
    )
    .keep(servers)
    .keep(data)
}

mod three_nodes {
    fencelock_conformance::conformance_suite!(super::setup(3));
}

mod five_nodes {
    fencelock_conformance::conformance_suite!(super::setup(5));
}

/// One node restarted empty, another pushed far ahead on its own, quorums forced through each
/// of them by killing the others: every grant still carries a higher token than the last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_with_counters_set_apart() {
    let nodes = spawn_nodes(3, &RedisServerOptions::default());
    let redlock = connect(urls(&nodes), NODE_TIMEOUT).await;
    let key = key("apart");
    let mut last: Option<FencingToken> = None;
    let mut grant = async |phase: &str| {
        for _ in 0..5 {
            let lease = acquire(&redlock, &key).await;
            if let Some(last) = last {
                assert!(
                    lease.token > last,
                    "{phase}: token {} after {last}",
                    lease.token
                );
            }
            last = Some(lease.token);
            assert!(redlock.release(&lease).await.unwrap());
        }
        last.unwrap()
    };

    grant("all nodes equal").await;

    // Node 0 loses its counter.
    restart(&nodes[0]).await;
    grant("node 0 empty").await;

    // Node 2 runs far ahead, through a one-node backend on it alone.
    let alone = RedisConfig::new(nodes[2].url()).connect().await.unwrap();
    let ahead = FencingToken::new(1_000).unwrap();
    alone.advance_token(&key, ahead).await.unwrap();

    // Only nodes 0 (low) and 2 (ahead) answer: the token jumps past 1000 and is written back.
    kill(&nodes[1]).await;
    let jumped = grant("quorum of the empty and the ahead node").await;
    assert!(
        jumped > ahead,
        "token {jumped} did not pass node 2's counter"
    );

    // Only nodes 0 and 1 answer, node 1 restarted empty: node 0 carries the written-back token.
    restart(&nodes[1]).await;
    kill(&nodes[2]).await;
    grant("quorum of the written-back and an empty node").await;

    // Everyone back, node 2 restarted empty too.
    restart(&nodes[2]).await;
    let end = grant("all nodes back").await;
    let info = redlock.inspect(&key).await.unwrap();
    assert!(info.last_token >= Some(end), "inspect lost the last token");
}

/// Two nodes of five down: everything works. A third one frozen: typed errors, each within
/// the node timeout, never a hang. All back: service resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn minority_down_works_majority_down_fails_fast_then_recovers() {
    let nodes = spawn_nodes(5, &RedisServerOptions::default());
    let redlock = connect(urls(&nodes), NODE_TIMEOUT).await;
    let key = key("majority");

    kill(&nodes[0]).await;
    kill(&nodes[1]).await;
    let lease = acquire(&redlock, &key).await;
    assert!(redlock.try_acquire(&key, TTL).await.unwrap().is_none());
    let lease = redlock.extend(&lease, TTL).await.unwrap();
    assert_eq!(
        redlock.inspect(&key).await.unwrap().holder,
        Some(lease.fence())
    );
    assert!(redlock.release(&lease).await.unwrap());
    let held = acquire(&redlock, &key).await;

    // A frozen node answers nothing: only the node timeout ends the calls to it.
    let frozen = Arc::clone(&nodes[2]);
    blocking(move || frozen.stop()).await;
    let bound = NODE_TIMEOUT + Duration::from_millis(750);
    let started = Instant::now();
    match redlock.try_acquire(&self::key("frozen"), TTL).await {
        Err(Error::QuorumFailed {
            granted,
            needed,
            nodes: reports,
        }) => {
            assert_eq!((granted, needed, reports.len()), (2, 3, 5), "{reports:?}");
            assert!(
                reports.iter().any(|r| r.outcome.contains("timed out")),
                "{reports:?}"
            );
        }
        other => panic!("expected QuorumFailed, got {other:?}"),
    }
    assert!(
        started.elapsed() < bound,
        "acquire took {:?}",
        started.elapsed()
    );
    for (what, result) in [
        ("extend", redlock.extend(&held, TTL).await.map(|_| ())),
        ("release", redlock.release(&held).await.map(|_| ())),
        ("inspect", redlock.inspect(&key).await.map(|_| ())),
        (
            "advance_token",
            redlock
                .advance_token(&key, FencingToken::MIN)
                .await
                .map(|_| ()),
        ),
    ] {
        match result {
            Err(e @ (Error::QuorumFailed { .. } | Error::Unavailable { .. })) => {
                assert!(e.is_retryable(), "{what}: {e}");
            }
            other => panic!("{what}: expected QuorumFailed or Unavailable, got {other:?}"),
        }
    }
    // A wake-up hint: it may return Ok (its `max` passed) or a retryable error, never hang.
    match redlock
        .wait_for_release(&key, Duration::from_millis(100))
        .await
    {
        Ok(()) => {}
        Err(e) => assert!(e.is_retryable(), "wait_for_release: {e}"),
    }
    assert!(
        started.elapsed() < bound * 6,
        "calls took {:?}",
        started.elapsed()
    );

    // All back (the frozen one thawed, the killed ones restarted empty): service resumes.
    // The release sent during the outage reached nodes 3 and 4 (and node 2 once thawed), so
    // the key is free again, and a quorum of five always includes a node that saw the old
    // token.
    let frozen = Arc::clone(&nodes[2]);
    blocking(move || frozen.cont()).await;
    restart(&nodes[0]).await;
    restart(&nodes[1]).await;
    let next = acquire(&redlock, &key).await;
    assert!(
        next.token > held.token,
        "{} after {}",
        next.token,
        held.token
    );
    assert!(redlock.release(&next).await.unwrap());
}

/// One node of five behind a proxy that adds 200 ms each way: acquisitions finish at the speed
/// of the fast quorum, not of the slow node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_node_does_not_gate_acquisition() {
    let nodes = spawn_nodes(5, &RedisServerOptions::default());
    let proxy = FaultProxy::start(nodes[0].addr()).await.unwrap();
    let mut via = urls(&nodes);
    via[0] = format!("redis://127.0.0.1:{}", proxy.port());
    let redlock = connect(via, Duration::from_secs(2)).await;
    let delay = Duration::from_millis(200);
    proxy.set_delay(delay);
    let key = key("slow");

    let rounds = 20u32;
    let mut times = Vec::new();
    let started = Instant::now();
    for _ in 0..rounds {
        let t = Instant::now();
        let lease = acquire(&redlock, &key).await;
        times.push(t.elapsed());
        assert!(redlock.release(&lease).await.unwrap());
    }
    let total = started.elapsed();
    times.sort();
    let median = times[times.len() / 2];
    // Gated by the slow node, each acquisition would take at least 2 x 200 ms.
    assert!(
        median < delay / 2,
        "median acquisition {median:?} (all: {times:?})"
    );
    assert!(
        total < delay * rounds / 2,
        "{rounds} acquire + release took {total:?}"
    );
}

/// A node that is down at connect time does not prevent connecting, and joins once it is up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_down_at_connect_joins_later() {
    let nodes = spawn_nodes(3, &RedisServerOptions::default());
    kill(&nodes[2]).await;
    let redlock = connect(urls(&nodes), NODE_TIMEOUT).await;
    let key = key("late-node");
    let lease = acquire(&redlock, &key).await;
    assert!(redlock.release(&lease).await.unwrap());

    restart(&nodes[2]).await;
    kill(&nodes[0]).await;
    // Now nodes 1 and 2 make the quorum: node 2 was never connected before.
    let lease = acquire(&redlock, &key).await;
    assert!(redlock.release(&lease).await.unwrap());

    // A majority down at connect time is a typed error naming every node.
    kill(&nodes[1]).await;
    match RedlockConfig::new(urls(&nodes))
        .node_timeout(NODE_TIMEOUT)
        .connect()
        .await
    {
        Err(Error::QuorumFailed { nodes: reports, .. }) => assert_eq!(reports.len(), 3),
        other => panic!("expected QuorumFailed, got {other:?}"),
    }
}

/// Capabilities: tokens persist only if every node persists.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_durability_needs_every_node_to_persist() {
    let persistent = spawn_nodes(3, &RedisServerOptions::persistent());
    let redlock = connect(urls(&persistent), NODE_TIMEOUT).await;
    assert_eq!(
        redlock.capabilities().tokens,
        TokenGuarantee::DurableIfServerPersists {
            server_persists: Some(true)
        }
    );
    assert!(redlock.capabilities().locks_survive_restart);

    let plain = spawn_nodes(1, &RedisServerOptions::default());
    let mut mixed = urls(&persistent[..2]);
    mixed.extend(urls(&plain));
    let redlock = connect(mixed, NODE_TIMEOUT).await;
    // The last node may still be connecting in the background; wait for its answer.
    let deadline = Instant::now() + Duration::from_secs(5);
    while redlock.capabilities().tokens
        != (TokenGuarantee::DurableIfServerPersists {
            server_persists: Some(false),
        })
    {
        assert!(Instant::now() < deadline, "{:?}", redlock.capabilities());
        redlock.inspect(&key("caps")).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Bad configurations and ttls are typed errors that touch nothing.
#[tokio::test]
async fn bad_configurations_are_refused() {
    for (what, config) in [
        ("no nodes", RedlockConfig::new(Vec::<String>::new())),
        (
            "a node twice",
            RedlockConfig::new(["redis://127.0.0.1:1", "redis://127.0.0.1:1/2"]),
        ),
        (
            "a bad URL",
            RedlockConfig::new(["redis://127.0.0.1:1", "http://127.0.0.1:2"]),
        ),
        (
            "a bad prefix",
            RedlockConfig::new(["redis://127.0.0.1:1"]).prefix("a{b"),
        ),
        (
            "a zero node timeout",
            RedlockConfig::new(["redis://127.0.0.1:1"]).node_timeout(Duration::ZERO),
        ),
    ] {
        match config.connect().await {
            Err(Error::InvalidConfig { .. }) => {}
            other => panic!("{what}: expected InvalidConfig, got {other:?}"),
        }
    }
}

/// A ttl the drift margin would eat entirely is refused before any node is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ttl_within_the_drift_margin_is_refused() {
    let nodes = spawn_nodes(1, &RedisServerOptions::default());
    let redlock = connect(urls(&nodes), NODE_TIMEOUT).await;
    let key = key("tiny-ttl");
    for ttl in [Duration::from_millis(1), Duration::from_millis(2)] {
        match redlock.try_acquire(&key, ttl).await {
            Err(Error::InvalidTtl { .. }) => {}
            other => panic!("ttl {ttl:?}: expected InvalidTtl, got {other:?}"),
        }
    }
    assert_eq!(redlock.inspect(&key).await.unwrap().last_token, None);
    let lease = redlock
        .try_acquire(&key, Duration::from_millis(200))
        .await
        .unwrap()
        .expect("a one-node redlock grants a free key");
    assert!(redlock.release(&lease).await.unwrap());
}

/// Redlock's errors say `redlock`, not `redis`, and name the node that answered them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_say_redlock_and_name_the_node() {
    let nodes = spawn_nodes(3, &RedisServerOptions::default());
    let redlock = connect(urls(&nodes), NODE_TIMEOUT).await;
    kill(&nodes[1]).await;
    kill(&nodes[2]).await;
    match redlock.try_acquire(&key("errors"), TTL).await {
        Err(Error::QuorumFailed { nodes: reports, .. }) => {
            for (report, node) in reports.iter().zip(&nodes).skip(1) {
                assert_eq!(report.node, format!("127.0.0.1:{}", node.port()));
                assert!(report.outcome.contains("redlock unavailable"), "{report}");
            }
        }
        other => panic!("expected QuorumFailed, got {other:?}"),
    }

    let locked = RedisServer::spawn_with(RedisServerOptions {
        password: Some("s3cret".into()),
        ..RedisServerOptions::default()
    });
    let url = format!("redis://:wrong@127.0.0.1:{}", locked.port());
    match RedlockConfig::new([url]).connect().await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(
                message.contains(&format!("node 127.0.0.1:{}", locked.port())),
                "{message}"
            );
            assert!(message.contains("redlock"), "{message}");
            assert!(!message.contains("wrong"), "password leaked: {message}");
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
}

/// The first node (or any minority) down at connect: the lock works, the storage (by default
/// on the first node) is connected only by storage operations, and its errors name it; once
/// the node is back, storage works without reconnecting anything by hand.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_node_down_at_connect_leaves_the_lock_working() {
    let nodes = spawn_nodes(3, &RedisServerOptions::default());
    kill(&nodes[0]).await;
    let hosts: Vec<String> = nodes.iter().map(|n| n.addr().to_string()).collect();
    let config = RedlockConfig::from_url(&format!("redlock://{}", hosts.join(",")))
        .unwrap()
        .node_timeout(NODE_TIMEOUT)
        .connect_timeout(Duration::from_secs(1));
    let redlock = config.connect().await.unwrap();
    let storage = config.connect_storage().await.unwrap();
    let key = key("first-down");
    let lease = acquire(&redlock, &key).await;
    match storage.write(&key, lease.fence(), b"v").await {
        Err(e @ Error::Unavailable { .. }) => {
            let shown = e.to_string();
            assert!(
                shown.contains(&format!("redlock storage node {}", hosts[0])),
                "{shown}"
            );
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
    assert!(redlock.release(&lease).await.unwrap());

    restart(&nodes[0]).await;
    let lease = acquire(&redlock, &key).await;
    storage.write(&key, lease.fence(), b"v").await.unwrap();
    assert_eq!(
        storage.read(&key, lease.fence()).await.unwrap().as_deref(),
        Some(&b"v"[..])
    );
    assert!(redlock.release(&lease).await.unwrap());

    // A storage of its own, up while the first lock node is down.
    let data = RedisServer::spawn();
    kill(&nodes[0]).await;
    let config = RedlockConfig::from_url(&format!(
        "redlock://{}?storage=redis%3A%2F%2F{}",
        hosts.join(","),
        data.addr()
    ))
    .unwrap()
    .node_timeout(NODE_TIMEOUT);
    let redlock = config.connect().await.unwrap();
    let storage = config.connect_storage().await.unwrap();
    let lease = acquire(&redlock, &key).await;
    storage.write(&key, lease.fence(), b"w").await.unwrap();
    assert!(redlock.release(&lease).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_sets_off_one_try_per_process_not_one_per_waiter() {
    let servers = spawn_nodes(3, &RedisServerOptions::default());
    let redlock = Arc::new(connect(urls(&servers), NODE_TIMEOUT).await);
    let key = key("herd");
    let held = acquire(&redlock, &key).await;
    let locker = fencelock_core::Locker::new(redlock.clone());
    let waiters: u64 = 16;
    let mut tasks = Vec::new();
    for _ in 0..waiters {
        let (locker, key) = (locker.clone(), key.clone());
        tasks.push(tokio::spawn(async move {
            let guard = locker
                .lock(key.as_str())
                .ttl(TTL)
                .wait(Duration::from_secs(120))
                .watchdog(false)
                .await
                .expect("a waiter was not granted");
            assert!(guard.release().await.unwrap());
        }));
    }
    // Every request has failed a try and waits (their pauses grow to the default's 500 ms).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut admin = stats::admin(&servers[0]).await;
    let before = stats::script_calls(&mut admin).await;
    assert!(redlock.release(&held).await.unwrap());
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("the waiters were not all granted")
            .unwrap();
    }
    let ran = stats::script_calls(&mut admin).await - before;
    // Each grant is one acquire and one release on the node. A release woke every waiting
    // request of the process, each sending a try (16 + 15 + ... refused tries, about 150
    // scripts more); with one request watching, a release sets off one try, and the others
    // try only when their own pause ends (at most every 500 ms).
    let floor = 1 + 2 * waiters;
    assert!(
        ran <= floor * 2,
        "{waiters} waiters handed one key down took {ran} scripts on a node, {floor} at least"
    );
}
