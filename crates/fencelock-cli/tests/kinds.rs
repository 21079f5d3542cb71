//! `fencelock run --permits`, `run --shared`, `elect` and `inspect` of the lock kinds, with
//! real child processes against a spawned Redis server (the memory backend cannot be shared
//! between processes).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::Duration;

use fencelock::redis::servers::RedisServer;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use common::{explain, wait_for_line};

fn spawn(args: &[&str]) -> Child {
    common::command()
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the fencelock binary runs")
}

#[test]
fn permits_bound_how_many_commands_run_at_once() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let inside = dir.path().join("inside");
    std::fs::create_dir(&inside).unwrap();
    let log = dir.path().join("log");
    // Each command marks itself inside, logs how many are inside and its slot, then leaves.
    let script = format!(
        "touch {inside}/$$; echo \"$(ls {inside} | wc -l) $FENCELOCK_SLOT $FENCELOCK_KEY\" >> {log}; \
         sleep 0.3; rm {inside}/$$",
        inside = inside.display(),
        log = log.display()
    );
    let children: Vec<Child> = (0..5)
        .map(|_| {
            spawn(&[
                "run",
                "--backend",
                &url,
                "--key",
                "transcode",
                "--permits",
                "2",
                "--wait",
                "60s",
                "--",
                "sh",
                "-c",
                &script,
            ])
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    }
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 5, "{lines:?}");
    for line in &lines {
        let mut fields = line.split_whitespace();
        let count: usize = fields.next().unwrap().parse().unwrap();
        let slot = fields.next().unwrap();
        let key = fields.next().unwrap();
        assert!(
            count <= 2,
            "{count} commands ran at once on 2 permits: {lines:?}"
        );
        assert!(slot == "0" || slot == "1", "slot {slot}");
        assert_eq!(key, format!("transcode/permit/{slot}"));
    }
}

#[test]
fn inspect_shows_permits_and_the_leader() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("started");
    let hold = format!("echo \"$FENCELOCK_TOKEN\" > {}; sleep 3", started.display());
    let permit = spawn(&[
        "run",
        "--backend",
        &url,
        "--key",
        "pool",
        "--permits",
        "3",
        "--",
        "sh",
        "-c",
        &hold,
    ]);
    wait_for_line(&started, Duration::from_secs(10));
    let (code, out, err) =
        common::fencelock(&["inspect", "--backend", &url, "--permits", "3", "pool"]);
    assert_eq!(code, 0, "{out}{err}");
    let permits = common::inspect_row(&out, "permits");
    assert_eq!(permits, Some("1 of 3 held"), "{out}");
    let kinds = common::inspect_row(&out, "kinds");
    assert_eq!(
        kinds,
        Some("exclusive, shared, semaphore, election"),
        "{out}"
    );
    let out = permit.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));

    std::fs::remove_file(&started).unwrap();
    let leader = spawn(&[
        "elect",
        "--backend",
        &url,
        "--key",
        "scheduler",
        "--",
        "sh",
        "-c",
        &hold,
    ]);
    let term = wait_for_line(&started, Duration::from_secs(10));
    let (code, out, err) = common::fencelock(&["inspect", "--backend", &url, "scheduler"]);
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        common::inspect_row(&out, "token"),
        Some(term.as_str()),
        "the leader's term is not shown: {out}"
    );
    let out = leader.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
}

#[test]
fn a_paused_leader_is_stopped_and_a_standby_takes_over_with_a_greater_term() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    let write_term = |path: &Path, then: &str| {
        format!(
            "test \"$FENCELOCK_TERM\" = \"$FENCELOCK_TOKEN\" && echo \"$FENCELOCK_TERM\" > {}; {then}",
            path.display()
        )
    };
    let leader = spawn(&[
        "elect",
        "--backend",
        &url,
        "--key",
        "jobs",
        "--ttl",
        "1s",
        "--grace",
        "1s",
        "--",
        "sh",
        "-c",
        &write_term(&first, "sleep 60"),
    ]);
    let first_term: u64 = wait_for_line(&first, Duration::from_secs(10))
        .parse()
        .unwrap();
    let standby = spawn(&[
        "elect",
        "--backend",
        &url,
        "--key",
        "jobs",
        "--ttl",
        "10s",
        "--",
        "sh",
        "-c",
        &write_term(&second, "true"),
    ]);
    // The leader's fencelock stops renewing; its command (in a group of its own) runs on.
    let pid = Pid::from_raw(i32::try_from(leader.id()).unwrap());
    kill(pid, Signal::SIGSTOP).unwrap();
    let second_term: u64 = wait_for_line(&second, Duration::from_secs(15))
        .parse()
        .unwrap();
    assert!(
        second_term > first_term,
        "term {second_term} after {first_term}"
    );
    kill(pid, Signal::SIGCONT).unwrap();
    let out = leader.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(76),
        "a deposed leader must stop its command: {}",
        explain(&out)
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("lost"),
        "{}",
        explain(&out)
    );
    let out = standby.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
}

