//! Input the command refuses, and where `--backend` comes from: every input error exits 2 as
//! the help says, no output ever shows a password, `FENCELOCK_BACKEND` stands in for
//! `--backend`, and `run`/`inspect` refuse a backend that lives inside one process.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{fencelock, fencelock_with};
use fencelock::redis::servers::RedisServer;
use fencelock_servers::port::free_port;

const PASSWORD: &str = "pw-s3cr3t-9f1";

/// Specs with a password that the command must refuse or fail on.
fn specs_with_a_password() -> Vec<String> {
    let dead = free_port().unwrap();
    vec![
        // malformed: refused by the argument parser
        format!("redis://:{PASSWORD}@127.0.0.1:99999"),
        format!("redis://:{PASSWORD}@"),
        format!("postgres://postgres:{PASSWORD}@127.0.0.1:{dead}/test?backend=leese"),
        format!("redlock://u:{PASSWORD}@127.0.0.1:1,,127.0.0.1:2"),
        format!("nosuch://u:{PASSWORD}@host"),
        format!("redis://:{}@127.0.0.1:6379/x", PASSWORD.replace('-', "%2D")),
        // well formed, nothing listening: fails when connecting
        format!("redis://:{PASSWORD}@127.0.0.1:{dead}"),
        format!("postgres://postgres:{PASSWORD}@127.0.0.1:{dead}/test"),
        format!("redlock://u:{PASSWORD}@127.0.0.1:{dead},127.0.0.1:{dead}"),
    ]
}

#[test]
fn no_output_shows_a_password() {
    for spec in specs_with_a_password() {
        for line in [
            vec![
                "run",
                "--backend",
                &spec,
                "--key",
                "k",
                "--wait",
                "1s",
                "--",
                "true",
            ],
            vec!["inspect", "--backend", &spec, "k"],
            vec!["demo", "--backend", &spec],
            vec!["bench", "--backend", &spec, "--duration", "10ms"],
            vec!["chaos", "--backend", &spec, "--duration", "1s"],
        ] {
            let (code, out, err) = fencelock(&line);
            assert!(code == 1 || code == 2, "{line:?}: exit {code}\n{err}");
            assert!(
                !out.contains(PASSWORD) && !err.contains(PASSWORD),
                "{line:?} shows the password:\n{out}\n{err}"
            );
            assert!(!err.contains("pw-s3cr3t"), "{line:?}: {err}");
            // The same through the environment.
            let without: Vec<&str> = line
                .iter()
                .copied()
                .filter(|a| *a != "--backend" && *a != spec)
                .collect();
            let (code, out, err) = fencelock_with(&without, &[("FENCELOCK_BACKEND", &spec)]);
            assert!(code == 1 || code == 2, "{without:?}: exit {code}\n{err}");
            assert!(
                !out.contains(PASSWORD) && !err.contains(PASSWORD),
                "{without:?} with FENCELOCK_BACKEND shows the password:\n{out}\n{err}"
            );
        }
    }
    // The help shows where --backend comes from, never its value.
    let spec = format!("redis://:{PASSWORD}@127.0.0.1:6379");
    for sub in ["run", "inspect", "demo", "bench", "chaos", "advance-token"] {
        let (code, out, err) = fencelock_with(&[sub, "--help"], &[("FENCELOCK_BACKEND", &spec)]);
        assert_eq!(code, 0, "{sub}: {err}");
        assert!(out.contains("FENCELOCK_BACKEND"), "{sub}: {out}");
        assert!(
            !out.contains(PASSWORD),
            "{sub} --help shows the password:\n{out}"
        );
    }
}

