//! Shared (reader) locks on the lease backend (DESIGN 5.3, *Read/write locks*), beyond the
//! conformance suite's read/write properties: a writer taking over an expired read phase,
//! transactions and read phases, the last reader's release ending the phase at once under
//! concurrent releases, fenced writes to the application's own tables, and reader grants
//! across new token epochs.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::{Error, FencingToken, Lease, LockBackend, LockKey, Locker, OwnerId, RwLocker};
use fencelock_postgres::{PgDatabase, PgFence, PgLeaseBackend};
use tokio::time::{Instant, sleep};

const TTL: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(200);
const COUNTER_BITS: u32 = 32;
const LAST_COUNTER: u64 = (1 << COUNTER_BITS) - 1;

fn key(name: &str, db: &PgDatabase) -> LockKey {
    LockKey::new(format!("{name}/{}", db.schema())).unwrap()
}

async fn reader(backend: &PgLeaseBackend, key: &LockKey, ttl: Duration) -> (Lease, OwnerId) {
    let reader = OwnerId::random();
    let lease = backend
        .try_acquire_shared(key, reader, ttl)
        .await
        .unwrap()
        .expect("a reader was refused on a key without writer");
    (lease, reader)
}

/// Rows of the key in the lease table and the readers table.
async fn rows(db: &PgDatabase, key: &LockKey) -> (i64, i64) {
    let s = db.schema();
    let count = |table: &str| format!("SELECT count(*) FROM \"{s}\".{table} WHERE key = $1");
    let leases: i64 = sqlx::query_scalar(&count("fencelock_leases"))
        .bind(key.as_str())
        .fetch_one(db.pool())
        .await
        .unwrap();
    let readers: i64 = sqlx::query_scalar(&count("fencelock_lease_readers"))
        .bind(key.as_str())
        .fetch_one(db.pool())
        .await
        .unwrap();
    (leases, readers)
}

/// A writer granted over an expired read phase holds the key as a writer: readers do not
/// join it, its own extend and release work, `inspect` shows it. (The phase mark lives in
/// the owner the writer overwrites; a mark the writer's grant left in place would let
/// readers in beside it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_over_an_expired_phase_is_a_writer() {
    let (schema, db) = common::database().await;
    let backend = db.lease_backend();
    let key = key("writer-over-phase", &db);
    let (phase, _) = reader(&backend, &key, SHORT).await;
    sleep(SHORT * 2).await;
    assert!(backend.inspect_shared(&key).await.unwrap().is_none());
    let writer = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    assert!(writer.token > phase.token);
    assert!(
        backend
            .try_acquire_shared(&key, OwnerId::random(), TTL)
            .await
            .unwrap()
            .is_none(),
        "a reader joined a writer granted over an expired phase"
    );
    assert!(backend.inspect_shared(&key).await.unwrap().is_none());
    assert_eq!(
        backend.inspect(&key).await.unwrap().holder,
        Some(writer.fence())
    );
    let writer = backend.extend(&writer, TTL).await.unwrap();
    assert!(backend.release(&writer).await.unwrap());
    // The readers of the phase gone by are forgotten by the next phase.
    let (next, next_reader) = reader(&backend, &key, TTL).await;
    assert!(next.token > writer.token);
    assert_eq!(rows(&db, &key).await, (1, 1));
    assert!(backend.release_shared(&next, next_reader).await.unwrap());
    assert_eq!(rows(&db, &key).await, (0, 0), "the phase left rows behind");
    schema.cleanup().await;
}

/// The exclusive extend and release never match a read phase, not even given a reader's
/// lease (the phase's own fence), and leave the phase as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exclusive_calls_never_match_a_phase() {
    let (schema, db) = common::database().await;
    let backend = db.lease_backend();
    let key = key("exclusive-vs-phase", &db);
    let (phase, phase_reader) = reader(&backend, &key, TTL).await;
    match backend.extend(&phase, TTL).await {
        Err(Error::LeaseLost { .. }) => {}
        other => panic!("the exclusive extend renewed a read phase: {other:?}"),
    }
    assert!(
        !backend.release(&phase).await.unwrap(),
        "the exclusive release ended a read phase"
    );
    let seen = backend
        .inspect_shared(&key)
        .await
        .unwrap()
        .expect("no phase");
    assert_eq!((seen.fence, seen.readers), (phase.fence(), 1));
    assert!(backend.release_shared(&phase, phase_reader).await.unwrap());
    schema.cleanup().await;
}

