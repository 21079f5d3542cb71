//! Readers on the advisory backend, what only PostgreSQL has: sessions ended by the server or
//! terminated, plain SQL shared and exclusive holders of the same id, transactions waiting
//! for readers, and the phase rule (`fencelock_advisory_read`) under concurrency.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{
    Error, FencedStorage, Lease, LockBackend, LockKey, Locker, LostReason, OwnerId, RwLocker,
};
use fencelock_postgres::{PgAdvisoryBackend, PgDatabase, raw_lock_key};
use fencelock_testkit::postgres::PgSchema;
use sqlx::{Connection, PgConnection};
use tokio::time::{Instant, sleep, timeout};

const TTL: Duration = Duration::from_secs(30);
/// How long the server and the session watch may take to notice an ended session.
const BOUND: Duration = Duration::from_secs(5);

async fn plain_connection() -> PgConnection {
    PgConnection::connect_with(&fencelock_testkit::postgres::pg_options())
        .await
        .unwrap()
}

async fn pid_of(conn: &mut PgConnection) -> i32 {
    sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(conn)
        .await
        .unwrap()
}

async fn plain(conn: &mut PgConnection, sql: &str, id: i64) -> bool {
    let row: Option<bool> = sqlx::query_scalar(sql)
        .bind(id)
        .fetch_one(conn)
        .await
        .unwrap();
    row.unwrap_or(true)
}

async fn reader(backend: &PgAdvisoryBackend, key: &LockKey, ttl: Duration) -> (Lease, OwnerId) {
    let reader = OwnerId::random();
    let lease = backend
        .try_acquire_shared(key, reader, ttl)
        .await
        .unwrap()
        .expect("a reader was refused");
    (lease, reader)
}

/// The pid of the session holding `reader`'s shared lock, as fencelock records it.
async fn reader_pid(schema: &PgSchema, key: &LockKey, reader: OwnerId) -> i32 {
    sqlx::query_scalar(&format!(
        "SELECT pid FROM \"{}\".fencelock_advisory_readers WHERE key = $1 AND reader = $2",
        schema.name()
    ))
    .bind(key.as_str())
    .bind(&reader.as_u128().to_be_bytes()[..])
    .fetch_one(schema.admin())
    .await
    .unwrap()
}

async fn terminate(schema: &PgSchema, pid: i32) {
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(schema.admin())
        .await
        .unwrap();
    assert!(terminated, "no session {pid} to terminate");
}

/// Whether the server still has a session with this pid.
async fn session_alive(schema: &PgSchema, pid: i32) -> bool {
    sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)")
        .bind(pid)
        .fetch_one(schema.admin())
        .await
        .unwrap()
}

async fn writer_when_free(backend: &PgAdvisoryBackend, key: &LockKey) -> Lease {
    let started = Instant::now();
    loop {
        if let Some(lease) = backend.try_acquire(key, TTL).await.unwrap() {
            return lease;
        }
        assert!(started.elapsed() < BOUND, "the writer never got the lock");
        sleep(Duration::from_millis(20)).await;
    }
}

fn key(schema: &PgSchema, name: &str) -> LockKey {
    LockKey::new(format!("readers/{name}/{}", schema.name())).unwrap()
}

/// `pg_terminate_backend` on one reader's session: that reader's guard fires `lost()` with
/// `SessionEnded` at once (watchdog off, 30 s ttl), while the other reader of the same phase,
/// in the same process, stays held; the phase lives on with one reader.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminated_reader_session_fires_lost_for_that_reader_only() {
    let (schema, db) = common::database().await;
    let backend = Arc::new(db.advisory_backend());
    let rw = RwLocker::new(Locker::new(backend.clone()));
    let key = key(&schema, "terminated");
    let first = rw
        .read(key.as_str())
        .ttl(TTL)
        .watchdog(false)
        .await
        .unwrap();
    let second = rw
        .read(key.as_str())
        .ttl(TTL)
        .watchdog(false)
        .await
        .unwrap();
    assert_eq!(first.fence(), second.fence());
    let lost = first.lost();
    terminate(&schema, reader_pid(&schema, &key, first.reader()).await).await;
    let reason = timeout(BOUND, lost)
        .await
        .expect("lost() did not fire after the reader's session was terminated");
    assert_eq!(reason, LostReason::SessionEnded);
    assert!(!first.is_held());
    assert!(
        timeout(Duration::from_millis(500), second.lost())
            .await
            .is_err(),
        "the other reader of the phase was reported lost"
    );
    assert!(second.is_held());
    let phase = backend
        .inspect_shared(&key)
        .await
        .unwrap()
        .expect("no phase");
    assert_eq!((phase.fence, phase.readers), (second.fence(), 1));
    assert!(backend.try_acquire(&key, TTL).await.unwrap().is_none());
    assert!(!first.release().await.unwrap());
    let phase_token = second.fence().token;
    assert!(second.release().await.unwrap());
    let writer = writer_when_free(&backend, &key).await;
    assert!(writer.token > phase_token);
    assert!(backend.release(&writer).await.unwrap());
    assert_eq!(backend.held_count(), 0);
    schema.cleanup().await;
}

