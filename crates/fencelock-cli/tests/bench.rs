//! `fencelock bench` end to end: short runs on every backend, checking the report's shape and
//! that every figure is positive. No timing thresholds: figures depend on the machine.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::fencelock;

use fencelock::redis::servers::RedisServer;
use fencelock_testkit::postgres::PgSchema;

/// Every scenario but the reader's, which only a backend with shared locks has.
const SCENARIOS: [&str; 16] = [
    "round_trip",
    "idle_round_trip",
    "acquire_release",
    "fenced_write",
    "handoff",
    "extend",
    "contended_one_key",
    "contended_many_keys",
    "exclusive_grant",
    "writer_grant",
    "permit_grant",
    "election_failover",
    "singles_2",
    "composite_2",
    "singles_8",
    "composite_8",
];

/// Scenarios without a baseline row of their own: counted in round trips, against the
/// exclusive grant, or against as many single grants.
const NO_BASELINE: [&str; 8] = [
    "handoff",
    "extend",
    "election_failover",
    "reader_grant",
    "writer_grant",
    "permit_grant",
    "composite_2",
    "composite_8",
];

const SHORT: [&str; 6] = ["--duration", "100ms", "--concurrency", "4", "--keys", "16"];

/// Runs a short JSON bench on `spec` and checks every row; returns the subjects seen.
fn bench_json(spec: &str) -> Vec<String> {
    let mut args = vec!["bench", "--backend", spec, "--json"];
    args.extend(SHORT);
    let (code, out, err) = fencelock(&args);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(err.contains("[1/11] round trip"), "no progress line: {err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("the output is JSON");
    assert_eq!(report["settings"]["concurrency"], 4);
    assert_eq!(report["settings"]["keys"], 16);
    let rows = report["rows"].as_array().expect("rows");
    for scenario in SCENARIOS {
        let of: Vec<_> = rows.iter().filter(|r| r["scenario"] == scenario).collect();
        assert!(!of.is_empty(), "{scenario} missing: {out}");
        let has_baseline = of.iter().any(|r| r["baseline"] == true);
        assert_eq!(
            has_baseline,
            !NO_BASELINE.contains(&scenario),
            "{scenario}: {out}"
        );
    }
    // A failover is counted in ttls too, and lasts about one (at least most of it).
    for row in rows.iter().filter(|r| r["scenario"] == "election_failover") {
        assert!(row["ttls"].as_f64().unwrap() > 0.5, "{row}");
        assert!(row["ttl_ms"].as_f64().unwrap() >= 100.0, "{row}");
    }
    let mut subjects = Vec::new();
    for row in rows {
        for field in ["p50_ns", "p99_ns", "mean_ns", "ops"] {
            assert!(row[field].as_u64().unwrap() > 0, "{field} in {row}");
        }
        assert!(row["ops_per_sec"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["p99_ns"].as_u64() >= row["p50_ns"].as_u64(), "{row}");
        if row["baseline"] == false {
            assert!(row["ratio"].as_f64().unwrap() > 0.0, "{row}");
        }
        subjects.push(row["subject"].as_str().unwrap().to_owned());
    }
    subjects
}

#[test]
fn bench_memory_prints_a_table() {
    let mut args = vec!["bench"];
    args.extend(SHORT);
    let (code, out, err) = fencelock(&args);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let lines: Vec<&str> = out.lines().collect();
    let header = lines
        .iter()
        .position(|l| l.starts_with("scenario"))
        .expect("a header line");
    for column in ["subject", "p50", "p99", "ops/s", "ratio"] {
        assert!(lines[header].contains(column), "{out}");
    }
    let rows: Vec<&str> = lines[header + 1..]
        .iter()
        .take_while(|l| !l.is_empty())
        .copied()
        .collect();
    // Memory has every lock kind, the reader included, both composite sets with their
    // single grants, the hand-off with the waiter's watchdog off and on, and both contended
    // steps fair and barging (memory queues its waiters).
    assert_eq!(rows.len(), 24, "{out}");
    assert!(out.contains("fencelock memory (watchdog on)"), "{out}");
    assert!(out.contains("fencelock memory (barging)"), "{out}");
    assert!(out.contains("composite of 8 grant+release"), "{out}");
    assert!(out.contains("reader grant+release"), "{out}");
    for row in &rows {
        let ratio = row.split_whitespace().last().unwrap();
        let figure = ratio.trim_end_matches('x');
        assert!(
            ratio == "baseline"
                || row.ends_with(" RT")
                || row.contains(" RT, ") && row.ends_with(" ttl")
                || figure.parse::<f64>().is_ok_and(|r| r > 0.0),
            "{row}"
        );
    }
    assert!(out.contains("fencelock memory"), "{out}");
    assert!(out.contains("raw tokio Mutex<HashMap>"), "{out}");
}

#[test]
fn bench_memory_json() {
    let subjects = bench_json("memory://");
    assert!(subjects.iter().any(|s| s == "fencelock memory"));
    let mut args = vec!["bench", "--json"];
    args.extend(SHORT);
    let (_, out, _) = fencelock(&args);
    assert!(out.contains("\"reader_grant\""), "{out}");
}

#[test]
fn bench_redis() {
    let server = RedisServer::spawn();
    let subjects = bench_json(&server.url());
    assert!(subjects.iter().any(|s| s == "raw SET NX PX + DEL"));
    assert!(subjects.iter().any(|s| s == "fencelock redis"));
}

#[test]
fn bench_redlock() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::spawn()).collect();
    let spec = format!(
        "redlock://{}",
        servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect::<Vec<_>>()
            .join(",")
    );
    let subjects = bench_json(&spec);
    assert!(
        subjects.iter().any(|s| s == "fencelock redlock"),
        "{subjects:?}"
    );
    assert!(
        subjects.iter().any(|s| s == "fencelock redis"),
        "{subjects:?}"
    );
}