#[test]
fn every_input_error_exits_2_as_the_help_says() {
    let shared = "redis://127.0.0.1:1";
    let cases: &[&[&str]] = &[
        &["run", "--backend", "nosuch://x", "--key", "k", "--", "true"],
        &[
            "run",
            "--backend",
            "redis://127.0.0.1:99999",
            "--key",
            "k",
            "--",
            "true",
        ],
        &["run", "--backend", shared, "--key", "", "--", "true"],
        &[
            "run",
            "--backend",
            shared,
            "--key",
            "k",
            "--ttl",
            "0s",
            "--",
            "true",
        ],
        &[
            "run",
            "--backend",
            shared,
            "--key",
            "k",
            "--ttl",
            "soon",
            "--",
            "true",
        ],
        &["run", "--backend", shared, "--key", "k"],
        &["run", "--key", "k", "--", "true"],
        &["run", "--backend", "memory://", "--key", "k", "--", "true"],
        &["inspect", "--backend", shared, ""],
        &["inspect", "k"],
        &[
            "advance-token",
            "--backend",
            shared,
            "--key",
            "k",
            "--to",
            "0",
        ],
        &[
            "advance-token",
            "--backend",
            shared,
            "--key",
            "",
            "--to",
            "3",
        ],
        &["demo", "--ttl", "0s"],
        &["demo", "--backend", "redis://:6379"],
        &["bench", "--keys", "0"],
        &["chaos", "--spawn", "redis", "--faults", "flood"],
        &["chaos", "--backend", "memory://", "--faults", "partition"],
        &["chaos", "--spawn", "redis", "--ttl", "1ms"],
        &["chaos", "--spawn", "redis", "--faults", "terminate"],
    ];
    for args in cases {
        let (code, out, err) = fencelock(args);
        assert_eq!(code, 2, "{args:?}: stdout {out}\nstderr {err}");
        assert!(!err.contains("panicked"), "{args:?}: {err}");
    }
    for sub in ["run", "inspect", "advance-token", "demo", "bench", "chaos"] {
        let (_, help, _) = fencelock(&[sub, "--help"]);
        let line = help
            .lines()
            .find(|l| l.trim_start().starts_with("2 "))
            .unwrap_or_else(|| panic!("{sub} --help lists no exit code 2:\n{help}"));
        assert!(line.contains("bad input"), "{sub}: {line}");
    }
}

#[test]
fn run_and_inspect_refuse_a_backend_inside_one_process() {
    for args in [
        &["run", "--key", "k", "--", "true"][..],
        &["run", "--backend", "memory://", "--key", "k", "--", "true"],
        &["inspect", "k"],
        &["inspect", "--backend", "memory://", "k"],
        &["advance-token", "--key", "k", "--to", "3"],
    ] {
        let (code, _, err) = fencelock(args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(
            err.contains("--backend") && err.contains("FENCELOCK_BACKEND"),
            "{args:?}: {err}"
        );
    }
    let (code, _, err) = fencelock_with(
        &["run", "--key", "k", "--", "true"],
        &[("FENCELOCK_BACKEND", "memory://")],
    );
    assert_eq!(code, 2, "{err}");
    // demo and bench keep the in-process default.
    let (code, out, err) = fencelock(&["demo", "--ttl", "100ms"]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("demo on memory://"), "{out}");
}

#[test]
fn the_backend_comes_from_the_environment() {
    let server = RedisServer::spawn();
    let url = server.url();
    let env = [("FENCELOCK_BACKEND", url.as_str())];
    let (code, out, err) = fencelock_with(&["run", "--key", "from-env", "--", "true"], &env);
    assert_eq!(code, 0, "{out}\n{err}");
    let (code, out, err) = fencelock_with(&["inspect", "from-env"], &env);
    assert_eq!(code, 0, "{err}");
    let backend = common::inspect_row(&out, "backend");
    assert_eq!(backend, Some(format!("{url} (redis)").as_str()), "{out}");
    assert_eq!(common::inspect_row(&out, "last token"), Some("1"), "{out}");
    let (code, out, err) = fencelock_with(&["demo", "--ttl", "200ms"], &env);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains(&format!("demo on {url}")), "{out}");
    // --backend wins over the environment.
    let (code, out, err) =
        fencelock_with(&["demo", "--backend", "memory://", "--ttl", "100ms"], &env);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("demo on memory://"), "{out}");
}

/// A duration longer than the clock can count ahead (`500000000000y`, about 1.6e19 seconds) is
/// bad input, refused before anything is touched, never a panic on an overflowing deadline.
#[test]
fn durations_past_the_clock_are_input_errors() {
    let dead = format!("redis://127.0.0.1:{}", free_port().unwrap());
    let huge = "500000000000y";
    let cases: &[&[&str]] = &[
        &[
            "run",
            "--backend",
            &dead,
            "--key",
            "k",
            "-w",
            huge,
            "--",
            "true",
        ],
        &[
            "run",
            "--backend",
            &dead,
            "--key",
            "k",
            "-w",
            "1e19",
            "--",
            "true",
        ],
        &[
            "run",
            "--backend",
            &dead,
            "--key",
            "k",
            "--grace",
            huge,
            "--",
            "true",
        ],
        &[
            "elect",
            "--backend",
            &dead,
            "--key",
            "k",
            "-w",
            huge,
            "--",
            "true",
        ],
        &["chaos", "--backend", "memory://", "--duration", huge],
        &[
            "chaos",
            "--backend",
            "memory://",
            "--ttl",
            huge,
            "--duration",
            "1s",
        ],
    ];
    for args in cases {
        let (code, out, err) = fencelock(args);
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        assert_eq!(code, 2, "{args:?}: stdout {out}\nstderr {err}");
        assert!(err.contains("longer than"), "{args:?}: {err}");
    }
}

