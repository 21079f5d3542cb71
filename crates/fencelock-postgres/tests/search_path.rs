//! Nothing fencelock runs on PostgreSQL resolves an operator or function on the caller's
//! `search_path` outside pg_catalog and fencelock's schema (DESIGN 8, *Security model*).
//!
//! Schema `fl_trojans` holds an exact-match operator or function for every call that
//! pg_catalog answers only through an implicit cast (`common/trojans.sql`); fencelock's
//! connections, and the application's, have it on their path as every default path has
//! `public`. The whole conformance suite runs on both backends, and the storage suite on the
//! application's own tables (`fencelock_admit` and the row guard), then the operator paths;
//! after each, no trojan may have fired. A schema in which a role other than its owner can
//! create, or owns an object, is refused at connect: its functions' pinned path holds it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::{Error, FencingToken, LockKey};
use fencelock_postgres::{PgBackendKind, PgConfig, PgDatabase};
use fencelock_testkit::postgres::{PgSchema, pg_options};
use sqlx::Executor;

use common::trojans;

mod lease {
    fencelock_conformance::conformance_suite_then!(
        crate::common::trojans::lease_setup(),
        crate::common::trojans::assert_none_fired()
    );
}

mod advisory {
    fencelock_conformance::conformance_suite_then!(
        crate::common::trojans::advisory_setup(),
        crate::common::trojans::assert_none_fired()
    );
}

mod admit {
    fencelock_conformance::storage_suite_then!(
        crate::common::trojans::admit_setup(),
        crate::common::trojans::assert_none_fired()
    );
}

mod row_guard {
    fencelock_conformance::storage_suite_then!(
        crate::common::trojans::row_guard_setup(),
        crate::common::trojans::assert_none_fired()
    );
}

async fn trojan_database() -> (PgSchema, PgDatabase) {
    let schema = PgSchema::create().await;
    let db = PgConfig::from_options(trojans::options().await)
        .schema(schema.name())
        .operation_timeout(common::OP_TIMEOUT)
        .connect()
        .await
        .expect("connecting with the trojans on the path");
    (schema, db)
}

/// What an operator or a script does beside the lock and the storage: the fence's lower,
/// current and present, unguarding a table, the transaction API, the queue listings, advance
/// token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_paths_resolve_nothing_on_the_callers_path() {
    let key = LockKey::new("trojan-ops").unwrap();
    // A schema serves one of the two backends.
    let (_advisory_schema, advisory_db) = trojan_database().await;
    let (_schema, db) = trojan_database().await;
    for backend in [
        advisory_db.lock_backend(PgBackendKind::Advisory),
        db.lock_backend(PgBackendKind::Lease),
    ] {
        let held = backend
            .try_acquire(&key, Duration::from_secs(5))
            .await
            .unwrap()
            .expect("a free key");
        backend.inspect(&key).await.unwrap();
        backend.inspect_queue(&key).await.unwrap();
        assert!(backend.release(&held).await.unwrap());
        backend
            .advance_token(&key, FencingToken::new(1 << 20).unwrap())
            .await
            .unwrap();
    }
    // The place keepers' statements: a waiter queued past the place ttl keeps its place only
    // if the keeper's rounds ran (the waiter itself does not try while the lock is held).
    for backend in [
        db.lock_backend(PgBackendKind::Lease),
        advisory_db.lock_backend(PgBackendKind::Advisory),
    ] {
        let held = backend
            .try_acquire(&key, Duration::from_secs(30))
            .await
            .unwrap()
            .expect("a free key");
        let mut waiters = Vec::new();
        for _ in 0..2 {
            waiters.push(tokio::spawn(
                fencelock_core::Locker::new(backend.clone())
                    .lock(key.as_str())
                    .ttl(Duration::from_secs(5))
                    .wait(Duration::from_secs(30))
                    .into_future(),
            ));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        let queue = backend.inspect_queue(&key).await.unwrap().unwrap();
        assert_eq!(queue.len(), 3, "a kept place lapsed: {queue:?}");
        assert!(backend.release(&held).await.unwrap());
        for waiter in waiters {
            let granted = waiter.await.unwrap().unwrap();
            assert!(granted.release().await.unwrap());
        }
    }
    let lease = db.lock_backend(PgBackendKind::Lease);
    let fence = db.fence();
    let mut fences = Vec::new();
    for _ in 0..2 {
        let held = lease
            .try_acquire(&key, Duration::from_secs(5))
            .await
            .unwrap()
            .expect("a free key");
        let granted = held.fence();
        let mut tx = db.pool().begin().await.unwrap();
        fence.admit(&mut *tx, &key, granted).await.unwrap();
        fence.present(&mut *tx, granted).await.unwrap();
        fence.current(&mut *tx, &key).await.unwrap();
        tx.commit().await.unwrap();
        assert!(lease.release(&held).await.unwrap());
        fences.push(granted);
    }
    // Below the counter's grants: refused, by the function that ran.
    let refused = fence.lower_fence(db.pool(), &key, fences[0].token).await;
    assert!(
        matches!(refused, Err(Error::InvalidConfig { .. })),
        "{refused:?}"
    );
    let table = format!("{}.trojan_guarded", db.schema());
    db.pool()
        .execute(
            format!("CREATE TABLE {table} (id int, fence_token bigint, fence_owner bytea)")
                .as_str(),
        )
        .await
        .unwrap();
    fence.guard_table(db.pool(), &table).await.unwrap();
    fence.unguard_table(db.pool(), &table).await.unwrap();
    db.storage()
        .transaction_with(
            "trojan-tx",
            Duration::from_secs(5),
            async |tx| -> fencelock_core::Result<()> {
                tx.read("trojan-tx").await?;
                tx.write("trojan-tx", b"v").await?;
                tx.peek("trojan-tx").await?;
                Ok(())
            },
        )
        .await
        .unwrap();
    trojans::assert_none_fired().await;
}

