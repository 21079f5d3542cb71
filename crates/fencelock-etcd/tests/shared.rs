//! Shared (reader) locks on etcd beyond the conformance suite: key ranges that must not
//! overlap, a writer woken by the end of a read phase, and the phase as other processes see it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{LockBackend, LockKey, Locker, OwnerId, RwLocker};

const TTL: Duration = Duration::from_secs(30);

#[tokio::test]
async fn readers_of_longer_keys_do_not_hold_a_key_their_name_extends() {
    let server = common::spawn(1).await;
    let backend = Arc::new(common::connect(&server).await.backend());
    let rw = RwLocker::new(Locker::new(backend.clone()));
    // `a/b`, `a/` and `a/b/c` start with `a/`: their readers must not count as `a`'s.
    let mut readers = Vec::new();
    for other in ["a/b", "a/", "a/b/c"] {
        readers.push(rw.read(other).ttl(TTL).await.unwrap());
    }
    let writer = rw.try_write("a").await.unwrap();
    assert!(
        writer.is_some(),
        "readers of keys that extend `a` keep out a writer of `a`"
    );
    writer.unwrap().release().await.unwrap();
    let _reader = rw.read("a").ttl(TTL).await.unwrap();
    assert!(rw.try_write("a").await.unwrap().is_none());
    assert!(rw.try_write("ab").await.unwrap().is_some());
}

#[tokio::test]
async fn a_waiting_writer_gets_the_lock_when_the_last_reader_releases() {
    let server = common::spawn(1).await;
    let backend = Arc::new(common::connect(&server).await.backend());
    let rw = RwLocker::new(Locker::new(backend));
    let first = rw.read("doc").ttl(TTL).await.unwrap();
    let second = rw.read("doc").ttl(TTL).await.unwrap();
    assert_eq!(first.fence(), second.fence(), "one phase, one fence");
    let phase_token = first.token();

    let writer = {
        let rw = rw.clone();
        tokio::spawn(async move { rw.write("doc").ttl(TTL).wait(TTL).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !writer.is_finished(),
        "a writer got in while two readers held"
    );
    first.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!writer.is_finished(), "a writer got in while a reader held");
    second.release().await.unwrap();
    // Far less than the readers' 30 s leases: the release, not the expiry, let it in.
    let writer = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the writer was not woken by the last reader's release")
        .unwrap()
        .unwrap();
    assert!(writer.token() > phase_token);
    writer.release().await.unwrap();
}

#[tokio::test]
async fn another_process_sees_the_phase_and_joins_it() {
    let server = common::spawn(1).await;
    let config = common::config(&server);
    let one = config.clone().connect().await.unwrap().backend();
    let two = config.connect().await.unwrap().backend();
    let key = LockKey::new("shared/doc").unwrap();
    let (a, b) = (OwnerId::random(), OwnerId::random());
    let first = one.try_acquire_shared(&key, a, TTL).await.unwrap().unwrap();
    let joined = two.try_acquire_shared(&key, b, TTL).await.unwrap().unwrap();
    assert_eq!(first.fence(), joined.fence());

    let phase = two
        .inspect_shared(&key)
        .await
        .unwrap()
        .expect("a live phase");
    assert_eq!((phase.fence, phase.readers), (first.fence(), 2));
    assert!(phase.remaining > Duration::from_secs(20), "{phase:?}");
    let info = one.inspect(&key).await.unwrap();
    assert_eq!(
        info.holder,
        Some(first.fence()),
        "inspect shows the phase's fence"
    );
    assert!(two.try_acquire(&key, TTL).await.unwrap().is_none());

    // Renewal and release are per reader: a reader another process granted is renewed here.
    one.extend_shared(&joined, b, TTL).await.unwrap();
    assert!(one.release_shared(&first, a).await.unwrap());
    assert!(
        !one.release_shared(&first, a).await.unwrap(),
        "released twice"
    );
    assert_eq!(two.inspect_shared(&key).await.unwrap().unwrap().readers, 1);
    assert!(two.release_shared(&joined, b).await.unwrap());
    assert!(two.inspect_shared(&key).await.unwrap().is_none());
    assert!(
        one.extend_shared(&joined, b, TTL).await.is_err(),
        "a released reader renewed"
    );

    // The next phase takes a new token.
    let next = two.try_acquire_shared(&key, a, TTL).await.unwrap().unwrap();
    assert!(next.token > first.token);
    assert_ne!(next.owner, first.owner);
}
