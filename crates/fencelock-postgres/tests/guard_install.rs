//! Installing a row guard from psql, as a shell user does: quiet on a table guarded for the
//! first time (no `NOTICE: trigger ... does not exist, skipping`), and when removing a guard
//! that is not there.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::Command;

use fencelock_testkit::postgres::pg_url;

/// Runs `sql` with psql against the test server; returns its stderr.
fn psql(sql: &str) -> String {
    let output = Command::new("psql")
        .arg(pg_url())
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-c", sql])
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run psql ({e}): install the PostgreSQL client (apt-get install postgresql-client)")
        });
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "psql -c {sql:?} failed: {stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn installing_a_guard_on_a_fresh_table_prints_no_notice() {
    let s = common::split().await;
    let (app, locks) = (s.app.name().to_owned(), s.locks.name().to_owned());
    sqlx::query(&format!(
        "CREATE TABLE {app}.accounts (id bigint PRIMARY KEY, fence_token bigint, fence_owner bytea)"
    ))
    .execute(s.app.admin())
    .await
    .unwrap();
    for sql in [
        format!("SELECT {locks}.fencelock_guard_table('{app}.accounts')"),
        format!("SELECT {locks}.fencelock_guard_table('{app}.accounts')"),
        format!("SELECT {locks}.fencelock_unguard_table('{app}.accounts')"),
        format!("SELECT {locks}.fencelock_unguard_table('{app}.accounts')"),
    ] {
        let stderr = psql(&sql);
        assert!(stderr.trim().is_empty(), "{sql}: psql said {stderr:?}");
    }
    // The guard was installed: both triggers, and a notice-free session afterwards still
    // shows the caller's own notices (the setting was the function's only).
    let stderr = psql(&format!(
        "SELECT {locks}.fencelock_guard_table('{app}.accounts'); \
         DO $$ BEGIN RAISE NOTICE 'still heard'; END $$"
    ));
    assert!(stderr.contains("still heard"), "{stderr:?}");
    let triggers: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM pg_trigger WHERE tgrelid = '{app}.accounts'::regclass \
         AND tgname LIKE 'fencelock_guard_%'"
    ))
    .fetch_one(s.app.admin())
    .await
    .unwrap();
    assert_eq!(triggers, 2);
    s.app.cleanup().await;
    s.locks.cleanup().await;
}
