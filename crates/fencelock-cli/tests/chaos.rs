//! `fencelock chaos` end to end against real servers: redis-server processes and ZooKeeper
//! servers the backends spawn (and, with the `etcd` feature, etcd members), the Postgres server at FENCELOCK_PG_URL (default
//! postgres://postgres@127.0.0.1:5432/test), in a throwaway schema, and the MySQL/MariaDB server at FENCELOCK_MYSQL_URL (default
//! mysql://root@127.0.0.1:3306/test). A missing service fails the test with a message; nothing
//! is skipped.
//!
//! The runs are serialised (each starts several worker processes) so that a loaded two-core
//! machine is not asked to run them all at once.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stderr)]

use std::io::Read;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use fencelock_testkit::postgres::PgSchema;
use serde_json::Value;

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs `fencelock chaos ARGS --json`, returning the exit code, the report and stderr.
fn chaos(args: &[&str]) -> (i32, Option<Value>, String) {
    let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
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

/// Asserts a passing run in which every fault of `faults` was injected.
fn assert_passes(args: &[&str], faults: &[&str]) -> Value {
    let (code, report, err) = chaos(args);
    let tail: String = err.lines().rev().take(15).collect::<Vec<_>>().join("\n");
    let report = report.unwrap_or_else(|| panic!("no JSON report (exit {code}); stderr:\n{tail}"));
    assert_eq!(code, 0, "exit {code}\nreport: {report:#}\nstderr:\n{tail}");
    assert_eq!(report["outcome"], "pass", "{report:#}");
    let fenced = &report["fenced"];
    let control = &report["control"];
    assert_eq!(fenced["violations"], 0, "{report:#}");
    assert_eq!(fenced["lost_updates"], 0, "{report:#}");
    assert!(control["lost_updates"].as_u64().unwrap() > 0, "{report:#}");
    assert!(
        fenced["writes"]["admitted"].as_u64().unwrap() > 0,
        "{report:#}"
    );
    // Writes with an unknown outcome may have landed too, so the final value can only be larger.
    assert!(
        fenced["final_value"].as_u64() >= fenced["writes"]["admitted"].as_u64(),
        "{report:#}"
    );
    for fault in faults {
        let injected = match *fault {
            "partition" => ["partition_delay", "partition_blackhole", "partition_reset"]
                .iter()
                .map(|k| fenced["faults"][k].as_u64().unwrap())
                .sum(),
            other => fenced["faults"][other].as_u64().unwrap(),
        };
        assert!(injected > 0, "no {fault} fault injected: {report:#}");
    }
    // The pause fault must bite: some paused holder came back to a refused write.
    if faults.contains(&"pause") {
        assert!(
            fenced["faults"]["paused_writes_refused"].as_u64().unwrap() > 0,
            "{report:#}"
        );
    }
    report
}

#[test]
fn redis_one_persistent_node_survives_pauses_kills_and_partitions() {
    assert_passes(
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
}

#[test]
fn redis_node_without_persistence_repeats_tokens_and_the_fence_holds() {
    // The lock node forgets its counters on every kill; the storage lives on a separate
    // persistent node. Repeated tokens are refused and healed with advance_token.
    assert_passes(
        &[
            "--spawn",
            "redis",
            "--persistence",
            "none",
            "--faults",
            "pause,kill",
            "--workers",
            "4",
            "--duration",
            "15s",
            "--control-duration",
            "6s",
        ],
        &["pause", "kill"],
    );
}

#[test]
fn redlock_five_nodes_without_persistence_survive_pauses_and_kills() {
    // A minority of lock nodes is killed at a time and comes back with no counters; the
    // storage lives on a separate persistent node that is never killed.
    assert_passes(
        &[
            "--spawn",
            "redlock:5",
            "--persistence",
            "none",
            "--faults",
            "pause,kill",
            "--workers",
            "4",
            "--duration",
            "15s",
            "--control-duration",
            "6s",
        ],
        &["pause", "kill"],
    );
}

#[test]
fn redis_semaphore_and_election_workloads_survive_pauses_and_kills() {
    // Worker processes this time: a semaphore's holders keep a counter per slot, and a
    // leader a leader-only counter under its term; a paused process stops its watchdog.
    for workload in [
        &["--workload", "semaphore", "--permits", "2"][..],
        &["--workload", "election"],
    ] {
        let mut args = vec![
            "--spawn",
            "redis",
            "--persistence",
            "always",
            "--faults",
            "pause,kill",
            "--workers",
            "4",
            "--duration",
            "10s",
            "--control-duration",
            "6s",
        ];
        args.extend_from_slice(workload);
        let report = assert_passes(&args, &["pause", "kill"]);
        assert_eq!(report["workload"], workload[1], "{report:#}");
    }
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_three_spawned_members_survive_pauses_member_kills_and_partitions() {
    // One member of three is killed at a time (the leader half of the time) and restarted on
    // its data, so the quorum holds; the lock and the counter live on the same cluster. etcd
    // leases last whole seconds, hence the one-second ttl.
    let report = assert_passes(
        &[
            "--spawn",
            "etcd:3",
            "--faults",
            "pause,kill,partition",
            "--ttl",
            "1s",
            "--workers",
            "4",
            "--duration",
            "30s",
            "--control-duration",
            "12s",
        ],
        &["pause", "kill", "partition"],
    );
    let backend = report["backend"].as_str().unwrap_or_default();
    assert!(backend.starts_with("3 spawned etcd members"), "{report:#}");
}

#[cfg(feature = "dynamodb")]
#[test]
fn dynamodb_on_spawned_moto_survives_pauses_and_partitions_and_refuses_kills() {
    // moto keeps everything in memory: a killed server would come back with every counter at
    // 0, so the spawned set offers no kill, and asking for one is refused before anything runs.
    let (code, report, err) = chaos(&["--spawn", "dynamodb", "--faults", "pause,kill"]);
    assert_eq!(code, 2, "{report:?}\n{err}");
    assert!(err.contains("the kill fault"), "{err}");
    assert!(err.contains("pause,partition"), "{err}");
    let report = assert_passes(
        &[
            "--spawn",
            "dynamodb",
            "--faults",
            "pause,partition",
            "--workers",
            "4",
            "--duration",
            "20s",
            "--control-duration",
            "8s",
        ],
        &["pause", "partition"],
    );
    let backend = report["backend"].as_str().unwrap_or_default();
    assert!(backend.contains("moto"), "{report:#}");
}

#[test]
fn zookeeper_three_spawned_members_survive_pauses_member_kills_and_partitions() {
    // One server of three is killed at a time (the leader half of the time) and restarted on
    // its data; the lock and the counter live on the same ensemble, under a prefix of the run.
    let report = assert_passes(
        &[
            "--spawn",
            "zookeeper:3",
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
    let backend = report["backend"].as_str().unwrap_or_default();
    assert!(
        backend.starts_with("3 spawned ZooKeeper servers"),
        "{report:#}"
    );
}

// Catches: an object-store storage whose conditional puts let a paused or partitioned holder
// overwrite its successor's counter (a violation or a lost update with the fence), and a run
// whose control cannot lose updates on it. The lock is a spawned Redis; the counter lives in a
// bucket of a real S3-compatible server (moto), reached through a fault proxy.
#[cfg(feature = "object-store")]
#[test]
fn object_storage_under_a_redis_lock_survives_pauses_kills_and_partitions() {
    let moto = fencelock_servers::moto::Moto::try_start().unwrap_or_else(|e| panic!("{e}"));
    let storage = moto.url(&format!("chaos-{}", std::process::id()));
    let report = assert_passes(
        &[
            "--spawn",
            "redis",
            "--storage",
            &storage,
            "--faults",
            "pause,kill,partition",
            "--ttl",
            "500ms",
            "--workers",
            "4",
            "--duration",
            "20s",
            "--control-duration",
            "10s",
        ],
        &["pause", "kill", "partition"],
    );
    let backend = report["backend"].as_str().unwrap_or_default();
    assert!(backend.contains("storage s3://"), "{report:#}");
    assert!(!backend.contains("secret_access_key=test"), "{report:#}");
}

fn pg_spec(schema: &PgSchema, backend: &str) -> String {
    let url = schema.url();
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}backend={backend}&schema={}", schema.name())
}

fn pg_run(backend: &str, workload: &str) {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let schema = runtime.block_on(PgSchema::create());
    let spec = pg_spec(&schema, backend);
    let report = assert_passes(
        &[
            "--backend",
            &spec,
            "--workload",
            workload,
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
    assert_eq!(report["workload"], workload, "{report:#}");
    runtime.block_on(schema.cleanup());
}

#[test]
fn postgres_lease_table_survives_pauses_terminations_and_partitions() {
    pg_run("lease", "lock");
}

#[test]
fn postgres_advisory_locks_survive_pauses_terminations_and_partitions() {
    pg_run("advisory", "lock");
}

/// Readers and writers of one key as worker processes: paused readers come back to a
/// writer's greater token, and their fenced reads are refused.
#[test]
fn postgres_readers_and_writers_survive_pauses_terminations_and_partitions() {
    pg_run("lease", "rwlock");
    pg_run("advisory", "rwlock");
}

/// The MySQL/MariaDB server at FENCELOCK_MYSQL_URL (default mysql://root@127.0.0.1:3306/test).
fn mysql_url() -> String {
    std::env::var("FENCELOCK_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

#[test]
fn mysql_survives_pauses_and_partitions() {
    let url = mysql_url();
    let spec = fencelock::spec::BackendSpec::parse(&url).expect("FENCELOCK_MYSQL_URL parses");
    for host in spec.hosts() {
        if std::net::TcpStream::connect((host.host.as_str(), host.port)).is_err() {
            panic!(
                "no MySQL server at {host}: start MariaDB or MySQL (scripts/test-deps does), or \
                 set FENCELOCK_MYSQL_URL"
            );
        }
    }
    assert_passes(
        &[
            "--backend",
            &url,
            "--faults",
            "pause,partition",
            "--workers",
            "4",
            "--duration",
            "12s",
            "--control-duration",
            "6s",
        ],
        &["pause", "partition"],
    );
}

#[test]
fn faults_that_do_not_apply_are_refused_with_a_reason() {
    let cases: [(&[&str], &str); 5] = [
        (
            &["--backend", "memory://", "--faults", "pause,partition"],
            "only takes the pause fault",
        ),
        (
            &[
                "--spawn",
                "redis",
                "--workload",
                "semaphore",
                "--permits",
                "5",
            ],
            "between 1 and 4 permits",
        ),
        (
            &["--backend", "redis://127.0.0.1:1", "--faults", "kill"],
            "--spawn SCHEME[:N]",
        ),
        (
            &["--spawn", "redis", "--faults", "terminate"],
            "postgres:// backends only",
        ),
        (&["--spawn", "redis", "--faults", "flood"], "unknown fault"),
    ];
    for (args, expected) in cases {
        let (code, report, err) = chaos(args);
        assert!(report.is_none(), "{args:?}: {report:?}");
        assert!(code == 1 || code == 2, "{args:?}: exit {code}, {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}