/// A reader paused past its lease (no renewal): the server ends its session at the ttl, while
/// a reader with a long lease keeps the phase and writers out. Once that one leaves, a writer
/// gets a greater token and the paused reader is refused by the storage, reads included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_reader_is_ended_by_the_server_and_refused_after_a_writer() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    let storage = db.storage();
    let key = key(&schema, "paused");
    let ttl = Duration::from_millis(300);
    let (paused, paused_id) = reader(&backend, &key, ttl).await;
    let (steady, steady_id) = reader(&backend, &key, TTL).await;
    assert_eq!(paused.fence(), steady.fence());
    let pid = reader_pid(&schema, &key, paused_id).await;
    storage.read(&key, paused.fence()).await.unwrap();
    sleep(ttl + Duration::from_millis(700)).await;
    assert!(
        !session_alive(&schema, pid).await,
        "the paused reader's session outlived its ttl"
    );
    let phase = backend
        .inspect_shared(&key)
        .await
        .unwrap()
        .expect("no phase");
    assert_eq!((phase.fence, phase.readers), (steady.fence(), 1));
    assert!(
        backend.try_acquire(&key, TTL).await.unwrap().is_none(),
        "a writer got in beside a live reader"
    );
    assert!(matches!(
        backend.extend_shared(&paused, paused_id, TTL).await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(backend.release_shared(&steady, steady_id).await.unwrap());
    let writer = writer_when_free(&backend, &key).await;
    assert!(writer.token > paused.token);
    storage
        .write(&key, writer.fence(), b"writer")
        .await
        .unwrap();
    for refused in [
        storage.read(&key, paused.fence()).await.map(drop),
        storage.write(&key, paused.fence(), b"stale").await,
    ] {
        match refused {
            Err(Error::Stale {
                presented, current, ..
            }) => {
                assert_eq!(presented, paused.fence());
                assert_eq!(current, writer.fence());
            }
            other => panic!("the paused reader was not refused: {other:?}"),
        }
    }
    assert!(!backend.release_shared(&paused, paused_id).await.unwrap());
    assert!(backend.release(&writer).await.unwrap());
    schema.cleanup().await;
}

/// A plain `pg_advisory_lock_shared` on a key's id coexists with fencelock readers and keeps
/// fencelock writers out; `inspect` reports it (with its pid) as an unfenced holder while no
/// fencelock reader is there, and the read phase's fence once one is. Fencelock readers in
/// turn admit plain shared holders and refuse plain exclusive ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_sql_shared_holders_coexist_with_readers_and_keep_writers_out() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    for key in [
        raw_lock_key(schema.unique_id() ^ 3),
        key(&schema, "plain-shared"),
    ] {
        let id = db.advisory_lock_id(&key);
        let mut shared = plain_connection().await;
        let pid = pid_of(&mut shared).await;
        plain(
            &mut shared,
            "SELECT pg_advisory_lock_shared($1)::text IS NULL",
            id,
        )
        .await;
        let info = backend.inspect(&key).await.unwrap();
        assert_eq!(info.holder, None);
        let who = info
            .unfenced_holder
            .expect("the plain shared holder is reported");
        assert!(
            who.contains(&format!("pid {pid}")) && who.contains("shared"),
            "{who}"
        );
        assert_eq!(backend.inspect_shared(&key).await.unwrap(), None);
        assert!(backend.try_acquire(&key, TTL).await.unwrap().is_none());

        let (lease, reader_id) = reader(&backend, &key, TTL).await;
        let info = backend.inspect(&key).await.unwrap();
        assert_eq!(info.holder, Some(lease.fence()));
        assert_eq!(info.unfenced_holder, None);
        let phase = backend
            .inspect_shared(&key)
            .await
            .unwrap()
            .expect("no phase");
        assert_eq!((phase.fence, phase.readers), (lease.fence(), 1));

        let mut other = plain_connection().await;
        assert!(!plain(&mut other, "SELECT pg_try_advisory_lock($1)", id).await);
        assert!(plain(&mut other, "SELECT pg_try_advisory_lock_shared($1)", id).await);
        assert!(plain(&mut other, "SELECT pg_advisory_unlock_shared($1)", id).await);

        // The plain holder leaves first: the reader still keeps writers out.
        assert!(plain(&mut shared, "SELECT pg_advisory_unlock_shared($1)", id).await);
        assert!(backend.try_acquire(&key, TTL).await.unwrap().is_none());
        assert!(backend.release_shared(&lease, reader_id).await.unwrap());
        assert!(!backend.inspect(&key).await.unwrap().is_held());

        // A plain exclusive holder keeps readers out until it unlocks.
        assert!(plain(&mut other, "SELECT pg_try_advisory_lock($1)", id).await);
        assert!(
            backend
                .try_acquire_shared(&key, OwnerId::random(), TTL)
                .await
                .unwrap()
                .is_none(),
            "a reader got in beside a plain exclusive holder"
        );
        assert!(plain(&mut other, "SELECT pg_advisory_unlock($1)", id).await);
        let (after, after_id) = reader(&backend, &key, TTL).await;
        assert!(after.token > lease.token, "a new phase takes a new token");
        assert!(backend.release_shared(&after, after_id).await.unwrap());
        shared.close().await.unwrap();
        other.close().await.unwrap();
    }
    schema.cleanup().await;
}

