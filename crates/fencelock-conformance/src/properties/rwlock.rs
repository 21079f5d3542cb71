//! Read/write locks, on a backend whose `Capabilities::kinds.shared` claims them; on one that
//! does not, every property checks that readers are refused with `Error::Unsupported`
//! instead (never a silent pass).

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, LockBackend, LockKey, Locker, OwnerId, RwLocker};
use tokio::time::sleep;

use super::support::{not_applicable, LONG_TTL, PATIENCE, assert_stale, grant, grant_after_expiry, key};
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
    assert_unsupported(rw.upgradeable_read(key.as_str()).wait(Duration::ZERO).await, b);
    // A writer needs no companion where no upgrader can exist: it is still granted.
    let writer = rw.try_write(key.as_str()).await.unwrap().expect("a writer was refused a free key");
    assert!(
        writer.release().await.unwrap(),
        "release of a writer on a backend without shared locks answered false (not held)"
    );
    false
}

/// Two read/write lockers over `backend`, each its own holder (as two processes are).
fn two_rw(backend: &Arc<dyn LockBackend>) -> (RwLocker, RwLocker) {
    let rw = || RwLocker::new(Locker::new(backend.clone()));
    (rw(), rw())
}

fn assert_unsupported<T: std::fmt::Debug>(outcome: Result<T, Error>, b: &dyn LockBackend) {
    match outcome {
        Err(Error::Unsupported { backend, .. }) => assert_eq!(
            backend,
            b.name(),
            "Unsupported names another backend than the one refusing"
        ),
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
            return not_applicable("readers_overlap_and_share_one_fence", "the backend offers no shared locks (LockKinds::shared)");
        }
        let b = &*s.backend;
        let key = key("readers-overlap");
        let (a, ra) = read_lease(b, &key, LONG_TTL).await;
        let (c, rc) = read_lease(b, &key, LONG_TTL).await;
        assert_eq!(a.fence(), c.fence(), "overlapping readers got different fences");
        let phase = b.inspect_shared(&key).await.unwrap().expect("no read phase");
        assert_eq!(
            phase.fence,
            a.fence(),
            "inspect_shared reports another fence than the readers'"
        );
        assert_eq!(
            phase.readers, 2,
            "inspect_shared does not count two readers"
        );
        let info = b.inspect(&key).await.unwrap();
        assert_eq!(info.holder, Some(a.fence()), "inspect does not show the read phase");
        for fence in [a.fence(), c.fence(), a.fence()] {
            s.storage.read(&key, fence).await.expect("a reader's fenced read was refused");
        }
        // Through the guard API too.
        let rw = RwLocker::new(Locker::new(s.backend.clone()));
        let guard = rw.read(key.as_str()).ttl(LONG_TTL).wait(Duration::ZERO).await.unwrap();
        assert_eq!(guard.fence(), a.fence(), "a joining reader got another fence");
        assert!(
            guard.release().await.unwrap(),
            "release of the joining reader's guard answered false (not held)"
        );
        assert!(
            b.release_shared(&a, ra).await.unwrap(),
            "release of a reader still in the phase answered false (not held)"
        );
        assert!(
            b.release_shared(&c, rc).await.unwrap(),
            "release of a reader still in the phase answered false (not held)"
        );
        assert!(b.inspect_shared(&key).await.unwrap().is_none(), "phase outlived its readers");
    }

    /// A writer excludes readers and writers; readers exclude writers until the last one
    /// leaves; a reader's release is its own (releasing twice is `false`).
    pub async fn writer_excludes_readers_and_writers(s: &Setup) {
        if !offers_shared(&s.backend).await {
            return not_applicable("writer_excludes_readers_and_writers", "the backend offers no shared locks (LockKinds::shared)");
        }
        let b = &*s.backend;
        let key = key("writer-excludes");
        let writer = grant(b, &key, LONG_TTL).await;
        assert!(b.try_acquire_shared(&key, OwnerId::random(), LONG_TTL).await.unwrap().is_none(), "a reader got in beside a writer");
        assert!(b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(), "two writers");
        assert!(
            b.release(&writer).await.unwrap(),
            "release of the writer's lease answered false (not held)"
        );
        let (a, ra) = read_lease(b, &key, LONG_TTL).await;
        let (c, rc) = read_lease(b, &key, LONG_TTL).await;
        assert!(b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(), "a writer got in beside readers");
        let renewed = b.extend_shared(&a, ra, LONG_TTL).await.expect("extend_shared failed");
        assert_eq!(renewed.fence(), a.fence(), "extend changed the read fence");
        assert!(
            b.release_shared(&a, ra).await.unwrap(),
            "release of a reader still in the phase answered false (not held)"
        );
        assert!(!b.release_shared(&a, ra).await.unwrap(), "a reader released twice");
        assert!(matches!(b.extend_shared(&a, ra, LONG_TTL).await, Err(Error::LeaseLost { .. })), "a released reader was renewed");
        assert!(b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(), "one reader left, yet a writer got in");
        assert!(
            b.release_shared(&c, rc).await.unwrap(),
            "release of the last reader answered false (not held)"
        );
        let writer = grant(b, &key, LONG_TTL).await;
        assert!(
            b.release(&writer).await.unwrap(),
            "release of the writer after the readers answered false (not held)"
        );
    }

    /// A writer's token exceeds every read fence before it, and the next read phase's token
    /// exceeds the writer's: tokens order phases and writers as one sequence.
    pub async fn writer_token_exceeds_every_reader_fence_before_it(s: &Setup) {
        if !offers_shared(&s.backend).await {
            return not_applicable("writer_token_exceeds_every_reader_fence_before_it", "the backend offers no shared locks (LockKinds::shared)");
        }
        let b = &*s.backend;
        let key = key("writer-token");
        let mut last = None;
        for _ in 0..3 {
            let (r, reader) = read_lease(b, &key, LONG_TTL).await;
            if let Some(previous) = last {
                assert!(r.token > previous, "read phase token {} not above {previous}", r.token);
            }
            assert!(
                b.release_shared(&r, reader).await.unwrap(),
                "release of a reader still in the phase answered false (not held)"
            );
            let w = grant(b, &key, LONG_TTL).await;
            assert!(w.token > r.token, "writer token {} not above read fence {}", w.token, r.token);
            assert!(
                b.release(&w).await.unwrap(),
                "release of the writer's lease answered false (not held)"
            );
            last = Some(w.token);
        }
    }

    /// A reader paused past its lease: the phase ends, a writer is granted and writes, and
    /// the reader's fenced read is then refused as stale; the reader cannot renew either.
    pub async fn paused_reader_is_refused_after_a_writer(s: &Setup) {
        if !offers_shared(&s.backend).await {
            return not_applicable("paused_reader_is_refused_after_a_writer", "the backend offers no shared locks (LockKinds::shared)");
        }
        let b = &*s.backend;
        let key = key("paused-reader");
        let (r, reader) = read_lease(b, &key, s.short_ttl()).await;
        s.storage.read(&key, r.fence()).await.unwrap();
        sleep(s.past_short_ttl()).await;
        let w = grant_after_expiry(b, &key, LONG_TTL).await;
        s.storage.write(&key, w.fence(), b"writer").await.unwrap();
        assert_stale(s.storage.read(&key, r.fence()).await, r.fence(), w.fence());
        assert_stale(s.storage.write(&key, r.fence(), b"stale").await, r.fence(), w.fence());
        assert!(matches!(b.extend_shared(&r, reader, LONG_TTL).await, Err(Error::LeaseLost { .. })), "an expired reader was renewed");
        assert!(
            !b.release_shared(&r, reader).await.unwrap(),
            "release of a reader whose phase a writer ended answered true (still held)"
        );
        assert!(b.release(&w).await.unwrap(), "the stale reader's release freed the writer's lock");
    }

    /// At most one upgradeable reader holds a key at a time, beside plain readers that share
    /// its fence; writers are kept out while it holds; once it is released the next one gets in.
    pub async fn one_upgradeable_reader_at_a_time_beside_plain_readers(s: &Setup) {
        if !offers_shared(&s.backend).await {
            return not_applicable("one_upgradeable_reader_at_a_time_beside_plain_readers", "the backend offers no shared locks (LockKinds::shared)");
        }
        let (a, b) = two_rw(&s.backend);
        let key = key("one-upgrader");
        let first = a.upgradeable_read(key.as_str()).ttl(LONG_TTL).wait(Duration::ZERO).await.expect("the first upgradeable reader was refused");
        assert!(b.try_upgradeable_read(key.as_str()).await.unwrap().is_none(), "two upgradeable readers at once");
        // The same locker asking again would wait for itself: refused at once.
        assert!(matches!(a.try_upgradeable_read(key.as_str()).await, Err(Error::AlreadyHeld { .. })), "a second upgradeable reader of one locker was not refused");
        let plain = b.read(key.as_str()).ttl(LONG_TTL).wait(Duration::ZERO).await.expect("a plain reader was refused beside the upgradeable reader");
        assert_eq!(plain.fence(), first.fence(), "the plain reader is in another phase");
        s.storage.read(&key, plain.fence()).await.expect("a plain reader's fenced read was refused");
        s.storage.read(&key, first.fence()).await.expect("the upgradeable reader's fenced read was refused");
        assert!(
            plain.release().await.unwrap(),
            "release of the plain reader's guard answered false (not held)"
        );
        assert!(b.try_write(key.as_str()).await.unwrap().is_none(), "a writer got in beside the upgradeable reader");
        assert!(
            first.release().await.unwrap(),
            "release of the upgradeable reader's guard answered false (not held)"
        );
        let next = b.try_upgradeable_read(key.as_str()).await.unwrap().expect("the released upgradeable reader still kept the next one out");
        assert!(
            next.release().await.unwrap(),
            "release of the next upgradeable reader's guard answered false (not held)"
        );
    }

    /// The upgrade waits for the other readers and takes a new token; a writer that was
    /// already waiting when the last other reader left is granted only after the upgraded
    /// writer (the companion keeps it out of the gap between the read and the write); after
    /// the upgraded write every read fence of the phase before it is refused, the upgrader's
    /// own and its plain readers' alike.
    pub async fn a_reader_fence_from_before_the_upgrade_is_refused_after_it(s: &Setup) {
        if !offers_shared(&s.backend).await {
            return not_applicable("a_reader_fence_from_before_the_upgrade_is_refused_after_it", "the backend offers no shared locks (LockKinds::shared)");
        }
        // A writer let into the gap would race the upgrader there and need not win every
        // time: a few rounds.
        for round in 0..3 {
            let (a, b) = two_rw(&s.backend);
            let key = key(&format!("upgrade-fence-{round}"));
            let upgradeable = a.upgradeable_read(key.as_str()).ttl(LONG_TTL).wait(Duration::ZERO).await.unwrap();
            let plain = b.read(key.as_str()).ttl(LONG_TTL).wait(Duration::ZERO).await.unwrap();
            let read_fence = upgradeable.fence();
            s.storage.read(&key, read_fence).await.expect("the phase's fenced read was refused");
            let upgrade = tokio::spawn(upgradeable.upgrade(PATIENCE));
            // Another locker's writer, waiting before the plain reader leaves.
            let other = RwLocker::new(Locker::new(s.backend.clone()));
            let waiting = tokio::spawn(async move {
                let writer = other.write(key.as_str()).ttl(LONG_TTL).wait(PATIENCE).await;
                (writer, key)
            });
            // The plain reader is still in the phase: the upgrade cannot be through.
            sleep(s.short_ttl()).await;
            assert!(!upgrade.is_finished(), "the upgrade did not wait for the other reader");
            assert!(
                plain.release().await.unwrap(),
                "release of the plain reader's guard answered false (not held)"
            );
            let writer = upgrade.await.unwrap().expect("the upgrade failed once the reader left");
            assert!(writer.token() > read_fence.token, "the upgrade's token {} is not above the read fence {read_fence}", writer.token());
            let key = writer.guard().lease().key;
            s.storage.write(&key, writer.fence(), b"upgraded").await.expect("the upgraded writer's write was refused");
            assert_stale(s.storage.read(&key, read_fence).await, read_fence, writer.fence());
            assert_stale(s.storage.write(&key, read_fence, b"stale").await, read_fence, writer.fence());
            assert!(b.try_read(key.as_str()).await.unwrap().is_none(), "a reader got in beside the upgraded writer");
            sleep(s.short_ttl()).await;
            assert!(!waiting.is_finished(), "a waiting writer was granted beside the upgraded writer");
            let upgraded_token = writer.token();
            assert!(
                writer.release().await.unwrap(),
                "release of the upgraded writer's guard answered false (not held)"
            );
            let (next, _) = waiting.await.unwrap();
            let next = next.expect("the waiting writer was not granted after the upgraded one left");
            assert!(next.token() > upgraded_token, "the waiting writer's token {} is not above the upgrade's {upgraded_token}", next.token());
            assert!(
                next.release().await.unwrap(),
                "release of the waiting writer's guard answered false (not held)"
            );
        }
    }

    /// A downgrade keeps other writers out between the write and the read: the reader's
    /// fence is newer than the write's, so it reads what the upgraded writer wrote, and plain
    /// readers join its phase.
    pub async fn a_downgrade_reads_the_upgraded_write_with_no_writer_between(s: &Setup) {
        if !offers_shared(&s.backend).await {
            return not_applicable("a_downgrade_reads_the_upgraded_write_with_no_writer_between", "the backend offers no shared locks (LockKinds::shared)");
        }
        let (a, b) = two_rw(&s.backend);
        let key = key("downgrade");
        let upgradeable = a.upgradeable_read(key.as_str()).ttl(LONG_TTL).wait(Duration::ZERO).await.unwrap();
        let writer = upgradeable.upgrade(PATIENCE).await.expect("an upgrade with no other reader failed");
        s.storage.write(&key, writer.fence(), b"written").await.unwrap();
        let write_fence = writer.fence();
        let reader = writer.downgrade().await.expect("the downgrade failed");
        assert!(reader.token() > write_fence.token, "the downgraded read fence {} is not above the write {write_fence}", reader.fence());
        let read = s.storage.read(&key, reader.fence()).await.expect("the downgraded reader's read was refused");
        assert_eq!(read.as_deref(), Some(&b"written"[..]), "the downgraded reader read something else");
        assert!(b.try_write(key.as_str()).await.unwrap().is_none(), "a writer got in beside the downgraded reader");
        let plain = b.try_read(key.as_str()).await.unwrap().expect("a plain reader was refused beside the downgraded reader");
        assert_eq!(
            plain.fence(),
            reader.fence(),
            "a plain reader beside the downgraded reader got another fence"
        );
        assert!(
            plain.release().await.unwrap(),
            "release of the plain reader's guard answered false (not held)"
        );
        assert!(
            reader.release().await.unwrap(),
            "release of the downgraded reader's guard answered false (not held)"
        );
        let writer = b.try_write(key.as_str()).await.unwrap().expect("a writer was refused once the reader was released");
        assert!(
            writer.release().await.unwrap(),
            "release of the writer's guard answered false (not held)"
        );
    }
});