/// A three-master Redis Cluster spawned for the test: fencelock's cluster backend next to raw
/// `SET NX PX` + `DEL` through the driver's cluster connection; no key of the run is left on
/// any master.
#[test]
fn bench_redis_cluster() {
    use fencelock::redis::servers::RedisCluster;

    let cluster = RedisCluster::spawn(3, 0);
    let subjects = bench_json(&cluster.url());
    assert!(
        subjects.iter().any(|s| s == "raw SET NX PX + DEL"),
        "{subjects:?}"
    );
    assert!(
        subjects.iter().any(|s| s == "fencelock redis-cluster"),
        "{subjects:?}"
    );
    for index in 0..cluster.len() {
        let left = cluster
            .cli(index, &["--scan", "--pattern", "*fencelock-bench/*"])
            .unwrap();
        assert!(left.trim().is_empty(), "left on node {index}: {left}");
    }
}

#[cfg(feature = "etcd")]
#[test]
fn bench_etcd() {
    use fencelock::etcd::servers::{Etcd, EtcdMembers};
    let server = fencelock_testkit::members::Spawned::spawn_with(Etcd, 1);
    let subjects = bench_json(&server.url());
    assert!(
        subjects
            .iter()
            .any(|s| s == "raw put-if-absent txn + delete"),
        "{subjects:?}"
    );
    assert!(
        subjects.iter().any(|s| s == "fencelock etcd"),
        "{subjects:?}"
    );
    assert!(
        subjects.iter().any(|s| s.starts_with("etcd v3 Lock")),
        "{subjects:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_postgres_lease_and_advisory() {
    // A schema serves one lock mechanism: one schema per backend.
    for backend in ["lease", "advisory"] {
        let schema = PgSchema::create().await;
        let spec = format!(
            "{}?schema={}&backend={backend}",
            schema.url(),
            schema.name()
        );
        let subjects = tokio::task::spawn_blocking(move || bench_json(&spec))
            .await
            .unwrap();
        assert!(
            subjects
                .iter()
                .any(|s| s == &format!("fencelock pg-{backend}"))
        );
        assert!(subjects.iter().any(|s| s == "sqlx PgAdvisoryLock"));
        // The plain table of the UPDATE baseline is gone.
        let left: i64 = sqlx_count(&schema).await;
        assert_eq!(left, 0);
        schema.cleanup().await;
    }
}

/// Through PgBouncer in transaction mode, said in the URL or detected: the lease backend
/// runs next to a raw baseline that only sends simple-protocol queries (named prepared
/// statements and session advisory locks break or leak through such a pooler), with no
/// session-advisory peer; the run's rows and the plain table are removed through the pooler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_postgres_through_pgbouncer() {
    use fencelock::postgres::sqlx;
    use fencelock_testkit::pgbouncer::PgBouncer;

    let bouncer = tokio::task::spawn_blocking(|| PgBouncer::spawn_with_pool_size(2))
        .await
        .unwrap();
    let schema = PgSchema::create().await;
    for pooler in ["transaction", "detect"] {
        let spec = format!(
            "{}?schema={}&pooler={pooler}&backend=lease",
            bouncer.url(),
            schema.name()
        );
        let subjects = tokio::task::spawn_blocking(move || bench_json(&spec))
            .await
            .unwrap_or_else(|e| panic!("pooler={pooler}: {e}{}", bouncer.log_tail()));
        assert!(
            subjects.iter().any(|s| s == "fencelock pg-lease"),
            "pooler={pooler}: {subjects:?}"
        );
        assert!(
            subjects.iter().any(|s| s == "raw SELECT 1 (simple query)"),
            "pooler={pooler}: {subjects:?}"
        );
        assert!(
            subjects
                .iter()
                .any(|s| s.contains("pg_try_advisory_xact_lock")),
            "pooler={pooler}: {subjects:?}"
        );
        assert!(
            !subjects
                .iter()
                .any(|s| s == "sqlx PgAdvisoryLock" || s.contains("pg_try_advisory_lock ")),
            "a session lock through a transaction pooler, pooler={pooler}: {subjects:?}"
        );
    }
    assert_eq!(sqlx_count(&schema).await, 0, "the plain table is left");
    for table in [
        "fencelock_leases",
        "fencelock_counters",
        "fencelock_storage",
    ] {
        let column = if table == "fencelock_storage" {
            "resource"
        } else {
            "key"
        };
        let left: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {}.{table} WHERE starts_with({column}, 'fencelock-bench/')",
            schema.name()
        ))
        .fetch_one(schema.admin())
        .await
        .unwrap();
        assert_eq!(left, 0, "rows of the runs left in {table}");
    }
    drop(bouncer);
    schema.cleanup().await;
}