/// `PgStorage::transaction` on a key with readers waits for them on the server (and, waiting,
/// keeps new readers out), then runs with a token above the read phase's, so the readers'
/// fence is refused afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_waits_for_readers_and_fences_them_out() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    let storage = db.storage();
    let key = key(&schema, "transaction");
    let (first, first_id) = reader(&backend, &key, TTL).await;
    let (second, second_id) = reader(&backend, &key, TTL).await;
    storage.read(&key, first.fence()).await.unwrap();
    let waiting = tokio::spawn({
        let storage = storage.clone();
        let key = key.clone();
        async move {
            storage
                .transaction(&key, Duration::from_secs(10), |tx| {
                    Box::pin(async move {
                        let resource = tx.key().clone();
                        tx.write(&resource, b"written in the transaction").await?;
                        Ok::<_, Error>(tx.fence())
                    })
                })
                .await
        }
    });
    sleep(Duration::from_millis(400)).await;
    assert!(!waiting.is_finished(), "the transaction ran beside readers");
    assert!(
        backend
            .try_acquire_shared(&key, OwnerId::random(), TTL)
            .await
            .unwrap()
            .is_none(),
        "a new reader got in while a transaction waited for the phase to end"
    );
    assert!(backend.release_shared(&first, first_id).await.unwrap());
    sleep(Duration::from_millis(200)).await;
    assert!(
        !waiting.is_finished(),
        "the transaction ran beside a reader"
    );
    assert!(backend.release_shared(&second, second_id).await.unwrap());
    let fence = timeout(BOUND, waiting)
        .await
        .expect("the transaction did not run once the readers left")
        .unwrap()
        .unwrap();
    assert!(fence.token > first.token);
    assert!(matches!(
        storage.read(&key, first.fence()).await,
        Err(Error::Stale { .. })
    ));
    schema.cleanup().await;
}

/// Readers arriving together, each on its own session, join one phase: the grants of a key
/// are serialised, so no two of them start a phase each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_arriving_together_share_one_phase() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    for round in 0..5 {
        let key = key(&schema, &format!("together/{round}"));
        let mut grants = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let backend = backend.clone();
            let key = key.clone();
            grants.spawn(async move { reader(&backend, &key, TTL).await });
        }
        let readers: Vec<(Lease, OwnerId)> = grants.join_all().await;
        let fence = readers[0].0.fence();
        for (lease, _) in &readers {
            assert_eq!(
                lease.fence(),
                fence,
                "readers arriving together got two phases"
            );
        }
        let phase = backend
            .inspect_shared(&key)
            .await
            .unwrap()
            .expect("no phase");
        assert_eq!((phase.fence, phase.readers), (fence, 8));
        for (lease, id) in &readers {
            assert!(backend.release_shared(lease, *id).await.unwrap());
        }
    }
    assert_eq!(backend.held_count(), 0);
    schema.cleanup().await;
}