/// A transaction of the transaction API waits for a live read phase and runs once its last
/// reader is released (woken by that release, long before the readers' ttl); while it holds
/// the key, a reader's grant is refused within its lock wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactions_and_read_phases_exclude_each_other() {
    let (schema, db) = common::database().await;
    let backend = db.lease_backend();
    let storage = db.storage();
    let key = key("tx-vs-phase", &db);
    let (a, ra) = reader(&backend, &key, TTL).await;
    let (b, rb) = reader(&backend, &key, TTL).await;
    let waiting = tokio::spawn({
        let (storage, key) = (storage.clone(), key.clone());
        async move {
            storage
                .transaction_with(
                    &key,
                    Duration::from_secs(10),
                    async |tx| -> Result<u64, Error> { Ok(tx.token().get()) },
                )
                .await
        }
    });
    sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the transaction ran beside readers");
    assert!(backend.release_shared(&a, ra).await.unwrap());
    sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the transaction ran beside a reader"
    );
    let released = Instant::now();
    assert!(backend.release_shared(&b, rb).await.unwrap());
    let token = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the transaction did not run after the last reader's release")
        .unwrap()
        .unwrap();
    assert!(
        released.elapsed() < Duration::from_secs(3),
        "the transaction waited {:?} after the release",
        released.elapsed()
    );
    assert!(token > a.token.get());

    // A transaction holding the key: a reader is refused, without waiting long.
    let (entered_tx, entered) = tokio::sync::oneshot::channel();
    let holder = tokio::spawn({
        let (storage, key) = (storage.clone(), key.clone());
        async move {
            storage
                .transaction_with(&key, TTL, async |tx| -> Result<u64, Error> {
                    let _ = entered_tx.send(());
                    sleep(Duration::from_secs(2)).await;
                    Ok(tx.token().get())
                })
                .await
        }
    });
    entered.await.unwrap();
    let started = Instant::now();
    let tried = backend
        .try_acquire_shared(&key, OwnerId::random(), TTL)
        .await
        .unwrap();
    assert!(tried.is_none(), "a reader got in beside a transaction");
    assert!(started.elapsed() < Duration::from_millis(1500));
    let tx_token = holder.await.unwrap().unwrap();
    let (after, reader_after) = reader(&backend, &key, TTL).await;
    assert!(after.token.get() > tx_token);
    assert!(backend.release_shared(&after, reader_after).await.unwrap());
    schema.cleanup().await;
}

/// Readers joining and leaving at once: all share one fence, and the phase ends with the
/// last release (not at the readers' 30 s expiry), leaving no row behind, so a writer gets
/// the key at once. Several rounds, to meet the races between releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_of_concurrent_releases_ends_the_phase() {
    let (schema, db) = common::database().await;
    let backend = db.lease_backend();
    let key = key("concurrent-readers", &db);
    for round in 0..10 {
        let mut joining = tokio::task::JoinSet::new();
        for _ in 0..8 {
            let (backend, key) = (backend.clone(), key.clone());
            joining.spawn(async move { reader(&backend, &key, TTL).await });
        }
        let joined = joining.join_all().await;
        let fence = joined[0].0.fence();
        assert!(
            joined.iter().all(|(lease, _)| lease.fence() == fence),
            "round {round}: concurrent readers got different fences"
        );
        let phase = backend.inspect_shared(&key).await.unwrap().unwrap();
        assert_eq!((phase.fence, phase.readers), (fence, 8), "round {round}");
        let mut releasing = tokio::task::JoinSet::new();
        for (lease, id) in joined {
            let backend = backend.clone();
            releasing.spawn(async move { backend.release_shared(&lease, id).await.unwrap() });
        }
        let released = releasing.join_all().await;
        assert!(released.iter().all(|r| *r), "round {round}: {released:?}");
        assert!(backend.inspect_shared(&key).await.unwrap().is_none());
        assert_eq!(rows(&db, &key).await, (0, 0), "round {round}");
        let writer = backend
            .try_acquire(&key, TTL)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("round {round}: the phase outlived its readers"));
        assert!(writer.token > fence.token);
        assert!(backend.release(&writer).await.unwrap());
    }
    schema.cleanup().await;
}

