//! `fencelock inspect` on the advisory backend while a plain SQL session holds the key's
//! advisory lock: reported as held, without a fence, with that session's pid.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::fencelock;
use fencelock::LockKey;
use fencelock::postgres::advisory_lock_id_in;
use fencelock::postgres::sqlx::{self, Connection, PgConnection};
use fencelock_testkit::postgres::PgSchema;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_shows_a_plain_sql_holder() {
    let schema = PgSchema::create().await;
    let spec = format!("{}?schema={}&backend=advisory", schema.url(), schema.name());
    let key = format!("inspect-unfenced/{}", schema.unique_id());
    let id = advisory_lock_id_in(schema.name(), &LockKey::new(&key).unwrap());
    let mut plain = PgConnection::connect_with(&fencelock_testkit::postgres::pg_options())
        .await
        .unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut plain)
        .await
        .unwrap();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(id)
        .execute(&mut plain)
        .await
        .unwrap();

    let inspect = |spec: String, key: String| {
        tokio::task::spawn_blocking(move || fencelock(&["inspect", "--backend", &spec, &key]))
    };
    let (code, out, err) = inspect(spec.clone(), key.clone()).await.unwrap();
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "held without a fence by PostgreSQL session pid {pid}"
        )),
        "{out}"
    );
    assert!(!out.contains("the lock is free"), "{out}");

    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(id)
        .execute(&mut plain)
        .await
        .unwrap();
    plain.close().await.unwrap();
    let (code, out, err) = inspect(spec, key).await.unwrap();
    assert_eq!(code, 0, "{out}{err}");
    // Free again, and never granted by fencelock: said as such.
    assert!(out.contains("none (never granted under "), "{out}");
    assert!(!out.contains("held without a fence"), "{out}");
    schema.cleanup().await;
}