/// A phase lives while one of its readers does, and only then: a reader joining while another
/// holds gets the phase's fence even after the first reader left; once the last one left (by
/// release, or its session ended), the next reader starts a phase with a new token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_phase_ends_with_its_last_live_reader() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    let key = key(&schema, "phase-ends");
    let (a, a_id) = reader(&backend, &key, TTL).await;
    let (b, b_id) = reader(&backend, &key, TTL).await;
    assert!(backend.release_shared(&a, a_id).await.unwrap());
    let (c, c_id) = reader(&backend, &key, TTL).await;
    assert_eq!(
        c.fence(),
        a.fence(),
        "the phase ended while a reader held it"
    );
    assert!(backend.release_shared(&b, b_id).await.unwrap());
    assert!(backend.release_shared(&c, c_id).await.unwrap());
    let (d, d_id) = reader(&backend, &key, TTL).await;
    assert!(d.token > a.token, "a phase outlived its last reader");
    assert_ne!(d.owner, a.owner);

    // The last reader's session ends without a release: its row stays, but does not keep
    // the phase alive.
    let pid = reader_pid(&schema, &key, d_id).await;
    terminate(&schema, pid).await;
    let started = Instant::now();
    while session_alive(&schema, pid).await {
        assert!(started.elapsed() < BOUND);
        sleep(Duration::from_millis(20)).await;
    }
    let (e, e_id) = reader(&backend, &key, TTL).await;
    assert!(
        e.token > d.token,
        "a reader whose session ended kept its phase alive"
    );
    assert!(backend.release_shared(&e, e_id).await.unwrap());
    assert!(!backend.release_shared(&d, d_id).await.unwrap());
    schema.cleanup().await;
}

/// A reader asking again while it holds renews its place (same fence, same session), and
/// released readers' connections go back to the pool clean: no shared lock and no time-out
/// stays on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_asking_again_renews_and_released_sessions_are_reused_clean() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    let key = key(&schema, "again");
    let (lease, id) = reader(&backend, &key, Duration::from_millis(200)).await;
    let again = backend
        .try_acquire_shared(&key, id, TTL)
        .await
        .unwrap()
        .expect("a reader asking again was refused");
    assert_eq!(again.fence(), lease.fence());
    assert_eq!(
        backend.held_count(),
        1,
        "asking again took a second session"
    );
    let phase = backend
        .inspect_shared(&key)
        .await
        .unwrap()
        .expect("no phase");
    assert_eq!(phase.readers, 1);
    // Renewed to 30 s: still held past the first ttl.
    sleep(Duration::from_millis(500)).await;
    let renewed = backend.extend_shared(&again, id, TTL).await.unwrap();
    assert!(backend.release_shared(&renewed, id).await.unwrap());

    for round in 0..30 {
        let key = LockKey::new(format!("again/{}", round % 3)).unwrap();
        let (lease, id) = reader(&backend, &key, Duration::from_millis(200)).await;
        assert!(backend.release_shared(&lease, id).await.unwrap());
    }
    assert_eq!(backend.held_count(), 0);
    sleep(Duration::from_millis(400)).await;
    // A pooled connection still holding a shared lock would keep this writer out, and one
    // with a stale time-out would be dead by now.
    for round in 0..3 {
        let key = LockKey::new(format!("again/{round}")).unwrap();
        let writer = backend
            .try_acquire(&key, TTL)
            .await
            .unwrap()
            .expect("a shared lock stayed");
        assert!(backend.extend(&writer, TTL).await.is_ok());
        assert!(backend.release(&writer).await.unwrap());
    }
    schema.cleanup().await;
}

