//! What the command tells a user: the `--backend` help of every subcommand lists the URL forms
//! of every registered scheme, and durations in messages are rounded (`12.3 ms`, not
//! `12.345678ms`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{explain, fencelock, wait_for_line};
use fencelock::redis::servers::RedisServer;

/// The subcommands that take `--backend`.
const WITH_BACKEND: &[&str] = &[
    "demo",
    "run",
    "elect",
    "inspect",
    "advance-token",
    "bench",
    "chaos",
];

/// The URL forms of this build: the ones a hand-written list once missed among them.
fn url_forms() -> Vec<&'static str> {
    let mut forms = vec![
        "memory://",
        "redis://",
        "rediss://",
        "redlock://",
        "redis+cluster://",
        "rediss+cluster://",
        "postgres://",
        "postgresql://",
        "mysql://",
        "mariadb://",
        "zookeeper://",
    ];
    if cfg!(feature = "etcd") {
        forms.push("etcd://");
    }
    forms
}

#[test]
fn every_backend_help_lists_every_url_form() {
    for sub in WITH_BACKEND {
        for flag in ["-h", "--help"] {
            let (code, out, err) = fencelock(&[sub, flag]);
            assert_eq!(code, 0, "{sub} {flag}: {err}");
            for form in url_forms() {
                assert!(out.contains(form), "{sub} {flag} lacks {form}:\n{out}");
            }
        }
    }
    // The long help says what each reaches, in the registry's words.
    let (_, out, _) = fencelock(&["inspect", "--help"]);
    let words = out.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("redis+cluster:// a Redis Cluster, reached through seed nodes"),
        "{out}"
    );
}

/// `text` ends with a rounded duration: a number of at most three significant digits and a
/// unit, separated by a space.
fn assert_rounded(text: &str, whole: &str) {
    let (number, unit) = text
        .trim()
        .split_once(' ')
        .unwrap_or_else(|| panic!("no `<number> <unit>` in {text:?}: {whole}"));
    assert!(
        ["ns", "µs", "ms", "s", "min"].contains(&unit),
        "unit {unit:?}: {whole}"
    );
    let digits = number.trim_start_matches(['0', '.']).replace('.', "");
    assert!(
        number.parse::<f64>().is_ok() && digits.len() <= 3,
        "{number:?} is not rounded: {whole}"
    );
}

#[test]
fn not_obtained_within_says_a_rounded_duration() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let done = dir.path().join("done");
    let script = format!(
        "echo held > {}; i=0; while [ ! -e {} ] && [ $i -lt 1200 ]; do sleep 0.05; \
         i=$((i+1)); done",
        started.display(),
        done.display()
    );
    let holder = common::command()
        .args(["run", "--backend", &url, "--key", "busy", "--", "sh", "-c"])
        .arg(&script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_line(&started, Duration::from_secs(20));
    let (code, out, err) = fencelock(&[
        "run",
        "--backend",
        &url,
        "--key",
        "busy",
        // Long enough to connect on a loaded machine (the wait covers the connect, and a
        // connect cut short exits 1 instead), with digits past what the message keeps.
        "--wait",
        "1.23456",
        "--",
        "true",
    ]);
    assert_eq!(code, 75, "{out}{err}");
    let line = err
        .lines()
        .find(|line| line.contains("not obtained within "))
        .unwrap_or_else(|| panic!("no `not obtained within`: {err}"));
    let (_, waited) = line.split_once("not obtained within ").unwrap();
    assert_rounded(waited, &err);
    std::fs::write(&done, "").unwrap();
    let held = holder.wait_with_output().unwrap();
    assert_eq!(held.status.code(), Some(0), "{}", explain(&held));
}
