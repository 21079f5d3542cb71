//! Helpers shared by the CLI's end-to-end tests.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// The `fencelock` binary, with no `FENCELOCK_BACKEND` inherited from the test's environment.
pub(crate) fn command() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_fencelock"));
    command.env_remove("FENCELOCK_BACKEND");
    command
}

/// Runs the `fencelock` binary with `args`: its exit code (-1 when a signal ended it), stdout
/// and stderr.
pub(crate) fn fencelock(args: &[&str]) -> (i32, String, String) {
    fencelock_with(args, &[])
}

/// [`fencelock`] with extra environment variables.
pub(crate) fn fencelock_with(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = command()
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("the fencelock binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The value of the `label` row in `fencelock inspect`'s text, where labels and values stand in
/// two columns (however wide the labels are); `None` without such a row.
pub(crate) fn inspect_row<'a>(out: &'a str, label: &str) -> Option<&'a str> {
    out.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix(label)?;
        rest.starts_with("  ").then(|| rest.trim())
    })
}

/// The exit code of `out`; -1 when a signal ended it.
pub(crate) fn code(out: &Output) -> i32 {
    out.status.code().unwrap_or(-1)
}

/// `out`'s status, stdout and stderr, for an assertion's message.
pub(crate) fn explain(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Waits up to `within` until `path` holds a whole line (it ends with a newline); returns its
/// text, trimmed.
pub(crate) fn wait_for_line(path: &Path, within: Duration) -> String {
    let until = Instant::now() + within;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text.trim().to_owned();
        }
        assert!(
            Instant::now() < until,
            "{} not written within {within:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Servers that accept connections and never answer.
pub(crate) fn silent_servers(count: usize) -> Vec<u16> {
    (0..count)
        .map(|_| {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            std::thread::spawn(move || {
                let mut held = Vec::new();
                for stream in listener.incoming().flatten() {
                    held.push(stream);
                }
            });
            port
        })
        .collect()
}
