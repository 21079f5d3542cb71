//! The connection budget (DESIGN 5.4, *Connections of one process*): however many waiters
//! one process has on a hot key, it holds no more connections to the server than
//! `pool_size + session_pool_size`. Counted in the server's process list by an account of the
//! process's own, while 256 waiters queue behind a holder and while the lock is handed down
//! to them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::Locker;
use fencelock_mysql::sqlx::{self, mysql::MySqlConnection};
use tokio::sync::mpsc;
use tokio::time::{Instant, sleep};

const WAITERS: usize = 256;
const POOL: u32 = 4;
const SESSIONS: u32 = 8;

async fn connections(admin: &mut MySqlConnection, account: &str) -> i64 {
    sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.processlist WHERE user = ?")
        .bind(account)
        .fetch_one(admin)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_process_keeps_its_connection_budget() {
    let deployed = common::accounts::deployed("budget").await;
    let db = deployed
        .app_config()
        .pool_size(POOL)
        .session_pool_size(SESSIONS)
        .connect()
        .await
        .unwrap();
    let budget = i64::from(POOL + SESSIONS);
    let mut admin = common::admin().await;
    let locker = Locker::new(Arc::new(db.lock_backend()));
    let key = format!("budget/{}", deployed.prefix);
    let holder = locker
        .lock(&key)
        .ttl(Duration::from_secs(60))
        .await
        .unwrap();
    let (granted, mut grants) = mpsc::unbounded_channel();
    for _ in 0..WAITERS {
        let (locker, key, granted) = (locker.clone(), key.clone(), granted.clone());
        tokio::spawn(async move {
            let guard = locker
                .lock(&key)
                .ttl(Duration::from_secs(60))
                .wait(Duration::from_secs(240))
                .await
                .expect("a waiter was not granted");
            granted.send(guard).unwrap();
        });
    }
    let mut queued = 0;
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        queued = queued.max(connections(&mut admin, &deployed.app).await);
        sleep(Duration::from_millis(20)).await;
    }
    assert!(
        queued <= budget,
        "{queued} connections while {WAITERS} waiters queued (budget {budget})"
    );
    holder.release().await.unwrap();
    let hand_down = tokio::spawn(async move {
        for _ in 0..WAITERS {
            let guard = tokio::time::timeout(Duration::from_secs(240), grants.recv())
                .await
                .expect("the hand-down stalled")
                .unwrap();
            guard.release().await.unwrap();
        }
    });
    let mut handed = 0;
    while !hand_down.is_finished() {
        handed = handed.max(connections(&mut admin, &deployed.app).await);
        sleep(Duration::from_millis(20)).await;
    }
    hand_down.await.unwrap();
    assert!(
        handed <= budget,
        "{handed} connections while the lock went down the queue (budget {budget})"
    );
    db.close().await;
}
