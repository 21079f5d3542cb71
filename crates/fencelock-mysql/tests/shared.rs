//! Shared (reader) locks on the `GET_LOCK` backend, against the real server: readers and
//! writers of two processes (two databases on one prefix) under contention, an expired
//! writer's session ended by a reader, a reader that ran out refused after a writer, waiting
//! out a read phase, what plain `GET_LOCK` callers see of readers, and a full readers table.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, Locker, OwnerId, RwLocker};
use fencelock_mysql::{MySqlDatabase, lock_name, sqlx};
use tokio::time::{Instant, sleep};

const LONG: Duration = Duration::from_secs(30);

fn key(name: &str) -> LockKey {
    LockKey::new(format!("shared/{name}/{}", OwnerId::random())).unwrap()
}

/// Two connections to one installation (one prefix), as two processes would have.
async fn two_processes(tag: &str) -> (MySqlDatabase, MySqlDatabase, common::Cleanup) {
    let config = common::config(tag);
    let one = config.connect().await.unwrap();
    let two = config.connect().await.unwrap();
    (one, two, common::Cleanup::new(config))
}

/// Whether connection `id` still exists on the server.
async fn session_exists(id: u64) -> bool {
    let mut admin = common::admin().await;
    let n: i64 =
        sqlx::query_scalar("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = ?")
            .bind(id)
            .fetch_one(&mut admin)
            .await
            .unwrap();
    n == 1
}

/// Readers and writers of two processes hammer one key: a writer is never inside beside a
/// reader or another writer, readers do overlap, and every writer's token is above the read
/// fence of every phase before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readers_and_writers_of_two_processes_never_overlap() {
    let (one, two, _cleanup) = two_processes("rw").await;
    let key = key("contention");
    let readers_in = Arc::new(AtomicUsize::new(0));
    let writer_in = Arc::new(AtomicBool::new(false));
    let most_readers = Arc::new(AtomicUsize::new(0));
    let highest_read_token = Arc::new(AtomicUsize::new(0));
    let writes = Arc::new(AtomicUsize::new(0));
    let until = Instant::now() + Duration::from_secs(3);
    let mut tasks = tokio::task::JoinSet::new();
    for worker in 0..8 {
        let db = if worker % 2 == 0 { &one } else { &two };
        let rw = RwLocker::new(Locker::new(db.backend()));
        let (key, readers_in, writer_in) = (key.clone(), readers_in.clone(), writer_in.clone());
        let (most_readers, highest_read_token, writes) = (
            most_readers.clone(),
            highest_read_token.clone(),
            writes.clone(),
        );
        tasks.spawn(async move {
            let reads = worker >= 2;
            while Instant::now() < until {
                if reads {
                    let guard = rw
                        .read(key.as_str())
                        .ttl(LONG)
                        .wait(Duration::from_secs(10))
                        .await
                        .expect("a reader waited 10 s");
                    assert!(
                        !writer_in.load(Ordering::SeqCst),
                        "a reader beside a writer"
                    );
                    let now_in = readers_in.fetch_add(1, Ordering::SeqCst) + 1;
                    most_readers.fetch_max(now_in, Ordering::SeqCst);
                    highest_read_token.fetch_max(guard.token().get() as usize, Ordering::SeqCst);
                    sleep(Duration::from_millis(15)).await;
                    assert!(
                        !writer_in.load(Ordering::SeqCst),
                        "a writer beside a reader"
                    );
                    readers_in.fetch_sub(1, Ordering::SeqCst);
                    assert!(guard.release().await.unwrap(), "a reader's lease was lost");
                } else {
                    let guard = rw
                        .write(key.as_str())
                        .ttl(LONG)
                        .wait(Duration::from_secs(10))
                        .await
                        .expect("a writer waited 10 s");
                    assert!(
                        !writer_in.swap(true, Ordering::SeqCst),
                        "two writers at once"
                    );
                    assert_eq!(
                        readers_in.load(Ordering::SeqCst),
                        0,
                        "a writer beside readers"
                    );
                    assert!(
                        guard.token().get() as usize > highest_read_token.load(Ordering::SeqCst),
                        "a writer's token is not above a read phase before it"
                    );
                    sleep(Duration::from_millis(15)).await;
                    assert_eq!(
                        readers_in.load(Ordering::SeqCst),
                        0,
                        "a reader beside a writer"
                    );
                    writer_in.store(false, Ordering::SeqCst);
                    writes.fetch_add(1, Ordering::SeqCst);
                    assert!(guard.release().await.unwrap(), "a writer's lease was lost");
                }
                sleep(Duration::from_millis(5)).await;
            }
        });
    }
    while let Some(outcome) = tasks.join_next().await {
        outcome.unwrap();
    }
    assert!(
        most_readers.load(Ordering::SeqCst) > 1,
        "readers never overlapped"
    );
    assert!(writes.load(Ordering::SeqCst) > 0, "no writer ever got in");
    let backend = one.lock_backend();
    assert!(backend.inspect_shared(&key).await.unwrap().is_none());
    assert_eq!(backend.held_count(), 0);
}

