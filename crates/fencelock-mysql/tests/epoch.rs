//! Tokens are `epoch << 32 | counter`: the counters live in a MEMORY table (no redo log per
//! grant), the epoch in an InnoDB row bumped once per loss of the counters. On private MariaDB
//! servers (SIGKILL and restart) and on the shared one (a truncated or full counters table,
//! token floors): every token after a loss is above every token before it, and concurrent
//! first grants after a loss start one epoch between them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::server::PrivateServer;
use fencelock_core::{Error, FencingToken, LockBackend, LockKey, Locker, OwnerId};
use fencelock_mysql::sqlx::mysql::MySqlConnection;
use fencelock_mysql::sqlx::{self, Connection};
use fencelock_mysql::{DEFAULT_PREFIX, MySqlConfig};

const TTL: Duration = Duration::from_secs(60);

/// The last epoch the floors may reach (the last 2^16 of 2^31 are kept).
const MAX_FLOOR_EPOCH: u64 = (1 << 31) - 1 - (1 << 16);

fn key(name: &str) -> LockKey {
    LockKey::new(name).unwrap()
}

fn epoch_of(token: FencingToken) -> u64 {
    token.get() >> 32
}

/// The durable epoch of `prefix`, read as an operator would.
async fn durable_epoch(conn: &mut MySqlConnection, prefix: &str) -> u64 {
    let epoch: i64 = sqlx::query_scalar(&format!("SELECT epoch FROM {prefix}epoch WHERE id = 1"))
        .fetch_one(conn)
        .await
        .unwrap();
    u64::try_from(epoch).unwrap()
}

fn above_all(token: FencingToken, before: &[FencingToken], what: &str) {
    if let Some(max) = before.iter().max() {
        assert!(token > *max, "{what}: token {token} is not above {max}");
    }
}

/// A writer's grant, a read phase and a writer after it, each checked against every token the
/// key had before; the leases are released.
async fn grants(
    b: &impl LockBackend,
    writer: &mut Vec<FencingToken>,
    phased: &mut Vec<FencingToken>,
) {
    for _ in 0..3 {
        let lease = b
            .try_acquire(&key("crash/writer"), TTL)
            .await
            .unwrap()
            .unwrap();
        above_all(lease.token, writer, "writer");
        writer.push(lease.token);
        assert!(b.release(&lease).await.unwrap());
    }
    let (one, two) = (OwnerId::random(), OwnerId::random());
    let phase = b
        .try_acquire_shared(&key("crash/phase"), one, TTL)
        .await
        .unwrap()
        .unwrap();
    above_all(phase.token, phased, "read phase");
    let joined = b
        .try_acquire_shared(&key("crash/phase"), two, TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        joined.token, phase.token,
        "a joining reader got another fence"
    );
    phased.push(phase.token);
    assert!(b.release_shared(&phase, one).await.unwrap());
    assert!(b.release_shared(&joined, two).await.unwrap());
    let after = b
        .try_acquire(&key("crash/phase"), TTL)
        .await
        .unwrap()
        .unwrap();
    above_all(after.token, phased, "writer after a read phase");
    phased.push(after.token);
    assert!(b.release(&after).await.unwrap());
}

/// SIGKILL three times: after grants in the installation's first epoch, and each time again
/// right after the first grants of the epoch the restart started (whose start must be on disk
/// before its first token is handed out), with a writer's lease and a reader held across the
/// crash. Every token after each crash is above every token before it, per key, for writers
/// and read phases, and each crash costs exactly one epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_increase_across_crashes_for_writers_and_read_phases() {
    let mut server = PrivateServer::start();
    server.ready().await;
    let config = MySqlConfig::from_url(&server.url("t")).unwrap();
    let (mut writer, mut phased) = (Vec::new(), Vec::new());
    let mut epochs = Vec::new();
    for round in 0..4 {
        let db = config.connect().await.unwrap();
        let b = db.lock_backend();
        if round > 0 {
            let info = b.inspect(&key("crash/writer")).await.unwrap();
            assert_eq!(info.holder, None, "a lock survived the crash");
        }
        grants(&b, &mut writer, &mut phased).await;
        // Held across the crash.
        let held = b
            .try_acquire(&key("crash/writer"), TTL)
            .await
            .unwrap()
            .unwrap();
        above_all(held.token, &writer, "held writer");
        writer.push(held.token);
        let reader = b
            .try_acquire_shared(&key("crash/phase"), OwnerId::random(), TTL)
            .await
            .unwrap()
            .unwrap();
        above_all(reader.token, &phased, "held reader");
        phased.push(reader.token);
        let mut admin = server.admin().await;
        let epoch = durable_epoch(&mut admin, DEFAULT_PREFIX).await;
        assert_eq!(
            epoch_of(held.token),
            epoch,
            "a token outside the durable epoch"
        );
        epochs.push(epoch);
        admin.close().await.unwrap();
        if round < 3 {
            server.crash();
            server.run();
            server.ready().await;
        }
    }
    assert_eq!(epochs, vec![0, 1, 2, 3], "each crash should cost one epoch");
}

