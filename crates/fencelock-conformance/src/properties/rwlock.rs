//! Read/write locks, on a backend whose `Capabilities::kinds.shared` claims them; on one that
//! does not, every property checks that readers are refused with `Error::Unsupported`
//! instead (never a silent pass).

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, LockBackend, LockKey, Locker, OwnerId, RwLocker};
use tokio::time::sleep;

use super::support::{LONG_TTL, assert_stale, grant, key};
use crate::Setup;

/// `true` when the backend claims shared locks. When it does not, checks that every shared
/// method and `RwLocker::read` are refused with `Unsupported`, and returns `false`.
/// (Takes the backend, not the `Setup`: every `async fn` of a `&Setup` here is a property.)
async fn offers_shared(backend: &Arc<dyn LockBackend>) -> bool {
    let b = &**backend;
    if b.capabilities().kinds.shared {
        return true;
    }
    let key = key("unsupported");
    let reader = OwnerId::random();
    assert_unsupported(b.try_acquire_shared(&key, reader, LONG_TTL).await, b);
    assert_unsupported(b.inspect_shared(&key).await, b);
    let lease = grant(b, &key, LONG_TTL).await;
    assert_unsupported(b.extend_shared(&lease, reader, LONG_TTL).await, b);
    assert_unsupported(b.release_shared(&lease, reader).await, b);
    assert!(b.release(&lease).await.unwrap(), "the writer's lock was lost");
    let rw = RwLocker::new(Locker::new(backend.clone()));
    assert_unsupported(rw.read(key.as_str()).wait(Duration::ZERO).await, b);
    false
}

fn assert_unsupported<T: std::fmt::Debug>(outcome: Result<T, Error>, b: &dyn LockBackend) {
    match outcome {
        Err(Error::Unsupported { backend, .. }) => assert_eq!(backend, b.name()),
        other => panic!(
            "{} does not claim shared locks: expected Error::Unsupported, got {other:?}",
            b.name()
        ),
    }
}

async fn read_lease(b: &dyn LockBackend, key: &LockKey, ttl: Duration) -> (fencelock_core::Lease, OwnerId) {
    let reader = OwnerId::random();
    let lease = b
        .try_acquire_shared(key, reader, ttl)
        .await
        .expect("try_acquire_shared failed")
        .unwrap_or_else(|| panic!("{} refused a reader on a key without writer", b.name()));
    (lease, reader)
}

