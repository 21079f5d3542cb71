//! fencelock's schema deployed as DESIGN 8.1 says: migrated by its owner, a role that is no
//! superuser, and used by an application role granted USAGE on the schema, SELECT on its
//! tables and DML on the queue and holder tables alone. The application role connects (the
//! migrator is skipped when the schema is current), locks, admits and writes through the
//! fence, and runs the whole conformance suite on both backends and the storage suites on its
//! own tables; it cannot write a counter, a fence, the storage or an epoch but through
//! fencelock's functions, nor call the operator's. A role with SELECT alone inspects.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::roles;
use fencelock_core::{Error, FencedStorageExt, LockBackend, LockKey};
use fencelock_postgres::PgConfig;
use fencelock_testkit::postgres::pg_options;
use sqlx::Executor;

mod app_lease {
    fencelock_conformance::conformance_suite!(crate::common::roles::lease_setup());
}

mod app_advisory {
    fencelock_conformance::conformance_suite!(crate::common::roles::advisory_setup());
}

mod app_admit {
    fencelock_conformance::storage_suite!(crate::common::roles::admit_setup());
}

mod app_row_guard {
    fencelock_conformance::storage_suite!(crate::common::roles::row_guard_setup());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_application_role_locks_and_writes_but_cannot_move_a_fence_back() {
    let closed = roles::closed().await;
    let name = closed.schema.name().to_owned();
    let can_create: bool = sqlx::query_scalar("SELECT has_schema_privilege($1, $2, 'CREATE')")
        .bind(&closed.app)
        .bind(&name)
        .fetch_one(closed.schema.admin())
        .await
        .unwrap();
    assert!(!can_create, "the application role can create in the schema");

    let app = PgConfig::from_options(closed.app_options())
        .schema(&name)
        .operation_timeout(common::OP_TIMEOUT)
        .connect()
        .await
        .expect("the application role connects without CREATE");
    let backend = app.lease_backend();
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
        .admit(&mut *tx, key.as_str(), lease.fence())
        .await
        .unwrap();
    tx.commit().await.unwrap();

    // Everything that would let it set the fence, a counter, the storage or an epoch back.
    let (epoch, last): (i64, i64) = sqlx::query_as(&format!(
        "SELECT (SELECT epoch FROM {name}.fencelock_epoch_live), \
                (SELECT last_token FROM {name}.fencelock_counters WHERE key = 'least-privilege')"
    ))
    .fetch_one(closed.schema.admin())
    .await
    .unwrap();
    let refused = [
        format!("SELECT {name}.fencelock_lower_fence('least-privilege', 1)"),
        format!(
            "SELECT {name}.fencelock_advance_token('least-privilege', {})",
            last + 1_000
        ),
        format!(
            "SELECT {name}.fencelock_new_epoch({epoch}, {})",
            epoch + 1_000
        ),
        format!("UPDATE {name}.fencelock_fences SET token = 1"),
        format!("DELETE FROM {name}.fencelock_fences"),
        format!("UPDATE {name}.fencelock_counters SET last_token = 1"),
        format!("DELETE FROM {name}.fencelock_counters"),
        format!("INSERT INTO {name}.fencelock_counters (key, last_token) VALUES ('other', 1)"),
        format!("TRUNCATE {name}.fencelock_counters"),
        format!("UPDATE {name}.fencelock_storage SET token = 1"),
        format!("DELETE FROM {name}.fencelock_storage"),
        format!("UPDATE {name}.fencelock_epoch SET epoch = 0"),
        format!("DELETE FROM {name}.fencelock_epoch_live"),
        format!("DELETE FROM {name}.fencelock_mechanism"),
    ];
    for sql in &refused {
        let error = app
            .pool()
            .execute(sql.as_str())
            .await
            .expect_err(&format!("the application role ran {sql}"));
        let code = error
            .as_database_error()
            .and_then(|e| e.code().map(|c| c.into_owned()));
        assert_eq!(
            code.as_deref(),
            Some("42501"),
            "{sql}: refused for another reason: {error}"
        );
    }
    // Starting an epoch that no grant needs starts none.
    let started: i64 = sqlx::query_scalar(&format!("SELECT {name}.fencelock_start_epoch($1)"))
        .bind(epoch)
        .fetch_one(app.pool())
        .await
        .unwrap();
    assert_eq!(started, epoch, "an epoch started that no grant needed");

    // Nothing moved: the superseded holder is refused, the next grant admitted.
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(info.last_token, Some(lease.token));
    let mut tx = app.pool().begin().await.unwrap();
    let stale = fence.admit(&mut *tx, key.as_str(), first.fence()).await;
    assert!(matches!(stale, Err(Error::Stale { .. })), "{stale:?}");
    drop(tx);
    assert!(backend.release(&lease).await.unwrap());
    let next = backend
        .try_acquire(&key, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("a free key");
    storage
        .write_key(key.as_str(), next.fence(), b"w")
        .await
        .unwrap();
    assert!(backend.release(&next).await.unwrap());
    app.close().await;

    // The owner may: it raises the key's counter floor (an operator's step).
    let owner = PgConfig::from_options(closed.owner_options())
        .schema(&name)
        .connect()
        .await
        .expect("the owner connects");
    owner
        .pool()
        .execute(
            format!(
                "SELECT {name}.fencelock_advance_token('least-privilege', {})",
                next.token.get() + 10
            )
            .as_str(),
        )
        .await
        .expect("the owner advances the counter");
    owner.close().await;

    // A monitoring role with SELECT alone inspects (fencelock inspect does nothing more).
    let monitor = closed.schema.role("monitor").await;
    closed
        .schema
        .admin()
        .execute(
            format!(
                "GRANT USAGE ON SCHEMA {name} TO {monitor}; \
                 GRANT SELECT ON ALL TABLES IN SCHEMA {name} TO {monitor}"
            )
            .as_str(),
        )
        .await
        .unwrap();
    let watching = PgConfig::from_options(pg_options().username(&monitor))
        .schema(&name)
        .operation_timeout(common::OP_TIMEOUT)
        .connect()
        .await
        .expect("a role with SELECT alone connects");
    let info = watching.lease_backend().inspect(&key).await.unwrap();
    assert_eq!(
        info.last_token.map(|t| t.get()),
        Some(next.token.get() + 10)
    );
    watching.lease_backend().inspect_queue(&key).await.unwrap();
    watching.close().await;
}
