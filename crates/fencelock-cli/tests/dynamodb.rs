//! `fencelock run`, `inspect` and `advance-token` on a `dynamodb://` backend: moto's server,
//! reached directly. Every command here is one client at a time, so moto's missing per-item
//! atomicity under concurrent requests (which the DynamoDB crate's tests put a serializing
//! proxy in front of) cannot show.
#![cfg(feature = "dynamodb")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::{fencelock, fencelock_with};
use fencelock_servers::moto::Moto;
use serde_json::Value;

/// The backend URL of a fresh table on `moto`, created by the first command.
fn url(moto: &Moto, table: &str) -> String {
    format!(
        "dynamodb://testing:testing@{table}?create=true&endpoint=http://127.0.0.1:{}&region=us-east-1",
        moto.port
    )
}

/// The token a `fencelock run` on `key` was granted, as the child saw it.
fn token_of_a_run(backend: &str, key: &str, env: &[(&str, &str)]) -> u64 {
    let (code, out, err) = fencelock_with(
        &[
            "run",
            "--backend",
            backend,
            "--key",
            key,
            "--",
            "sh",
            "-c",
            "echo $FENCELOCK_TOKEN",
        ],
        env,
    );
    assert_eq!(code, 0, "{out}\n{err}");
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("not a token: {out:?}\n{err}"))
}

/// `fencelock inspect --json` of `key`.
fn inspect(backend: &str, key: &str) -> Value {
    let (code, out, err) = fencelock(&["inspect", "--json", "--backend", backend, key]);
    assert_eq!(code, 0, "{out}\n{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}\n{err}"))
}

#[test]
fn run_inspect_and_advance_token_on_dynamodb() {
    let moto = Moto::try_start().expect("moto_server for the DynamoDB CLI test");
    let backend = url(&moto, "fencelock-cli");
    assert_eq!(token_of_a_run(&backend, "job", &[]), 1);
    assert_eq!(token_of_a_run(&backend, "job", &[]), 2);

    let shown = inspect(&backend, "job");
    assert_eq!(shown["last_token"], 2, "{shown}");
    assert_eq!(
        shown["holder"],
        Value::Null,
        "released after the run: {shown}"
    );
    let (code, text, err) = fencelock(&["inspect", "--backend", &backend, "job"]);
    assert_eq!(code, 0, "{err}");
    let last = common::inspect_row(&text, "last token").unwrap_or_default();
    assert!(last.starts_with('2'), "{text}");
    assert!(
        !text.contains("testing:testing"),
        "the secret was shown: {text}"
    );

    let (code, out, err) = fencelock(&[
        "advance-token",
        "--backend",
        &backend,
        "--key",
        "job",
        "--to",
        "10",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("above 10"), "{out}");
    assert_eq!(inspect(&backend, "job")["last_token"], 10);
    assert_eq!(token_of_a_run(&backend, "job", &[]), 11);

    // Credentials from the environment instead of the URL.
    let from_env = backend.replace("testing:testing@", "");
    let env = [
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
    ];
    assert_eq!(token_of_a_run(&from_env, "job", &env), 12);
    assert_eq!(token_of_a_run(&from_env, "other", &env), 1);
}
