//! Bad configuration, an unreachable server, a role without privileges: typed errors, no panic.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockBackend, LockKey};
use fencelock_postgres::{PgConfig, PgDatabase};
use fencelock_testkit::postgres::pg_options;

#[tokio::test]
async fn invalid_urls_are_invalid_config() {
    for url in [
        "",
        "not a url",
        "postgres://host:notaport/db",
        "mysql://x@y/z",
    ] {
        match PgDatabase::connect(url).await {
            Err(Error::InvalidConfig { .. }) => {}
            other => panic!("{url:?}: {other:?}"),
        }
    }
}

#[tokio::test]
async fn invalid_schema_names_are_refused_before_connecting() {
    let long = "s".repeat(49);
    for schema in [
        "",
        "Upper",
        "1digit",
        "with-dash",
        "semi;colon",
        "quote\"d",
        long.as_str(),
    ] {
        let outcome = PgConfig::from_options(pg_options())
            .schema(schema)
            .connect()
            .await;
        assert!(
            matches!(outcome, Err(Error::InvalidConfig { .. })),
            "{schema:?}: {outcome:?}"
        );
    }
}

#[tokio::test]
async fn unreachable_server_is_unavailable_quickly() {
    // A port nothing listens on: bind, learn the port, close.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let started = std::time::Instant::now();
    let outcome = PgConfig::from_options(pg_options().host("127.0.0.1").port(port))
        .operation_timeout(Duration::from_millis(500))
        .connect()
        .await;
    match outcome {
        Err(e @ Error::Unavailable { .. }) => assert!(e.is_retryable()),
        other => panic!("{other:?}"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
}

#[tokio::test]
async fn blackholed_server_does_not_hang_calls() {
    let (schema, proxy, db) = common::proxied_database().await;
    let backend = db.lease_backend();
    let key = LockKey::new("blackhole").unwrap();
    let lease = backend
        .try_acquire(&key, Duration::from_secs(30))
        .await
        .unwrap()
        .unwrap();
    proxy.set_blackhole(true);
    let started = std::time::Instant::now();
    assert!(matches!(
        backend.extend(&lease, Duration::from_secs(30)).await,
        Err(Error::Unavailable { .. })
    ));
    assert!(matches!(
        db.storage().read(&key, lease.fence()).await,
        Err(Error::Unavailable { .. })
    ));
    assert!(started.elapsed() < common::OP_TIMEOUT * 4);
    proxy.heal();
    drop(db);
    schema.cleanup().await;
}

#[tokio::test]
async fn role_without_privileges_gets_typed_errors() {
    let (schema, db) = common::database().await;
    let role = format!("{}_noperm", schema.name());
    sqlx::query(&format!("CREATE ROLE {role} LOGIN"))
        .execute(schema.admin())
        .await
        .unwrap();
    let options = pg_options().username(&role);

    // Cannot create its own schema.
    let own = PgConfig::from_options(options.clone())
        .schema(format!("{}_own", schema.name()))
        .connect()
        .await;
    match &own {
        Err(Error::Backend { message, .. }) => assert!(message.contains("42501"), "{message}"),
        other => panic!("creating a schema without the right: {other:?}"),
    }

    // Cannot use the tables of a schema it may see but has no rights on.
    sqlx::query(&format!(
        "GRANT USAGE ON SCHEMA {} TO {role}",
        schema.name()
    ))
    .execute(schema.admin())
    .await
    .unwrap();
    let theirs = PgConfig::from_options(options)
        .schema(schema.name())
        .run_migrations(false)
        .connect()
        .await
        .unwrap();
    let key = LockKey::new("noperm").unwrap();
    match theirs
        .lease_backend()
        .try_acquire(&key, Duration::from_secs(5))
        .await
    {
        Err(Error::Backend { message, .. }) => assert!(message.contains("42501"), "{message}"),
        other => panic!("acquire without privileges: {other:?}"),
    }
    match theirs.storage().peek(&key).await {
        Err(Error::Backend { message, .. }) => assert!(message.contains("42501"), "{message}"),
        other => panic!("peek without privileges: {other:?}"),
    }
    theirs.close().await;
    // Nothing was changed by the refused calls.
    assert_eq!(
        db.lease_backend().inspect(&key).await.unwrap().last_token,
        None
    );
    db.close().await;
    for sql in [format!("DROP OWNED BY {role}"), format!("DROP ROLE {role}")] {
        sqlx::query(&sql).execute(schema.admin()).await.unwrap();
    }
    schema.cleanup().await;
}
