//! A backend spec's password stays out of the places other users or the command read: the
//! spec can come from a file (`--backend @FILE`, `FENCELOCK_BACKEND=@FILE`), a password typed
//! on the command line is warned about, and `run` does not hand `FENCELOCK_BACKEND` to its
//! command. Against the shared PostgreSQL (trust authentication: any password is accepted,
//! so one is present without being needed).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Output;

use fencelock_testkit::postgres::PgSchema;

use common::{code, explain};

const PASSWORD: &str = "hunter2-in-the-spec";

fn spec(schema: &PgSchema) -> String {
    format!(
        "postgres://postgres:{PASSWORD}@127.0.0.1:5432/test?schema={}",
        schema.name()
    )
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_stays_off_the_command_line_and_out_of_the_command() {
    let schema = PgSchema::create().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("backend");
    std::fs::write(&file, format!("{}\n", spec(&schema))).unwrap();
    let from_file = format!("@{}", file.display());

    // From a file: connected, no warning, and the command sees neither the spec nor its
    // password.
    let out = common::command()
        .args(["run", "--backend", &from_file, "--key", "k", "--", "env"])
        .env_remove("FENCELOCK_BACKEND")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert!(
        stdout(&out).contains("FENCELOCK_TOKEN="),
        "{}",
        explain(&out)
    );
    assert!(!stdout(&out).contains(PASSWORD), "{}", explain(&out));
    assert!(!stderr(&out).contains("warning"), "{}", explain(&out));

    // In the environment: the command's environment has no FENCELOCK_BACKEND.
    let out = common::command()
        .args(["run", "--key", "k", "--", "env"])
        .env("FENCELOCK_BACKEND", spec(&schema))
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert!(
        !stdout(&out).contains("FENCELOCK_BACKEND"),
        "{}",
        explain(&out)
    );
    assert!(!stdout(&out).contains(PASSWORD), "{}", explain(&out));
    assert!(!stderr(&out).contains("warning"), "{}", explain(&out));

    // On the command line: it works, with a warning that names the safe form.
    let out = common::command()
        .args(["inspect", "--backend", &spec(&schema), "k"])
        .env_remove("FENCELOCK_BACKEND")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert!(
        stderr(&out).contains("carries a password") && stderr(&out).contains("--backend @FILE"),
        "{}",
        explain(&out)
    );
    assert!(!stderr(&out).contains(PASSWORD), "{}", explain(&out));

    // A file that is not there, or holds no spec: a usage error naming the file.
    let missing = dir.path().join("missing");
    let empty = dir.path().join("empty");
    std::fs::write(&empty, "\n").unwrap();
    for path in [&missing, &empty] {
        let out = common::command()
            .args(["inspect", "--backend", &format!("@{}", path.display()), "k"])
            .env_remove("FENCELOCK_BACKEND")
            .output()
            .unwrap();
        assert_eq!(code(&out), 2, "{}", explain(&out));
        assert!(
            stderr(&out).contains(&path.display().to_string()),
            "{}",
            explain(&out)
        );
    }
    // A bad spec in a file is named by the file, its password hidden.
    let bad = dir.path().join("bad");
    std::fs::write(
        &bad,
        format!("postgres://postgres:{PASSWORD}@127.0.0.1:5432/test?schema=a;b"),
    )
    .unwrap();
    let out = common::command()
        .args(["inspect", "--backend", &format!("@{}", bad.display()), "k"])
        .env_remove("FENCELOCK_BACKEND")
        .output()
        .unwrap();
    assert_eq!(code(&out), 2, "{}", explain(&out));
    assert!(!stderr(&out).contains(PASSWORD), "{}", explain(&out));
}

/// `--grant-file` never writes through a symlink: a link planted at the path (to a file of
/// the user's) is replaced by the grant, and its target keeps what it held.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grant_file_replaces_a_symlink_and_spares_its_target() {
    let schema = PgSchema::create().await;
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim");
    std::fs::write(&victim, "precious\n").unwrap();
    let grant = dir.path().join("grant.json");
    std::os::unix::fs::symlink(&victim, &grant).unwrap();
    let out = common::command()
        .args([
            "run",
            "--backend",
            &spec(&schema),
            "--key",
            "k",
            "--grant-file",
        ])
        .arg(&grant)
        .args(["--", "true"])
        .env_remove("FENCELOCK_BACKEND")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", explain(&out));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(
        !std::fs::symlink_metadata(&grant)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let written = std::fs::read_to_string(&grant).unwrap();
    assert!(written.contains("\"token\""), "{written}");
    // Nothing is left beside it.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}
