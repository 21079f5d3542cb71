//! The `fencelock-file` binary end to end: `run`, `bench` and `chaos` on `lockdir://`, each
//! reaching the backend only through the scheme the binary registers.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// The binary, with no `FENCELOCK_BACKEND` inherited from the test's environment.
fn binary() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fencelock-file"));
    command.env_remove("FENCELOCK_BACKEND");
    command
}

fn run(args: &[&str]) -> Output {
    binary().args(args).output().expect("the binary runs")
}

fn explain(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn spec(dir: &Path) -> String {
    format!("lockdir://{}", dir.display())
}

/// Every file below `dir`, at any depth.
fn files_below(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    for entry in entries {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(files_below(&path));
        } else {
            found.push(path.display().to_string());
        }
    }
    found
}

#[test]
fn concurrent_runs_never_overlap_and_tokens_increase() {
    let temp = tempfile::tempdir().unwrap();
    let spec = spec(&temp.path().join("locks"));
    let log = temp.path().join("sections.log");
    // Each section logs its start and end around a pause long enough for the other run to
    // try and wait; interleaved lines would show an overlap.
    let script = format!(
        "echo \"start $FENCELOCK_TOKEN\" >> {log}; sleep 0.5; echo \"end $FENCELOCK_TOKEN\" >> {log}",
        log = log.display()
    );
    let runs: Vec<_> = (0..2)
        .map(|_| {
            let (spec, script) = (spec.clone(), script.clone());
            std::thread::spawn(move || {
                run(&[
                    "run",
                    "--backend",
                    &spec,
                    "--key",
                    "k",
                    "--wait",
                    "60s",
                    "--ttl",
                    "5s",
                    "--",
                    "sh",
                    "-c",
                    &script,
                ])
            })
        })
        .collect();
    for handle in runs {
        let out = handle.join().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    let mut last = 0u64;
    for pair in lines.chunks(2) {
        let start = pair[0]
            .strip_prefix("start ")
            .unwrap_or_else(|| panic!("overlap:\n{text}"));
        let end = pair[1]
            .strip_prefix("end ")
            .unwrap_or_else(|| panic!("overlap:\n{text}"));
        assert_eq!(start, end, "sections interleaved:\n{text}");
        let token: u64 = start.parse().unwrap();
        assert!(
            token > last,
            "the second run's token is not greater:\n{text}"
        );
        last = token;
    }
}

#[test]
fn run_reports_a_missing_or_bad_directory() {
    let out = run(&[
        "run",
        "--backend",
        "lockdir://relative/x",
        "--key",
        "k",
        "--",
        "true",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("absolute"),
        "{}",
        explain(&out)
    );
    let temp = tempfile::tempdir().unwrap();
    let file = temp.path().join("a-file");
    std::fs::write(&file, b"not a directory").unwrap();
    let out = run(&["run", "--backend", &spec(&file), "--key", "k", "--", "true"]);
    assert_eq!(out.status.code(), Some(1), "{}", explain(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("unavailable"),
        "{}",
        explain(&out)
    );
}

#[test]
fn bench_prints_its_table_against_the_baseline_and_cleans_up() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("locks");
    let out = run(&[
        "bench",
        "--backend",
        &spec(&dir),
        "--duration",
        "50ms",
        "--concurrency",
        "4",
        "--keys",
        "16",
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", explain(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    let header = text
        .lines()
        .find(|l| l.starts_with("scenario"))
        .expect("a header line");
    for column in ["subject", "p50", "p99", "ops/s", "ratio"] {
        assert!(header.contains(column), "{text}");
    }
    for subject in [
        "fencelock lockdir",
        "raw open(O_EXCL) + unlink",
        "raw stat",
        "raw write",
    ] {
        assert!(text.contains(subject), "{subject} missing:\n{text}");
    }
    assert!(
        text.lines().any(|l| l.trim_end().ends_with("baseline")),
        "{text}"
    );
    // The kit's cleanup and the baseline's close leave nothing of the run behind.
    assert!(dir.join("locks").is_dir());
    assert_eq!(
        files_below(&dir),
        Vec::<String>::new(),
        "files left after the run"
    );
}

#[test]
fn chaos_with_pauses_passes_and_its_control_loses_updates() {
    let temp = tempfile::tempdir().unwrap();
    let out = run(&[
        "chaos",
        "--backend",
        &spec(&temp.path().join("locks")),
        "--faults",
        "pause",
        "--workers",
        "4",
        "--duration",
        "5s",
        "--json",
    ]);
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|_| panic!("no JSON report: {}", explain(&out)));
    assert_eq!(out.status.code(), Some(0), "{report:#}");
    assert_eq!(report["outcome"], "pass", "{report:#}");
    let (fenced, control) = (&report["fenced"], &report["control"]);
    assert_eq!(fenced["violations"], 0, "{report:#}");
    assert_eq!(fenced["lost_updates"], 0, "{report:#}");
    assert!(
        fenced["writes"]["admitted"].as_u64().unwrap() > 0,
        "{report:#}"
    );
    assert!(
        fenced["faults"]["pause"].as_u64().unwrap() > 0,
        "{report:#}"
    );
    assert!(
        fenced["faults"]["paused_writes_refused"].as_u64().unwrap() > 0,
        "no paused holder was fenced out: {report:#}"
    );
    assert!(control["lost_updates"].as_u64().unwrap() > 0, "{report:#}");
}

/// A fault that cannot be injected is refused before the run, never reported as passed: a
/// file backend names no server to put a fault proxy in front of, so `partition` is refused
/// with the reason (before, the run injected 0 partitions and said PASS).
#[test]
fn chaos_refuses_a_partition_it_cannot_inject() {
    let temp = tempfile::tempdir().unwrap();
    let out = run(&[
        "chaos",
        "--backend",
        &spec(&temp.path().join("locks")),
        "--faults",
        "pause,partition",
        "--workers",
        "2",
        "--duration",
        "2s",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{}", explain(&out));
    assert!(stderr.contains("partition"), "{stderr}");
    assert!(stderr.contains("names none"), "{stderr}");
    assert!(
        !String::from_utf8_lossy(&out.stdout).contains("PASS"),
        "{}",
        explain(&out)
    );
}