/// A writer that went silent past its lease: a reader claims the lease, ends the writer's
/// session and starts a phase with a greater token; the writer can no longer renew.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_ends_the_session_of_a_writer_whose_lease_ran_out() {
    let (one, two, _cleanup) = two_processes("claim").await;
    let (writers, readers) = (one.lock_backend(), two.lock_backend());
    let key = key("claim");
    let writer = writers
        .try_acquire(&key, Duration::from_millis(300))
        .await
        .unwrap()
        .unwrap();
    let [session] = writers.session_ids()[..] else {
        panic!("expected one holding session");
    };
    let reader = OwnerId::random();
    assert!(
        readers
            .try_acquire_shared(&key, reader, LONG)
            .await
            .unwrap()
            .is_none(),
        "a reader got in beside a writer's valid lease"
    );
    sleep(Duration::from_millis(400)).await;
    let lease = readers
        .try_acquire_shared(&key, reader, LONG)
        .await
        .unwrap()
        .expect("a reader was refused by a writer whose lease ran out");
    assert!(lease.token > writer.token);
    assert!(
        common::eventually(Duration::from_secs(5), || async {
            !session_exists(session).await
        })
        .await,
        "the expired writer's session was not ended"
    );
    assert!(matches!(
        writers.extend(&writer, LONG).await,
        Err(Error::LeaseLost { .. })
    ));
    assert!(readers.release_shared(&lease, reader).await.unwrap());
}

/// A reader whose row ran out on the server: a writer is granted, writes, and the reader can
/// neither renew, nor read or write through the storage, nor bring its phase back; the next
/// reader starts a new phase with a token above the writer's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_that_ran_out_is_refused_after_a_writer_and_its_phase_stays_ended() {
    let (db, _cleanup) = common::database("paused").await;
    let backend = db.lock_backend();
    let storage = db.storage();
    let key = key("paused");
    let (early, late) = (OwnerId::random(), OwnerId::random());
    let short = backend
        .try_acquire_shared(&key, early, Duration::from_millis(200))
        .await
        .unwrap()
        .unwrap();
    storage.read(&key, short.fence()).await.unwrap();
    // A second reader keeps the phase alive after the first one ran out.
    let long = backend
        .try_acquire_shared(&key, late, Duration::from_millis(1200))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(long.fence(), short.fence());
    sleep(Duration::from_millis(300)).await;
    assert!(
        backend.try_acquire(&key, LONG).await.unwrap().is_none(),
        "a writer got in while one reader of the phase was live"
    );
    assert!(
        matches!(
            backend.extend_shared(&short, early, LONG).await,
            Err(Error::LeaseLost { .. })
        ),
        "a reader that ran out was renewed"
    );
    let phase = backend.inspect_shared(&key).await.unwrap().unwrap();
    assert_eq!((phase.fence, phase.readers), (short.fence(), 1));
    sleep(Duration::from_millis(1000)).await;
    assert!(backend.inspect_shared(&key).await.unwrap().is_none());

    let writer = backend.try_acquire(&key, LONG).await.unwrap().unwrap();
    assert!(writer.token > short.token);
    storage.write(&key, writer.fence(), b"w").await.unwrap();
    for (lease, reader) in [(&short, early), (&long, late)] {
        assert!(matches!(
            backend.extend_shared(lease, reader, LONG).await,
            Err(Error::LeaseLost { .. })
        ));
        assert!(matches!(
            storage.read(&key, lease.fence()).await,
            Err(Error::Stale { .. })
        ));
    }
    assert!(
        backend
            .try_acquire_shared(&key, early, LONG)
            .await
            .unwrap()
            .is_none(),
        "a reader got in beside a writer"
    );
    assert!(backend.release(&writer).await.unwrap());
    let next = backend
        .try_acquire_shared(&key, early, LONG)
        .await
        .unwrap()
        .unwrap();
    assert!(next.token > writer.token, "the ended phase came back");
    assert_ne!(next.owner, short.owner);
    // Asked again, a reader already in the phase is renewed, not counted twice.
    let again = backend
        .try_acquire_shared(&key, early, LONG)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(again.fence(), next.fence());
    assert_eq!(
        backend.inspect_shared(&key).await.unwrap().unwrap().readers,
        1
    );
    assert!(backend.release_shared(&next, early).await.unwrap());
}

