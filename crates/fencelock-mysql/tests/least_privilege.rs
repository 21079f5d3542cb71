//! An installation deployed as DESIGN 8.3 says: made by an owner account that is not root,
//! used by an application account granted SELECT and EXECUTE on the database and DML on the
//! lease, queue and reader tables alone (no CREATE, no CREATE ROUTINE). The application
//! account connects (nothing is created when the installation is complete), locks, admits
//! and writes through the fence, and runs the whole conformance suite; it cannot write a
//! counter, a fence, the storage or the epoch but through the procedures that run as the
//! owner, nor take the operator's steps.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::accounts;
use fencelock_core::{Error, FencedStorageExt, LockBackend, LockKey};
use fencelock_mysql::sqlx;

mod app_account {
    fencelock_conformance::conformance_suite!(crate::common::accounts::app_setup());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_application_account_locks_and_writes_but_cannot_move_a_fence_back() {
    let deployed = accounts::deployed("lp").await;
    let p = deployed.prefix.clone();
    let app = deployed
        .app_config()
        .connect()
        .await
        .expect("the application account connects without CREATE");
    let backend = app.lock_backend();
    let key = LockKey::new("least-privilege").unwrap();
    let first = backend
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a free key");
    assert!(backend.release(&first).await.unwrap());
    let lease = backend
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a free key");
    let storage = app.storage();
    storage
        .write_key(key.as_str(), lease.fence(), b"v")
        .await
        .unwrap();
    let fence = app.fence();
    let mut tx = app.pool().begin().await.unwrap();
    fence
        .admit(&mut tx, key.as_str(), lease.fence())
        .await
        .unwrap();
    tx.commit().await.unwrap();

    // Everything that would let it set the fence, a counter, the storage or the epoch back.
    let refused = [
        format!(
            "CALL {p}advance_token_v2('least-privilege', {})",
            lease.token.get() + 1_000
        ),
        format!("CALL {p}new_epoch_v1(NULL, 1000, @epoch)"),
        format!("UPDATE {p}fences SET token = 1"),
        format!("DELETE FROM {p}fences"),
        format!("UPDATE {p}counters SET token = 1"),
        format!("DELETE FROM {p}counters"),
        format!("INSERT INTO {p}counters (lock_key, token) VALUES ('other', 1)"),
        format!("UPDATE {p}storage SET token = 1"),
        format!("DELETE FROM {p}storage"),
        format!("UPDATE {p}epoch SET epoch = 0"),
    ];
    for sql in &refused {
        let error = sqlx::raw_sql(sql)
            .execute(app.pool())
            .await
            .expect_err(&format!("the application account ran {sql}"));
        let number = error
            .as_database_error()
            .and_then(|e| e.try_downcast_ref::<sqlx::mysql::MySqlDatabaseError>())
            .map(|e| e.number());
        // ER_TABLEACCESS_DENIED_ERROR: the statement, or the one inside a procedure that
        // runs with the caller's rights.
        assert_eq!(
            number,
            Some(1142),
            "{sql}: refused for another reason: {error}"
        );
    }

    // Nothing moved: the superseded holder is refused.
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(info.last_token, Some(lease.token));
    let mut tx = app.pool().begin().await.unwrap();
    let stale = fence.admit(&mut tx, key.as_str(), first.fence()).await;
    assert!(matches!(stale, Err(Error::Stale { .. })), "{stale:?}");
    drop(tx);
    let stale = storage.write_key(key.as_str(), first.fence(), b"x").await;
    assert!(matches!(stale, Err(Error::Stale { .. })), "{stale:?}");
    assert!(backend.release(&lease).await.unwrap());
    app.close().await;

    // The owner may take the operator's step.
    let owner = deployed
        .owner_config()
        .connect()
        .await
        .expect("the owner connects");
    let floor = fencelock_core::FencingToken::new(lease.token.get() + 10).unwrap();
    owner
        .lock_backend()
        .advance_token(&key, floor)
        .await
        .expect("the owner advances the counter");
    owner.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_makes_an_earlier_installation_run_the_fence_as_itself() {
    let deployed = accounts::deployed("up").await;
    let p = deployed.prefix.clone();
    // As an earlier version installed them: every procedure with the caller's rights.
    let mut admin = common::admin().await;
    for name in [
        "next_token_v2",
        "install_epoch_v1",
        "storage_apply_v1",
        "admit_v1",
    ] {
        sqlx::raw_sql(&format!("ALTER PROCEDURE {p}{name} SQL SECURITY INVOKER"))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    let refused = deployed.app_config().connect().await;
    assert!(
        refused.is_err(),
        "the application account used an installation that runs the fence with its rights"
    );
    deployed
        .owner_config()
        .connect()
        .await
        .expect("the owner completes the installation")
        .close()
        .await;
    let definers: i64 = sqlx::query_scalar(
        "SELECT COUNT(*) FROM information_schema.routines \
          WHERE routine_schema = DATABASE() AND security_type = 'DEFINER' \
            AND routine_name IN (?, ?, ?, ?)",
    )
    .bind(format!("{p}next_token_v2"))
    .bind(format!("{p}install_epoch_v1"))
    .bind(format!("{p}storage_apply_v1"))
    .bind(format!("{p}admit_v1"))
    .fetch_one(&mut admin)
    .await
    .unwrap();
    assert_eq!(definers, 4);
    let app = deployed
        .app_config()
        .connect()
        .await
        .expect("the application account connects");
    let key = LockKey::new("upgraded").unwrap();
    let backend = app.lock_backend();
    let lease = backend
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a free key");
    assert!(backend.release(&lease).await.unwrap());
    app.close().await;
}
