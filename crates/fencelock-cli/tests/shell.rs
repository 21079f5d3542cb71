//! What shell users and scripts rely on: flock(1)'s spellings (`-n`, `-w`, `-E`, `-c`, `-q`,
//! `-v`), options after the key, the grant as JSON (`run --json`, `--grant-file`),
//! `inspect --json` and its capabilities in words, aligned text, and completion scripts.
//! Against a spawned Redis.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use common::fencelock;
use fencelock::redis::servers::RedisServer;
use serde_json::Value;

/// `fencelock run --backend URL --key KEY` followed by `rest`.
fn run_on(url: &str, key: &str, rest: &[&str]) -> (i32, String, String) {
    let mut args = vec!["run", "--backend", url, "--key", key];
    args.extend(rest);
    fencelock(&args)
}

/// A `fencelock run` that holds `key` until dropped; the holder's token and owner, as its
/// command saw them.
struct Holder {
    child: Child,
    token: u64,
    owner: String,
}

impl Holder {
    fn start(url: &str, key: &str, dir: &Path) -> Holder {
        let file = dir.join(format!("{key}.holder"));
        let job = format!(
            "echo \"$FENCELOCK_TOKEN $FENCELOCK_OWNER\" > {}.tmp && mv {0}.tmp {0} && sleep 60",
            file.display()
        );
        let child = common::command()
            .args(["run", "--backend", url, "--key", key, "--grace", "1s"])
            .args(["--", "sh", "-c", &job])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        let text = loop {
            if let Ok(text) = std::fs::read_to_string(&file) {
                break text;
            }
            assert!(Instant::now() < deadline, "the holder never got {key}");
            std::thread::sleep(Duration::from_millis(20));
        };
        let (token, owner) = text.trim().split_once(' ').unwrap();
        Holder {
            child,
            token: token.parse().unwrap(),
            owner: owner.to_owned(),
        }
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
    }
}

fn explain(code: i32, out: &str, err: &str) -> String {
    format!("exit {code}\nstdout:\n{out}\nstderr:\n{err}")
}

#[test]
fn options_after_the_key_are_options_and_the_command_starts_after_them() {
    let server = RedisServer::spawn();
    let url = server.url();
    let (code, out, err) = run_on(&url, "k", &["-q", "--", "true"]);
    assert_eq!(
        code,
        0,
        "-q was taken for the command: {}",
        explain(code, &out, &err)
    );
    let (code, out, err) = run_on(
        &url,
        "k",
        &["--ttl", "5s", "-v", "--", "sh", "-c", "exit 5"],
    );
    assert_eq!(code, 5, "{}", explain(code, &out, &err));
    // The first word that is not an option starts the command; its own options are its own.
    let (code, out, err) = run_on(&url, "k", &["sh", "-c", "echo $0-$1", "a", "-q"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "a--q\n"),
        "{}",
        explain(code, &out, &err)
    );
}

#[test]
fn nonblock_and_a_chosen_conflict_exit_code() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let holder = Holder::start(&url, "busy", dir.path());

    let (code, out, err) = run_on(&url, "busy", &["-n", "-E", "9", "--", "true"]);
    assert_eq!(code, 9, "{}", explain(code, &out, &err));
    assert!(
        err.contains("held by another owner"),
        "{}",
        explain(code, &out, &err)
    );
    let (code, out, err) = run_on(&url, "busy", &["--nonblock", "--", "true"]);
    assert_eq!(
        code,
        75,
        "the default stays 75: {}",
        explain(code, &out, &err)
    );
    let (code, out, err) = run_on(&url, "busy", &["--conflict-exit-code", "1", "--", "true"]);
    assert_eq!(code, 1, "{}", explain(code, &out, &err));
    // -E is about the lock only: a command's own code passes through.
    let (code, out, err) = run_on(&url, "free", &["-E", "9", "--", "sh", "-c", "exit 3"]);
    assert_eq!(code, 3, "{}", explain(code, &out, &err));
    // -n and --wait contradict each other.
    let (code, out, err) = run_on(&url, "busy", &["-n", "-w", "1", "--", "true"]);
    assert_eq!(code, 2, "{}", explain(code, &out, &err));
    drop(holder);
}