/// A writer of another process waiting out a read phase neither spins nor returns early while
/// the phase lives, and is woken soon after its last reader leaves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_writer_waiting_out_a_read_phase_is_woken_when_it_ends() {
    let (one, two, _cleanup) = two_processes("wait").await;
    let (readers, writers) = (one.lock_backend(), two.lock_backend());
    let key = key("wait");
    let reader = OwnerId::random();
    let lease = readers
        .try_acquire_shared(&key, reader, LONG)
        .await
        .unwrap()
        .unwrap();

    let started = Instant::now();
    writers
        .wait_for_release(&key, Duration::from_millis(700))
        .await
        .unwrap();
    assert!(
        started.elapsed() >= Duration::from_millis(650),
        "wait_for_release returned after {:?} while the read phase lived",
        started.elapsed()
    );

    let release = {
        let readers = readers.clone();
        let lease = lease.clone();
        tokio::spawn(async move {
            sleep(Duration::from_millis(300)).await;
            readers.release_shared(&lease, reader).await.unwrap()
        })
    };
    let started = Instant::now();
    let guard = Locker::new(writers.clone())
        .lock(&key)
        .ttl(LONG)
        .wait(Duration::from_secs(20))
        .await
        .unwrap();
    let waited = started.elapsed();
    assert!(release.await.unwrap());
    assert!(
        waited >= Duration::from_millis(250),
        "granted beside a reader"
    );
    assert!(
        waited < Duration::from_secs(2),
        "the writer was granted {waited:?} after the wait began, long after the phase ended"
    );
    assert!(guard.token() > lease.token);
    assert!(guard.release().await.unwrap());
}

/// Readers hold no session: a reader's grant leaves `GET_LOCK` free (so a plain SQL client can
/// take it during the phase, the documented limit), and while a plain client holds it new
/// readers are refused but readers already in keep renewing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_hold_no_session_and_plain_get_lock_callers_are_not_excluded() {
    let (db, _cleanup) = common::database("plain").await;
    let backend = db.lock_backend();
    let key = key("plain");
    let name = lock_name(&key);
    let reader = OwnerId::random();
    let lease = backend
        .try_acquire_shared(&key, reader, LONG)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(backend.held_count(), 0, "a reader kept a session");
    let mut admin = common::admin().await;
    assert_eq!(
        common::holder_of(&mut admin, &name).await,
        None,
        "a reader's grant left GET_LOCK held"
    );
    let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
        .bind(&name)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    assert_eq!(got, Some(1));
    assert!(
        backend
            .try_acquire_shared(&key, OwnerId::random(), LONG)
            .await
            .unwrap()
            .is_none(),
        "a reader joined while a plain client held the lock"
    );
    backend.extend_shared(&lease, reader, LONG).await.unwrap();
    assert!(backend.try_acquire(&key, LONG).await.unwrap().is_none());
    let _: Option<i64> = sqlx::query_scalar("SELECT RELEASE_LOCK(?)")
        .bind(&name)
        .fetch_one(&mut admin)
        .await
        .unwrap();
    let joined = backend
        .try_acquire_shared(&key, OwnerId::random(), LONG)
        .await
        .unwrap()
        .expect("a reader was refused after the plain client let go");
    assert_eq!(joined.fence(), lease.fence());
    assert!(
        backend.try_acquire(&key, LONG).await.unwrap().is_none(),
        "a writer got in beside readers"
    );
}

