//! `fencelock inspect` shows a key's queue where the backend keeps one it can list
//! (ZooKeeper, one Redis server, PostgreSQL, etcd): the holder first, then the waiters in the
//! order they will be granted, each with its token where it is drawn on entering; a backend
//! without such a queue (Redlock) prints none.
//! Needs the Redis and PostgreSQL of `scripts/test-deps` (127.0.0.1:6379, 127.0.0.1:5432), and
//! ZooKeeper and etcd installed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock::redis::servers::RedisServer;
use fencelock::spec::BackendSpec;
use fencelock::zookeeper::servers::{ZkMembers, ZooKeeper};
use fencelock::{LockBackend, LockKey, Locker, OwnerId};
use fencelock_testkit::members::Spawned;
use fencelock_testkit::postgres::PgSchema;
use serde_json::Value;

/// `fencelock inspect [--json] --backend spec key`: exit code and stdout.
async fn inspect(spec: &str, key: &str, json: bool) -> String {
    let mut args = vec!["inspect".to_owned()];
    if json {
        args.push("--json".into());
    }
    args.extend(["--backend", spec, key].map(str::to_owned));
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        common::fencelock(&args.iter().map(String::as_str).collect::<Vec<_>>())
    })
    .await
    .unwrap();
    assert_eq!(code, 0, "{spec}: {out}{err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_lists_the_zookeeper_queue_in_grant_order() {
    let server = tokio::task::spawn_blocking(|| Spawned::spawn_with(ZooKeeper::plain(), 1))
        .await
        .unwrap();
    let spec = format!("{}?prefix=cli-queue-{}", server.url(), OwnerId::random());
    let connected = spec
        .parse::<BackendSpec>()
        .unwrap()
        .connect()
        .await
        .unwrap();
    let backend = connected.backend.clone();
    let locker = Locker::new(connected.backend);
    let key = "queue/inspected";

    let empty: Value = serde_json::from_str(&inspect(&spec, key, true).await).unwrap();
    assert_eq!(empty["queue"], Value::Array(Vec::new()), "{empty}");

    let held = locker.lock(key).ttl(Duration::from_secs(20)).await.unwrap();
    let waiter = {
        let locker = locker.clone();
        tokio::spawn(async move {
            locker
                .lock(key)
                .ttl(Duration::from_secs(20))
                .wait(Duration::from_secs(60))
                .await
        })
    };
    // The waiter's place is in the queue once its first try was refused.
    let lock_key = LockKey::new(key).unwrap();
    let mut queued = false;
    for _ in 0..200 {
        let entries = backend.inspect_queue(&lock_key).await.unwrap().unwrap();
        if entries.len() == 2 {
            queued = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(queued, "the waiter never appeared in the queue");

    let shown: Value = serde_json::from_str(&inspect(&spec, key, true).await).unwrap();
    let queue = shown["queue"].as_array().expect("a queue array");
    assert_eq!(queue.len(), 2, "{shown}");
    assert_eq!(queue[0]["role"], "holder", "{shown}");
    assert_eq!(queue[0]["token"], held.token().get(), "{shown}");
    assert_eq!(queue[0]["owner"], held.fence().owner.to_string(), "{shown}");
    assert_eq!(queue[1]["role"], "waiting", "{shown}");
    let next = queue[1]["token"].as_u64().unwrap();
    assert!(next > held.token().get(), "{shown}");

    let text = inspect(&spec, key, false).await;
    assert_eq!(
        common::inspect_row(&text, "queue"),
        Some("2 in order (1 waiting)"),
        "{text}"
    );
    let first = text.find("1. holder").expect(&text);
    let second = text.find("2. waiting").expect(&text);
    assert!(first < second, "{text}");

    // The waiter is granted the token its place showed.
    assert!(held.release().await.unwrap());
    let granted = waiter.await.unwrap().unwrap();
    assert_eq!(granted.token().get(), next);
    assert!(granted.release().await.unwrap());
}

/// On `spec`, a held lock with one waiter behind it: `fencelock inspect` lists the holder with
/// its token, then the waiter with no token yet (drawn at its grant), and the waiter is then
/// granted a greater token.
async fn lists_the_holder_then_a_waiter_whose_token_is_to_come(spec: &str, key: &str) {
    let connected = spec
        .parse::<BackendSpec>()
        .unwrap()
        .connect()
        .await
        .unwrap();
    let locker = Locker::new(connected.backend);
    let held = locker.lock(key).ttl(Duration::from_secs(20)).await.unwrap();
    let waiter = {
        let (locker, key) = (locker.clone(), key.to_owned());
        tokio::spawn(async move {
            locker
                .lock(&key)
                .ttl(Duration::from_secs(20))
                .wait(Duration::from_secs(60))
                .await
        })
    };
    let mut shown = Value::Null;
    for _ in 0..100 {
        shown = serde_json::from_str(&inspect(spec, key, true).await).unwrap();
        if shown["queue"]
            .as_array()
            .is_some_and(|queue| queue.len() == 2)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let queue = shown["queue"].as_array().expect("a queue listed");
    assert_eq!(
        queue.len(),
        2,
        "the waiter never showed in the queue: {shown}"
    );
    assert_eq!(queue[0]["role"], "holder", "{shown}");
    assert_eq!(queue[0]["token"], held.token().get(), "{shown}");
    assert_eq!(queue[1]["role"], "waiting", "{shown}");
    assert_eq!(
        queue[1]["token"],
        Value::Null,
        "drawn at the grant: {shown}"
    );
    let text = inspect(spec, key, false).await;
    assert!(text.contains("drawn at its grant"), "{text}");
    let held_token = held.token();
    assert!(held.release().await.unwrap());
    let granted = waiter.await.unwrap().unwrap();
    assert!(granted.token() > held_token);
    assert!(granted.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_lists_the_redis_queue_with_waiters_tokens_to_come() {
    let spec = format!(
        "redis://127.0.0.1:6379?prefix=cli-queue-{}:",
        OwnerId::random()
    );
    lists_the_holder_then_a_waiter_whose_token_is_to_come(&spec, "queue/redis").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_lists_both_postgres_queues() {
    for kind in ["lease", "advisory"] {
        let schema = PgSchema::create().await;
        let spec = format!("{}?schema={}&backend={kind}", schema.url(), schema.name());
        lists_the_holder_then_a_waiter_whose_token_is_to_come(&spec, "queue/pg").await;
        schema.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_without_a_listed_queue_shows_none() {
    // Redlock keeps no queue: its waiters are woken by each node's release channel.
    let nodes: Vec<RedisServer> =
        tokio::task::spawn_blocking(|| (0..3).map(|_| RedisServer::spawn()).collect())
            .await
            .unwrap();
    let hosts: Vec<String> = nodes
        .iter()
        .map(|node| format!("127.0.0.1:{}", node.port()))
        .collect();
    let spec = format!("redlock://{}", hosts.join(","));
    let shown: Value = serde_json::from_str(&inspect(&spec, "queue/none", true).await).unwrap();
    assert!(shown.get("queue").is_none(), "{shown}");
    let text = inspect(&spec, "queue/none", false).await;
    assert!(common::inspect_row(&text, "queue").is_none(), "{text}");
}

#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_lists_the_etcd_queue() {
    use fencelock::etcd::servers::{Etcd, EtcdMembers};
    let server = tokio::task::spawn_blocking(|| Spawned::spawn_with(Etcd, 1))
        .await
        .unwrap();
    lists_the_holder_then_a_waiter_whose_token_is_to_come(&server.url(), "queue/etcd").await;
}

/// A private Redis server, a backend on it, and `key` held there (30 s) through a `Locker`.
async fn held_on_a_redis_server(
    key: &str,
) -> (
    RedisServer,
    std::sync::Arc<dyn LockBackend>,
    fencelock::LockGuard,
) {
    let server = RedisServer::spawn();
    let connected = server
        .url()
        .parse::<BackendSpec>()
        .unwrap()
        .connect()
        .await
        .unwrap();
    let backend = connected.backend.clone();
    let held = Locker::new(connected.backend)
        .lock(key)
        .ttl(Duration::from_secs(30))
        .await
        .unwrap();
    (server, backend, held)
}

/// `run --no-fair` waits without a place in the queue (a plain `run --wait` takes one), and
/// still gets the lock at the release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_no_fair_waits_without_a_place_in_the_queue() {
    let (server, backend, held) = held_on_a_redis_server("queue/barging").await;
    let (spec, key, lock_key) = (server.url(), "queue/barging", held.lease().key);
    let mut waiting = common::command()
        .args([
            "run",
            "--no-fair",
            "--wait",
            "30s",
            "--backend",
            &spec,
            "--key",
            key,
        ])
        .args(["--", "true"])
        .spawn()
        .unwrap();
    // Time to connect and try, many times over.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let entries = backend.inspect_queue(&lock_key).await.unwrap().unwrap();
    assert_eq!(
        entries.len(),
        1,
        "a `run --no-fair` took a place in the queue: {entries:?}"
    );
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "the barging run ended while the lock was held"
    );
    assert!(held.release().await.unwrap());
    let status = tokio::task::spawn_blocking(move || waiting.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "the barging run failed: {status:?}");
}

/// A `run` waiting in the queue that gets SIGTERM gives its place up before it exits (143), so
/// the waiter behind it is not held up until the place lapses (2 s on one Redis server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_run_stopped_by_a_signal_leaves_the_queue_before_it_exits() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let (server, backend, held) = held_on_a_redis_server("queue/signalled").await;
    let (spec, key, lock_key) = (server.url(), "queue/signalled", held.lease().key);
    for round in 0..3 {
        let mut waiting = common::command()
            .args(["run", "--wait", "30s", "--backend", &spec, "--key", key])
            .args(["--", "true"])
            .spawn()
            .unwrap();
        let mut queued = false;
        for _ in 0..200 {
            if backend
                .inspect_queue(&lock_key)
                .await
                .unwrap()
                .unwrap()
                .len()
                == 2
            {
                queued = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert!(queued, "round {round}: the waiting run never queued");
        let pid = Pid::from_raw(i32::try_from(waiting.id()).unwrap());
        kill(pid, Signal::SIGTERM).unwrap();
        let status = tokio::task::spawn_blocking(move || waiting.wait().unwrap())
            .await
            .unwrap();
        assert_eq!(status.code(), Some(143), "round {round}: {status:?}");
        let entries = backend.inspect_queue(&lock_key).await.unwrap().unwrap();
        assert_eq!(
            entries.len(),
            1,
            "round {round}: the run exited and left its place in the queue: {entries:?}"
        );
    }
    assert!(held.release().await.unwrap());
}
