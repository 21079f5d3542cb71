//! `fencelock chaos --workload composite` end to end: workers take overlapping sets of keys
//! with one `lock_all` and increment each member's counter under that member's fence. On
//! memory:// (worker threads, paused whole), on a redis-server the backend spawns (worker
//! processes, paused, killed and cut off) and on the Postgres server at FENCELOCK_PG_URL
//! (default postgres://postgres@127.0.0.1:5432/test, in a throwaway schema). A missing service
//! fails the test with a message; nothing is skipped.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Mutex;

use fencelock_testkit::postgres::PgSchema;
use serde_json::Value;

/// The runs start several workers each: one at a time on a loaded machine.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `fencelock chaos --workload composite ARGS --json`, asserts that it passed with every
/// fault of `faults` injected, and returns the report.
fn assert_passes(args: &[&str], faults: &[&str]) -> Value {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let mut all = vec!["chaos", "--workload", "composite", "--json"];
    all.extend_from_slice(args);
    let (code, out, err) = common::fencelock(&all);
    let tail: String = err.lines().rev().take(15).collect::<Vec<_>>().join("\n");
    let report: Value = serde_json::from_str(out.trim())
        .unwrap_or_else(|_| panic!("no JSON report (exit {code}); stderr:\n{tail}"));
    assert_eq!(code, 0, "exit {code}\nreport: {report:#}\nstderr:\n{tail}");
    assert_eq!(report["outcome"], "pass", "{report:#}");
    assert_eq!(report["workload"], "composite", "{report:#}");
    let (fenced, control) = (&report["fenced"], &report["control"]);
    assert_eq!(fenced["violations"], 0, "{report:#}");
    assert_eq!(fenced["lost_updates"], 0, "{report:#}");
    assert_ne!(
        fenced["linearizability"]["verdict"], "not-linearizable",
        "{report:#}"
    );
    assert!(control["lost_updates"].as_u64().unwrap() > 0, "{report:#}");
    assert!(
        fenced["writes"]["admitted"].as_u64().unwrap() > 0,
        "{report:#}"
    );
    assert!(
        fenced["final_value"].as_u64() >= fenced["writes"]["admitted"].as_u64(),
        "{report:#}"
    );
    for fault in faults {
        let injected: u64 = match *fault {
            "partition" => ["partition_delay", "partition_blackhole", "partition_reset"]
                .iter()
                .map(|k| fenced["faults"][k].as_u64().unwrap())
                .sum(),
            other => fenced["faults"][other].as_u64().unwrap(),
        };
        assert!(injected > 0, "no {fault} fault injected: {report:#}");
    }
    // A paused holder of a set came back to a refused write on one of its members.
    assert!(
        fenced["faults"]["paused_writes_refused"].as_u64().unwrap() > 0,
        "{report:#}"
    );
    report
}

#[test]
fn composite_sets_on_memory_survive_pauses() {
    let report = assert_passes(
        &[
            "--backend",
            "memory://",
            "--members",
            "3",
            "--workers",
            "5",
            "--ttl",
            "100ms",
            "--duration",
            "6s",
            "--control-duration",
            "4s",
        ],
        &["pause"],
    );
    assert_eq!(report["members"], 3, "{report:#}");
}

#[test]
fn composite_sets_on_redis_survive_pauses_kills_and_partitions() {
    let report = assert_passes(
        &[
            "--spawn",
            "redis",
            "--persistence",
            "always",
            "--faults",
            "pause,kill,partition",
            "--workers",
            "4",
            "--duration",
            "20s",
            "--control-duration",
            "8s",
        ],
        &["pause", "kill", "partition"],
    );
    assert_eq!(report["members"], 2, "{report:#}");
}

#[test]
fn composite_sets_on_postgres_survive_pauses_terminations_and_partitions() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(PgSchema::create());
    let url = schema.url();
    let sep = if url.contains('?') { '&' } else { '?' };
    let spec = format!("{url}{sep}backend=lease&schema={}", schema.name());
    assert_passes(
        &[
            "--backend",
            &spec,
            "--faults",
            "pause,terminate,partition",
            "--workers",
            "4",
            "--duration",
            "15s",
            "--control-duration",
            "6s",
        ],
        &["pause", "terminate", "partition"],
    );
    runtime.block_on(schema.cleanup());
}
