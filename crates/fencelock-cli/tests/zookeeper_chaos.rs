//! `fencelock chaos` end to end on a three-member ZooKeeper ensemble this test spawns (from the
//! Debian package `zookeeper`: run scripts/test-deps; a missing install fails the test saying
//! so). Timeouts are generous: the test machine runs at a load of 8 to 10.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fencelock_testkit::zookeeper::ZkServer;
use serde_json::Value;

/// Runs `fencelock chaos ARGS --json`, returning the exit code, the report and stderr.
fn chaos(args: &[&str]) -> (i32, Option<Value>, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fencelock"))
        .env_remove("FENCELOCK_BACKEND")
        .arg("chaos")
        .args(args)
        .arg("--json")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the fencelock binary runs");
    let mut stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stdout.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("fencelock chaos {args:?} did not finish within 300s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = out.join().unwrap();
    let err = err.join().unwrap();
    let report = serde_json::from_str(out.trim()).ok();
    (status.code().unwrap_or(-1), report, err)
}

// Catches: a ZooKeeper lock or storage that lets a paused holder (its lease lapsed on the
// leader's clock, a contender took the lock) or a partitioned one (its connection delayed,
// swallowed or reset) write over a newer holder's update: a violation or a lost update in the
// fenced run. Catches as well a run whose faults never bit (none injected, no paused holder
// refused) and a harness whose negative control cannot lose updates, either of which would
// make the 0 violations meaningless.
#[test]
fn zookeeper_three_members_survive_pauses_and_partitions() {
    let ensemble = ZkServer::spawn_ensemble(3);
    let url = ensemble.url();
    let (code, report, err) = chaos(&[
        "--backend",
        &url,
        "--faults",
        "pause,partition",
        "--workers",
        "4",
        "--duration",
        "10s",
        "--control-duration",
        "6s",
    ]);
    let tail: String = err.lines().rev().take(15).collect::<Vec<_>>().join("\n");
    let report = report.unwrap_or_else(|| panic!("no JSON report (exit {code}); stderr:\n{tail}"));
    assert_eq!(code, 0, "exit {code}\nreport: {report:#}\nstderr:\n{tail}");
    assert_eq!(report["outcome"], "pass", "{report:#}");
    let backend = report["backend"].as_str().unwrap_or_default();
    assert!(backend.starts_with("zookeeper://"), "{report:#}");
    let fenced = &report["fenced"];
    let control = &report["control"];
    assert_eq!(fenced["violations"], 0, "{report:#}");
    assert_eq!(fenced["lost_updates"], 0, "{report:#}");
    // The unfenced negative control: the same faults lose updates without the fence.
    assert!(control["lost_updates"].as_u64().unwrap() > 0, "{report:#}");
    let admitted = fenced["writes"]["admitted"].as_u64().unwrap();
    assert!(admitted > 0, "{report:#}");
    // Writes with an unknown outcome may have landed too, so the final value can only be larger.
    assert!(
        fenced["final_value"].as_u64().unwrap() >= admitted,
        "{report:#}"
    );
    let faults = &fenced["faults"];
    assert!(faults["pause"].as_u64().unwrap() > 0, "{report:#}");
    let partitions: u64 = ["partition_delay", "partition_blackhole", "partition_reset"]
        .iter()
        .map(|k| faults[k].as_u64().unwrap())
        .sum();
    assert!(partitions > 0, "no partition injected: {report:#}");
    // The pause fault must bite: some paused holder came back to a refused write.
    assert!(
        faults["paused_writes_refused"].as_u64().unwrap() > 0,
        "{report:#}"
    );
    drop(ensemble);
}
