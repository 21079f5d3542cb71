//! Holder metadata: `fencelock run` and `elect` record host, pid and purpose beside the lock;
//! `fencelock inspect` shows them for the lock, a permit's slot and the leader.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::{command, fencelock, inspect_row};
use fencelock::redis::servers::RedisServer;
use serde_json::Value;

/// Starts `fencelock ARGS -- sleep 30` and waits until its grant file exists.
fn hold(args: &[&str], grant: &Path) -> Child {
    let child = command()
        .args(args)
        .arg("--grant-file")
        .arg(grant)
        .args(["--", "sleep", "30"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !grant.exists() {
        assert!(Instant::now() < deadline, "no grant written");
        std::thread::sleep(Duration::from_millis(50));
    }
    child
}

fn inspect_json(args: &[&str]) -> Value {
    let mut all = vec!["inspect", "--json"];
    all.extend_from_slice(args);
    let (code, out, err) = fencelock(&all);
    assert_eq!(code, 0, "{out}{err}");
    serde_json::from_str(&out).unwrap()
}

fn this_host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

#[test]
fn inspect_shows_who_holds_the_lock_and_each_permit() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();

    let grant = dir.path().join("lock.json");
    let mut holder = hold(
        &[
            "run",
            "--backend",
            &url,
            "--key",
            "report",
            "--purpose",
            "nightly report",
        ],
        &grant,
    );
    let shown = inspect_json(&["--backend", &url, "report"]);
    let described = &shown["holder"]["described"];
    assert_eq!(described["purpose"], "nightly report", "{shown}");
    assert_eq!(described["pid"], holder.id(), "{shown}");
    assert_eq!(described["host"], this_host().as_str(), "{shown}");
    let (_, text, _) = fencelock(&["inspect", "--backend", &url, "report"]);
    assert_eq!(
        inspect_row(&text, "held by"),
        Some(format!("pid {} on {}: nightly report", holder.id(), this_host()).as_str()),
        "{text}"
    );

    // Without --purpose the program's name (never its arguments) is the purpose.
    let grant = dir.path().join("permit.json");
    let mut permit = hold(
        &[
            "run",
            "--backend",
            &url,
            "--key",
            "transcode",
            "--permits",
            "2",
        ],
        &grant,
    );
    let slot: Value = serde_json::from_str(&std::fs::read_to_string(&grant).unwrap()).unwrap();
    let shown = inspect_json(&["--backend", &url, "--permits", "2", "transcode"]);
    let slots = shown["permits"]["slots"].as_array().unwrap();
    let index = match &slot["slot"] {
        Value::String(text) => text.parse::<usize>().unwrap(),
        number => usize::try_from(number.as_u64().unwrap()).unwrap(),
    };
    let held = &slots[index];
    assert_eq!(held["holder"]["described"]["purpose"], "sleep", "{shown}");
    assert_eq!(held["holder"]["described"]["pid"], permit.id(), "{shown}");

    for child in [&mut holder, &mut permit] {
        child.kill().unwrap();
        child.wait().unwrap();
    }
}

#[test]
fn a_record_is_only_shown_for_the_holder_that_wrote_it() {
    let server = RedisServer::spawn();
    let url = server.url();
    let (code, out, err) = fencelock(&[
        "run",
        "--backend",
        &url,
        "--key",
        "once",
        "--purpose",
        "first",
        "--",
        "true",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    // Released: the record stays in the storage, but belongs to no current holder.
    let shown = inspect_json(&["--backend", &url, "once"]);
    assert_eq!(shown["holder"], Value::Null, "{shown}");
    let (_, text, _) = fencelock(&["inspect", "--backend", &url, "once"]);
    assert_eq!(inspect_row(&text, "held by"), None, "{text}");
}

#[test]
fn a_bad_purpose_is_refused_before_any_lock_is_taken() {
    let server = RedisServer::spawn();
    let url = server.url();
    let long = "p".repeat(300);
    for purpose in ["two\nlines", "\u{1b}[2J", long.as_str()] {
        let (code, out, err) = fencelock(&[
            "run",
            "--backend",
            &url,
            "--key",
            "clean",
            "--purpose",
            purpose,
            "--",
            "true",
        ]);
        assert_eq!(code, 2, "{out}{err}");
        assert!(err.contains("--purpose"), "{err}");
    }
    let shown = inspect_json(&["--backend", &url, "clean"]);
    assert_eq!(
        shown["last_token"],
        Value::Null,
        "a lock was taken: {shown}"
    );
}

#[test]
fn inspect_shows_the_leader() {
    let server = RedisServer::spawn();
    let url = server.url();
    let mut leader = command()
        .args([
            "elect",
            "--backend",
            &url,
            "--key",
            "scheduler",
            "--purpose",
            "cron",
        ])
        .args(["--", "sleep", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let described = loop {
        let shown = inspect_json(&["--backend", &url, "scheduler"]);
        if !shown["holder"]["described"].is_null() {
            break shown["holder"]["described"].clone();
        }
        assert!(Instant::now() < deadline, "no leader recorded: {shown}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(described["purpose"], "cron");
    assert_eq!(described["pid"], leader.id());
    leader.kill().unwrap();
    leader.wait().unwrap();
}
