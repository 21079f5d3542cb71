//! Tokens keep increasing across a crash of the server, fences survive it, held locks do not. On a private MariaDB server this
//! test starts itself (`mariadb-install-db` + `mariadbd` on a free port, in a directory of its
//! own), kills with SIGKILL and starts again: the shared server is never touched.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::server::PrivateServer;
use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, TokenGuarantee};
use fencelock_mysql::MySqlConfig;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_and_fences_survive_a_crash_and_held_locks_do_not() {
    let mut server = PrivateServer::start();
    server.ready().await;
    let config = MySqlConfig::from_url(&server.url("t")).unwrap();
    let db = config.connect().await.unwrap();
    let backend = db.lock_backend();
    assert_eq!(backend.capabilities().tokens, TokenGuarantee::Durable);
    let storage = db.storage();
    let key = LockKey::new("restart/ledger").unwrap();

    let first = backend
        .try_acquire(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    storage.write(&key, first.fence(), b"before").await.unwrap();
    assert!(backend.release(&first).await.unwrap());
    let held = backend
        .try_acquire(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    storage.write(&key, held.fence(), b"held").await.unwrap();

    server.crash();
    server.run();
    server.ready().await;

    // A fresh process on the restarted server.
    let db = config.connect().await.unwrap();
    let backend = db.lock_backend();
    let storage = db.storage();
    let info = backend.inspect(&key).await.unwrap();
    // The volatile counters went with the restart; the next grant starts a new epoch.
    assert_eq!(info.last_token, None, "a counter survived the restart");
    assert_eq!(info.holder, None, "a lock survived the crash");
    let after = backend
        .try_acquire(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .expect("the lock held before the crash is still taken");
    assert!(after.token > held.token, "a token repeated after the crash");
    let snapshot = storage.peek(&key).await.unwrap().unwrap();
    assert_eq!(snapshot.value.as_deref(), Some(&b"held"[..]));
    assert_eq!(snapshot.fence, held.fence());
    assert!(matches!(
        storage.write(&key, first.fence(), b"stale").await,
        Err(Error::Stale { .. })
    ));
    storage.write(&key, after.fence(), b"after").await.unwrap();
    assert!(backend.release(&after).await.unwrap());
    db.close().await;
}

/// A server whose sessions start with autocommit off (`--autocommit=0`): fencelock's own
/// sessions must still commit what they write, or the install's epoch row stays in an open
/// transaction that other processes wait on (and that is rolled back when the session ends),
/// and the grants' tokens are not seen elsewhere or repeat. Fails without fencelock setting
/// autocommit on its sessions: the second process's connect waits on the epoch row the
/// first one left locked until the lock wait times out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_commit_their_tokens_on_a_server_with_autocommit_off() {
    let server = PrivateServer::start_with(vec!["--autocommit=0"]);
    server.ready().await;
    let config = MySqlConfig::from_url(&server.url("t")).unwrap();
    let first = config.connect().await.unwrap();
    let holder = first.lock_backend();
    let key = LockKey::new("autocommit/ledger").unwrap();
    let lease = holder
        .try_acquire(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();

    // Another process sees the token while the lock is held.
    let second = config.connect().await.unwrap();
    let other = second.lock_backend();
    let info = other.inspect(&key).await.unwrap();
    assert_eq!(
        info.last_token,
        Some(lease.token),
        "the grant's token was not committed: another session cannot see it"
    );
    assert!(holder.release(&lease).await.unwrap());

    // The next grant, in the other process, neither waits on a row left locked nor repeats
    // the token.
    let next = tokio::time::timeout(
        Duration::from_secs(20),
        other.try_acquire(&key, Duration::from_secs(60)),
    )
    .await
    .expect("the next grant waited on the counter row the first grant left locked")
    .unwrap()
    .unwrap();
    assert!(
        next.token > lease.token,
        "token {} after {}",
        next.token,
        lease.token
    );
    assert!(other.release(&next).await.unwrap());
    first.close().await;
    let again = other
        .try_acquire(&key, Duration::from_secs(60))
        .await
        .unwrap()
        .unwrap();
    assert!(
        again.token > next.token,
        "a token repeated after a session closed"
    );
    assert!(other.release(&again).await.unwrap());
}

/// A process that keeps its database across a restart of the server: once the server is back
/// and the pooled connections have sat idle for a moment, they are found dead on their way
/// out of the pool and replaced, so the next inspect, grant and fenced write succeed instead
/// of failing on a connection the crash ended. Fails without the pools' idle test: the first
/// statement on each pooled connection reports the lost connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_kept_across_a_restart_works_once_the_server_is_back() {
    const TTL: Duration = Duration::from_secs(60);
    let mut server = PrivateServer::start();
    server.ready().await;
    let config = MySqlConfig::from_url(&server.url("t")).unwrap();
    let db = config.connect().await.unwrap();
    let backend = db.lock_backend();
    let storage = db.storage();
    let key = LockKey::new("restart/kept").unwrap();
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    storage.write(&key, lease.fence(), b"before").await.unwrap();
    assert!(backend.release(&lease).await.unwrap());

    server.crash();
    server.run();
    server.ready().await;
    // Longer than the pause after which a pooled connection is tested.
    tokio::time::sleep(Duration::from_secs(1)).await;

    backend
        .inspect(&key)
        .await
        .expect("an inspect on the pool kept across the restart");
    let again = backend
        .try_acquire(&key, TTL)
        .await
        .expect("a grant on the sessions kept across the restart")
        .expect("the lock is free");
    assert!(
        again.token > lease.token,
        "a token repeated after the crash"
    );
    storage
        .write(&key, again.fence(), b"after")
        .await
        .expect("a fenced write on the pool kept across the restart");
    assert!(backend.release(&again).await.unwrap());
    db.close().await;
}

/// A release whose connection fails under it (the proxy closes the connection at the server's
/// first answer, so the release may or may not have run) is an error, its outcome unknown,
/// never `Ok(false)`, which says the lock was lost while held (`fencelock run` exits 76 on
/// it); the key is granted again afterwards (at the latest once the lease's ttl ran out).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_whose_answer_is_lost_is_an_error_not_a_loss() {
    /// Short, so a lease the lost release left held lapses within the test's patience.
    const TTL: Duration = Duration::from_secs(3);

    let (db, cleanup) = common::database("lostans").await;
    let (proxy, proxied) = common::through_proxy(cleanup.config()).await;
    let backend = proxied.lock_backend();
    let key = LockKey::new("lost-answer").unwrap();
    let lease = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    proxy.set_lose_answers(true);
    let released = backend.release(&lease).await;
    proxy.heal();
    assert!(
        matches!(released, Err(Error::Unavailable { .. })),
        "a release whose answer was lost: {released:?}"
    );
    let fresh = db.lock_backend();
    let started = std::time::Instant::now();
    let again = loop {
        if let Some(lease) = fresh.try_acquire(&key, TTL).await.unwrap() {
            break lease;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the key was never granted again"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(again.token > lease.token);
    assert!(fresh.release(&again).await.unwrap());
    proxied.close().await;
    db.close().await;
}