/// `advance-token --to N` promises a next grant above N: a floor with no token above it
/// (`i64::MAX` for a Redis or Postgres counter) is bad input and changes nothing, not a key
/// (or, on Postgres, the schema's epoch, which every key's tokens count from) that can never
/// grant again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_with_no_token_above_it_is_refused_and_changes_nothing() {
    let redis = RedisServer::spawn();
    let schema = fencelock_testkit::postgres::PgSchema::create().await;
    let specs = [
        redis.url(),
        format!("{}?schema={}", schema.url(), schema.name()),
    ];
    for spec in specs {
        let max = i64::MAX.to_string();
        for floor in [max.as_str(), "18446744073709551615"] {
            let args = [
                "advance-token",
                "--backend",
                &spec,
                "--key",
                "floored",
                "--to",
                floor,
            ];
            let (code, out, err) = fencelock(&args);
            assert_eq!(code, 2, "{args:?}: {out}\n{err}");
            assert!(err.contains("no token above it"), "{args:?}: {err}");
        }
        let (code, out, err) = fencelock(&["inspect", "--backend", &spec, "floored"]);
        assert_eq!(code, 0, "{err}");
        let last = common::inspect_row(&out, "last token").unwrap_or_default();
        assert!(
            last.starts_with("none (never granted under "),
            "{spec}: {out}"
        );
        // Another key still counts from 1.
        let (code, out, err) = fencelock(&[
            "run",
            "--backend",
            &spec,
            "--key",
            "other",
            "--",
            "sh",
            "-c",
            "echo $FENCELOCK_TOKEN",
        ]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out.trim(), "1", "{spec}");
    }
    schema.cleanup().await;
}

/// `--wait` bounds connecting as well, for `elect` as for `run`: against a server that never
/// answers, `-w 1s` gives up after about a second, not after the 5 s connecting has when
/// there is no wait.
#[test]
fn a_wait_bounds_connecting_to_a_silent_server() {
    // Connections complete in the listen backlog, and nothing ever answers them.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let spec = format!(
        "postgres://postgres@127.0.0.1:{}/test",
        silent.local_addr().unwrap().port()
    );
    for sub in ["run", "elect"] {
        let started = std::time::Instant::now();
        let (code, out, err) = fencelock(&[
            sub,
            "--backend",
            &spec,
            "--key",
            "k",
            "-w",
            "1s",
            "--",
            "true",
        ]);
        let took = started.elapsed();
        assert_eq!(code, 1, "{sub}: {out}\n{err}");
        assert!(err.contains("no answer"), "{sub}: {err}");
        assert!(
            took < std::time::Duration::from_secs(4),
            "{sub} took {took:?}: {err}"
        );
    }
    drop(silent);
}

/// `chaos` on Postgres opens an admin session first: when that fails it says why at once (a
/// refused connection, a database that does not exist, exit 2 as bad input), not that a pool
/// timed out after 5 s.
#[test]
fn chaos_says_why_the_postgres_admin_session_failed() {
    let dead = free_port().unwrap();
    let refused = format!("postgres://postgres@127.0.0.1:{dead}/test");
    let started = std::time::Instant::now();
    let (code, _, err) = fencelock(&["chaos", "--backend", &refused, "--duration", "1s"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("refused"), "{err}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(4),
        "{err}"
    );
    let missing = format!(
        "{}/fencelock_no_such_database",
        fencelock_testkit::postgres::pg_url()
            .rsplit_once('/')
            .unwrap()
            .0
    );
    let (code, _, err) = fencelock(&["chaos", "--backend", &missing, "--duration", "1s"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("fencelock_no_such_database"), "{err}");
}

/// A key given twice, and a storage spec where a lock backend goes, are input errors that say
/// what is wrong: the repeated key (before, `--key k --key k` ran as one key without the
/// several-keys variables `--help` promises), and that `s3://` is a storage spec and where it
/// goes (before: "unknown backend scheme" or "lacks the feature").
#[test]
fn a_repeated_key_and_a_storage_spec_as_backend_are_named() {
    let (code, _, err) = fencelock(&[
        "run",
        "--backend",
        "redis://127.0.0.1:6379",
        "--key",
        "k",
        "--key",
        "k",
        "--",
        "true",
    ]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--key k is given more than once"), "{err}");
    for sub in [&["run", "--key", "k", "--", "true"][..], &["inspect", "k"]] {
        let mut args = vec![sub[0], "--backend", "s3://bucket/locks"];
        args.extend_from_slice(&sub[1..]);
        let (code, _, err) = fencelock(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(err.contains("s3:// is a storage spec"), "{args:?}: {err}");
        assert!(err.contains("--storage"), "{args:?}: {err}");
    }
}
