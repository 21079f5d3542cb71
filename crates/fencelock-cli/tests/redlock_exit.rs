//! `fencelock run` on a Redlock returns as soon as a quorum decided, but waits for the calls to
//! the other nodes before it exits: a release past the quorum, and a failed acquisition's undo
//! of the grants it got on a minority. Were they dropped with the process, the slow node
//! would keep the lock for its ttl, and losing one more node would leave the key unavailable.
//!
//! The third node sits behind a proxy that delays every chunk; the scripts are not loaded on
//! it yet, so each release there takes three round trips (EVALSHA, NOSCRIPT, SCRIPT LOAD,
//! EVALSHA), all within the 500 ms node timeout, and most of them after the quorum answered.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Child, Stdio};
use std::time::Duration;

use common::{command, explain, fencelock, wait_for_line};
use fencelock::redis::servers::RedisServer;
use fencelock_testkit::proxy::FaultProxy;
use serde_json::Value;

/// Per chunk and direction: a round trip to the slow node is 80 ms, a release there 240 ms.
const SLOW: Duration = Duration::from_millis(40);

struct Nodes {
    servers: [RedisServer; 3],
    slow: FaultProxy,
}

impl Nodes {
    async fn start() -> Self {
        let servers = [
            RedisServer::spawn(),
            RedisServer::spawn(),
            RedisServer::spawn(),
        ];
        let slow = FaultProxy::start(servers[2].addr())
            .await
            .expect("a proxy on 127.0.0.1");
        Nodes { servers, slow }
    }

    /// The Redlock: the first two nodes directly, the third through the proxy.
    fn url(&self) -> String {
        format!(
            "redlock://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
            self.servers[0].port(),
            self.servers[1].port(),
            self.slow.port()
        )
    }

    /// The holder of `key` on the third node itself, as `fencelock inspect` on that one
    /// server sees it (Redlock's nodes keep the keys a Redis server does).
    fn holder_on_third(&self, key: &str) -> Value {
        let url = self.servers[2].url();
        let (code, out, err) = fencelock(&["inspect", "--json", "--backend", &url, key]);
        assert_eq!(code, 0, "{out}{err}");
        let shown: Value = serde_json::from_str(&out).unwrap();
        shown["holder"].clone()
    }
}

fn hold(url: &str, key: &str, grant: &std::path::Path, seconds: &str) -> Child {
    let child = command()
        .args(["run", "--backend", url, "--key", key, "--ttl", "60s"])
        .arg("--grant-file")
        .arg(grant)
        .args(["--", "sleep", seconds])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_line(grant, Duration::from_secs(30));
    child
}

/// After the slow node is healed and the first killed, the other two must be a free quorum.
fn the_key_is_free_without_the_first_node(nodes: &Nodes, key: &str) {
    nodes.slow.heal();
    assert_eq!(
        nodes.holder_on_third(key),
        Value::Null,
        "the third node still holds {key:?}"
    );
    nodes.servers[0].kill();
    let (code, out, err) = fencelock(&[
        "run",
        "-n",
        "--backend",
        &nodes.url(),
        "--key",
        key,
        "--",
        "true",
    ]);
    assert_eq!(code, 0, "two free nodes of three grant: {out}{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_reaches_the_slow_node_before_run_exits() {
    let nodes = Nodes::start().await;
    let dir = tempfile::tempdir().unwrap();
    let grant = dir.path().join("grant.json");
    let holder = hold(&nodes.url(), "report", &grant, "1");
    // Granted on every node; from now on the third node answers slowly.
    nodes.slow.set_delay(SLOW);
    let out = tokio::task::spawn_blocking(move || holder.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    the_key_is_free_without_the_first_node(&nodes, "report");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_acquisition_is_undone_on_the_slow_node_before_run_exits() {
    let nodes = Nodes::start().await;
    let dir = tempfile::tempdir().unwrap();
    let url = nodes.url();
    // The first holder has the first two nodes only: the third refuses connections meanwhile.
    nodes.slow.set_reset(true);
    let grant = dir.path().join("first.json");
    let first = hold(&url, "deploy", &grant, "6");
    // Its call to the third node (bounded by the 500 ms node timeout) has ended refused, so
    // it cannot grant there once the proxy lets connections through again.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    nodes.slow.set_reset(false);
    nodes.slow.set_delay(SLOW);
    // The second try is refused by the first two nodes at once and granted by the third,
    // late: not obtained, and the third node's grant must be undone.
    let try_url = url.clone();
    let (code, out, err) = tokio::task::spawn_blocking(move || {
        fencelock(&[
            "run",
            "-n",
            "--ttl",
            "60s",
            "--backend",
            &try_url,
            "--key",
            "deploy",
            "--",
            "true",
        ])
    })
    .await
    .unwrap();
    assert_eq!(code, 75, "held by the first holder: {out}{err}");
    let out = tokio::task::spawn_blocking(move || first.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    the_key_is_free_without_the_first_node(&nodes, "deploy");
}
