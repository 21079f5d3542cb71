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

/// Connecting names the server in every error, says "not a PostgreSQL server" when another
/// kind of server answers, and refuses a role or a database that does not exist as
/// configuration, never retryable.
#[tokio::test]
async fn connect_errors_name_the_server() {
    let dead = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let refused = PgConfig::from_options(pg_options().host("127.0.0.1").port(dead))
        .operation_timeout(Duration::from_millis(500))
        .connect()
        .await
        .unwrap_err();
    assert!(matches!(refused, Error::Unavailable { .. }), "{refused:?}");
    assert!(
        refused.to_string().contains(&format!("127.0.0.1:{dead}")),
        "{refused}"
    );

    // Another kind of server: it greets first, in a protocol of its own.
    let other = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = other.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in other.incoming() {
            let Ok(mut stream) = stream else { return };
            let _ = std::io::Write::write_all(&mut stream, b"HTTP/1.0 400 Bad Request\r\n\r\n");
            std::thread::sleep(Duration::from_secs(2));
        }
    });
    let started = std::time::Instant::now();
    let wrong = PgConfig::from_options(pg_options().host("127.0.0.1").port(port))
        .operation_timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(4), "{wrong}");
    match &wrong {
        Error::InvalidConfig { message, .. } => assert!(
            message.contains(&format!("127.0.0.1:{port}"))
                && message.contains("not a PostgreSQL server"),
            "{message}"
        ),
        other => panic!("{other:?}"),
    }

    for options in [
        pg_options().username("fencelock_no_such_role"),
        pg_options().database("fencelock_no_such_database"),
    ] {
        let addr = format!("{}:{}", options.get_host(), options.get_port());
        match PgConfig::from_options(options).connect().await {
            Err(e @ Error::InvalidConfig { .. }) => {
                assert!(!e.is_retryable());
                assert!(e.to_string().contains(&addr), "{e}");
            }
            other => panic!("{other:?}"),
        }
    }
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

/// A serialization failure (`40001`) and a deadlock (`40P01`), made on the server, map to the
/// retryable [`Error::Conflict`].
#[tokio::test]
async fn serialization_failures_and_deadlocks_are_retryable_conflicts() {
    use fencelock_postgres::map_sqlx_error;
    use sqlx::{Connection, PgConnection};

    let schema = fencelock_testkit::postgres::PgSchema::create().await;
    let table = format!("{}.conflict_rows", schema.name());
    let mut a = PgConnection::connect_with(&pg_options()).await.unwrap();
    let mut b = PgConnection::connect_with(&pg_options()).await.unwrap();
    sqlx::raw_sql(&format!(
        "CREATE TABLE {table} (id int PRIMARY KEY, v int); INSERT INTO {table} VALUES (1, 0), (2, 0)"
    ))
    .execute(&mut a)
    .await
    .unwrap();

    // 40001: a REPEATABLE READ transaction updates a row changed since its snapshot.
    sqlx::raw_sql(&format!(
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT v FROM {table} WHERE id = 1"
    ))
    .execute(&mut a)
    .await
    .unwrap();
    sqlx::raw_sql(&format!("UPDATE {table} SET v = v + 1 WHERE id = 1"))
        .execute(&mut b)
        .await
        .unwrap();
    let failure = sqlx::raw_sql(&format!("UPDATE {table} SET v = v + 1 WHERE id = 1"))
        .execute(&mut a)
        .await
        .unwrap_err();
    let mapped = map_sqlx_error("test", failure);
    assert!(
        matches!(&mapped, Error::Conflict { message, .. } if message.contains("40001")),
        "{mapped:?}"
    );
    assert!(mapped.is_retryable());
    sqlx::raw_sql("ROLLBACK").execute(&mut a).await.unwrap();

    // 40P01: two transactions lock two rows in opposite orders.
    for conn in [&mut a, &mut b] {
        sqlx::raw_sql("BEGIN").execute(&mut *conn).await.unwrap();
    }
    sqlx::raw_sql(&format!("UPDATE {table} SET v = 1 WHERE id = 1"))
        .execute(&mut a)
        .await
        .unwrap();
    sqlx::raw_sql(&format!("UPDATE {table} SET v = 2 WHERE id = 2"))
        .execute(&mut b)
        .await
        .unwrap();
    let (first_sql, second_sql) = (
        format!("UPDATE {table} SET v = 1 WHERE id = 2"),
        format!("UPDATE {table} SET v = 2 WHERE id = 1"),
    );
    let first = sqlx::raw_sql(&first_sql).execute(&mut a);
    let second = sqlx::raw_sql(&second_sql).execute(&mut b);
    let (first, second) = tokio::join!(first, second);
    let failure = match (first, second) {
        (Err(e), Ok(_)) | (Ok(_), Err(e)) => e,
        other => panic!("expected one deadlock victim: {other:?}"),
    };
    let mapped = map_sqlx_error("test", failure);
    assert!(
        matches!(&mapped, Error::Conflict { message, .. } if message.contains("40P01")),
        "{mapped:?}"
    );
    assert!(mapped.is_retryable());
    a.close().await.unwrap();
    b.close().await.unwrap();
    schema.cleanup().await;
}