/// After a restart, 16 first grants of 16 keys from two processes at once, and 8 clients
/// queueing on one key: every token is in the one new epoch, the epoch moved exactly once, and
/// the one key's tokens increase in the order of its grants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_grants_after_a_restart_start_one_epoch() {
    let mut server = PrivateServer::start();
    server.ready().await;
    let config = MySqlConfig::from_url(&server.url("t"))
        .unwrap()
        .pool_size(24)
        .session_pool_size(24);
    let db = config.connect().await.unwrap();
    let before = db
        .lock_backend()
        .try_acquire(&key("hot"), TTL)
        .await
        .unwrap()
        .unwrap();
    server.crash();
    server.run();
    server.ready().await;

    let processes = [
        config.connect().await.unwrap(),
        config.connect().await.unwrap(),
    ];
    let mut admin = server.admin().await;
    let old = durable_epoch(&mut admin, DEFAULT_PREFIX).await;
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut tasks = Vec::new();
    for i in 0..16 {
        let b = processes[i % 2].lock_backend();
        tasks.push(tokio::spawn(async move {
            let lease = b
                .try_acquire(&key(&format!("first/{i}")), TTL)
                .await
                .unwrap()
                .unwrap();
            assert!(b.release(&lease).await.unwrap());
            lease.token
        }));
    }
    for i in 0..8 {
        let locker = Locker::new(processes[i % 2].backend());
        let order = order.clone();
        tasks.push(tokio::spawn(async move {
            let guard = locker
                .lock("hot")
                .wait(Duration::from_secs(60))
                .await
                .unwrap();
            let token = guard.token();
            order.lock().unwrap().push(token);
            assert!(guard.release().await.unwrap());
            token
        }));
    }
    let mut tokens = Vec::new();
    for task in tasks {
        tokens.push(task.await.unwrap());
    }
    let new = durable_epoch(&mut admin, DEFAULT_PREFIX).await;
    assert_eq!(
        new,
        old + 1,
        "concurrent first grants started {} epochs",
        new - old
    );
    for token in &tokens {
        assert_eq!(epoch_of(*token), new, "token {token} outside the new epoch");
    }
    let order = order.lock().unwrap().clone();
    assert_eq!(order.len(), 8);
    assert!(
        order[0] > before.token,
        "the hot key's token went back after the restart"
    );
    assert!(
        order.windows(2).all(|pair| pair[0] < pair[1]),
        "the hot key's tokens do not increase in grant order: {order:?}"
    );
    admin.close().await.unwrap();
}

/// The per-grant path writes no redo log: on a private server with nothing else running,
/// 100 grants and releases cause (almost) no InnoDB log writes, while 100 autocommit InnoDB
/// inserts, what a grant used to commit, cause at least one each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_write_no_redo_log() {
    let server = PrivateServer::start();
    server.ready().await;
    let config = MySqlConfig::from_url(&server.url("t")).unwrap();
    let db = config.connect().await.unwrap();
    let b = db.lock_backend();
    let mut admin = server.admin().await;
    sqlx::query(
        "CREATE TABLE scratch (k INT PRIMARY KEY, n INT) ENGINE = InnoDB STATS_PERSISTENT = 0",
    )
    .execute(&mut admin)
    .await
    .unwrap();
    // Warm: the first grant of each key.
    for i in 0..4 {
        let lease = b
            .try_acquire(&key(&format!("quiet/{i}")), TTL)
            .await
            .unwrap()
            .unwrap();
        assert!(b.release(&lease).await.unwrap());
    }
    async fn log_writes(conn: &mut MySqlConnection) -> u64 {
        let (_, value): (String, String) =
            sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Innodb_log_writes'")
                .fetch_one(conn)
                .await
                .unwrap();
        value.parse().unwrap()
    }

    let start = log_writes(&mut admin).await;
    for i in 0..100 {
        sqlx::query("INSERT INTO scratch VALUES (?, 1) ON DUPLICATE KEY UPDATE n = n + 1")
            .bind(i % 4)
            .execute(&mut admin)
            .await
            .unwrap();
    }
    let commits = log_writes(&mut admin).await - start;
    assert!(
        commits >= 100,
        "the counter misses commits: {commits} log writes for 100"
    );

    let start = log_writes(&mut admin).await;
    for i in 0..100 {
        let lease = b
            .try_acquire(&key(&format!("quiet/{}", i % 4)), TTL)
            .await
            .unwrap()
            .unwrap();
        assert!(b.release(&lease).await.unwrap());
    }
    let grants = log_writes(&mut admin).await - start;
    assert!(
        grants < 25,
        "100 grants wrote the redo log {grants} times (100 commits: {commits})"
    );
    admin.close().await.unwrap();
}