#[test]
fn wait_takes_flock_seconds_and_quiet_says_nothing() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let holder = Holder::start(&url, "busy", dir.path());

    let started = Instant::now();
    let (code, out, err) = run_on(&url, "busy", &["-w", "1", "-q", "--", "true"]);
    let waited = started.elapsed();
    assert_eq!(code, 75, "{}", explain(code, &out, &err));
    assert!(err.is_empty(), "-q printed: {}", explain(code, &out, &err));
    assert!(out.is_empty(), "{}", explain(code, &out, &err));
    assert!(
        waited >= Duration::from_millis(900),
        "-w 1 waited {waited:?}"
    );
    let (code, out, err) = run_on(&url, "busy", &["--wait", "300ms", "-q", "--", "true"]);
    assert_eq!(
        (code, err.as_str()),
        (75, ""),
        "{}",
        explain(code, &out, &err)
    );
    // -q and -v contradict each other.
    let (code, out, err) = run_on(&url, "free", &["-q", "-v", "--", "true"]);
    assert_eq!(code, 2, "{}", explain(code, &out, &err));
    drop(holder);
}

#[test]
fn elect_takes_the_same_flock_spellings() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("leader");
    let job = format!(
        "echo \"$FENCELOCK_TERM\" > {}.tmp && mv {0}.tmp {0} && sleep 60",
        file.display()
    );
    let mut leader = common::command()
        .args([
            "elect",
            "--backend",
            &url,
            "--key",
            "sched",
            "--grace",
            "1s",
        ])
        .args(["-c", &job])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !file.exists() {
        assert!(Instant::now() < deadline, "the first campaign never won");
        std::thread::sleep(Duration::from_millis(20));
    }
    let elect = |rest: &[&str]| {
        let mut args = vec!["elect", "--backend", url.as_str(), "--key", "sched"];
        args.extend(rest);
        fencelock(&args)
    };
    // -n: one try; -E: the code when not elected; -q: nothing said about it.
    let (code, out, err) = elect(&["-n", "-q", "-E", "9", "-c", "true"]);
    assert_eq!(
        (code, err.as_str()),
        (9, ""),
        "{}",
        explain(code, &out, &err)
    );
    let (code, out, err) = elect(&["-n", "--", "true"]);
    assert_eq!(code, 75, "{}", explain(code, &out, &err));
    assert!(err.contains("not elected"), "{}", explain(code, &out, &err));
    // -w takes flock's bare seconds.
    let started = Instant::now();
    let (code, out, err) = elect(&["-w", "1", "-q", "--", "true"]);
    assert_eq!(code, 75, "{}", explain(code, &out, &err));
    assert!(started.elapsed() >= Duration::from_millis(900));
    // -n and -w contradict each other, as do -q and -v.
    let (code, out, err) = elect(&["-n", "-w", "1", "--", "true"]);
    assert_eq!(code, 2, "{}", explain(code, &out, &err));
    let (code, out, err) = elect(&["-q", "-v", "--", "true"]);
    assert_eq!(code, 2, "{}", explain(code, &out, &err));

    let pid = nix::unistd::Pid::from_raw(leader.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    leader.wait().unwrap();
    // -v says when it resigns; the command's own code passes through.
    let (code, out, err) = elect(&["-n", "-v", "-E", "9", "--", "sh", "-c", "exit 4"]);
    assert_eq!(code, 4, "{}", explain(code, &out, &err));
    assert!(err.contains("resigned"), "{}", explain(code, &out, &err));
}