/// A full readers table: with every row live a reader's grant fails with a typed error and
/// still lets go of `GET_LOCK` (a writer of that key is granted right after); once the rows
/// ran out, the next grant purges them and is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_readers_table_is_refused_with_an_error_then_purged() {
    let config = common::config("full");
    let _cleanup = common::Cleanup::new(config.clone());
    // The table made small before fencelock installs the rest (it keeps a table that exists).
    let mut admin = common::admin().await;
    sqlx::query("SET SESSION max_heap_table_size = 16384")
        .execute(&mut admin)
        .await
        .unwrap();
    let table = include_str!("../sql/readers_table.sql").replace("{prefix}", config.prefix_name());
    sqlx::raw_sql(&table).execute(&mut admin).await.unwrap();
    let db = config.connect().await.unwrap();
    let backend = db.lock_backend();

    let ttl = Duration::from_secs(2);
    let filled_at = Instant::now();
    let mut filled = 0;
    let refused = loop {
        let key = key(&format!("filler-{filled}"));
        match backend
            .try_acquire_shared(&key, OwnerId::random(), ttl)
            .await
        {
            Ok(Some(_)) => filled += 1,
            Ok(None) => panic!("a reader of a free key was refused"),
            Err(Error::Backend { message, .. }) => {
                assert!(message.contains("readers table is full"), "{message}");
                break key;
            }
            Err(other) => panic!("expected the table-full error, got {other:?}"),
        }
        assert!(filled < 10_000, "the readers table never filled up");
    };
    assert!(filled > 0);
    assert!(
        filled_at.elapsed() < ttl,
        "filling took longer than the ttl"
    );
    let name = lock_name(&refused);
    assert_eq!(
        common::holder_of(&mut admin, &name).await,
        None,
        "a failed reader's grant kept GET_LOCK"
    );
    let writer = backend
        .try_acquire(&refused, LONG)
        .await
        .unwrap()
        .expect("a writer was refused after a reader's grant failed");
    assert!(backend.release(&writer).await.unwrap());

    sleep(ttl.saturating_sub(filled_at.elapsed()) + Duration::from_millis(100)).await;
    let key = key("after-purge");
    let reader = OwnerId::random();
    let lease = backend
        .try_acquire_shared(&key, reader, LONG)
        .await
        .unwrap()
        .expect("a reader was refused once every other reader ran out");
    assert!(backend.release_shared(&lease, reader).await.unwrap());
}

/// A ttl out of bounds is `InvalidTtl` for readers too, and touches nothing on the server.
#[tokio::test]
async fn reader_ttls_out_of_bounds_are_refused_and_touch_nothing() {
    let (db, _cleanup) = common::database("ttl").await;
    let backend = db.lock_backend();
    let key = key("ttl");
    let reader = OwnerId::random();
    let too_long = backend.capabilities().max_ttl + Duration::from_secs(1);
    for ttl in [Duration::ZERO, Duration::from_millis(1), too_long] {
        assert!(matches!(
            backend.try_acquire_shared(&key, reader, ttl).await,
            Err(Error::InvalidTtl { .. })
        ));
    }
    assert_eq!(backend.inspect(&key).await.unwrap().last_token, None);
    let lease = backend
        .try_acquire_shared(&key, reader, LONG)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        backend.extend_shared(&lease, reader, too_long).await,
        Err(Error::InvalidTtl { .. })
    ));
    let phase = backend.inspect_shared(&key).await.unwrap().unwrap();
    assert!(phase.remaining > LONG - Duration::from_secs(5));
    assert!(backend.release_shared(&lease, reader).await.unwrap());
}
