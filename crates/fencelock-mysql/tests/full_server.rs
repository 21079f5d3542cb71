//! A server at its connection limit (a private MariaDB started with `max_connections = 4`,
//! never the shared one): the waiters of one process do not each ask it for a connection at
//! every try (thousands of refused connects a second before), at most ten a second are
//! refused, and the error says which server refused, why, and what to change.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::server::PrivateServer;
use fencelock_core::{Error, Locker};
use fencelock_mysql::MySqlConfig;
use fencelock_mysql::sqlx::{self, Connection};

async fn refused_so_far(admin: &mut sqlx::mysql::MySqlConnection) -> i64 {
    let (_, value): (String, String) =
        sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Connection_errors_max_connections'")
            .fetch_one(admin)
            .await
            .unwrap();
    value.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_is_asked_at_most_ten_times_a_second_and_named() {
    let server = PrivateServer::start_with(vec!["--max-connections=4"]);
    server.ready().await;
    let db = MySqlConfig::from_url(&server.url("t"))
        .unwrap()
        .session_pool_size(50)
        .connect()
        .await
        .unwrap();
    let locker = Locker::new(std::sync::Arc::new(db.lock_backend()));

    // An operator's session, then others until the server refuses: it is full.
    let mut admin = server.admin().await;
    let mut fillers = Vec::new();
    let options = MySqlConfig::from_url(&server.url("t"))
        .unwrap()
        .connect_options()
        .unwrap();
    while let Ok(conn) = sqlx::mysql::MySqlConnection::connect_with(&options).await {
        fillers.push(conn);
        assert!(fillers.len() < 20, "the server never refused a connection");
    }
    let before = refused_so_far(&mut admin).await;

    const WAIT: Duration = Duration::from_secs(3);
    let waiters: Vec<_> = (0..16)
        .map(|i| {
            let locker = locker.clone();
            tokio::spawn(async move { locker.lock(format!("full/{i}")).wait(WAIT).await })
        })
        .collect();
    let started = tokio::time::Instant::now();
    let mut said = Vec::new();
    for waiter in waiters {
        match waiter.await.unwrap() {
            Ok(_) => panic!("granted by a server with no connection to spare"),
            Err(e) => said.push(e),
        }
    }
    let elapsed = started.elapsed().as_secs_f64().max(WAIT.as_secs_f64());
    let refused = refused_so_far(&mut admin).await - before;
    // Ten a second, and a margin for the probes in flight at either end.
    assert!(
        (refused as f64) <= 10.0 * elapsed + 4.0,
        "{refused} refused connects in {elapsed:.1} s"
    );
    let named = said.iter().find_map(|e| match e {
        Error::Unavailable { message, .. } if message.contains("max_connections") => {
            Some(message.clone())
        }
        _ => None,
    });
    let message = named.unwrap_or_else(|| panic!("no error names the setting: {said:?}"));
    assert!(message.contains("session_pool_size"), "{message}");
    assert!(message.contains("127.0.0.1"), "{message}");

    // Room again: the next request is granted without waiting out a pause longer than 5 s.
    drop(fillers);
    let lease = locker
        .lock("full/after")
        .wait(Duration::from_secs(15))
        .await
        .expect("granted once the server has room");
    lease.release().await.unwrap();
    admin.close().await.ok();
}
