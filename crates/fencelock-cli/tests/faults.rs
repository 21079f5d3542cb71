//! `fencelock run` and `elect` while the lock server fails under them (frozen, emptied), as a
//! shell user sees it: the exit code, the message, the time it takes, and the token of the
//! next run. Against spawned servers only.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use fencelock::redis::servers::RedisServer;
use fencelock_testkit::pg_cluster::PgCluster;

use common::{code, explain, wait_for_line};

/// The subcommands that hold a lock while a command runs.
const HOLDING: [&str; 2] = ["run", "elect"];

/// `fencelock SUB` holding a key, its command running: the command wrote its
/// FENCELOCK_TOKEN to a file and runs until told to end (at most a minute).
struct Held {
    child: Child,
    /// The token the command was given.
    token: u64,
    /// The file whose existence ends the command.
    done: PathBuf,
}

impl Held {
    /// Starts `fencelock SUB --backend URL --key KEY --ttl TTL --grace 2s` with such a
    /// command, its files in `dir`, and waits until the command runs.
    fn start(dir: &Path, sub: &str, url: &str, key: &str, ttl: &str) -> Held {
        let started = dir.join(format!("{sub}-{key}-started"));
        let done = dir.join(format!("{sub}-{key}-done"));
        let script = format!(
            "echo $FENCELOCK_TOKEN > {}; i=0; while [ ! -e {} ] && [ $i -lt 1200 ]; do \
             sleep 0.05; i=$((i+1)); done",
            started.display(),
            done.display()
        );
        let child = common::command()
            .args([
                sub,
                "--backend",
                url,
                "--key",
                key,
                "--ttl",
                ttl,
                "--grace",
                "2s",
                "--",
                "sh",
                "-c",
                &script,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the fencelock binary runs");
        let token = wait_for_line(&started, Duration::from_secs(20))
            .parse()
            .unwrap();
        Held { child, token, done }
    }

    /// Tells the command to end.
    fn end_command(&self) {
        std::fs::write(&self.done, "").unwrap();
    }

    /// Waits for fencelock to exit: its output, and how long it took from `since`.
    fn wait(self, since: Instant) -> (Output, Duration) {
        let out = self.child.wait_with_output().unwrap();
        (out, since.elapsed())
    }
}

/// The token the next `run` of `key` gets, waiting up to 10 s for the lock.
fn next_token(url: &str, key: &str) -> u64 {
    let out = common::command()
        .args([
            "run",
            "--backend",
            url,
            "--key",
            key,
            "--wait",
            "10s",
            "--",
            "sh",
            "-c",
            "echo $FENCELOCK_TOKEN",
        ])
        .output()
        .expect("the fencelock binary runs");
    assert_eq!(code(&out), 0, "the next run: {}", explain(&out));
    String::from_utf8_lossy(&out.stdout).trim().parse().unwrap()
}

fn redis_cli(server: &RedisServer, args: &[&str]) {
    let out = std::process::Command::new("redis-cli")
        .args(["-p", &server.port().to_string()])
        .args(args)
        .output()
        .expect("redis-cli runs (apt-get install redis-tools)");
    assert!(out.status.success(), "redis-cli {args:?}: {out:?}");
}

/// The server loses the lock while the command runs (emptied, as by a restart without
/// persistence) and the command exits 0 before the watchdog's next renewal notices: the
/// release finds the lease gone, and the run is 76, not the command's 0, since another
/// holder could have run beside it. The message names the server.
#[test]
fn a_lease_the_release_finds_gone_is_76_whatever_the_command_exits_with() {
    let server = RedisServer::spawn();
    let dir = tempfile::tempdir().unwrap();
    for sub in HOLDING {
        let held = Held::start(dir.path(), sub, &server.url(), sub, "60s");
        redis_cli(&server, &["FLUSHALL"]);
        held.end_command();
        let (out, _) = held.wait(Instant::now());
        assert_eq!(code(&out), 76, "{sub}: {}", explain(&out));
        let stderr = String::from_utf8_lossy(&out.stderr);
        // Named with its server, as every lost-lease message is.
        assert!(
            stderr.contains(&format!(
                "the lease on \"{sub}\" at {} was lost before the command exited",
                server.url()
            )),
            "{sub}: {stderr}"
        );
    }
}

/// The server is frozen (SIGSTOP) past the ttl while the command runs: the command is
/// stopped and fencelock exits 76 within a bound, saying which key on which server it lost;
/// once the server is back, the next run gets a greater token.
#[test]
fn a_frozen_server_ends_the_run_with_76_naming_the_server() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    for sub in HOLDING {
        let held = Held::start(dir.path(), sub, &url, sub, "1s");
        let token = held.token;
        server.stop();
        let (out, took) = held.wait(Instant::now());
        server.cont();
        assert_eq!(code(&out), 76, "{sub}: {}", explain(&out));
        // The ttl, a renewal's time-out and the grace, with a wide margin.
        assert!(took < Duration::from_secs(20), "{sub}: took {took:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("lost") && stderr.contains(&url),
            "{sub}: the message names neither the loss nor the server {url}: {stderr}"
        );
        let next = next_token(&url, sub);
        assert!(next > token, "{sub}: token {next} after {token}");
    }
}

/// Once the lease is lost (the server frozen past the 1 s ttl), fencelock stops the command
/// and exits promptly: its release of the lost lease is bounded by a quarter of the ttl, not
/// left to the 5 s call time-out against a server that does not answer (which made the exit
/// 5.2-6.7 s after the freeze).
#[test]
fn a_lost_lease_ends_the_run_promptly() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    for sub in HOLDING {
        let key = format!("{sub}-prompt");
        let held = Held::start(dir.path(), sub, &url, &key, "1s");
        server.stop();
        let (out, took) = held.wait(Instant::now());
        server.cont();
        assert_eq!(code(&out), 76, "{sub}: {}", explain(&out));
        // The ttl (about 0.8 s left at most) and a quarter-ttl release, with a wide margin.
        assert!(
            took < Duration::from_secs(4),
            "{sub}: exited {took:?} after the server froze"
        );
    }
}