#[test]
fn c_runs_a_shell_string_with_the_grant_in_its_environment() {
    let server = RedisServer::spawn();
    let url = server.url();
    let (code, out, err) = run_on(
        &url,
        "job",
        &[
            "-c",
            "echo \"$FENCELOCK_KEY:$FENCELOCK_TOKEN\" | tr a-z A-Z; exit 4",
        ],
    );
    assert_eq!(code, 4, "{}", explain(code, &out, &err));
    assert_eq!(out, "JOB:1\n", "{}", explain(code, &out, &err));
    // A string and a command at once is refused.
    let (code, out, err) = run_on(&url, "job", &["-c", "true", "--", "true"]);
    assert_eq!(code, 2, "{}", explain(code, &out, &err));
}

#[test]
fn verbose_says_when_the_lock_is_obtained_and_released() {
    let server = RedisServer::spawn();
    let url = server.url();
    let (code, out, err) = run_on(&url, "job", &["-v", "--", "sh", "-c", "echo ran"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "ran\n"),
        "{}",
        explain(code, &out, &err)
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{}", explain(code, &out, &err));
    assert!(
        lines[0].starts_with("fencelock: obtained \"job\" with token 1 (owner "),
        "{}",
        explain(code, &out, &err)
    );
    assert!(
        lines[1].contains("released \"job\"") && lines[1].ends_with(" 0"),
        "{}",
        explain(code, &out, &err)
    );
}

fn parse_grant(line: &str) -> Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
}

#[test]
fn run_json_puts_the_grant_first_on_stderr_and_leaves_stdout_to_the_command() {
    let server = RedisServer::spawn();
    let url = server.url();
    let job = "echo out; echo err >&2; echo \"$FENCELOCK_TOKEN $FENCELOCK_OWNER\"";
    let (code, out, err) = run_on(&url, "job", &["--json", "--", "sh", "-c", job]);
    assert_eq!(code, 0, "{}", explain(code, &out, &err));
    let mut out_lines = out.lines();
    assert_eq!(
        out_lines.next(),
        Some("out"),
        "{}",
        explain(code, &out, &err)
    );
    let (token, owner) = out_lines.next().unwrap().split_once(' ').unwrap();
    let err_lines: Vec<&str> = err.lines().collect();
    assert_eq!(err_lines.len(), 2, "{}", explain(code, &out, &err));
    let grant = parse_grant(err_lines[0]);
    assert_eq!(err_lines[1], "err");
    assert_eq!(grant["key"], "job", "{grant}");
    assert_eq!(
        grant["token"].as_u64(),
        Some(token.parse().unwrap()),
        "{grant}"
    );
    assert_eq!(grant["owner"], owner, "{grant}");
    assert_eq!(grant["backend"], url.as_str(), "{grant}");

    // A permit adds its slot.
    let (code, out, err) = run_on(&url, "pool", &["--permits", "2", "--json", "--", "true"]);
    assert_eq!(code, 0, "{}", explain(code, &out, &err));
    let grant = parse_grant(err.lines().next().unwrap());
    let slot = grant["slot"].as_u64().unwrap();
    assert!(slot < 2, "{grant}");
    assert_eq!(
        grant["key"],
        format!("pool/permit/{slot}").as_str(),
        "{grant}"
    );
}

#[test]
fn grant_file_holds_the_grant_as_one_json_line() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("grant.json");
    let seen = dir.path().join("seen");
    // The file is there before the command starts: the command itself can read it.
    let job = format!("cat {} > {}", path.display(), seen.display());
    let grant_file = path.to_str().unwrap();
    for _ in 0..2 {
        let (code, out, err) = run_on(&url, "deploy", &["--grant-file", grant_file, "-c", &job]);
        assert_eq!(code, 0, "{}", explain(code, &out, &err));
        assert!(
            out.is_empty() && err.is_empty(),
            "{}",
            explain(code, &out, &err)
        );
    }
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(text, std::fs::read_to_string(&seen).unwrap());
    assert_eq!(
        text.lines().count(),
        1,
        "the file is replaced, not appended to: {text}"
    );
    let grant = parse_grant(text.trim_end());
    assert_eq!(grant["key"], "deploy", "{grant}");
    assert_eq!(grant["token"].as_u64(), Some(2), "{grant}");
    assert_eq!(grant["owner"].as_str().map(str::len), Some(32), "{grant}");
}