/// Every function of a migrated schema pins its `search_path`: fencelock's schema, then
/// pg_catalog, then pg_temp (migration 17, and `SET search_path FROM CURRENT` after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_function_pins_its_path() {
    let (schema, db) = common::database().await;
    let unpinned: Vec<(String, Option<Vec<String>>)> = sqlx::query_as(
        "SELECT p.oid::regprocedure::text, p.proconfig FROM pg_proc p \
         WHERE p.pronamespace = $1::regnamespace \
           AND NOT coalesce(p.proconfig, '{}') && ARRAY[$2, $3]",
    )
    .bind(schema.name())
    // Pinned by migration 17 (the name as `%I` writes it) or by `SET search_path FROM
    // CURRENT` (always quoted): the same path.
    .bind(format!(
        "search_path={}, pg_catalog, pg_temp",
        schema.name()
    ))
    .bind(format!(
        "search_path=\"{}\", pg_catalog, pg_temp",
        schema.name()
    ))
    .fetch_all(schema.admin())
    .await
    .unwrap();
    assert!(
        unpinned.is_empty(),
        "functions without the pinned path: {unpinned:#?}"
    );
    let count: i64 =
        sqlx::query_scalar("SELECT count(*) FROM pg_proc WHERE pronamespace = $1::regnamespace")
            .bind(db.schema())
            .fetch_one(schema.admin())
            .await
            .unwrap();
    assert!(
        count > 40,
        "only {count} functions: the schema was not migrated"
    );
}

fn refusal(result: fencelock_core::Result<PgDatabase>) -> String {
    match result {
        Err(Error::InvalidConfig { message, .. }) => message,
        Err(other) => panic!("refused with the wrong error: {other:?}"),
        Ok(_) => panic!("a schema others can change was accepted"),
    }
}

async fn connect(schema: &PgSchema) -> fencelock_core::Result<PgDatabase> {
    PgConfig::from_options(pg_options())
        .schema(schema.name())
        .operation_timeout(common::OP_TIMEOUT)
        .connect()
        .await
}

/// A role other than the schema's owner that can create in it, or owns an operator in it
/// (planted through such a grant), is refused at connect, naming the grant or the object, with
/// or without migrations; once the grant is revoked and the object dropped, connecting works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_others_can_create_in_is_refused_at_connect() {
    let schema = PgSchema::create().await;
    connect(&schema).await.expect("fencelock's own schema");
    let role = format!("{}_intruder", schema.name());
    let admin = schema.admin();
    admin
        .execute(format!("CREATE ROLE {role}").as_str())
        .await
        .unwrap();
    admin
        .execute(format!("GRANT CREATE, USAGE ON SCHEMA {} TO {role}", schema.name()).as_str())
        .await
        .unwrap();
    let message = refusal(connect(&schema).await);
    assert!(
        message.contains(&format!("CREATE on the schema is granted to {role}")),
        "{message}"
    );
    let without_migrations = PgConfig::from_options(pg_options())
        .schema(schema.name())
        .run_migrations(false)
        .connect()
        .await;
    assert!(refusal(without_migrations).contains(&role));

    // The intruder plants an operator, then loses the grant: its object still refuses.
    let mut tx = admin.begin().await.unwrap();
    tx.execute(format!("SET LOCAL ROLE {role}").as_str())
        .await
        .unwrap();
    tx.execute(
        format!(
            "CREATE FUNCTION {s}.planted(name, name) RETURNS text LANGUAGE sql AS 'SELECT 1::text'; \
             CREATE OPERATOR {s}.|| (LEFTARG = name, RIGHTARG = name, FUNCTION = {s}.planted)",
            s = schema.name()
        )
        .as_str(),
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    admin
        .execute(format!("REVOKE CREATE ON SCHEMA {} FROM {role}", schema.name()).as_str())
        .await
        .unwrap();
    let message = refusal(connect(&schema).await);
    assert!(
        message.contains(&format!("is owned by {role}")),
        "{message}"
    );

    admin
        .execute(format!("DROP OWNED BY {role}; DROP ROLE {role}").as_str())
        .await
        .unwrap();
    connect(&schema)
        .await
        .expect("the schema is fencelock's alone again");
}
