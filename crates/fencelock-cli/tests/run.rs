//! `fencelock run` with real child processes, against real Redis and PostgreSQL servers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fencelock::redis::servers::RedisServer;
use fencelock_servers::port::free_port;
use fencelock_testkit::postgres::PgSchema;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use common::{code, explain};

fn fencelock() -> Command {
    common::command()
}

fn run(args: &[&str]) -> Output {
    fencelock()
        .args(args)
        .output()
        .expect("the fencelock binary runs")
}

#[test]
fn exit_codes_pass_through() {
    let server = RedisServer::spawn();
    let url = server.url();
    let run_k = |rest: &[&str]| {
        let mut args = vec!["run", "--backend", &url, "--key", "k", "--"];
        args.extend(rest);
        run(&args)
    };
    let out = run_k(&["sh", "-c", "exit 3"]);
    assert_eq!(code(&out), 3, "{}", explain(&out));
    let out = run_k(&["sh", "-c", "kill -9 $$"]);
    assert_eq!(code(&out), 128 + 9, "{}", explain(&out));
    let out = run_k(&["/nonexistent/command"]);
    assert_eq!(code(&out), 127, "{}", explain(&out));
    let out = run_k(&[
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
    let shared = "redis://127.0.0.1:1";
    let out = run(&["run", "--backend", shared, "--key", "", "--", "true"]);
    assert_eq!(code(&out), 2, "{}", explain(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid key"));
    let out = run(&["run", "--backend", shared, "--key", "k"]);
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
    let dir = tempfile::tempdir().unwrap();
    // A schema serves one lock mechanism: one schema per backend.
    for backend in ["lease", "advisory"] {
        let schema = PgSchema::create().await;
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
        schema.cleanup().await;
    }
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

/// The first job of the signal tests: a shell that runs, in the foreground, a script that
/// records which signal it got, takes a second to clean up, and exits. The script is a
/// grandchild of fencelock, so only a signal sent to the whole process group reaches it, and
/// fencelock must wait for more than its own child. Its loop ends by itself after a minute,
/// so a job that never gets the signal does not outlive the test.
fn first_job(dir: &Path, log: &Path) -> String {
    let script = dir.join("job.sh");
    let mut text = String::from("log=\"$1\"\n");
    for name in ["HUP", "INT", "TERM"] {
        text.push_str(&format!(
            "trap 'echo got-{name} >> \"$log\"; sleep 1; echo first-exit >> \"$log\"; exit 0' {name}\n"
        ));
    }
    text.push_str(
        "echo first-start >> \"$log\"\n\
         i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done\n",
    );
    std::fs::write(&script, text).unwrap();
    format!("sh {} {}; true", script.display(), log.display())
}

/// A signal to `fencelock run` reaches the job; the job finishes its clean-up before anyone
/// else gets the lock, and the lock is released as soon as the job is gone (the second run
/// waits 30 s for a lock whose ttl is 60 s, so it only gets it through a release).
fn signal_is_passed_on_and_the_lock_released_after_the_command(signal: Signal) {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();
    let job = first_job(dir.path(), &log);
    let first = fencelock()
        .args(["run", "--backend", &url, "--key", "job", "--ttl", "60s"])
        .args(["--grace", "20s", "--", "sh", "-c", &job])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&log, "first-start");
    let second_job = format!("echo second-start >> {}", log.display());
    let second = fencelock()
        .args(["run", "--backend", &url, "--key", "job", "--wait", "30s"])
        .args(["--", "sh", "-c", &second_job])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    kill(Pid::from_raw(first.id() as i32), signal).unwrap();
    let first = first.wait_with_output().unwrap();
    assert_eq!(
        first.status.code(),
        Some(128 + signal as i32),
        "{signal}: log:\n{}\n{}",
        log_text(),
        explain(&first)
    );
    let second = second.wait_with_output().unwrap();
    assert_eq!(
        code(&second),
        0,
        "{signal}: log:\n{}\n{}",
        log_text(),
        explain(&second)
    );
    let name = signal.as_str().trim_start_matches("SIG");
    let got = format!("got-{name}");
    let lines: Vec<String> = log_text().lines().map(str::to_owned).collect();
    assert_eq!(
        lines,
        ["first-start", got.as_str(), "first-exit", "second-start"],
        "{signal}"
    );
}

#[test]
fn sigterm_is_passed_on_and_the_lock_released_after_the_command() {
    signal_is_passed_on_and_the_lock_released_after_the_command(Signal::SIGTERM);
}

#[test]
fn sighup_is_passed_on_and_the_lock_released_after_the_command() {
    signal_is_passed_on_and_the_lock_released_after_the_command(Signal::SIGHUP);
}

#[test]
fn sigint_is_passed_on_and_the_lock_released_after_the_command() {
    signal_is_passed_on_and_the_lock_released_after_the_command(Signal::SIGINT);
}

/// A command that ignores the signal is killed after the grace period, and the lock is still
/// released at once (the next run with `--wait 0s` gets it).
#[test]
fn a_command_ignoring_the_signal_is_killed_after_the_grace_period() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let job = format!(
        "trap '' TERM; echo started >> {}; i=0; while [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done",
        log.display()
    );
    let first = fencelock()
        .args([
            "run",
            "--backend",
            &url,
            "--key",
            "stubborn",
            "--ttl",
            "60s",
        ])
        .args(["--grace", "500ms", "--", "sh", "-c", &job])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&log, "started");
    kill(Pid::from_raw(first.id() as i32), Signal::SIGTERM).unwrap();
    let out = first.wait_with_output().unwrap();
    assert_eq!(code(&out), 128 + 15, "{}", explain(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("SIGKILL"),
        "{}",
        explain(&out)
    );
    let next = run(&["run", "--backend", &url, "--key", "stubborn", "--", "true"]);
    assert_eq!(code(&next), 0, "{}", explain(&next));
}

/// `--wait` bounds connecting too: against servers that accept and never answer, the run
/// ends shortly after the wait instead of after the drivers' own connect time-outs (5 to 10 s).
#[test]
fn wait_bounds_connecting_too() {
    let ports = common::silent_servers(3);
    let specs = [
        format!("redis://127.0.0.1:{}", ports[0]),
        format!("postgres://postgres@127.0.0.1:{}/test", ports[1]),
        format!(
            "redlock://127.0.0.1:{},127.0.0.1:{},127.0.0.1:{}",
            ports[0], ports[1], ports[2]
        ),
    ];
    for spec in &specs {
        let started = Instant::now();
        let out = run(&[
            "run",
            "--backend",
            spec,
            "--key",
            "k",
            "--wait",
            "500ms",
            "--",
            "true",
        ]);
        let took = started.elapsed();
        assert_eq!(code(&out), 1, "{spec}: {}", explain(&out));
        assert!(
            took < Duration::from_secs(4),
            "{spec}: took {took:?} with --wait 500ms; {}",
            explain(&out)
        );
    }
}

/// `--wait` covers connecting to a server that is not back yet (a restart): the run keeps
/// trying and runs its command once the server answers. Fails when a refused connection ends
/// the run at once (exit 1 within milliseconds, most of the wait unspent).
#[test]
fn wait_retries_a_refused_connection() {
    let server = RedisServer::spawn();
    server.kill();
    let child = fencelock()
        .args([
            "run",
            "--backend",
            &server.url(),
            "--key",
            "restarting",
            "--wait",
            "30s",
            "--",
            "true",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the fencelock binary runs");
    std::thread::sleep(Duration::from_millis(1500));
    server.restart();
    let out = child.wait_with_output().unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
}