/// A reader paused past its lease: after a writer admitted by `fencelock_admit` in the
/// application's own transaction, the reader's fence is refused there too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_reader_is_refused_by_the_applications_tables() {
    let (schema, db) = common::database().await;
    let backend = db.lease_backend();
    let fence = PgFence::new(&db);
    let key = key("paused-reader-admit", &db);
    let rw = RwLocker::new(Locker::new(std::sync::Arc::new(backend.clone())));
    let read = rw
        .read(key.as_str())
        .ttl(SHORT)
        .watchdog(false)
        .await
        .unwrap();
    let read_fence = read.fence();
    let mut tx = db.pool().begin().await.unwrap();
    fence.admit(&mut *tx, &key, read_fence).await.unwrap();
    tx.commit().await.unwrap();
    sleep(SHORT * 2).await;
    let writer = backend.try_acquire(&key, TTL).await.unwrap().unwrap();
    let mut tx = db.pool().begin().await.unwrap();
    fence.admit(&mut *tx, &key, writer.fence()).await.unwrap();
    tx.commit().await.unwrap();
    let mut tx = db.pool().begin().await.unwrap();
    match fence.admit(&mut *tx, &key, read_fence).await {
        Err(Error::Stale {
            presented, current, ..
        }) => {
            assert_eq!((presented, current), (read_fence, writer.fence()));
        }
        other => panic!("a paused reader was admitted after a writer: {other:?}"),
    }
    tx.rollback().await.unwrap();
    assert!(backend.release(&writer).await.unwrap());
    drop(read);
    schema.cleanup().await;
}

/// A reader's grant starts a new epoch as a writer's does: after the volatile state is lost,
/// and when the key's counter is used up; its token is above every earlier one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_grant_starts_new_epochs() {
    let (schema, db) = common::database().await;
    let backend = db.lease_backend();
    let key = key("reader-epochs", &db);
    let (first, first_reader) = reader(&backend, &key, TTL).await;
    assert!(backend.release_shared(&first, first_reader).await.unwrap());
    common::lose_volatile_state(
        db.pool(),
        db.schema(),
        &[
            "fencelock_epoch_live",
            "fencelock_counters",
            "fencelock_leases",
            "fencelock_lease_readers",
            "fencelock_lease_places",
            "fencelock_advisory_holders",
        ],
    )
    .await;
    let (lost, lost_reader) = reader(&backend, &key, TTL).await;
    assert!(
        lost.token > first.token,
        "{} after {}",
        lost.token,
        first.token
    );
    assert!(lost.token.get() >> COUNTER_BITS > first.token.get() >> COUNTER_BITS);
    assert!(backend.release_shared(&lost, lost_reader).await.unwrap());
    let epoch = lost.token.get() >> COUNTER_BITS;
    let floor = FencingToken::new((epoch << COUNTER_BITS) | LAST_COUNTER).unwrap();
    backend.advance_token(&key, floor).await.unwrap();
    let (next, next_reader) = reader(&backend, &key, TTL).await;
    assert_eq!(
        next.token.get() >> COUNTER_BITS,
        epoch + 1,
        "{}",
        next.token
    );
    assert_eq!(next.token.get() & LAST_COUNTER, 1, "{}", next.token);
    assert!(backend.release_shared(&next, next_reader).await.unwrap());
    schema.cleanup().await;
}