/// A writer's holder row left behind by a session that ended is not shown as the holder
/// while readers hold the key, even if a reader's session got the dead writer's pid (the
/// server reuses pids): a reader's grant forgets the key's writer row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_writers_row_is_not_shown_during_a_read_phase() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    let key = key(&schema, "dead-writer");
    let writer = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let table = format!("\"{}\".fencelock_advisory_holders", schema.name());
    let pid: i32 = sqlx::query_scalar(&format!("SELECT pid FROM {table} WHERE key = $1"))
        .bind(key.as_str())
        .fetch_one(schema.admin())
        .await
        .unwrap();
    terminate(&schema, pid).await;
    // The server frees the dead writer's lock as its session ends.
    let started = Instant::now();
    let lease = loop {
        let granted = backend.try_acquire_shared(&key, OwnerId::random(), TTL);
        if let Some(lease) = granted.await.unwrap() {
            break lease;
        }
        assert!(
            started.elapsed() < BOUND,
            "the dead writer's lock was not freed"
        );
        sleep(Duration::from_millis(20)).await;
    };
    // What a reused pid would look like: the dead writer's row naming the reader's session.
    let reader_session: Option<i32> = sqlx::query_scalar(&format!(
        "UPDATE {table} SET pid = (SELECT r.pid FROM \"{}\".fencelock_advisory_readers r \
         WHERE r.key = $1 LIMIT 1) WHERE key = $1 RETURNING pid",
        schema.name()
    ))
    .bind(key.as_str())
    .fetch_optional(schema.admin())
    .await
    .unwrap();
    assert_eq!(reader_session, None, "the dead writer's row is still there");
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(info.holder, Some(lease.fence()));
    assert_ne!(info.holder, Some(writer.fence()));
    schema.cleanup().await;
}

/// Readers need the schema bound to the advisory mechanism, as writers do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_are_refused_in_a_lease_schema() {
    let (schema, db): (PgSchema, PgDatabase) = common::database().await;
    let key = key(&schema, "lease-schema");
    let lease = db
        .lease_backend()
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .unwrap();
    let other = PgDatabase::from_pool(common::app_pool(schema.name()), schema.name()).unwrap();
    match other
        .advisory_backend()
        .try_acquire_shared(&key, OwnerId::random(), TTL)
        .await
    {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(message.contains("lease"), "{message}")
        }
        other => panic!("a reader in a lease schema: {other:?}"),
    }
    assert!(db.lease_backend().release(&lease).await.unwrap());
    schema.cleanup().await;
}

/// A reader whose grant finds no token (the volatile state lost, as after a crash; or the
/// key's counter used up in the live epoch) gives its shared lock back, starts a new epoch
/// and asks again: it is granted once, in the new epoch, and its released session holds
/// nothing (a writer gets the key right after).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_without_a_token_starts_a_new_epoch_and_holds_the_lock_once() {
    let (schema, db) = common::database().await;
    let backend = db.advisory_backend();
    let s = schema.name();
    let key = key(&schema, "epoch");
    let (first, first_id) = reader(&backend, &key, TTL).await;
    assert!(backend.release_shared(&first, first_id).await.unwrap());
    let epoch = |token: fencelock_core::FencingToken| token.get() >> 32;

    // What crash recovery does to the UNLOGGED tables.
    common::lose_volatile_state(
        schema.admin(),
        s,
        &[
            "fencelock_epoch_live",
            "fencelock_counters",
            "fencelock_advisory_holders",
            "fencelock_advisory_phases",
            "fencelock_advisory_readers",
        ],
    )
    .await;
    let (second, second_id) = reader(&backend, &key, TTL).await;
    assert!(second.token > first.token);
    assert_eq!(epoch(second.token), epoch(first.token) + 1);
    assert!(backend.release_shared(&second, second_id).await.unwrap());

    // The key's counter used up in the live epoch.
    sqlx::query(&format!(
        "UPDATE \"{s}\".fencelock_counters SET last_token = (last_token >> 32) * 4294967296 + 4294967295 \
         WHERE key = $1"
    ))
    .bind(key.as_str())
    .execute(schema.admin())
    .await
    .unwrap();
    let (third, third_id) = reader(&backend, &key, TTL).await;
    assert_eq!(epoch(third.token), epoch(second.token) + 1);
    assert_eq!(third.token.get() & 0xffff_ffff, 1);
    assert!(backend.release_shared(&third, third_id).await.unwrap());
    assert_eq!(backend.held_count(), 0);
    // No session of the pool kept a shared lock from the refused tries.
    let writer = backend
        .try_acquire(&key, TTL)
        .await
        .unwrap()
        .expect("a shared lock stayed behind");
    assert!(writer.token > third.token);
    assert!(backend.release(&writer).await.unwrap());
    schema.cleanup().await;
}
