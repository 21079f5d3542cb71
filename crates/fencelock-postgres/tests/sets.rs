//! A set of lease locks in one step (DESIGN 5.3, *A set in one step*): `Locker::lock_all` of
//! free keys is one transaction, every key or none, each with its own counter's token; a held
//! key, a read phase or a transaction's claim refuses the set with nothing changed, expired
//! leases are taken, a lost epoch is replaced, and overlapping sets tried concurrently with
//! single grants never deadlock nor grant a key twice.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock_core::{Error, FencingToken, LockBackend, LockKey, Locker, OwnerId};
use fencelock_postgres::{PgDatabase, PgLeaseBackend};
use tokio::time::{sleep, timeout};

const TTL: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(50);

fn key(name: &str) -> LockKey {
    LockKey::new(name).unwrap()
}

fn keys(names: &[&str]) -> Vec<LockKey> {
    names.iter().map(|name| key(name)).collect()
}

/// The transaction ids (`xmin`) that last wrote the lease rows and counter rows of `keys`.
/// Every row a transaction writes carries its id (a subtransaction's, which a function's
/// exception block opens, is shared by all the rows written in that block), and no two write
/// transactions share one: rows with one `xmin` were written by one transaction.
async fn writers(db: &PgDatabase, keys: &[LockKey]) -> Vec<String> {
    let s = db.schema();
    let names: Vec<&str> = keys.iter().map(LockKey::as_str).collect();
    let mut xmins = Vec::new();
    for table in ["fencelock_leases", "fencelock_counters"] {
        let rows: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT xmin::text FROM \"{s}\".{table} WHERE key = ANY ($1) ORDER BY key"
        ))
        .bind(&names)
        .fetch_all(db.pool())
        .await
        .unwrap();
        assert_eq!(rows.len(), keys.len(), "a row of {table} is missing");
        xmins.extend(rows);
    }
    xmins
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_of_free_keys_is_one_transaction() {
    let (_schema, db) = common::database().await;
    let backend = db.lease_backend();
    assert!(backend.capabilities().atomic_sets);
    let locker = Locker::new(Arc::new(backend.clone()));
    let set = locker
        .lock_all(["c", "a", "b"])
        .watchdog(false)
        .await
        .unwrap();
    let held: Vec<String> = set.keys().map(|key| key.to_string()).collect();
    assert_eq!(held, ["a", "b", "c"]);
    let xmins = writers(&db, &keys(&["a", "b", "c"])).await;
    assert!(
        xmins.iter().all(|xmin| *xmin == xmins[0]),
        "the set's rows were written by several transactions (key by key): {xmins:?}"
    );
    for member in set.members() {
        let info = backend.inspect(&member.lease().key).await.unwrap();
        assert_eq!(info.holder, Some(member.fence()));
    }
    assert!(set.release().await.unwrap());

    // The ordered form, for contrast: one transaction per key, so the check above can fail.
    let one = locker.lock("x").watchdog(false).await.unwrap();
    let other = locker.lock("y").watchdog(false).await.unwrap();
    let xmins = writers(&db, &keys(&["x", "y"])).await;
    assert_ne!(xmins[0], xmins[1], "two single grants shared a transaction");
    assert!(one.release().await.unwrap());
    assert!(other.release().await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_member_takes_its_own_counters_next_token() {
    let (_schema, db) = common::database().await;
    let backend = db.lease_backend();
    backend
        .advance_token(&key("x"), FencingToken::new(100).unwrap())
        .await
        .unwrap();
    let set = backend
        .try_acquire_all(&keys(&["x", "y"]), TTL)
        .await
        .unwrap()
        .expect("both keys are free");
    assert_eq!(set.len(), 2);
    assert_eq!((set[0].key.as_str(), set[0].token.get()), ("x", 101));
    assert_eq!((set[1].key.as_str(), set[1].token.get()), ("y", 1));
    assert_eq!(set[0].owner, set[1].owner);
    for lease in &set {
        assert!(backend.release(lease).await.unwrap());
    }
}

/// Asserts that `try_acquire_all` of `set` is refused and that `free` keys are untouched:
/// not held, their counters where they were.
async fn refused_changing_nothing(backend: &PgLeaseBackend, set: &[LockKey], free: &[&LockKey]) {
    let mut before = HashMap::new();
    for k in free {
        before.insert(k.to_string(), backend.inspect(k).await.unwrap().last_token);
    }
    assert!(
        backend.try_acquire_all(set, TTL).await.unwrap().is_none(),
        "a set one of whose keys was taken was granted"
    );
    for k in free {
        let info = backend.inspect(k).await.unwrap();
        assert!(info.holder.is_none(), "{k} was taken by a refused set");
        assert_eq!(
            info.last_token,
            before[&k.to_string()],
            "{k}'s counter moved for a refused set"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_with_one_key_taken_changes_nothing() {
    let (_schema, db) = common::database().await;
    let backend = db.lease_backend();
    let set = keys(&["a", "b", "c"]);
    let (a, b, c) = (&set[0], &set[1], &set[2]);
    // a has a counter already, c none.
    let earlier = backend.try_acquire(a, TTL).await.unwrap().unwrap();
    assert!(backend.release(&earlier).await.unwrap());

    // b held by a writer.
    let holder = backend.try_acquire(b, TTL).await.unwrap().unwrap();
    refused_changing_nothing(&backend, &set, &[a, c]).await;
    assert!(backend.release(&holder).await.unwrap());

    // c in a read phase.
    let reader = OwnerId::random();
    let phase = backend
        .try_acquire_shared(c, reader, TTL)
        .await
        .unwrap()
        .unwrap();
    refused_changing_nothing(&backend, &set, &[a, b]).await;
    assert!(backend.release_shared(&phase, reader).await.unwrap());

    // a held by a transaction of the transaction API, which claims its lease row.
    let (claimed_tx, claimed_rx) = tokio::sync::oneshot::channel::<()>();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let storage = db.storage();
    let tx_key = a.clone();
    let transaction = tokio::spawn(async move {
        storage
            .transaction(&tx_key, TTL, move |_tx| {
                Box::pin(async move {
                    claimed_tx.send(()).unwrap();
                    done_rx.await.unwrap();
                    Ok::<_, Error>(())
                })
            })
            .await
    });
    claimed_rx.await.unwrap();
    refused_changing_nothing(&backend, &set, &[b, c]).await;
    done_tx.send(()).unwrap();
    transaction.await.unwrap().unwrap();

    // All free now: granted, each above its key's last token.
    let last: Vec<_> = {
        let mut last = Vec::new();
        for k in &set {
            last.push(backend.inspect(k).await.unwrap().last_token);
        }
        last
    };
    let leases = backend
        .try_acquire_all(&set, TTL)
        .await
        .unwrap()
        .expect("all free");
    for (lease, last) in leases.iter().zip(last) {
        assert!(last.is_none_or(|last| lease.token > last));
        assert!(backend.release(lease).await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_leases_and_phases_are_taken() {
    let (_schema, db) = common::database().await;
    let backend = db.lease_backend();
    let set = keys(&["p", "q", "r"]);
    let writer = backend.try_acquire(&set[0], SHORT).await.unwrap().unwrap();
    let reader = OwnerId::random();
    let phase = backend
        .try_acquire_shared(&set[1], reader, SHORT)
        .await
        .unwrap()
        .unwrap();
    assert!(backend.try_acquire_all(&set, TTL).await.unwrap().is_none());
    sleep(SHORT * 3).await;
    let leases = backend
        .try_acquire_all(&set, TTL)
        .await
        .unwrap()
        .expect("expired leases are free");
    assert!(leases[0].token > writer.token);
    assert!(leases[1].token > phase.token);
    for lease in &leases {
        let info = backend.inspect(&lease.key).await.unwrap();
        assert_eq!(info.holder, Some(lease.fence()));
    }
    // The expired holders are gone for good.
    assert!(backend.extend(&writer, TTL).await.is_err());
    assert!(!backend.release(&writer).await.unwrap());
    for lease in &leases {
        assert!(backend.release(lease).await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_epoch_is_replaced_before_the_set_is_granted() {
    let (_schema, db) = common::database().await;
    let backend = db.lease_backend();
    let set = keys(&["e1", "e2"]);
    let first = backend.try_acquire_all(&set, TTL).await.unwrap().unwrap();
    for lease in &first {
        assert!(backend.release(lease).await.unwrap());
    }
    // What a crash does to the volatile state: the live marker is gone.
    sqlx::query(&format!(
        "DELETE FROM \"{}\".fencelock_epoch_live",
        db.schema()
    ))
    .execute(db.pool())
    .await
    .unwrap();
    let second = backend.try_acquire_all(&set, TTL).await.unwrap().unwrap();
    for (old, new) in first.iter().zip(&second) {
        assert!(
            new.token.get() >> 32 > old.token.get() >> 32,
            "{} was granted {} in the old epoch after it was lost (before: {})",
            new.key,
            new.token,
            old.token
        );
    }
    for lease in &second {
        assert!(backend.release(lease).await.unwrap());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_sets_and_other_mechanisms_are_refused() {
    let (_schema, db) = common::database().await;
    let backend = db.lease_backend();
    for bad in [keys(&[]), keys(&["b", "a"]), keys(&["a", "a"])] {
        assert!(
            matches!(
                backend.try_acquire_all(&bad, TTL).await,
                Err(Error::InvalidConfig { .. })
            ),
            "{bad:?} was not refused"
        );
    }
    assert!(matches!(
        backend
            .try_acquire_all(&keys(&["a", "b"]), Duration::ZERO)
            .await,
        Err(Error::InvalidTtl { .. })
    ));
    // A schema bound to advisory locks refuses the set, granting nothing.
    let advisory = db.advisory_backend();
    let lease = advisory.try_acquire(&key("z"), TTL).await.unwrap().unwrap();
    assert!(matches!(
        backend.try_acquire_all(&keys(&["a", "b"]), TTL).await,
        Err(Error::InvalidConfig { .. })
    ));
    assert_eq!(backend.inspect(&key("a")).await.unwrap().last_token, None);
    assert!(advisory.release(&lease).await.unwrap());
}

/// Overlapping sets tried again and again by several owners, beside single grants of the
/// shared keys: every try ends (no deadlock, no error), no key is ever held by two at once,
/// and each key's holders get strictly increasing tokens.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn overlapping_sets_never_deadlock_nor_grant_a_key_twice() {
    let (_schema, db) = common::database().await;
    let backend = Arc::new(db.lease_backend());
    let all = keys(&["k0", "k1", "k2", "k3"]);
    let inside: Arc<Vec<AtomicUsize>> = Arc::new(all.iter().map(|_| AtomicUsize::new(0)).collect());
    let last: Arc<Mutex<HashMap<LockKey, FencingToken>>> = Arc::default();
    let sets: Vec<Vec<usize>> = vec![
        vec![0, 1, 2, 3],
        vec![0, 1],
        vec![1, 2],
        vec![2, 3],
        vec![0, 2, 3],
        vec![1],
        vec![3],
    ];
    let mut tasks = Vec::new();
    for members in sets {
        let (backend, inside, last, all) =
            (backend.clone(), inside.clone(), last.clone(), all.clone());
        tasks.push(tokio::spawn(async move {
            let set: Vec<LockKey> = members.iter().map(|&i| all[i].clone()).collect();
            let mut granted = 0;
            for _ in 0..30 {
                let leases = if set.len() == 1 {
                    backend
                        .try_acquire(&set[0], TTL)
                        .await
                        .unwrap()
                        .map(|lease| vec![lease])
                } else {
                    backend.try_acquire_all(&set, TTL).await.unwrap()
                };
                if let Some(leases) = leases {
                    granted += 1;
                    for (&i, lease) in members.iter().zip(&leases) {
                        assert_eq!(
                            inside[i].fetch_add(1, Ordering::SeqCst),
                            0,
                            "{} was held by two at once",
                            lease.key
                        );
                        let mut last = last.lock().unwrap();
                        if let Some(before) = last.insert(lease.key.clone(), lease.token) {
                            assert!(
                                lease.token > before,
                                "{}: {} after {before}",
                                lease.key,
                                lease.token
                            );
                        }
                    }
                    sleep(Duration::from_millis(2)).await;
                    for (&i, lease) in members.iter().zip(&leases) {
                        inside[i].fetch_sub(1, Ordering::SeqCst);
                        assert!(backend.release(lease).await.unwrap());
                    }
                }
                sleep(Duration::from_millis(1)).await;
            }
            (set.len() > 1, granted)
        }));
    }
    let mut sets_granted = 0;
    for task in tasks {
        let (is_set, granted) = timeout(Duration::from_secs(60), task)
            .await
            .expect("the tries did not finish: a deadlock")
            .unwrap();
        if is_set {
            sets_granted += granted;
        }
    }
    assert!(sets_granted > 0, "no set was ever granted");
}