#[test]
fn inspect_json_has_the_holder_token_and_capabilities_in_words() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let holder = Holder::start(&url, "report", dir.path());

    let (code, out, err) = fencelock(&["inspect", "--backend", &url, "--json", "report"]);
    assert_eq!(code, 0, "{}", explain(code, &out, &err));
    assert_eq!(out.lines().count(), 1, "one JSON line: {out}");
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["key"], "report", "{shown}");
    assert_eq!(shown["holder"]["owner"], holder.owner.as_str(), "{shown}");
    assert_eq!(
        shown["holder"]["token"].as_u64(),
        Some(holder.token),
        "{shown}"
    );
    assert!(
        shown["holder"]["remaining_ms"].as_u64().unwrap() > 0,
        "{shown}"
    );
    assert_eq!(shown["last_token"].as_u64(), Some(holder.token), "{shown}");
    let caps = &shown["capabilities"];
    assert_eq!(caps["tokens"], "durable-if-server-persists", "{shown}");
    assert_eq!(caps["time_authority"], "server", "{shown}");
    assert_eq!(caps["wake_up"], "notify", "{shown}");
    assert_eq!(caps["locks_survive_restart"], false, "{shown}");
    assert_eq!(caps["fair"], true, "{shown}");
    assert_eq!(caps["atomic_sets"], true, "{shown}");
    let kinds: Vec<&str> = caps["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kind| kind.as_str().unwrap())
        .collect();
    assert!(
        kinds.contains(&"exclusive") && kinds.contains(&"election"),
        "{shown}"
    );
    drop(holder);

    let (code, out, err) = fencelock(&["inspect", "--backend", &url, "--json", "report"]);
    assert_eq!(code, 0, "{}", explain(code, &out, &err));
    let shown: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(shown["holder"], Value::Null, "released: {shown}");
}

#[test]
fn inspect_text_says_capabilities_in_words_in_one_column() {
    let server = RedisServer::spawn();
    let url = server.url();
    let (code, out, err) = fencelock(&["inspect", "--backend", &url, "--permits", "2", "k"]);
    assert_eq!(code, 0, "{}", explain(code, &out, &err));
    for debug in [
        "DurableIfServerPersists",
        "server_persists",
        "Server",
        "Notify",
        "{",
    ] {
        assert!(!out.contains(debug), "Rust debug output {debug:?}:\n{out}");
    }
    assert!(
        out.contains("durable if the server persists its data"),
        "{out}"
    );
    // Every value starts in the same column, the labels' widths whatever.
    let columns: Vec<usize> = out
        .lines()
        .filter(|line| line.trim() != "capabilities")
        .map(|line| {
            let label_end =
                line.trim_start().find("  ").unwrap() + (line.len() - line.trim_start().len());
            label_end + line[label_end..].len() - line[label_end..].trim_start().len()
        })
        .collect();
    assert!(columns.len() >= 10, "{out}");
    assert!(
        columns.iter().all(|c| *c == columns[0]),
        "{columns:?}\n{out}"
    );
}

#[test]
fn completions_for_each_shell_name_the_subcommands() {
    for shell in ["bash", "zsh", "fish"] {
        let (code, out, err) = fencelock(&["completions", shell]);
        assert_eq!(code, 0, "{shell}: {}", explain(code, &out, &err));
        for word in [
            "run",
            "inspect",
            "elect",
            "completions",
            "conflict-exit-code",
        ] {
            assert!(out.contains(word), "{shell}: no {word} in\n{out}");
        }
    }
    let (code, out, err) = fencelock(&["completions", "nosuchshell"]);
    assert_eq!(code, 2, "{}", explain(code, &out, &err));
}
