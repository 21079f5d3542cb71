//! Semaphores of N permits (fencelock-core's `Semaphore`, a slot of exclusive locks per
//! permit), on every backend that claims `Capabilities::kinds.semaphore`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fencelock_core::{Error, LockKey, Locker, Semaphore};
use tokio::time::{sleep, timeout};

use super::support::{not_applicable, LONG_TTL, PATIENCE, assert_stale, key};
use crate::Setup;

/// The semaphore, or `None` after checking that a backend which does not claim semaphores
/// is refused with `Unsupported` (never a silent pass).
fn semaphore(s: &Setup, name: &str, permits: usize) -> Option<Semaphore> {
    let locker = Locker::new(s.backend.clone());
    let semaphore = Semaphore::new(&locker, key(name).as_str(), permits);
    if s.backend.capabilities().kinds.semaphore {
        return Some(semaphore.expect("Semaphore::new failed"));
    }
    match semaphore {
        Err(Error::Unsupported { .. }) => None,
        other => panic!("semaphores are not claimed: expected Unsupported, got {other:?}"),
    }
}

declare_properties!(__fencelock_conformance_semaphore, {
    /// N permits are granted on N different slots, the N+1st waits until one is given back,
    /// and under contention no more than N holders ever overlap.
    pub async fn at_most_n_permit_holders_at_once(s: &Setup) {
        let Some(sem) = semaphore(s, "permits", 3) else {
            return not_applicable("at_most_n_permit_holders_at_once", "the backend offers no semaphore (LockKinds::semaphore)");
        };
        let mut held = Vec::new();
        for _ in 0..3 {
            held.push(sem.acquire().ttl(LONG_TTL).wait(Duration::ZERO).await.unwrap());
        }
        let mut slots: Vec<usize> = held.iter().map(|p| p.slot()).collect();
        slots.sort_unstable();
        assert_eq!(slots, [0, 1, 2], "permits share a slot");
        assert!(sem.try_acquire().await.unwrap().is_none(), "a 4th permit of 3");
        let waiter = tokio::spawn(sem.acquire().ttl(LONG_TTL).wait(PATIENCE).into_future());
        sleep(Duration::from_millis(200)).await;
        assert!(!waiter.is_finished(), "a waiter got a permit while all were held");
        let freed = held.remove(1);
        let freed_slot = freed.slot();
        assert!(
            freed.release().await.unwrap(),
            "release of a held permit answered false (not held)"
        );
        let got = timeout(PATIENCE, waiter).await.expect("waiter not woken").unwrap().unwrap();
        assert_eq!(
            got.slot(),
            freed_slot,
            "the waiter got another slot than the one given back"
        );
        held.push(got);
        for permit in held {
            assert!(
                permit.release().await.unwrap(),
                "release of a held permit answered false (not held)"
            );
        }
        // Contention: 6 tasks x 4 rounds on 2 permits, counting overlapping holders.
        let sem = semaphore(s, "permits-contended", 2).unwrap();
        let inside = Arc::new(AtomicUsize::new(0));
        let most = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..6 {
            let (sem, inside, most) = (sem.clone(), inside.clone(), most.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..4 {
                    let permit = sem.acquire().ttl(LONG_TTL).wait(PATIENCE * 3).await.unwrap();
                    let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                    most.fetch_max(now, Ordering::SeqCst);
                    sleep(Duration::from_millis(10)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(
                        permit.release().await.unwrap(),
                        "release of a held permit answered false (not held)"
                    );
                }
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let most = most.load(Ordering::SeqCst);
        assert!(most <= 2, "{most} holders of 2 permits at once");
    }

    /// Each slot has its own token sequence, and a permit holder paused past its lease is
    /// refused on its slot's data once the slot's next holder has written.
    pub async fn paused_permit_holder_is_refused_on_its_slot(s: &Setup) {
        let Some(sem) = semaphore(s, "paused-permit", 1) else {
            return not_applicable("paused_permit_holder_is_refused_on_its_slot", "the backend offers no semaphore (LockKinds::semaphore)");
        };
        let old = sem.acquire().ttl(s.short_ttl()).watchdog(false).wait(Duration::ZERO).await.unwrap();
        let resource = old.slot_key();
        s.storage.write(&resource, old.fence(), b"old").await.unwrap();
        sleep(s.past_short_ttl()).await;
        let new = sem.acquire().ttl(LONG_TTL).wait(PATIENCE).await.unwrap();
        assert_eq!(
            new.slot(),
            old.slot(),
            "the next permit of a 1-permit semaphore is on another slot"
        );
        assert!(new.token() > old.token(), "a slot's token did not increase");
        s.storage.write(&resource, new.fence(), b"new").await.unwrap();
        assert_stale(s.storage.write(&resource, old.fence(), b"stale").await, old.fence(), new.fence());
        assert!(!old.release().await.unwrap(), "the paused holder released the new holder's slot");
        assert!(new.is_held(), "the new holder's permit says it is not held");
        assert!(
            new.release().await.unwrap(),
            "release of the new holder's permit answered false (not held)"
        );
    }

    /// Slot keys stay within `LockKey::MAX_LEN`: the longest key that fits works, one byte
    /// more is `InvalidKey`, zero permits `InvalidConfig`, all before the backend is touched.
    pub async fn semaphore_keys_near_the_limit(s: &Setup) {
        if semaphore(s, "long-check", 1).is_none() {
            return not_applicable("semaphore_keys_near_the_limit", "the backend offers no semaphore (LockKinds::semaphore)");
        }
        let locker = Locker::new(s.backend.clone());
        let base = key("long");
        // `/permit/9` is 9 bytes: with 10 permits a key may be 503 bytes long.
        let fits: String = format!("{base}/").chars().chain(std::iter::repeat('x')).take(503).collect();
        let sem = Semaphore::new(&locker, &fits, 10).expect("a 503-byte key with 10 permits");
        assert_eq!(
            sem.slot_key(9).unwrap().as_str().len(),
            LockKey::MAX_LEN,
            "the last slot's key of a 503-byte key with 10 permits is not MAX_LEN bytes long"
        );
        let permit = sem.acquire().ttl(LONG_TTL).wait(Duration::ZERO).await.unwrap();
        assert!(
            permit.release().await.unwrap(),
            "release of a permit with the longest key answered false (not held)"
        );
        let too_long = format!("{fits}x");
        let over_long = Semaphore::new(&locker, &too_long, 10);
        assert!(
            matches!(over_long, Err(Error::InvalidKey { .. })),
            "slot keys over MAX_LEN answered {over_long:?}, not InvalidKey"
        );
        let no_permits = Semaphore::new(&locker, &fits, 0);
        assert!(
            matches!(no_permits, Err(Error::InvalidConfig { .. })),
            "a semaphore of zero permits answered {no_permits:?}, not InvalidConfig"
        );
    }
});