#[test]
fn elect_gives_up_after_wait_and_shared_needs_a_backend_that_offers_it() {
    let server = RedisServer::spawn();
    let url = server.url();
    let holder = spawn(&[
        "elect",
        "--backend",
        &url,
        "--key",
        "busy",
        "--",
        "sleep",
        "3",
    ]);
    std::thread::sleep(Duration::from_millis(500));
    let (code, out, err) = common::fencelock(&[
        "elect",
        "--backend",
        &url,
        "--key",
        "busy",
        "--wait",
        "300ms",
        "--",
        "true",
    ]);
    assert_eq!(code, 75, "{out}{err}");
    assert!(err.contains("not elected"), "{err}");
    assert_eq!(holder.wait_with_output().unwrap().status.code(), Some(0));
    // Redlock does not offer shared locks: a typed refusal, an input error (exit 2: the
    // backend chosen cannot do what was asked), and the command never started.
    let redlock = format!("redlock://127.0.0.1:{}", server.port());
    let (code, out, err) = common::fencelock(&[
        "run",
        "--backend",
        &redlock,
        "--key",
        "catalog",
        "--shared",
        "--",
        "sh",
        "-c",
        "echo ran",
    ]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("does not support shared (reader) locks"),
        "{err}"
    );
    assert!(!out.contains("ran"));
    // --shared and --permits do not go together.
    let (code, _, err) = common::fencelock(&[
        "run",
        "--backend",
        &url,
        "--key",
        "k",
        "--shared",
        "--permits",
        "2",
        "--",
        "true",
    ]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn shared_runs_overlap_on_redis_share_one_token_and_keep_a_writer_out() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let mark = |name: &str| dir.path().join(name).display().to_string();
    // Each reader writes its token, then waits (up to 20 s) for the other's: both exit 0 only
    // if they held their readers' locks at the same time.
    let reader = |mine: &str, other: &str| {
        format!(
            "echo \"$FENCELOCK_TOKEN\" > {mine}.tmp && mv {mine}.tmp {mine}; i=0; \
             while [ ! -f {other} ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done; \
             test -f {other} && sleep 0.5",
        )
    };
    let readers: Vec<Child> = [("a", "b"), ("b", "a")]
        .iter()
        .map(|(mine, other)| {
            spawn(&[
                "run",
                "--backend",
                &url,
                "--key",
                "catalog",
                "--shared",
                "--",
                "sh",
                "-c",
                &reader(&mark(mine), &mark(other)),
            ])
        })
        .collect();
    let a = wait_for_line(Path::new(&mark("a")), Duration::from_secs(20));
    let b = wait_for_line(Path::new(&mark("b")), Duration::from_secs(20));
    assert_eq!(a, b, "overlapping readers got different tokens");
    // While they read, a writer is refused at once and inspect shows the read phase.
    let (code, out, err) = common::fencelock(&[
        "run",
        "--backend",
        &url,
        "--key",
        "catalog",
        "-n",
        "--",
        "true",
    ]);
    assert_eq!(code, 75, "a writer got in beside readers: {out}{err}");
    let (code, out, err) = common::fencelock(&["inspect", "--backend", &url, "catalog"]);
    assert_eq!(code, 0, "{out}{err}");
    let phase = common::inspect_row(&out, "readers").unwrap_or_default();
    assert!(
        phase.starts_with(&format!("2 sharing token {a} ")),
        "inspect does not show both readers: {out}"
    );
    for child in readers {
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    }
    let (code, out, err) = common::fencelock(&[
        "run",
        "--backend",
        &url,
        "--key",
        "catalog",
        "-n",
        "--",
        "sh",
        "-c",
        "echo \"$FENCELOCK_TOKEN\"",
    ]);
    assert_eq!(code, 0, "the readers left the key held: {out}{err}");
    let writer: u64 = out.trim().parse().unwrap();
    assert!(
        writer > a.parse().unwrap(),
        "writer token {writer} after read phase {a}"
    );
}
