//! The lock's client-side expiry on moto: a contender takes over an unreleased lock only after
//! it has seen the same record version for lease × DRIFT; a renewed lock is never taken over;
//! a released lock is granted at once with a higher token; the fenced storage refuses the
//! superseded holder. Timing asserts are lower bounds the code guarantees, with generous
//! upper bounds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, OwnerId};
use fencelock_dynamodb::DRIFT;
use fencelock_servers::proxy::FaultProxy;
use tokio::time::{Instant, sleep};

fn key(name: &str) -> LockKey {
    LockKey::new(format!("{name}/{}", OwnerId::random())).unwrap()
}

const TTL: Duration = Duration::from_secs(1);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_contender_takes_over_an_unreleased_lock_only_after_lease_times_drift() {
    let table = common::connect().await;
    // Two backend values: two processes, each with its own record of what it has seen.
    let (holder, contender) = (table.backend(), table.backend());
    let key = key("takeover");
    let held = holder.try_acquire(&key, TTL).await.unwrap().unwrap();
    let first_try = Instant::now();
    let taken = loop {
        if let Some(lease) = contender
            .try_acquire(&key, Duration::from_secs(30))
            .await
            .unwrap()
        {
            break lease;
        }
        assert!(
            first_try.elapsed() < Duration::from_secs(20),
            "never taken over"
        );
        sleep(Duration::from_millis(50)).await;
    };
    let waited = first_try.elapsed();
    assert!(
        waited >= TTL.mul_f64(DRIFT),
        "taken over after {waited:?}, before lease × DRIFT = {:?}",
        TTL.mul_f64(DRIFT)
    );
    assert!(
        taken.token > held.token,
        "{} after {}",
        taken.token,
        held.token
    );
    assert!(
        !held.is_valid(),
        "the holder's own deadline had not passed at the takeover"
    );
    match holder.extend(&held, TTL).await {
        Err(Error::LeaseLost { .. }) => {}
        other => panic!("extend after a takeover: {other:?}"),
    }
    assert!(
        !holder.release(&held).await.unwrap(),
        "a superseded release freed the lock"
    );
    let info = contender.inspect(&key).await.unwrap();
    assert_eq!(info.holder, Some(taken.fence()));
    assert!(contender.release(&taken).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewed_lock_is_never_taken_over() {
    let table = common::connect().await;
    let (holder, contender) = (table.backend(), table.backend());
    let key = key("renewed");
    let mut lease = holder.try_acquire(&key, TTL).await.unwrap().unwrap();
    let until = Instant::now() + TTL * 4;
    while Instant::now() < until {
        assert!(
            contender.try_acquire(&key, TTL).await.unwrap().is_none(),
            "a lock renewed every {:?} of a {TTL:?} lease was taken over",
            TTL / 4
        );
        sleep(TTL / 8).await;
        lease = holder.extend(&lease, TTL).await.unwrap();
        sleep(TTL / 8).await;
    }
    assert!(holder.release(&lease).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lock_is_granted_at_once_with_a_higher_token() {
    let table = common::connect().await;
    let (first, second) = (table.backend(), table.backend());
    let key = key("released");
    let mut last = None;
    for _ in 0..3 {
        let lease = first.try_acquire(&key, TTL * 30).await.unwrap().unwrap();
        assert!(second.try_acquire(&key, TTL).await.unwrap().is_none());
        assert!(first.release(&lease).await.unwrap());
        let next = second
            .try_acquire(&key, TTL * 30)
            .await
            .unwrap()
            .expect("granted at once");
        assert!(
            next.token > lease.token,
            "{} after {}",
            next.token,
            lease.token
        );
        if let Some(last) = last {
            assert!(lease.token > last);
        }
        assert!(second.release(&next).await.unwrap());
        let info = first.inspect(&key).await.unwrap();
        assert_eq!((info.holder, info.last_token), (None, Some(next.token)));
        last = Some(next.token);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_superseded_holder_is_refused_by_the_storage() {
    let table = common::connect().await;
    let (holder, contender) = (table.backend(), table.backend());
    let storage = table.storage();
    let key = key("fenced");
    let old = holder.try_acquire(&key, TTL).await.unwrap().unwrap();
    storage.write(&key, old.fence(), b"old").await.unwrap();
    // A value past the item limit, kept in chunk items.
    let big: Vec<u8> = (0..1_500_000u32).map(|i| (i % 251) as u8).collect();
    let new = loop {
        if let Some(lease) = contender
            .try_acquire(&key, Duration::from_secs(30))
            .await
            .unwrap()
        {
            break lease;
        }
        sleep(Duration::from_millis(50)).await;
    };
    storage.write(&key, new.fence(), &big).await.unwrap();
    for refused in [
        storage.write(&key, old.fence(), b"stale").await.map(|_| ()),
        storage.read(&key, old.fence()).await.map(|_| ()),
    ] {
        match refused {
            Err(Error::Stale {
                presented, current, ..
            }) => {
                assert_eq!((presented, current), (old.fence(), new.fence()));
            }
            other => panic!("expected Stale, got {other:?}"),
        }
    }
    let snapshot = storage.peek(&key).await.unwrap().unwrap();
    assert_eq!(snapshot.fence, new.fence());
    assert!(
        snapshot.value.as_deref() == Some(&big[..]),
        "the chunked value did not survive"
    );
    storage
        .write(&key, new.fence(), b"small again")
        .await
        .unwrap();
    assert_eq!(
        storage.read(&key, new.fence()).await.unwrap().as_deref(),
        Some(&b"small again"[..])
    );
    assert!(contender.release(&new).await.unwrap());
}

/// A grant whose answer is lost after moto applied it: the SDK sends it again, the
/// condition fails on the grant's own write, and the item returned (`ALL_OLD`) shows this
/// grant's owner and version, so the retry reports the grant instead of a held lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_answer_was_lost_recognizes_itself_on_retry() {
    let moto = common::moto().await;
    let proxy = FaultProxy::start(([127, 0, 0, 1], moto.port).into())
        .await
        .unwrap();
    let config = fencelock_dynamodb::DynamoConfig::from_url(&common::url_at(
        proxy.port(),
        common::TABLE,
        "&create=true",
    ))
    .unwrap()
    .prefix(format!("test-{}/", OwnerId::random()));
    let table = config.connect().await.unwrap();
    let backend = table.backend();
    let key = key("lost-answer");
    proxy.set_lose_answers(true);
    let before = proxy.exchanges();
    let grant = {
        let backend = backend.clone();
        let key = key.clone();
        tokio::spawn(async move { backend.try_acquire(&key, Duration::from_secs(30)).await })
    };
    // The first try reached moto; let its answer be dropped, then let the retry through.
    let deadline = Instant::now() + Duration::from_secs(10);
    while proxy.exchanges() == before && Instant::now() < deadline {
        sleep(Duration::from_millis(1)).await;
    }
    sleep(Duration::from_millis(30)).await;
    proxy.set_lose_answers(false);
    let lease = grant
        .await
        .unwrap()
        .unwrap()
        .expect("the retried grant is the grant");
    let info = backend.inspect(&key).await.unwrap();
    assert_eq!(
        info.holder,
        Some(lease.fence()),
        "another grant holds the lock"
    );
    assert!(backend.release(&lease).await.unwrap());
}