/// A counters table emptied while the server runs (TRUNCATE by an operator) is a loss like a
/// restart: the next grant starts one new epoch, above every token before; `inspect` shows no
/// last token until then.
#[tokio::test]
async fn a_truncated_counters_table_starts_one_new_epoch() {
    let (db, _drop) = common::database("trunc").await;
    let prefix = db.prefix().to_owned();
    let b = db.lock_backend();
    let k = key("truncated/k");
    let mut tokens = Vec::new();
    for _ in 0..3 {
        let lease = b.try_acquire(&k, TTL).await.unwrap().unwrap();
        tokens.push(lease.token);
        assert!(b.release(&lease).await.unwrap());
    }
    let mut admin = common::admin().await;
    let old = durable_epoch(&mut admin, &prefix).await;
    sqlx::query(&format!("TRUNCATE TABLE {prefix}counters"))
        .execute(&mut admin)
        .await
        .unwrap();
    assert_eq!(b.inspect(&k).await.unwrap().last_token, None);
    for _ in 0..3 {
        let lease = b.try_acquire(&k, TTL).await.unwrap().unwrap();
        above_all(lease.token, &tokens, "after TRUNCATE");
        tokens.push(lease.token);
        assert!(b.release(&lease).await.unwrap());
    }
    assert_eq!(durable_epoch(&mut admin, &prefix).await, old + 1);
    assert_eq!(
        b.inspect(&k).await.unwrap().last_token,
        tokens.last().copied()
    );
    admin.close().await.unwrap();
}

/// A counters table that fills up (`max_heap_table_size`) is emptied and counting goes on in
/// a new epoch: 80 keys on a table that holds about 30 rows, each granted three times, each
/// key's tokens increasing.
#[tokio::test]
async fn a_full_counters_table_goes_on_in_a_new_epoch() {
    let (db, _drop) = common::database("full").await;
    let prefix = db.prefix().to_owned();
    let mut admin = common::admin().await;
    // A MEMORY table takes its size limit from the session that (re)creates it.
    sqlx::query("SET SESSION max_heap_table_size = 16384")
        .execute(&mut admin)
        .await
        .unwrap();
    sqlx::query(&format!("ALTER TABLE {prefix}counters ENGINE = MEMORY"))
        .execute(&mut admin)
        .await
        .unwrap();
    let old = durable_epoch(&mut admin, &prefix).await;
    let b = db.lock_backend();
    let mut last: Vec<Option<FencingToken>> = vec![None; 80];
    for _ in 0..3 {
        for (i, last) in last.iter_mut().enumerate() {
            let lease = b
                .try_acquire(&key(&format!("full/{i}")), TTL)
                .await
                .unwrap()
                .unwrap();
            if let Some(before) = *last {
                assert!(
                    lease.token > before,
                    "full/{i}: {} after {before}",
                    lease.token
                );
            }
            *last = Some(lease.token);
            assert!(b.release(&lease).await.unwrap());
        }
    }
    let new = durable_epoch(&mut admin, &prefix).await;
    assert!(new > old + 2, "a full table started {} epochs", new - old);
    admin.close().await.unwrap();
}

