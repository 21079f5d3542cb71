//! `run` and `elect` without `--ttl` take 30 s within the backend's bounds: on a ZooKeeper
//! session shorter than that they ran nothing before ("ttl must be at most 4s").

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::fencelock;
use fencelock::zookeeper::servers::{ZkMembers, ZooKeeper};
use fencelock_testkit::members::Spawned;

#[test]
fn run_and_elect_without_a_ttl_work_on_a_short_session() {
    let server = Spawned::spawn_with(ZooKeeper::plain(), 1);
    let spec = format!("{}?session_timeout=4s", server.url());
    let (code, out, err) = fencelock(&["run", "--backend", &spec, "--key", "k", "--", "true"]);
    assert_eq!(code, 0, "run: {out}{err}");
    let (code, out, err) =
        fencelock(&["elect", "--backend", &spec, "--key", "leader", "--", "true"]);
    assert_eq!(code, 0, "elect: {out}{err}");
    // A ttl given past the session is refused, naming the setting.
    let (code, _, err) = fencelock(&[
        "run",
        "--backend",
        &spec,
        "--key",
        "k",
        "--ttl",
        "30s",
        "--",
        "true",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("session_timeout"), "{err}");
}
