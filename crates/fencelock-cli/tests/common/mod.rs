//! Helpers shared by the CLI's end-to-end tests.

use std::process::Command;

/// Runs the `fencelock` binary with `args`: its exit code (-1 when a signal ended it), stdout
/// and stderr.
pub(crate) fn fencelock(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_fencelock"))
        .args(args)
        .output()
        .expect("the fencelock binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
