//! `fencelock chaos --report DIR --history FILE` on a spawned redis-server: the history file
//! and the report's history.jsonl hold every operation of both runs, and the page, opened in a
//! headless Chromium (Debian `chromium`, installed by scripts/test-deps), renders a time line
//! per worker. A missing redis-server or chromium fails the test; nothing is skipped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use fencelock_chaos::history::{self, OpKind, OpOutcome};
use fencelock_chaos::linearizability::{self, Linearizability};
use serde_json::Value;

const WORKERS: usize = 3;

/// Runs `command` to completion within `limit`, killing it past that. Its output is read
/// while it runs: a full pipe would stop it.
fn run_within(mut command: Command, limit: Duration, what: &str) -> Output {
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let _ = pipe.read_to_end(&mut bytes);
            bytes
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("{what} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    Output {
        status,
        stdout: stdout.join().unwrap(),
        stderr: stderr.join().unwrap(),
    }
}

fn chromium() -> PathBuf {
    let candidates = [PathBuf::from("/usr/bin/chromium")];
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("chromium"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    candidates
        .into_iter()
        .chain(on_path)
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "chromium is not installed: the chaos report test opens the page in a headless \
                 Chromium; run scripts/test-deps (Debian package `chromium`)"
            )
        })
}

/// Chromium, headless, with a profile of its own under `scratch`.
fn headless(scratch: &Path) -> Command {
    let mut command = Command::new(chromium());
    command.args([
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--hide-scrollbars",
        "--window-size=1600,1900",
    ]);
    command.arg(format!(
        "--user-data-dir={}",
        scratch.join("profile").display()
    ));
    command
}

fn history_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}")))
        .collect()
}

