//! An application role that may use fencelock's schema but not create in it (USAGE on the
//! schema, DML on its tables and sequences) connects to a schema its owner migrated, locks,
//! and writes through the fence: connecting skips the migrator when the schema is current
//! (DESIGN 8, *Security model*). A role with SELECT alone inspects.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::{FencedStorageExt, LockBackend, LockKey};
use fencelock_postgres::PgConfig;
use fencelock_testkit::postgres::{PgSchema, pg_options};
use sqlx::Executor;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_role_without_create_uses_a_schema_its_owner_migrated() {
    let schema = PgSchema::create().await;
    let name = schema.name();
    let owner = PgConfig::from_options(pg_options())
        .schema(name)
        .connect()
        .await
        .expect("the owner migrates");
    owner.close().await;
    let role = format!("{name}_app");
    schema
        .admin()
        .execute(
            format!(
                "CREATE ROLE {role} LOGIN; \
                 GRANT USAGE ON SCHEMA {name} TO {role}; \
                 GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {name} TO {role}; \
                 GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {name} TO {role}"
            )
            .as_str(),
        )
        .await
        .unwrap();
    let can_create: bool = sqlx::query_scalar("SELECT has_schema_privilege($1, $2, 'CREATE')")
        .bind(&role)
        .bind(name)
        .fetch_one(schema.admin())
        .await
        .unwrap();
    assert!(!can_create, "the application role can create in the schema");

    let app = PgConfig::from_options(pg_options().username(&role))
        .schema(name)
        .operation_timeout(common::OP_TIMEOUT)
        .connect()
        .await
        .expect("the application role connects without CREATE");
    let backend = app.lease_backend();
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

    // A monitoring role with SELECT alone inspects (fencelock inspect does nothing more).
    let monitor = format!("{name}_monitor");
    schema
        .admin()
        .execute(
            format!(
                "CREATE ROLE {monitor} LOGIN; \
                 GRANT USAGE ON SCHEMA {name} TO {monitor}; \
                 GRANT SELECT ON ALL TABLES IN SCHEMA {name} TO {monitor}"
            )
            .as_str(),
        )
        .await
        .unwrap();
    let watching = PgConfig::from_options(pg_options().username(&monitor))
        .schema(name)
        .operation_timeout(common::OP_TIMEOUT)
        .connect()
        .await
        .expect("a role with SELECT alone connects");
    let info = watching.lease_backend().inspect(&key).await.unwrap();
    assert_eq!(info.last_token, Some(lease.token));
    watching.lease_backend().inspect_queue(&key).await.unwrap();
    watching.close().await;

    schema
        .admin()
        .execute(
            format!("DROP OWNED BY {role}; DROP ROLE {role}; DROP OWNED BY {monitor}; DROP ROLE {monitor}")
                .as_str(),
        )
        .await
        .unwrap();
}
