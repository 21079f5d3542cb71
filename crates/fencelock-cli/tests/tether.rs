//! A `fencelock run` or `elect` killed with SIGKILL, which cannot act on it, takes its command
//! with it (on Linux, the parent-death signal): no command goes on working under a lease that
//! nobody renews.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use common::{command, wait_for_line};
use fencelock::redis::servers::RedisServer;

/// Whether process `pid` is gone: no such process, or dead and waiting to be reaped.
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // `pid (comm) S ...`: the state follows the last parenthesis.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

fn program(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

#[test]
fn a_killed_fencelock_takes_its_command_with_it() {
    let server = RedisServer::spawn();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    for sub in ["run", "elect"] {
        let pid_file = dir.path().join(format!("{sub}.pid"));
        let line = format!("echo $$ > '{}'; exec sleep 60", pid_file.display());
        let mut fencelock = command()
            .args([
                sub,
                "--backend",
                &url,
                "--key",
                &format!("tethered-{sub}"),
                "-c",
                &line,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid: u32 = wait_for_line(&pid_file, Duration::from_secs(30))
            .parse()
            .unwrap();
        // The shell has become `sleep` (or is about to): the command is running.
        let until = Instant::now() + Duration::from_secs(30);
        while program(pid) != "sleep" {
            assert!(!gone(pid), "{sub}: the command ended by itself");
            assert!(
                Instant::now() < until,
                "{sub}: the command never became sleep"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        fencelock.kill().unwrap(); // SIGKILL
        fencelock.wait().unwrap();
        let until = Instant::now() + Duration::from_secs(30);
        while !gone(pid) {
            assert!(
                Instant::now() < until,
                "{sub}: the command {pid} outlived its killed fencelock by 30 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
