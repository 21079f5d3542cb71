//! A server at its connection limit (a throwaway cluster started with `max_connections = 8`,
//! never the shared one): the waiters of one process do not each loop on connects inside the
//! pool (sqlx retries SQLSTATE 53300 until its time-out and says only "pool timed out"), at
//! most ten connects a second are refused, and the error says which server refused, why, and
//! what to change; a new connect to the full server says the same.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, Locker};
use fencelock_postgres::{PgBackendKind, PgConfig};
use fencelock_testkit::pg_cluster::PgCluster;
use sqlx::Connection;
use sqlx::postgres::PgConnection;

/// What the server logs at each connect it refuses as full.
const REFUSED: &str = "too many clients already";

fn config(cluster: &PgCluster) -> PgConfig {
    PgConfig::from_url(&format!(
        "{}?pooler=none&schema=fl_full&backend=advisory",
        cluster.url()
    ))
    .unwrap()
    .operation_timeout(Duration::from_secs(2))
}

fn named(said: &[Error]) -> String {
    let named = said.iter().find_map(|e| match e {
        Error::Unavailable { message, .. } if message.contains("max_connections") => {
            Some(message.clone())
        }
        _ => None,
    });
    named.unwrap_or_else(|| panic!("no error names the setting: {said:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_server_is_asked_at_most_ten_times_a_second_and_named() {
    let cluster = tokio::task::spawn_blocking(|| {
        Arc::new(PgCluster::spawn(&[
            "max_connections = 8",
            "superuser_reserved_connections = 0",
        ]))
    })
    .await
    .unwrap();
    let db = config(&cluster).connect().await.unwrap();
    let locker = Locker::new(db.lock_backend(PgBackendKind::Advisory));
    // The listener's connection is open before the server fills up, and a holder holds.
    let holder = locker
        .lock("full/holder")
        .wait(Duration::from_secs(10))
        .await
        .unwrap();

    // Others' sessions until the server refuses: it is full.
    let options: sqlx::postgres::PgConnectOptions = cluster.url().parse().unwrap();
    let mut fillers = Vec::new();
    while let Ok(conn) = PgConnection::connect_with(&options).await {
        fillers.push(conn);
        assert!(fillers.len() < 20, "the server never refused a connection");
    }
    let before = cluster.log().matches(REFUSED).count();

    // Each advisory grant keeps a session of its own: every waiter needs a new connection.
    const WAIT: Duration = Duration::from_secs(4);
    let waiters: Vec<_> = (0..16)
        .map(|i| {
            let locker = locker.clone();
            tokio::spawn(async move { locker.lock(format!("full/{i}")).wait(WAIT).await })
        })
        .collect();
    let started = tokio::time::Instant::now();
    let mut said = Vec::new();
    let mut granted = Vec::new();
    for waiter in waiters {
        match waiter.await.unwrap() {
            Ok(guard) => granted.push(guard),
            Err(e) => said.push(e),
        }
    }
    let elapsed = started.elapsed().as_secs_f64().max(WAIT.as_secs_f64());
    // The holder renews over the pool's connections, the server full all along.
    holder
        .extend(Duration::from_secs(30))
        .await
        .expect("a holder could not renew while the server was full");
    let refused = cluster.log().matches(REFUSED).count() - before;
    // Ten a second, and a margin for the connects in flight at either end.
    assert!(
        (refused as f64) <= 10.0 * elapsed + 4.0,
        "{refused} refused connects in {elapsed:.1} s"
    );
    let message = named(&said);
    assert!(message.contains("holder_pool_size"), "{message}");
    assert!(
        message.contains(&format!("127.0.0.1:{}", cluster.port())),
        "{message}"
    );

    // A new process's connect to the full server says the same.
    let connect = config(&cluster).connect().await.unwrap_err();
    let message = named(std::slice::from_ref(&connect));
    assert!(message.contains("pool_size"), "{message}");

    // Room again: the next request is granted without waiting out a pause longer than 5 s.
    drop(fillers);
    let guard = locker
        .lock("full/after")
        .wait(Duration::from_secs(15))
        .await
        .expect("granted once the server has room");
    guard.release().await.unwrap();
    holder.release().await.unwrap();
    drop(granted);
    db.close().await;
}
