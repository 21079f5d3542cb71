//! `fencelock demo` end to end, as a user runs it.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn fencelock(args: &[&str]) -> (i32, String, String) {
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

#[test]
fn demo_refuses_the_stale_write_and_shows_unfenced_corruption() {
    let (code, out, err) = fencelock(&["demo", "--ttl", "200ms"]);
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let fenced = out.split("Without fencing").next().unwrap();
    assert!(fenced.contains("REFUSED: stale fence token 1"), "{out}");
    assert!(fenced.contains("storage is at token 2"), "{out}");
    assert!(fenced.contains("final balance 150: correct"), "{out}");
    let unfenced = out.split("Without fencing").nth(1).unwrap();
    assert!(unfenced.contains("ACCEPTED"), "{out}");
    assert!(unfenced.contains("final balance 70: CORRUPTED"), "{out}");
}

#[test]
fn demo_reports_bad_input_with_typed_errors() {
    let (code, _, err) = fencelock(&["demo", "--backend", "nosuch://x"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("unknown backend scheme"), "{err}");
    let (code, _, err) = fencelock(&["demo", "--ttl", "0s"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("invalid ttl"), "{err}");
    let (code, _, err) = fencelock(&["demo", "--ttl", "soon"]);
    assert_eq!(code, 2, "{err}");
}