async fn sqlx_count(schema: &PgSchema) -> i64 {
    use fencelock::postgres::sqlx;
    sqlx::query_scalar(
        "SELECT count(*) FROM information_schema.tables \
         WHERE table_schema = $1 AND table_name LIKE 'fencelock_bench_plain%'",
    )
    .bind(schema.name())
    .fetch_one(schema.admin())
    .await
    .unwrap()
}

/// The MySQL/MariaDB server at FENCELOCK_MYSQL_URL (default mysql://root@127.0.0.1:3306/test).
fn mysql_url() -> String {
    std::env::var("FENCELOCK_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned())
}

/// Drops a test prefix's tables and procedures when the test ends, passed or failed: on a
/// thread and runtime of its own.
struct MySqlUninstall(String);

impl Drop for MySqlUninstall {
    fn drop(&mut self) {
        let url = self.0.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                let config = fencelock::mysql::MySqlConfig::from_url(&url).ok()?;
                let db = config.install(false).connect().await.ok()?;
                let dropped = db.uninstall().await.ok();
                db.close().await;
                dropped
            })
        })
        .join();
    }
}

/// MySQL/MariaDB under a table prefix of the test's own: fencelock's `GET_LOCK` backend next
/// to raw `GET_LOCK` + `RELEASE_LOCK`; the run's rows and the plain table are gone afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_mysql() {
    // The same sqlx, with MySQL enabled by fencelock-mysql, re-exported by the facade.
    use fencelock::postgres::sqlx;

    let prefix = format!("tbench{}_", std::process::id());
    let base = mysql_url();
    let sep = if base.contains('?') { '&' } else { '?' };
    let spec = format!("{base}{sep}prefix={prefix}");
    let Ok(config) = fencelock::mysql::MySqlConfig::from_url(&spec) else {
        panic!("FENCELOCK_MYSQL_URL is not a MySQL URL: {base}");
    };
    let _uninstall = MySqlUninstall(spec.clone());
    let db = config.connect().await.unwrap_or_else(|e| {
        panic!(
            "cannot use MySQL/MariaDB at {base}: {e}\nStart a server (for example `service \
             mariadb start`; user root with an empty password and a database `test`), or set \
             FENCELOCK_MYSQL_URL=mysql://user:password@host:port/database"
        )
    });
    let run = spec.clone();
    let subjects = tokio::task::spawn_blocking(move || bench_json(&run))
        .await
        .unwrap();
    assert!(
        subjects.iter().any(|s| s == "raw GET_LOCK + RELEASE_LOCK"),
        "{subjects:?}"
    );
    assert!(
        subjects.iter().any(|s| s == "fencelock mysql"),
        "{subjects:?}"
    );
    for (table, column) in [
        ("locks", "lock_key"),
        ("leases", "lock_key"),
        ("storage", "resource"),
    ] {
        let left: i64 = sqlx::query_scalar(&format!(
            "SELECT COUNT(*) FROM {prefix}{table} WHERE LEFT({column}, 16) = 'fencelock-bench/'"
        ))
        .fetch_one(db.pool())
        .await
        .unwrap();
        assert_eq!(left, 0, "rows of the run left in {prefix}{table}");
    }
    let plain: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.tables \
         WHERE table_schema = DATABASE() AND table_name LIKE CONCAT(?, 'bench\\_plain\\_%')",
    )
    .bind(prefix.replace('_', "\\_"))
    .fetch_one(db.pool())
    .await
    .unwrap();
    assert_eq!(plain, 0, "the plain table is left");
    db.close().await;
}