/// The `data-rendered-*` attribute the page's script puts on figure `id` once laid out.
fn rendered(dom: &str, id: &str, dimension: &str) -> u64 {
    let at = dom
        .find(&format!("id=\"{id}\""))
        .unwrap_or_else(|| panic!("no figure {id} in the page"));
    let tag_end = at + dom[at..].find('>').unwrap();
    let tag = &dom[at..tag_end];
    let key = format!("data-rendered-{dimension}=\"");
    let start = tag
        .find(&key)
        .unwrap_or_else(|| panic!("figure {id} was not laid out: {tag}"))
        + key.len();
    let digits: String = tag[start..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

#[test]
fn the_report_page_renders_a_time_line_per_worker_and_the_history_is_exported() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("report");
    let history = scratch.path().join("history.jsonl");
    let mut chaos = Command::new(env!("CARGO_BIN_EXE_fencelock"));
    chaos
        .env_remove("FENCELOCK_BACKEND")
        .args(["chaos", "--spawn", "redis", "--faults", "pause,kill"])
        .args([
            "--ttl",
            "100ms",
            "--work",
            "2ms",
            "--workers",
            &WORKERS.to_string(),
        ])
        .args(["--duration", "4s", "--control-duration", "3s", "--json"])
        .arg("--report")
        .arg(&dir)
        .arg("--history")
        .arg(&history);
    let out = run_within(chaos, Duration::from_secs(240), "fencelock chaos");
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code().unwrap_or(-1);
    // 4: the control lost nothing in so short a run; the page is still written.
    assert!(code == 0 || code == 4, "exit {code}\n{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        report["fenced"]["linearizability"]["verdict"], "linearizable",
        "{report:#}"
    );
    assert_eq!(
        report["control"]["linearizability"]["verdict"],
        "linearizable"
    );

    // The history: both runs, every line complete, the same in both places.
    let lines = history_lines(&history);
    assert_eq!(lines, history_lines(&dir.join("history.jsonl")));
    let admitted = report["fenced"]["writes"]["admitted"].as_u64().unwrap();
    let fenced_writes = lines
        .iter()
        .filter(|l| l["run"] == "fenced" && l["f"] == "write" && l["outcome"] == "ok")
        .count();
    assert_eq!(fenced_writes as u64, admitted);
    assert!(
        lines
            .iter()
            .any(|l| l["run"] == "control" && l["f"] == "peek")
    );
    assert!(lines.iter().any(|l| l["process"] == "final"));
    for line in &lines {
        let invoke = line["invoke_ns"].as_u64().unwrap();
        match line["complete_ns"].as_u64() {
            Some(complete) => assert!(complete >= invoke, "{line}"),
            None => assert_eq!(line["outcome"], "unknown", "{line}"),
        }
    }

    // The exported history, read back, passes the checker; made to admit a stale write or
    // to read a value never written, it fails it.
    let text = std::fs::read_to_string(&history).unwrap();
    let ops = history::read_jsonl(&text).unwrap();
    let budget = linearizability::DEFAULT_STATE_BUDGET;
    assert!(matches!(
        linearizability::check(&ops, budget),
        Linearizability::Linearizable { .. }
    ));
    let fenced_key = lines[0]["key"].as_str().unwrap();
    let admitted_writes: Vec<usize> = (0..ops.len())
        .filter(|&i| {
            let op = &ops[i];
            op.key == fenced_key && op.kind == OpKind::Write && op.outcome == OpOutcome::Ok
        })
        .collect();
    assert!(
        admitted_writes.len() >= 10,
        "too few admitted writes to tamper with"
    );
    let mut stale = ops.clone();
    let last = *admitted_writes.last().unwrap();
    stale[last].fence = stale[admitted_writes[0]].fence;
    let verdict = linearizability::check(&stale, budget);
    assert!(verdict.is_violation(), "{verdict}");
    let mut invented = ops.clone();
    let read = invented
        .iter_mut()
        .rfind(|op| op.key == fenced_key && op.kind == OpKind::Read && op.outcome == OpOutcome::Ok)
        .unwrap();
    read.value = Some(u64::MAX / 2);
    let verdict = linearizability::check(&invented, budget);
    assert!(verdict.is_violation(), "{verdict}");

    // The page, rendered by a real browser. It is self-contained: nothing to fetch.
    let page = dir.join("index.html");
    let html = std::fs::read_to_string(&page).unwrap();
    for fetches in ["src=", "href=", "@import", "url("] {
        assert!(
            !html.contains(fetches),
            "the page loads something ({fetches})"
        );
    }
    // The legend names faults by what the backend calls them: Redis has no session fault, so
    // no other backend's name for one shows.
    assert!(
        !html.contains("pg_terminate_backend"),
        "the legend names a fault this backend has not"
    );
    let mut dump = headless(scratch.path());
    dump.arg("--dump-dom")
        .arg(format!("file://{}", page.display()));
    let out = run_within(dump, Duration::from_secs(120), "chromium --dump-dom");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dom = String::from_utf8(out.stdout).unwrap();
    for id in ["timeline-fenced", "timeline-control"] {
        let width = rendered(&dom, id, "width");
        let height = rendered(&dom, id, "height");
        assert!(width >= 300 && height >= 100, "{id}: {width} x {height}");
    }
    assert!(rendered(&dom, "latency-fenced-write", "width") >= 300);
    let start = dom.find("id=\"timeline-fenced\"").unwrap();
    let end = dom[start..].find("</figure>").unwrap() + start;
    let timeline = &dom[start..end];
    let texts: Vec<&str> = timeline
        .split('>')
        .filter_map(|s| s.split('<').next())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    for lane in (0..WORKERS)
        .map(|w| format!("worker {w}"))
        .chain(["servers".into()])
    {
        assert!(
            texts.contains(&lane.as_str()),
            "no lane {lane:?} in the time line: {texts:?}"
        );
    }
    let leases = report["fenced"]["lock_cycles"].as_u64().unwrap();
    let rects = timeline.matches("<rect").count() as u64;
    assert!(rects >= leases, "{rects} rectangles for {leases} leases");
    assert!(
        dom.contains("fenced history: "),
        "no checker verdict on the page"
    );

    // And as pixels: a page with charts, not a blank one.
    let png = scratch.path().join("page.png");
    let mut shot = headless(scratch.path());
    shot.arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", page.display()));
    let out = run_within(shot, Duration::from_secs(120), "chromium --screenshot");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let bytes = std::fs::read(&png).unwrap();
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(
        bytes.len() > 50_000,
        "a {} byte screenshot looks blank",
        bytes.len()
    );
}