/// Floors work across epochs and may not use the epochs up: a floor past the last epoch a
/// floor may reach is refused with `InvalidConfig` before anything is written (and by the
/// procedure itself, SQLSTATE FL006); a floor in a later epoch makes that epoch durable; a
/// floor at the very end of the last allowed epoch leaves the next grant a token above it.
#[tokio::test]
async fn floors_cross_epochs_and_cannot_use_them_up() {
    let (db, _drop) = common::database("floor").await;
    let prefix = db.prefix().to_owned();
    let b = db.lock_backend();
    let mut admin = common::admin().await;
    let k = key("floor/k");
    let old = durable_epoch(&mut admin, &prefix).await;

    let beyond = FencingToken::new((MAX_FLOOR_EPOCH + 1) << 32).unwrap();
    match b.advance_token(&k, beyond).await {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("beyond epoch 2147418111"), "{message}");
        }
        other => panic!("a floor past the last epoch was not refused: {other:?}"),
    }
    assert_eq!(
        b.inspect(&k).await.unwrap().last_token,
        None,
        "a refused floor wrote"
    );
    assert_eq!(durable_epoch(&mut admin, &prefix).await, old);
    let direct = sqlx::query(&format!("CALL {prefix}advance_token_v2(?, ?)"))
        .bind(k.as_str().as_bytes())
        .bind(i64::try_from(beyond.get()).unwrap())
        .execute(&mut admin)
        .await
        .unwrap_err();
    assert!(
        direct.to_string().contains("beyond epoch 2147418111"),
        "{direct}"
    );

    // A floor five epochs on: that epoch becomes durable and live for every key.
    let later = FencingToken::new(((old + 5) << 32) | 7).unwrap();
    assert_eq!(b.advance_token(&k, later).await.unwrap(), later);
    assert_eq!(durable_epoch(&mut admin, &prefix).await, old + 5);
    let next = b.try_acquire(&k, TTL).await.unwrap().unwrap();
    assert_eq!(next.token.get(), later.get() + 1);
    assert!(b.release(&next).await.unwrap());
    let other = b
        .try_acquire(&key("floor/other"), TTL)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        epoch_of(other.token),
        old + 5,
        "another key is not in the floor's epoch"
    );
    assert!(b.release(&other).await.unwrap());

    // The last token of the last epoch a floor may reach: the key's counter is used up, and
    // its next grant starts the next epoch.
    let last = FencingToken::new((MAX_FLOOR_EPOCH << 32) | 0xFFFF_FFFF).unwrap();
    assert_eq!(b.advance_token(&k, last).await.unwrap(), last);
    let after = b.try_acquire(&k, TTL).await.unwrap().unwrap();
    assert!(after.token > last, "{} after the floor {last}", after.token);
    assert_eq!(epoch_of(after.token), MAX_FLOOR_EPOCH + 1);
    assert!(b.release(&after).await.unwrap());
    assert_eq!(b.inspect(&k).await.unwrap().last_token, Some(after.token));
    admin.close().await.unwrap();
}

/// An installation upgraded from the InnoDB counters of earlier versions (`<prefix>locks`)
/// starts its epoch above every token they handed out.
#[tokio::test]
async fn an_upgraded_installation_starts_above_the_old_counters() {
    let config = common::config("upg");
    let _drop = common::Cleanup::new(config.clone());
    let prefix = config.prefix_name().to_owned();
    let mut admin = common::admin().await;
    sqlx::raw_sql(&include_str!("../sql/locks_table.sql").replace("{prefix}", &prefix))
        .execute(&mut admin)
        .await
        .unwrap();
    let old = (3_i64 << 32) | 5;
    sqlx::query(&format!(
        "INSERT INTO {prefix}locks (lock_key, token) VALUES ('old', 41), ('older', ?)"
    ))
    .bind(old)
    .execute(&mut admin)
    .await
    .unwrap();
    let db = config.connect().await.unwrap();
    assert_eq!(durable_epoch(&mut admin, &prefix).await, 4);
    let b = db.lock_backend();
    for name in ["old", "older", "new"] {
        let lease = b.try_acquire(&key(name), TTL).await.unwrap().unwrap();
        assert_eq!(lease.token.get(), (4 << 32) | 1, "{name}");
        assert!(b.release(&lease).await.unwrap());
    }
    // A second connect leaves the epoch as it is.
    let again = config.connect().await.unwrap();
    assert_eq!(durable_epoch(&mut admin, &prefix).await, 4);
    again.close().await;
    db.close().await;
    admin.close().await.unwrap();
}