#[test]
fn bench_refuses_bad_input() {
    for args in [
        &["bench", "--duration", "0s"][..],
        &["bench", "--duration", "soon"],
        &["bench", "--concurrency", "0"],
        &["bench", "--keys", "-3"],
        &["bench", "--backend", "nosuch://x"],
    ] {
        let (code, out, err) = fencelock(args);
        assert_eq!(code, 2, "{args:?}: stdout {out} stderr {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
    let (code, _, err) = fencelock(&[
        "bench",
        "--backend",
        "redis://127.0.0.1:1",
        "--duration",
        "10ms",
    ]);
    assert_eq!(code, 1, "{err}");
    assert!(err.starts_with("fencelock: "), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

/// Starts `fencelock bench` on `spec` for long enough to be interrupted, and returns it once
/// its progress reached `step` (a line with `[step/11]`), with the rest of stderr still to read.
fn bench_until_step(
    spec: &str,
    step: usize,
) -> (
    std::process::Child,
    std::io::Lines<std::io::BufReader<std::process::ChildStderr>>,
) {
    use std::io::BufRead;
    let mut child = common::command()
        .args(["bench", "--backend", spec, "--duration", "1s", "--json"])
        .args(["--concurrency", "4", "--keys", "16"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the fencelock binary runs");
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let marker = format!("[{step}/11]");
    for line in lines.by_ref() {
        let line = line.unwrap();
        if line.contains(&marker) {
            return (child, lines);
        }
    }
    let status = child.wait().unwrap();
    panic!("bench ended ({status}) before step {step}");
}

fn redis_dbsize(server: &RedisServer) -> i64 {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &server.port().to_string(), "DBSIZE"])
        .output()
        .expect("redis-cli runs (apt-get install redis-tools)");
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

/// SIGINT, SIGTERM or SIGHUP in the middle of a run: the run stops, its keys are removed
/// from the server, and fencelock exits 128 + N.
#[test]
fn bench_interrupted_removes_its_keys() {
    for (signal, code) in [("INT", 130), ("TERM", 143), ("HUP", 129)] {
        let server = RedisServer::spawn();
        let (mut child, rest) = bench_until_step(&server.url(), 4);
        assert!(redis_dbsize(&server) > 0, "the run wrote no keys yet");
        let killed = std::process::Command::new("kill")
            .args([format!("-{signal}"), child.id().to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let err: Vec<String> = rest.map(Result::unwrap).collect();
        let status = child.wait().unwrap();
        assert_eq!(status.code(), Some(code), "SIG{signal}: {err:?}");
        assert!(
            err.iter().any(|l| l.contains("removed its keys")),
            "SIG{signal}: {err:?}"
        );
        assert_eq!(redis_dbsize(&server), 0, "SIG{signal}: keys left behind");
    }
}

/// A Redlock node that goes down at the end of a run fails the cleanup, not the run: the
/// report is printed, then the leftover keys are named, and the exit code is 1.
#[test]
fn bench_reports_before_a_failed_cleanup() {
    use std::io::Read;
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::spawn()).collect();
    let spec = format!(
        "redlock://{}",
        servers
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port()))
            .collect::<Vec<_>>()
            .join(",")
    );
    let (mut child, rest) = bench_until_step(&spec, 7);
    servers[2].kill();
    let err: Vec<String> = rest.map(Result::unwrap).collect();
    let mut out = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(1), "{err:?}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("the report, as JSON");
    assert!(!report["rows"].as_array().unwrap().is_empty(), "{out}");
    let last = err.last().cloned().unwrap_or_default();
    assert!(last.contains("could not remove the run's keys"), "{err:?}");
    assert!(last.contains(&format!("{}", servers[2].port())), "{err:?}");
}

/// `--sweep` measures the one-hot-key scenario alone at each task count, in order, each with
/// the fenced lock (fair and barging) beside the raw baseline, and refuses a count out of
/// range or a `--concurrency` beside it.
#[test]
fn a_sweep_measures_one_hot_key_at_each_count() {
    let (code, out, err) = fencelock(&[
        "bench",
        "--backend",
        "memory://",
        "--sweep",
        "2,16",
        "--duration",
        "40ms",
        "--json",
    ]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let report: serde_json::Value = serde_json::from_str(&out).expect("the output is JSON");
    let runs = report["sweep"].as_array().expect("one run per count");
    assert_eq!(runs.len(), 2, "{report:#}");
    for (run, n) in runs.iter().zip([2, 16]) {
        assert_eq!(run["settings"]["concurrency"], n, "{run:#}");
        let rows = run["rows"].as_array().unwrap();
        assert!(
            rows.iter().all(|r| r["scenario"] == "contended_one_key"),
            "{run:#}"
        );
        assert!(rows.iter().any(|r| r["baseline"] == true), "{run:#}");
        let fenced = rows.iter().filter(|r| r["baseline"] == false).count();
        assert!(fenced >= 2, "fair and barging rows expected: {run:#}");
        for row in rows {
            assert!(row["ops"].as_u64().unwrap() > 0, "{row:#}");
        }
    }
    for bad in [
        &["bench", "--backend", "memory://", "--sweep", "0"][..],
        &["bench", "--backend", "memory://", "--sweep", "5000"],
        &[
            "bench",
            "--backend",
            "memory://",
            "--sweep",
            "8",
            "--concurrency",
            "8",
        ],
    ] {
        let (code, _, err) = fencelock(bad);
        assert_eq!(code, 2, "{bad:?}: {err}");
    }
}
