//! An account that may use an installation but not change it (SELECT, INSERT, UPDATE, DELETE
//! and EXECUTE; no CREATE, no CREATE ROUTINE) connects to one its owner made, locks, and
//! writes through the fence: connecting creates nothing when every table and procedure is
//! there (DESIGN 8.3).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::{FencedStorageExt, LockBackend, LockKey, OwnerId};
use fencelock_mysql::MySqlConfig;
use fencelock_mysql::sqlx::{self, Connection};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_account_without_create_uses_an_installation_its_owner_made() {
    let (owner, cleanup) = common::database("lp").await;
    owner.close().await;
    let user = format!("fl_app_{:08x}", OwnerId::random().as_u128() as u32);
    let mut admin = common::admin().await;
    for host in ["%", "localhost"] {
        for sql in [
            format!("CREATE USER '{user}'@'{host}' IDENTIFIED BY 'app-pass'"),
            format!("GRANT SELECT, INSERT, UPDATE, DELETE, EXECUTE ON test.* TO '{user}'@'{host}'"),
        ] {
            sqlx::query(&sql).execute(&mut admin).await.unwrap();
        }
    }

    let app = MySqlConfig::from_url(&format!("mysql://{user}:app-pass@127.0.0.1:3306/test"))
        .unwrap()
        .prefix(cleanup.config().prefix_name())
        .connect()
        .await
        .expect("the account connects without CREATE");
    let backend = app.lock_backend();
    let key = LockKey::new("least-privilege").unwrap();
    let lease = backend
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a free key");
    app.storage()
        .write_key(key.as_str(), lease.fence(), b"v")
        .await
        .unwrap();
    assert!(backend.release(&lease).await.unwrap());
    app.close().await;

    for host in ["%", "localhost"] {
        sqlx::query(&format!("DROP USER '{user}'@'{host}'"))
            .execute(&mut admin)
            .await
            .unwrap();
    }
    admin.close().await.ok();
}
