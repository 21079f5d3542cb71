//! Composite locks (`Locker::lock_all`) and re-entry, on top of the backend under test.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fencelock_core::{Error, Locker, LostReason};
use tokio::time::{sleep, timeout};

use super::support::{not_applicable, LONG_TTL, PATIENCE, assert_stale, grant, grant_after_expiry, key};
use crate::Setup;

declare_properties!(__fencelock_conformance_composite, {
    /// Two owners that lock overlapping sets given in opposite orders ({a, b} and {b, a}),
    /// again and again, all finish: no deadlock. While either holds its set nobody else holds
    /// any member, and a set one of whose keys is held elsewhere is not taken at all: its
    /// other keys stay free.
    pub async fn composite_is_all_or_none_and_never_deadlocks(s: &Setup) {
        let (a, b, c) = (key("set-a"), key("set-b"), key("set-c"));
        let inside = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for set in [vec![a.clone(), b.clone()], vec![b.clone(), a.clone()], vec![c.clone(), b.clone()]] {
            let (locker, inside) = (Locker::new(s.backend.clone()), inside.clone());
            tasks.push(tokio::spawn(async move {
                for _ in 0..8 {
                    let held = locker
                        .lock_all(set.iter().map(|key| key.as_str()))
                        .ttl(LONG_TTL)
                        .wait(PATIENCE * 3)
                        .await
                        .expect("a composite lock of overlapping sets was not granted");
                    assert!(
                        held.is_held(),
                        "a composite lock just granted says it is not held"
                    );
                    assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two owners held key b at once");
                    sleep(Duration::from_millis(5)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    assert!(held.release().await.unwrap(), "a member was lost without contention");
                }
            }));
        }
        for task in tasks {
            timeout(PATIENCE * 6, task)
                .await
                .expect("owners locking {a, b} and {b, a} did not all finish: a deadlock")
                .unwrap();
        }

        // All or none: with b held elsewhere, {a, b} is refused and a is left free.
        let b = &*s.backend;
        let other = grant(b, &c, LONG_TTL).await;
        let locker = Locker::new(s.backend.clone());
        let refused = locker.lock_all([c.as_str(), a.as_str()]).ttl(LONG_TTL).wait(Duration::from_millis(300)).await;
        assert!(
            matches!(&refused, Err(Error::Timeout { key, .. }) if *key == c.to_string()),
            "expected a Timeout naming the held key {c}, got {refused:?}"
        );
        let info = b.inspect(&a).await.unwrap();
        assert_eq!(info.holder, None, "a refused composite lock left {a} held");
        assert!(
            b.release(&other).await.unwrap(),
            "release of the lease on the held key answered false (not held)"
        );
    }

    /// Each member of a composite lock carries its own key's grant: its fence is the one the
    /// backend reports for that key, the fences of different keys differ, and a write to a
    /// key's resource is admitted with that key's fence.
    pub async fn composite_members_carry_their_own_fences(s: &Setup) {
        let b = &*s.backend;
        let (a, k) = (key("own-a"), key("own-b"));
        // Set the two keys' counters apart, so one key's token cannot pass for the other's.
        for _ in 0..3 {
            let lease = grant(b, &k, LONG_TTL).await;
            assert!(
                b.release(&lease).await.unwrap(),
                "release of a lease still held answered false (not held)"
            );
        }
        let locker = Locker::new(s.backend.clone());
        let held = locker.lock_all([k.as_str(), a.as_str(), k.as_str()]).ttl(LONG_TTL).wait(PATIENCE).await.unwrap();
        assert_eq!(
            held.keys().collect::<Vec<_>>(),
            {
                let mut keys = vec![a.clone(), k.clone()];
                keys.sort();
                keys
            },
            "the composite's keys are not its distinct keys, sorted"
        );
        for member in [&a, &k] {
            let fence = held.fence(member.as_str()).unwrap();
            let info = b.inspect(member).await.unwrap();
            assert_eq!(info.holder, Some(fence), "{member}'s member does not carry {member}'s grant");
            s.storage.write(member, fence, b"mine").await.expect("a member's own fence was refused");
        }
        assert_ne!(
            held.fence(a.as_str()),
            held.fence(k.as_str()),
            "two members of a composite lock share a fence"
        );
        assert!(
            held.release().await.unwrap(),
            "release of the composite lock answered false (a member was not held)"
        );
    }

    /// A backend that claims to grant sets in one step (`Capabilities::atomic_sets`) grants
    /// every key of a set or changes nothing: with one key held, `try_acquire_all` takes none
    /// of the others and moves no counter; with all free, each key is granted with a token
    /// above every earlier one of its own key, and the grants are the ones `inspect` reports.
    /// Two owners trying overlapping sets again and again never hold the shared key at once.
    pub async fn atomic_sets_grant_every_key_or_none(s: &Setup) {
        if !s.backend.capabilities().atomic_sets {
            return not_applicable("atomic_sets_grant_every_key_or_none", "the backend does not claim atomic_sets");
        }
        let b = &*s.backend;
        let mut set = vec![key("one-x"), key("one-y"), key("one-z")];
        set.sort();
        // Earlier grants on x, so its counter is ahead of the others.
        let mut before = Vec::new();
        for _ in 0..2 {
            let lease = grant(b, &set[0], LONG_TTL).await;
            assert!(
                b.release(&lease).await.unwrap(),
                "release of a lease still held answered false (not held)"
            );
        }
        for k in &set {
            before.push(b.inspect(k).await.unwrap().last_token);
        }
        let held = grant(b, &set[1], LONG_TTL).await;
        let refused = b.try_acquire_all(&set, LONG_TTL).await.unwrap();
        assert!(refused.is_none(), "{} granted a set one of whose keys was held", b.name());
        for (k, last) in [(&set[0], before[0]), (&set[2], before[2])] {
            let info = b.inspect(k).await.unwrap();
            assert_eq!(info.holder, None, "a refused set left {k} held");
            assert_eq!(info.last_token, last, "a refused set moved {k}'s counter");
        }
        assert!(
            b.release(&held).await.unwrap(),
            "release of the lease on the held key answered false (not held)"
        );
        let after_hold = b.inspect(&set[1]).await.unwrap().last_token;

        let leases = b
            .try_acquire_all(&set, LONG_TTL)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{} refused a set of free keys", b.name()));
        assert_eq!(leases.iter().map(|l| l.key.clone()).collect::<Vec<_>>(), set, "one lease per key, in order");
        let floors = [before[0], after_hold, before[2]];
        for (lease, floor) in leases.iter().zip(floors) {
            assert!(
                floor.is_none_or(|floor| lease.token > floor),
                "{}'s token {} is not above its key's last {floor:?}",
                lease.key,
                lease.token
            );
            let info = b.inspect(&lease.key).await.unwrap();
            assert_eq!(info.holder, Some(lease.fence()), "{} does not hold the set's grant", lease.key);
        }
        for lease in &leases {
            assert!(
                b.release(lease).await.unwrap(),
                "release of {}'s lease from the granted set answered false (not held)",
                lease.key
            );
        }

        // Overlapping sets {x, y} and {y, z}, tried again and again by two owners.
        let inside = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for pair in [vec![set[0].clone(), set[1].clone()], vec![set[1].clone(), set[2].clone()]] {
            let (backend, inside) = (s.backend.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                let mut granted = 0;
                for _ in 0..40 {
                    if let Some(leases) = backend.try_acquire_all(&pair, LONG_TTL).await.unwrap() {
                        granted += 1;
                        assert_eq!(inside.fetch_add(1, Ordering::SeqCst), 0, "two sets held the shared key at once");
                        sleep(Duration::from_millis(2)).await;
                        inside.fetch_sub(1, Ordering::SeqCst);
                        for lease in &leases {
                            assert!(
                                backend.release(lease).await.unwrap(),
                                "release of {}'s lease from a set answered false (not held)",
                                lease.key
                            );
                        }
                    }
                    sleep(Duration::from_millis(1)).await;
                }
                granted
            }));
        }
        for task in tasks {
            let granted = timeout(PATIENCE * 3, task).await.expect("the set tries did not finish").unwrap();
            assert!(granted > 0, "a set of keys held only in turns was never granted");
        }
    }

    /// When one member of a composite lock is lost (here: another owner takes it), the guard's
    /// `lost()` fires naming that member, `is_held()` turns false, and a write to that
    /// member's resource with the composite's fence is refused once the new owner wrote.
    pub async fn composite_lost_fires_when_one_member_is_lost(s: &Setup) {
        let b = &*s.backend;
        let (a, k) = (key("lost-a"), key("lost-b"));
        let locker = Locker::new(s.backend.clone());
        let held = locker
            .lock_all([a.as_str(), k.as_str()])
            .ttl(s.short_ttl())
            .watchdog(false)
            .wait(PATIENCE)
            .await
            .unwrap();
        let old = held.fence(k.as_str()).unwrap();
        // Keep `a` alive; let `k` lapse and go to another owner.
        held.member(a.as_str()).unwrap().extend(LONG_TTL).await.unwrap();
        sleep(s.past_short_ttl()).await;
        let successor = grant_after_expiry(b, &k, LONG_TTL).await;
        let lost = timeout(PATIENCE, held.lost()).await.expect("lost() did not fire after a member was lost");
        assert_eq!(lost.key, k, "lost() named the wrong member");
        assert!(
            matches!(
                lost.reason,
                LostReason::DeadlinePassed | LostReason::NotHeld | LostReason::Superseded
            ),
            "lost() gave the reason {:?}, not one of a member taken over",
            lost.reason
        );
        timeout(PATIENCE, held.lost_token().cancelled_owned()).await.expect("lost_token() was not cancelled");
        assert!(!held.is_held(), "a composite with a lost member says it is held");
        assert!(held.member(a.as_str()).unwrap().is_held(), "the other member should be unaffected");
        s.storage.write(&k, successor.fence(), b"new").await.unwrap();
        assert_stale(s.storage.write(&k, old, b"stale").await, old, successor.fence());
        assert!(!held.release().await.unwrap(), "release says every member was still held");
        assert!(
            b.release(&successor).await.unwrap(),
            "release of the successor's lease answered false (not held)"
        );
    }

    /// A second lock of a key the same `Locker` holds is refused at once with `AlreadyHeld`,
    /// never a wait for itself nor a second grant: the token is not bumped. A composite lock
    /// with a held key is refused the same way and takes none of its other keys. A clone is
    /// a holder of its own and contends normally.
    pub async fn relocking_a_held_key_is_refused(s: &Setup) {
        let b = &*s.backend;
        let (k, other) = (key("reenter"), key("reenter-other"));
        let locker = Locker::new(s.backend.clone());
        let guard = locker.lock(k.as_str()).ttl(LONG_TTL).await.unwrap();
        let again = timeout(PATIENCE, locker.lock(k.as_str()).ttl(LONG_TTL).wait(LONG_TTL).into_future())
            .await
            .expect("a re-entrant lock waited instead of being refused");
        assert!(matches!(&again, Err(Error::AlreadyHeld { key }) if *key == k.to_string()), "expected AlreadyHeld, got {again:?}");
        let tried = locker.try_lock(k.as_str()).await;
        assert!(
            matches!(tried, Err(Error::AlreadyHeld { .. })),
            "a try of a key the same locker holds answered {tried:?}, not AlreadyHeld"
        );
        let set = locker.lock_all([other.as_str(), k.as_str()]).ttl(LONG_TTL).wait(LONG_TTL).await;
        assert!(matches!(&set, Err(Error::AlreadyHeld { .. })), "expected AlreadyHeld, got {set:?}");
        let info = b.inspect(&k).await.unwrap();
        assert_eq!(info.holder, Some(guard.fence()), "a refused re-entry changed the holder");
        assert_eq!(info.last_token, Some(guard.token()), "a refused re-entry bumped the token");
        assert_eq!(b.inspect(&other).await.unwrap().holder, None, "a refused composite took a key");
        let clone = locker.clone();
        assert!(clone.try_lock(k.as_str()).await.unwrap().is_none(), "a clone got a held lock");
        assert!(
            guard.release().await.unwrap(),
            "release of the held guard answered false (not held)"
        );
        let relocked = locker.lock(k.as_str()).ttl(LONG_TTL).wait(PATIENCE).await.expect("released key not granted again");
        assert!(
            relocked.token() > info.last_token.unwrap(),
            "the re-lock's token {} is not above the released guard's {}",
            relocked.token(),
            info.last_token.unwrap()
        );
        assert!(
            relocked.release().await.unwrap(),
            "release of the re-locked guard answered false (not held)"
        );
    }
});
