//! The holder record is informational: a record that cannot be written (its storage server
//! down, or the storage refusing the grant's fence as stale) is a warning on stderr, and the
//! granted command runs all the same, under `run` and `elect`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::fencelock;
use fencelock::redis::servers::RedisServer;

fn redlock_url(nodes: &[&RedisServer]) -> String {
    let hosts: Vec<String> = nodes
        .iter()
        .map(|node| format!("127.0.0.1:{}", node.port()))
        .collect();
    format!("redlock://{}", hosts.join(","))
}

const RAN: &str = "the command ran";

fn run_and_elect(backend: &str, key: &str, extra: &[&str]) -> Vec<(i32, String, String)> {
    ["run", "elect"]
        .into_iter()
        .map(|sub| {
            let mut args = vec![sub, "--backend", backend, "--key", key];
            args.extend_from_slice(extra);
            args.extend_from_slice(&["-c", "echo 'the command ran'"]);
            fencelock(&args)
        })
        .collect()
}

#[test]
fn a_redlock_with_its_first_node_down_runs_the_command_without_a_record() {
    let nodes = [
        RedisServer::spawn(),
        RedisServer::spawn(),
        RedisServer::spawn(),
    ];
    let url = redlock_url(&nodes.iter().collect::<Vec<_>>());
    // The first node keeps the fenced data (and so the holder record) by default.
    nodes[0].kill();
    for (code, out, err) in run_and_elect(&url, "first-node-down", &["-n"]) {
        assert_eq!(code, 0, "a quorum is up, so the grant stands\n{out}{err}");
        assert_eq!(out.trim(), RAN, "{err}");
        assert!(
            err.contains("warning: recording the lock's holder"),
            "the failed record is said: {err}"
        );
        assert!(err.contains(&nodes[0].port().to_string()), "{err}");
    }
}

#[test]
fn a_record_refused_as_stale_does_not_stop_the_granted_command() {
    // The lock node forgets its counter (a restart without persistence, as a promoted replica
    // that missed the grant), while the storage keeps the first holder's record: the next
    // grant repeats token 1 with another owner, which the storage refuses.
    let node = RedisServer::spawn();
    let storage = RedisServer::spawn();
    let url = format!(
        "{}?storage=redis%3A%2F%2F127.0.0.1%3A{}",
        redlock_url(&[&node]),
        storage.port()
    );
    let (code, out, err) = fencelock(&["run", "--backend", &url, "--key", "K", "--", "true"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("warning"), "{err}");
    for sub in ["run", "elect"] {
        node.restart();
        let (code, out, err) = fencelock(&[
            sub,
            "--backend",
            &url,
            "--key",
            "K",
            "--wait",
            "20s",
            "-c",
            "echo 'the command ran'",
        ]);
        assert_eq!(
            code, 0,
            "{sub}: the grant stands; the record decides nothing\n{out}{err}"
        );
        assert_eq!(out.trim(), RAN, "{sub}: {err}");
        assert!(
            err.contains("warning: recording the lock's holder") && err.contains("stale"),
            "{sub}: {err}"
        );
        assert!(
            err.contains("advance-token"),
            "{sub}: the way to heal it is named: {err}"
        );
    }
}
