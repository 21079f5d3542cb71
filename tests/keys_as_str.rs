//! One key type across the API: every user-facing method that takes a key or a resource takes
//! what `Locker::lock` takes (a `&str`, a `String`, a `LockKey`), and refuses an invalid name
//! with the same `Error::InvalidKey` as `lock`, before anything is sent.
//!
//! The calls below compile only while each signature takes a `&str`; the ones that refuse a
//! name run against real servers (a spawned Redis, the PostgreSQL and MySQL of the test
//! environment) and prove nothing was needed from them.
#![cfg(all(feature = "redis", feature = "postgres", feature = "mysql"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fencelock::memory::{MemoryLockBackend, MemoryStorage};
use fencelock::mysql::{MySqlFence, sqlx as mysql_sqlx};
use fencelock::postgres::{PgDatabase, sqlx as pg_sqlx};
use fencelock::redis::{RedisFence, redis};
use fencelock::{Error, Fence, FencedStorageExt, FencingToken, Locker, OwnerId};
use fencelock_redis::servers::RedisServer;

/// Names `lock` refuses, and what it says of each.
async fn refused_by_lock() -> Vec<(&'static str, Error)> {
    let locker = Locker::new(MemoryLockBackend::new());
    let mut refused = Vec::new();
    for name in ["", "a\0b", "tab\there"] {
        let error = locker.lock(name).await.expect_err("lock refuses it");
        refused.push((name, error));
    }
    refused
}

/// `result` is the refusal `lock` gave for the same name.
fn same_refusal<T: std::fmt::Debug>(what: &str, result: fencelock::Result<T>, lock: &Error) {
    match (result, lock) {
        (
            Err(Error::InvalidKey { key, reason }),
            Error::InvalidKey {
                key: lock_key,
                reason: lock_reason,
            },
        ) => assert_eq!((key, reason), (lock_key.clone(), *lock_reason), "{what}"),
        (other, _) => panic!("{what}: expected {lock:?}, got {other:?}"),
    }
}

fn fence() -> Fence {
    Fence::new(FencingToken::new(1).unwrap(), OwnerId::from_u128(7))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn storage_helpers_take_a_str() {
    let locker = Locker::new(MemoryLockBackend::new());
    let storage = MemoryStorage::new();
    let guard = locker.lock("account/7").await.unwrap();
    storage
        .write_key("account/7", guard.fence(), b"1")
        .await
        .unwrap();
    assert_eq!(
        storage.read_key("account/7", guard.fence()).await.unwrap(),
        Some(b"1".to_vec())
    );
    assert!(storage.peek_key("account/7").await.unwrap().is_some());
    for (name, lock) in refused_by_lock().await {
        same_refusal("peek_key", storage.peek_key(name).await, &lock);
        same_refusal("read_key", storage.read_key(name, fence()).await, &lock);
        same_refusal(
            "write_key",
            storage.write_key(name, fence(), b"x").await,
            &lock,
        );
    }
    guard.release().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_redis_fence_takes_a_str() {
    let server = RedisServer::spawn();
    let conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .expect("the spawned Redis answers");
    let replies = RedisFence::new(conn.clone())
        .set("balance:{account/7}", "10")
        .commit("account/7", fence())
        .await
        .unwrap();
    assert_eq!(replies.len(), 1);
    let (admitted, _) = RedisFence::new(conn.clone())
        .peek(String::from("account/7"))
        .await
        .unwrap();
    assert_eq!(admitted, Some(fence()));
    for (name, lock) in refused_by_lock().await {
        same_refusal(
            "RedisFence::commit",
            RedisFence::new(conn.clone()).commit(name, fence()).await,
            &lock,
        );
        same_refusal(
            "RedisFence::peek",
            RedisFence::new(conn.clone()).peek(name).await,
            &lock,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_postgres_fence_and_transactions_take_a_str() {
    // Nothing listens here: a refused name must not need the server.
    let pool = pg_sqlx::postgres::PgPoolOptions::new()
        .connect_lazy("postgres://postgres@127.0.0.1:1/none")
        .unwrap();
    let db = PgDatabase::from_pool(pool.clone(), "fencelock").unwrap();
    let pg_fence = db.fence();
    let storage = db.storage();
    for (name, lock) in refused_by_lock().await {
        same_refusal(
            "PgFence::admit",
            pg_fence.admit(&pool, name, fence()).await,
            &lock,
        );
        same_refusal(
            "PgFence::current",
            pg_fence.current(&pool, name).await,
            &lock,
        );
        let boxed = storage
            .transaction(name, Duration::from_secs(1), |tx| {
                Box::pin(async move {
                    // Never run: the name is refused first. It compiles with `&str`s.
                    tx.write("account/7", b"1").await?;
                    tx.peek("account/7").await?;
                    tx.read("account/7").await
                })
            })
            .await;
        same_refusal("PgStorage::transaction", boxed, &lock);
        let with = storage
            .transaction_with(
                name,
                Duration::from_secs(1),
                async |tx| -> fencelock::Result<Option<Vec<u8>>> {
                    tx.read(String::from("account/7")).await
                },
            )
            .await;
        same_refusal("PgStorage::transaction_with", with, &lock);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mysql_fence_takes_a_str() {
    let url = std::env::var("FENCELOCK_MYSQL_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/test".to_owned());
    let pool = mysql_sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(1)
        .connect(&url)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "MySQL/MariaDB at {url} is needed (apt-get install mariadb-server, a database \
                 `test`, or set FENCELOCK_MYSQL_URL): {e}"
            )
        });
    // Never installed: a refused name must not reach its procedures.
    let mysql_fence = MySqlFence::new("fencelock_keys_as_str_").unwrap();
    for (name, lock) in refused_by_lock().await {
        let mut tx = pool.begin().await.unwrap();
        same_refusal(
            "MySqlFence::admit",
            mysql_fence.admit(&mut tx, name, fence()).await,
            &lock,
        );
        tx.rollback().await.unwrap();
        same_refusal(
            "MySqlFence::current",
            mysql_fence.current(&pool, name).await,
            &lock,
        );
    }
    pool.close().await;
}