declare_properties!(__fencelock_conformance_rwlock, {
    /// Readers that overlap are all admitted and share one fence (token and owner), which
    /// the storage admits for each of them; `inspect_shared` counts them.
    pub async fn readers_overlap_and_share_one_fence(s: &Setup) {
        if !offers_shared(&s.backend).await {
            return;
        }
        let b = &*s.backend;
        let key = key("readers-overlap");
        let (a, ra) = read_lease(b, &key, LONG_TTL).await;
        let (c, rc) = read_lease(b, &key, LONG_TTL).await;
        assert_eq!(a.fence(), c.fence(), "overlapping readers got different fences");
        let phase = b.inspect_shared(&key).await.unwrap().expect("no read phase");
        assert_eq!(phase.fence, a.fence());
        assert_eq!(phase.readers, 2);
        let info = b.inspect(&key).await.unwrap();
        assert_eq!(info.holder, Some(a.fence()), "inspect does not show the read phase");
        for fence in [a.fence(), c.fence(), a.fence()] {
            s.storage.read(&key, fence).await.expect("a reader's fenced read was refused");
        }
        // Through the guard API too.
        let rw = RwLocker::new(Locker::new(s.backend.clone()));
        let guard = rw.read(key.as_str()).ttl(LONG_TTL).wait(Duration::ZERO).await.unwrap();
        assert_eq!(guard.fence(), a.fence(), "a joining reader got another fence");
        assert!(guard.release().await.unwrap());
        assert!(b.release_shared(&a, ra).await.unwrap());
        assert!(b.release_shared(&c, rc).await.unwrap());
        assert!(b.inspect_shared(&key).await.unwrap().is_none(), "phase outlived its readers");
    }

    /// A writer excludes readers and writers; readers exclude writers until the last one
    /// leaves; a reader's release is its own (releasing twice is `false`).
    pub async fn writer_excludes_readers_and_writers(s: &Setup) {
        if !offers_shared(&s.backend).await {
            return;
        }
        let b = &*s.backend;
        let key = key("writer-excludes");
        let writer = grant(b, &key, LONG_TTL).await;
        assert!(b.try_acquire_shared(&key, OwnerId::random(), LONG_TTL).await.unwrap().is_none(), "a reader got in beside a writer");
        assert!(b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(), "two writers");
        assert!(b.release(&writer).await.unwrap());
        let (a, ra) = read_lease(b, &key, LONG_TTL).await;
        let (c, rc) = read_lease(b, &key, LONG_TTL).await;
        assert!(b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(), "a writer got in beside readers");
        let renewed = b.extend_shared(&a, ra, LONG_TTL).await.expect("extend_shared failed");
        assert_eq!(renewed.fence(), a.fence(), "extend changed the read fence");
        assert!(b.release_shared(&a, ra).await.unwrap());
        assert!(!b.release_shared(&a, ra).await.unwrap(), "a reader released twice");
        assert!(matches!(b.extend_shared(&a, ra, LONG_TTL).await, Err(Error::LeaseLost { .. })), "a released reader was renewed");
        assert!(b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(), "one reader left, yet a writer got in");
        assert!(b.release_shared(&c, rc).await.unwrap());
        let writer = grant(b, &key, LONG_TTL).await;
        assert!(b.release(&writer).await.unwrap());
    }

    /// A writer's token exceeds every read fence before it, and the next read phase's token
    /// exceeds the writer's: tokens order phases and writers as one sequence.
    pub async fn writer_token_exceeds_every_reader_fence_before_it(s: &Setup) {
        if !offers_shared(&s.backend).await {
            return;
        }
        let b = &*s.backend;
        let key = key("writer-token");
        let mut last = None;
        for _ in 0..3 {
            let (r, reader) = read_lease(b, &key, LONG_TTL).await;
            if let Some(previous) = last {
                assert!(r.token > previous, "read phase token {} not above {previous}", r.token);
            }
            assert!(b.release_shared(&r, reader).await.unwrap());
            let w = grant(b, &key, LONG_TTL).await;
            assert!(w.token > r.token, "writer token {} not above read fence {}", w.token, r.token);
            assert!(b.release(&w).await.unwrap());
            last = Some(w.token);
        }
    }

    /// A reader paused past its lease: the phase ends, a writer is granted and writes, and
    /// the reader's fenced read is then refused as stale; the reader cannot renew either.
    pub async fn paused_reader_is_refused_after_a_writer(s: &Setup) {
        if !offers_shared(&s.backend).await {
            return;
        }
        let b = &*s.backend;
        let key = key("paused-reader");
        let (r, reader) = read_lease(b, &key, s.short_ttl()).await;
        s.storage.read(&key, r.fence()).await.unwrap();
        sleep(s.past_short_ttl()).await;
        let w = grant(b, &key, LONG_TTL).await;
        s.storage.write(&key, w.fence(), b"writer").await.unwrap();
        assert_stale(s.storage.read(&key, r.fence()).await, r.fence(), w.fence());
        assert_stale(s.storage.write(&key, r.fence(), b"stale").await, r.fence(), w.fence());
        assert!(matches!(b.extend_shared(&r, reader, LONG_TTL).await, Err(Error::LeaseLost { .. })), "an expired reader was renewed");
        assert!(!b.release_shared(&r, reader).await.unwrap());
        assert!(b.release(&w).await.unwrap(), "the stale reader's release freed the writer's lock");
    }
});
