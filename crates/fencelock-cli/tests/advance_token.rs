//! `fencelock advance-token` heals a lock server that lost its counters.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::fencelock;
use fencelock_testkit::redis::RedisServer;

/// The token a `fencelock run` on `key` was granted.
fn token_of_a_run(url: &str, key: &str) -> u64 {
    let (code, out, err) = fencelock(&[
        "run",
        "--backend",
        url,
        "--key",
        key,
        "--",
        "sh",
        "-c",
        "echo $FENCELOCK_TOKEN",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    out.trim().parse().unwrap()
}

#[test]
fn advance_token_heals_a_counter_lost_in_a_restart() {
    // No persistence: a restart loses the counters, so tokens start again at 1.
    let server = RedisServer::spawn();
    let url = server.url();
    let tokens: Vec<u64> = (0..3).map(|_| token_of_a_run(&url, "job")).collect();
    assert_eq!(tokens, [1, 2, 3]);
    server.restart();
    assert_eq!(token_of_a_run(&url, "job"), 1, "the counter was lost");

    let (code, out, err) = fencelock(&[
        "advance-token",
        "--backend",
        &url,
        "--key",
        "job",
        "--to",
        "3",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("above 3"), "{out}");
    assert_eq!(token_of_a_run(&url, "job"), 4);

    // The counter never goes down.
    let (code, _, err) = fencelock(&[
        "advance-token",
        "--backend",
        &url,
        "--key",
        "job",
        "--to",
        "2",
    ]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(token_of_a_run(&url, "job"), 5);
}
