//! `fencelock run --key a --key b`: several locks held together, against a real Redis server.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Child, Stdio};
use std::time::Duration;

use fencelock::redis::servers::RedisServer;

use common::{fencelock, wait_for_line};

/// The token a single-key run of `key` is granted.
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
    assert_eq!(code, 0, "a single-key run failed: {err}");
    out.trim().parse().expect("FENCELOCK_TOKEN is a number")
}

#[test]
fn several_keys_give_each_key_its_own_token() {
    let server = RedisServer::spawn();
    let url = server.url();
    // Set b's counter apart from a's, so one key's token cannot pass for the other's.
    for _ in 0..3 {
        token_of_a_run(&url, "set/b");
    }
    let (code, out, err) = fencelock(&[
        "run",
        "--backend",
        &url,
        "--key",
        "set/b",
        "--key",
        "set/a",
        "--",
        "sh",
        "-c",
        "test \"$FENCELOCK_KEY_COUNT\" = 2 && test -z \"$FENCELOCK_TOKEN\" \
         && test ${#FENCELOCK_OWNER_0} -eq 32 && test ${#FENCELOCK_OWNER_1} -eq 32 \
         && echo $FENCELOCK_KEY_0 $FENCELOCK_TOKEN_0 $FENCELOCK_KEY_1 $FENCELOCK_TOKEN_1",
    ]);
    assert_eq!(
        code, 0,
        "the environment of several keys is wrong: {out}{err}"
    );
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(words.len(), 4, "unexpected output {out:?}");
    assert_eq!(
        (words[0], words[2]),
        ("set/a", "set/b"),
        "keys not in sorted order"
    );
    let (token_a, token_b): (u64, u64) = (words[1].parse().unwrap(), words[3].parse().unwrap());
    assert_ne!(token_a, token_b);
    // Each key's next grant follows that key's own token.
    assert_eq!(
        token_of_a_run(&url, "set/a"),
        token_a + 1,
        "set/a's member had another key's token"
    );
    assert_eq!(
        token_of_a_run(&url, "set/b"),
        token_b + 1,
        "set/b's member had another key's token"
    );
}

/// A holder of `key` until it is stopped, once its grant is written to a file.
fn hold(url: &str, key: &str, grant: &std::path::Path) -> Child {
    let child = common::command()
        .args(["run", "--backend", url, "--key", key, "--grant-file"])
        .arg(grant)
        .args(["--", "sleep", "60"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_line(grant, Duration::from_secs(20));
    child
}

#[test]
fn several_keys_are_all_or_none() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let mut holder = hold(&url, "pair/b", &dir.path().join("grant.json"));
    let (code, out, err) = fencelock(&[
        "run",
        "--backend",
        &url,
        "-n",
        "--key",
        "pair/b",
        "--key",
        "pair/a",
        "--",
        "echo",
        "ran",
    ]);
    assert_eq!(
        code, 75,
        "a set with a held key was not refused: {out}{err}"
    );
    assert!(!out.contains("ran"), "the command ran without every lock");
    assert!(
        err.contains("pair/b"),
        "the refusal does not name the held key: {err}"
    );
    // pair/a was taken first and given back: it is free now.
    let (code, _, err) = fencelock(&[
        "run",
        "--backend",
        &url,
        "-n",
        "--key",
        "pair/a",
        "--",
        "true",
    ]);
    assert_eq!(code, 0, "a refused set left pair/a held: {err}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(holder.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    holder.wait().unwrap();
}

#[test]
fn several_keys_refuse_shared_and_permits() {
    for kind in ["--shared", "--permits=2"] {
        let (code, _, err) = fencelock(&[
            "run",
            "--backend",
            "redis://127.0.0.1:1",
            kind,
            "--key",
            "a",
            "--key",
            "b",
            "--",
            "true",
        ]);
        assert_eq!(code, 2, "{kind} with two keys: {err}");
        assert!(err.contains("one --key"), "{kind}: {err}");
    }
}