/// The server is frozen when the command exits: the release cannot be confirmed, so fencelock
/// exits 1 within a bound, saying it was releasing after the command ended (with its code), so
/// the error does not read as the command's own failure.
#[test]
fn a_release_the_server_does_not_answer_says_the_command_had_ended() {
    let server = RedisServer::spawn();
    let dir = tempfile::tempdir().unwrap();
    for sub in HOLDING {
        let held = Held::start(dir.path(), sub, &server.url(), sub, "60s");
        server.stop();
        held.end_command();
        let (out, took) = held.wait(Instant::now());
        server.cont();
        assert_eq!(code(&out), 1, "{sub}: {}", explain(&out));
        assert!(took < Duration::from_secs(30), "{sub}: took {took:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!(
                "releasing \"{sub}\" after the command ended with 0"
            )),
            "{sub}: {stderr}"
        );
    }
}

/// `elect --wait` bounds connecting, and a server that stops answering in the middle of the
/// campaign, as `run --wait` does: exit 1 shortly after the wait, not after the drivers' own
/// time-outs (5 s and more).
#[test]
fn elect_wait_bounds_a_server_that_does_not_answer() {
    let silent = format!("redis://127.0.0.1:{}", common::silent_servers(1)[0]);
    let started = Instant::now();
    let out = common::command()
        .args([
            "elect",
            "--backend",
            &silent,
            "--key",
            "k",
            "--wait",
            "500ms",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    let took = started.elapsed();
    assert_eq!(code(&out), 1, "{}", explain(&out));
    assert!(
        took < Duration::from_secs(4),
        "took {took:?} with --wait 500ms: {}",
        explain(&out)
    );

    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let holder = Held::start(dir.path(), "run", &url, "k", "60s");
    let campaign = common::command()
        .args([
            "elect",
            "--backend",
            &url,
            "--key",
            "k",
            "--wait",
            "2s",
            "--",
            "true",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let campaigning = Instant::now();
    std::thread::sleep(Duration::from_millis(800));
    server.stop();
    let out = campaign.wait_with_output().unwrap();
    let took = campaigning.elapsed();
    server.cont();
    holder.end_command();
    let _ = holder.wait(Instant::now());
    assert_eq!(code(&out), 1, "{}", explain(&out));
    assert!(
        took < Duration::from_millis(4500),
        "took {took:?} with --wait 2s: {}",
        explain(&out)
    );
}

/// Runs `sql` on the throwaway `cluster` with psql.
fn psql(cluster: &PgCluster, sql: &str) {
    let out = std::process::Command::new("psql")
        .args(["-h", "127.0.0.1", "-p", &cluster.port().to_string()])
        .args(["-U", "postgres", "-d", "postgres", "-Atc", sql])
        .output()
        .expect("psql runs (apt-get install postgresql-client)");
    assert!(out.status.success(), "psql {sql:?}: {out:?}");
}

/// On PostgreSQL, as a shell user sees it: the advisory lock's session terminated
/// (`pg_terminate_backend`) under a 60 s ttl, and a crash (UNLOGGED leases emptied) under the
/// lease backend. Each run and elect ends with 76 within a bound, well before its ttl for the
/// terminated session, and the next run gets a greater token.
#[test]
fn a_postgres_session_ended_or_crashed_ends_the_run_with_76() {
    let cluster = PgCluster::spawn(&[]);
    let advisory = format!("{}?backend=advisory&schema=fl_advisory", cluster.url());
    let lease = cluster.url();
    let dir = tempfile::tempdir().unwrap();
    for sub in HOLDING {
        let key = format!("terminated-{sub}");
        let held = Held::start(dir.path(), sub, &advisory, &key, "60s");
        let token = held.token;
        let terminated = Instant::now();
        psql(
            &cluster,
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE pid <> pg_backend_pid() AND backend_type = 'client backend'",
        );
        let (out, took) = held.wait(terminated);
        assert_eq!(code(&out), 76, "{sub}: {}", explain(&out));
        assert!(took < Duration::from_secs(30), "{sub}: took {took:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("session"), "{sub}: {stderr}");
        let next = next_token(&advisory, &key);
        assert!(next > token, "{sub}: token {next} after {token}");
    }
    for sub in HOLDING {
        let key = format!("crashed-{sub}");
        let held = Held::start(dir.path(), sub, &lease, &key, "2s");
        let token = held.token;
        cluster.crash();
        let (out, took) = held.wait(Instant::now());
        cluster.start();
        assert_eq!(code(&out), 76, "{sub}: {}", explain(&out));
        assert!(took < Duration::from_secs(20), "{sub}: took {took:?}");
        let next = next_token(&lease, &key);
        assert!(next > token, "{sub}: token {next} after {token}");
    }
}

/// On etcd: the member frozen (SIGSTOP) past the ttl ends each run and elect with 76 within a
/// bound, naming the server, and after it is resumed the next run gets a greater token.
#[cfg(feature = "etcd")]
#[test]
fn a_frozen_etcd_ends_the_run_with_76_naming_the_server() {
    use fencelock::etcd::servers::{Etcd, EtcdMembers};
    let etcd = fencelock_testkit::members::Spawned::spawn_with(Etcd, 1);
    let url = etcd.url();
    let dir = tempfile::tempdir().unwrap();
    for sub in HOLDING {
        let held = Held::start(dir.path(), sub, &url, sub, "2s");
        let token = held.token;
        etcd.pause(0);
        let (out, took) = held.wait(Instant::now());
        etcd.resume(0);
        assert_eq!(code(&out), 76, "{sub}: {}", explain(&out));
        assert!(took < Duration::from_secs(20), "{sub}: took {took:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(&url), "{sub}: {stderr}");
        let next = next_token(&url, sub);
        assert!(next > token, "{sub}: token {next} after {token}");
    }
}
