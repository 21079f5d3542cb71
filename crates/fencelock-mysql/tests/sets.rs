//! Sets of locks on the `GET_LOCK` backend (DESIGN 5.4, *Sets*): why a set is not granted in
//! one step here. A `GET_LOCK` belongs to the session that took it and ends with it, and an
//! expired lease is taken over by ending its session; so each member of a set keeps a session
//! of its own, and a set is taken key by key.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;
use std::time::Duration;

use fencelock_core::{Error, LockBackend, LockKey, Locker, OwnerId};
use fencelock_mysql::lock_name;
use fencelock_mysql::sqlx;
use tokio::time::sleep;

fn key(name: &str) -> LockKey {
    LockKey::new(format!("sets/{name}/{}", OwnerId::random())).unwrap()
}

/// `IS_FREE_LOCK(name)` on `conn`.
async fn is_free(conn: &mut sqlx::mysql::MySqlConnection, name: &str) -> bool {
    let free: Option<i64> = sqlx::query_scalar("SELECT CAST(IS_FREE_LOCK(?) AS SIGNED)")
        .bind(name)
        .fetch_one(conn)
        .await
        .unwrap();
    free == Some(1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_in_one_step_is_not_offered_and_touches_nothing() {
    let (db, _cleanup) = common::database("setoff").await;
    let backend = db.lock_backend();
    assert!(
        !backend.capabilities().atomic_sets,
        "the GET_LOCK backend claims sets in one step"
    );
    let keys = {
        let mut keys = vec![key("a"), key("b"), key("c")];
        keys.sort();
        keys
    };
    match backend
        .try_acquire_all(&keys, Duration::from_secs(30))
        .await
    {
        Err(Error::Unsupported { .. }) => {}
        other => panic!("expected Unsupported, got {other:?}"),
    }
    let mut admin = common::admin().await;
    for key in &keys {
        assert!(is_free(&mut admin, &lock_name(key)).await, "{key} is held");
        assert_eq!(backend.inspect(key).await.unwrap().last_token, None);
    }
    assert_eq!(backend.held_count(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_member_of_a_set_holds_a_session_of_its_own() {
    let (db, _cleanup) = common::database("setsess").await;
    let backend = db.lock_backend();
    let locker = Locker::new(backend.clone());
    let (a, b, c) = (key("a"), key("b"), key("c"));
    let set = locker
        .lock_all([a.as_str(), b.as_str(), c.as_str()])
        .ttl(Duration::from_secs(30))
        .watchdog(false)
        .await
        .unwrap();
    let ids: HashSet<u64> = backend.session_ids().into_iter().collect();
    assert_eq!(ids.len(), 3, "three members on {ids:?}");
    let mut admin = common::admin().await;
    let mut holders = HashSet::new();
    for key in [&a, &b, &c] {
        let holder = common::holder_of(&mut admin, &lock_name(key)).await;
        let holder = holder.unwrap_or_else(|| panic!("{key} is not held"));
        assert!(
            ids.contains(&holder),
            "{key} is held by {holder}, not {ids:?}"
        );
        holders.insert(holder);
    }
    assert_eq!(holders.len(), 3, "two members share a session");
    assert!(set.release().await.unwrap());
    for key in [&a, &b, &c] {
        assert!(
            is_free(&mut admin, &lock_name(key)).await,
            "{key} is still held"
        );
    }
}

/// The take-over of one lapsed member ends that member's session only: the member still
/// renewed stays held. Were both on one session, the `KILL` that frees the lapsed one would
/// free the live one too, while its holder believes it holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn taking_over_a_lapsed_member_leaves_the_others_held() {
    let (db, _cleanup) = common::database("setlapse").await;
    let backend = db.lock_backend();
    let locker = Locker::new(backend.clone());
    let (live, lapsed) = (key("live"), key("lapsed"));
    let set = locker
        .lock_all([live.as_str(), lapsed.as_str()])
        .ttl(Duration::from_millis(400))
        .watchdog(false)
        .await
        .unwrap();
    let mut admin = common::admin().await;
    let live_session = common::holder_of(&mut admin, &lock_name(&live))
        .await
        .unwrap();
    set.member(live.as_str())
        .unwrap()
        .extend(Duration::from_secs(30))
        .await
        .unwrap();
    sleep(Duration::from_millis(700)).await;

    let other = fencelock_mysql::MySqlLockBackend::new(&db);
    let successor = other
        .try_acquire(&lapsed, Duration::from_secs(30))
        .await
        .unwrap()
        .expect("the lapsed member was not taken over");
    assert_eq!(
        common::holder_of(&mut admin, &lock_name(&live)).await,
        Some(live_session),
        "taking over the lapsed member ended the live member's session"
    );
    let member = set.member(live.as_str()).unwrap();
    assert!(member.is_held());
    member.extend(Duration::from_secs(30)).await.unwrap();
    assert!(other.release(&successor).await.unwrap());
    assert!(
        !set.release().await.unwrap(),
        "the lapsed member was still held"
    );
    assert!(is_free(&mut admin, &lock_name(&live)).await);
}

/// The server's rule the argument rests on: the locks of a session end with it, all of
/// them, however many it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_session_lets_go_of_every_lock_it_held() {
    let (one, two) = (lock_name(&key("kill-one")), lock_name(&key("kill-two")));
    let mut holder = common::admin().await;
    for name in [&one, &two] {
        let got: Option<i64> = sqlx::query_scalar("SELECT GET_LOCK(?, 0)")
            .bind(name)
            .fetch_one(&mut holder)
            .await
            .unwrap();
        assert_eq!(got, Some(1), "one session takes a second lock");
    }
    let id: i64 = sqlx::query_scalar("SELECT CAST(CONNECTION_ID() AS SIGNED)")
        .fetch_one(&mut holder)
        .await
        .unwrap();
    let mut admin = common::admin().await;
    for name in [&one, &two] {
        assert!(!is_free(&mut admin, name).await);
    }
    common::kill(&[u64::try_from(id).unwrap()]).await;
    let freed = common::eventually(Duration::from_secs(5), || async {
        let mut conn = common::admin().await;
        is_free(&mut conn, &one).await && is_free(&mut conn, &two).await
    })
    .await;
    assert!(freed, "a killed session kept one of its locks");
}

/// Each member of a set keeps a holding session, so a set of more keys than the session pool
/// could never be granted: it would hold every session and wait for one more. It is refused
/// at once, naming both numbers, and takes nothing; a set that fits is granted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_larger_than_the_session_pool_is_refused_at_once() {
    let (db, cleanup) = common::database("setpool").await;
    db.close().await;
    let db = cleanup
        .config()
        .clone()
        .session_pool_size(3)
        .connect()
        .await
        .unwrap();
    let backend = db.lock_backend();
    assert_eq!(backend.capabilities().max_held, Some(3));
    let locker = Locker::new(backend.clone());
    let keys = [key("p1"), key("p2"), key("p3"), key("p4")];
    let started = std::time::Instant::now();
    match locker
        .lock_all(keys.iter().map(LockKey::as_str))
        .wait(Duration::from_secs(30))
        .await
    {
        Err(Error::InvalidConfig { message, .. }) => {
            assert!(
                message.contains("4 keys") && message.contains('3'),
                "{message}"
            );
        }
        other => panic!("expected InvalidConfig, got {other:?}"),
    }
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "not refused at once"
    );
    for key in &keys {
        assert!(
            backend.inspect(key).await.unwrap().holder.is_none(),
            "{key} was taken"
        );
    }
    let set = locker
        .lock_all(keys[..3].iter().map(LockKey::as_str))
        .await
        .unwrap();
    assert!(set.release().await.unwrap());
    db.close().await;
}
