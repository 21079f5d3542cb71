//! What a backend warns about reaches the command line's stderr, as the command's own
//! warnings do (`fencelock: warning: ...`), once each: a Redis server whose eviction policy
//! could not be read, one that may evict under `allow_eviction=true`, and a ZooKeeper session
//! without credentials (DESIGN 8.2 and 8.5). Nothing the URL holds as a secret is printed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use common::fencelock;
use fencelock::redis::servers::RedisServer;
use fencelock::zookeeper::servers::{ZkMembers, ZooKeeper};
use fencelock_testkit::members::Spawned;

fn redis_cli(server: &RedisServer, args: &[&str]) {
    let out = Command::new("redis-cli")
        .args(["-p", &server.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs (it comes with redis-server: apt-get install redis-server)");
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("OK"),
        "redis-cli {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn warnings(err: &str, about: &str) -> usize {
    err.lines()
        .filter(|line| line.starts_with("fencelock: warning:") && line.contains(about))
        .count()
}

#[test]
fn a_skipped_eviction_check_is_said() {
    let server = RedisServer::spawn();
    // An ACL user that may lock but not read the server's configuration.
    redis_cli(
        &server,
        &[
            "ACL",
            "SETUSER",
            "app",
            "on",
            ">s3cretpw",
            "~*",
            "&*",
            "+@all",
            "-config",
        ],
    );
    let url = format!("redis://app:s3cretpw@127.0.0.1:{}", server.port());
    let (code, out, err) = fencelock(&["run", "--backend", &url, "--key", "k", "--", "true"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(warnings(&err, "the eviction check was skipped"), 1, "{err}");
    assert!(!err.contains("s3cretpw"), "the password leaked: {err}");
}

#[test]
fn an_accepted_eviction_policy_is_said() {
    let server = RedisServer::spawn();
    redis_cli(
        &server,
        &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"],
    );
    let url = format!("redis://127.0.0.1:{}", server.port());
    let (code, _, err) = fencelock(&["run", "--backend", &url, "--key", "k", "--", "true"]);
    assert_eq!(
        code, 2,
        "an evicting server is refused without the option: {err}"
    );
    let accepted = format!("{url}?allow_eviction=true");
    let (code, out, err) = fencelock(&["run", "--backend", &accepted, "--key", "k", "--", "true"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(warnings(&err, "allow_eviction=true accepts it"), 1, "{err}");
}

#[test]
fn a_zookeeper_session_without_credentials_is_said() {
    let server = Spawned::spawn_with(ZooKeeper::plain(), 1);
    let (code, out, err) = fencelock(&[
        "run",
        "--backend",
        &server.url(),
        "--key",
        "k",
        "--",
        "true",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(warnings(&err, "without credentials"), 1, "{err}");
}
