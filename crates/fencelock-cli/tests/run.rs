//! `fencelock run` with real child processes, against real Redis and PostgreSQL servers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fencelock_testkit::postgres::PgSchema;
use fencelock_testkit::redis::{RedisServer, free_port};

fn fencelock() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fencelock"))
}

fn run(args: &[&str]) -> Output {
    fencelock()
        .args(args)
        .output()
        .expect("the fencelock binary runs")
}

fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

fn explain(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn exit_codes_pass_through() {
    let out = run(&["run", "--key", "k", "--", "sh", "-c", "exit 3"]);
    assert_eq!(code(&out), 3, "{}", explain(&out));
    let out = run(&["run", "--key", "k", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(code(&out), 128 + 9, "{}", explain(&out));
    let out = run(&["run", "--key", "k", "--", "/nonexistent/command"]);
    assert_eq!(code(&out), 127, "{}", explain(&out));
    let out = run(&[
        "run",
        "--key",
        "k",
        "--",
        "sh",
        "-c",
        "test \"$FENCELOCK_KEY\" = k && test \"$FENCELOCK_TOKEN\" -ge 1 && test ${#FENCELOCK_OWNER} -eq 32",
    ]);
    assert_eq!(code(&out), 0, "environment not passed: {}", explain(&out));
}

#[test]
fn bad_input_gives_clear_errors() {
    let out = run(&["run", "--backend", "bogus", "--key", "k", "--", "true"]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    let out = run(&["run", "--key", "", "--", "true"]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid key"));
    let out = run(&["run", "--key", "k"]);
    assert_eq!(
        code(&out),
        2,
        "a missing command is a usage error: {}",
        explain(&out)
    );
    let dead = format!("redis://127.0.0.1:{}", free_port().unwrap());
    let out = run(&["run", "--backend", &dead, "--key", "k", "--", "true"]);
    assert_eq!(code(&out), 1, "{}", explain(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unavailable"),
        "{}",
        explain(&out)
    );
}

/// Four concurrent `fencelock run`s of three rounds each: the file shows every critical
/// section whole (start then end of the same run), with tokens increasing.
fn never_overlap(spec: &str, dir: &Path) {
    let log = dir.join("sections.log");
    let script = format!(
        "echo \"start $FENCELOCK_TOKEN\" >> {log}; sleep 0.2; echo \"end $FENCELOCK_TOKEN\" >> {log}",
        log = log.display()
    );
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (spec, script) = (spec.to_owned(), script.clone());
            std::thread::spawn(move || {
                for _ in 0..3 {
                    let out = run(&[
                        "run",
                        "--backend",
                        &spec,
                        "--key",
                        "overlap",
                        "--wait",
                        "60s",
                        "--ttl",
                        "5s",
                        "--",
                        "sh",
                        "-c",
                        &script,
                    ]);
                    assert_eq!(code(&out), 0, "{}", explain(&out));
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().unwrap();
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 24, "{text}");
    let mut last_token = 0u64;
    for pair in lines.chunks(2) {
        let start = pair[0]
            .strip_prefix("start ")
            .unwrap_or_else(|| panic!("overlap:\n{text}"));
        let end = pair[1]
            .strip_prefix("end ")
            .unwrap_or_else(|| panic!("overlap:\n{text}"));
        assert_eq!(start, end, "sections interleaved:\n{text}");
        let token: u64 = start.parse().unwrap();
        assert!(token > last_token, "tokens went back:\n{text}");
        last_token = token;
    }
}

#[test]
fn runs_never_overlap_on_redis() {
    let server = RedisServer::spawn();
    let dir = tempfile::tempdir().unwrap();
    never_overlap(&server.url(), dir.path());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_never_overlap_on_postgres() {
    let schema = PgSchema::create().await;
    let dir = tempfile::tempdir().unwrap();
    for backend in ["lease", "advisory"] {
        let spec = format!(
            "{}?schema={}&backend={backend}",
            schema.url(),
            schema.name()
        );
        let (spec, path) = (spec.clone(), dir.path().join(backend));
        std::fs::create_dir(&path).unwrap();
        tokio::task::spawn_blocking(move || never_overlap(&spec, &path))
            .await
            .unwrap();
    }
    schema.cleanup().await;
}

#[test]
fn held_lock_is_exit_75() {
    let server = RedisServer::spawn();
    let url = server.url();
    let mut holder = fencelock()
        .args([
            "run",
            "--backend",
            &url,
            "--key",
            "busy",
            "--",
            "sleep",
            "5",
        ])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_secs(1));
    let out = run(&[
        "run",
        "--backend",
        &url,
        "--key",
        "busy",
        "--wait",
        "200ms",
        "--",
        "true",
    ]);
    assert_eq!(code(&out), 75, "{}", explain(&out));
    assert!(holder.wait().unwrap().success());
}

/// Waits until `path` contains `text`.
fn wait_for(path: &Path, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(path)
        .unwrap_or_default()
        .contains(text)
    {
        assert!(
            Instant::now() < deadline,
            "{text:?} never appeared in {}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The server goes away while the command runs: the lease cannot be renewed, so the command
/// gets SIGTERM (and SIGKILL if it ignores it) and fencelock exits 76.
#[test]
fn child_outliving_a_lost_lease_is_signalled() {
    let dir = tempfile::tempdir().unwrap();
    for (name, script, grace) in [
        (
            "polite",
            "trap 'echo TERM >> {log}; exit 0' TERM; echo started >> {log}; while :; do sleep 0.1; done",
            "5s",
        ),
        (
            "stubborn",
            "trap '' TERM; echo started >> {log}; while :; do sleep 0.1; done",
            "1s",
        ),
    ] {
        let server = RedisServer::spawn();
        let log = dir.path().join(name);
        let script = script.replace("{log}", &log.display().to_string());
        let child = fencelock()
            .args([
                "run",
                "--backend",
                &server.url(),
                "--key",
                "lost",
                "--ttl",
                "1s",
                "--grace",
                grace,
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(&log, "started");
        server.kill();
        let out = child.wait_with_output().unwrap();
        assert_eq!(code(&out), 76, "{name}: {}", explain(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("lost"), "{name}: {stderr}");
        if name == "polite" {
            wait_for(&log, "TERM");
        } else {
            assert!(stderr.contains("SIGKILL"), "{name}: {stderr}");
        }
    }
}
