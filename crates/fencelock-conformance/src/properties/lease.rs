//! One lease at a time per key, on the backend alone: who holds it, until when, and what a
//! superseded holder can no longer do.

use std::time::Duration;

use fencelock_core::{Error, OwnerId};
use tokio::time::{Instant, sleep};

use super::support::{not_applicable, LONG_TTL, grant, grant_after_expiry, key};
use crate::Setup;

declare_properties!(__fencelock_conformance_lease, {
    /// Grant, contention, release, and a re-grant with a higher token and a new owner.
    pub async fn grant_contend_release(s: &Setup) {
        let b = &*s.backend;
        let key = key("grant");
        let first = grant(b, &key, LONG_TTL).await;
        assert!(
            b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(),
            "a held lock was granted twice"
        );
        assert!(
            first.is_valid(),
            "a fresh lease is already past valid_until"
        );
        assert!(
            first.valid_until <= Instant::now() + LONG_TTL,
            "valid_until is later than the ttl allows"
        );
        assert!(
            b.release(&first).await.unwrap(),
            "release of a held lease returned false"
        );
        let second = grant(b, &key, LONG_TTL).await;
        assert!(
            second.token > first.token,
            "re-grant did not raise the token"
        );
        assert_ne!(second.owner, first.owner, "two grants share an owner id");
        assert!(
            b.release(&second).await.unwrap(),
            "release of the re-granted lease answered false (not held)"
        );
    }

    /// An expired lease no longer blocks: the next client is granted, with a higher token.
    pub async fn expiry_hands_over(s: &Setup) {
        let b = &*s.backend;
        let key = key("expiry");
        let old = grant(b, &key, s.short_ttl()).await;
        assert!(
            b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(),
            "held lock granted before expiry"
        );
        sleep(s.past_short_ttl()).await;
        assert!(!old.is_valid(), "valid_until is later than the ttl");
        let new = grant_after_expiry(b, &key, LONG_TTL).await;
        assert!(
            new.token > old.token,
            "the grant after expiry has token {}, not above the expired lease's {}",
            new.token,
            old.token
        );
        b.release(&new).await.unwrap();
    }

    /// Extend keeps owner and token, moves `valid_until` forward, and keeps the lock past the
    /// original ttl.
    pub async fn extend_keeps_lease_and_token(s: &Setup) {
        let b = &*s.backend;
        let key = key("extend");
        // Twice the short ttl: the extend, sent a sixth of the way in, may stall for most of
        // the rest on a loaded machine, and the wait below still outlasts the original ttl.
        let lease = grant(b, &key, s.short_ttl() * 2).await;
        sleep(s.short_ttl() / 3).await;
        let extended = b.extend(&lease, Duration::from_secs(5)).await.unwrap();
        assert_eq!(extended.token, lease.token, "extend changed the token");
        assert_eq!(extended.owner, lease.owner, "extend changed the owner");
        assert_eq!(extended.key, lease.key, "extend changed the key");
        assert!(
            extended.valid_until > lease.valid_until,
            "extend did not move valid_until"
        );
        sleep(s.past_short_ttl()).await;
        assert!(
            b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(),
            "extended lock was granted to another client"
        );
        assert!(
            b.release(&extended).await.unwrap(),
            "release of the extended lease answered false (not held)"
        );
    }

    /// Extending a lease whose lock was taken over is `LeaseLost` and leaves the new holder alone.
    pub async fn extend_after_takeover_is_lease_lost(s: &Setup) {
        let b = &*s.backend;
        let key = key("takeover");
        let old = grant(b, &key, s.short_ttl()).await;
        sleep(s.past_short_ttl()).await;
        let new = grant_after_expiry(b, &key, LONG_TTL).await;
        match b.extend(&old, LONG_TTL).await {
            Err(Error::LeaseLost { .. }) => {}
            other => panic!("extend after takeover: expected LeaseLost, got {other:?}"),
        }
        let info = b.inspect(&key).await.unwrap();
        assert_eq!(
            info.holder,
            Some(new.fence()),
            "extend disturbed the new holder"
        );
        assert!(
            b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(),
            "a lock held by the new holder was granted again after the old one's extend"
        );
        assert!(
            b.release(&new).await.unwrap(),
            "release of the new holder's lease answered false (not held)"
        );
        // Extending a lease that was released does not re-create the lock.
        match b.extend(&new, LONG_TTL).await {
            Err(Error::LeaseLost { .. }) => {}
            other => panic!("extend after release: expected LeaseLost, got {other:?}"),
        }
        let info = b.inspect(&key).await.unwrap();
        assert_eq!(info.holder, None, "extend re-created a released lock");
    }

    /// Extending one's own lease after it expired, with nobody else taking the lock in
    /// between, is `LeaseLost` too: the lock is gone, and extend never re-creates it (a
    /// backend that revives an expired lease lets its holder write across a gap in which
    /// another client could have been granted).
    pub async fn extend_of_own_expired_lease_is_lease_lost(s: &Setup) {
        let b = &*s.backend;
        let key = key("own-expired");
        let old = grant(b, &key, s.short_ttl()).await;
        sleep(s.past_short_ttl()).await;
        match b.extend(&old, LONG_TTL).await {
            Err(Error::LeaseLost { .. }) => {}
            other => panic!("extend of an expired lease: expected LeaseLost, got {other:?}"),
        }
        let info = b.inspect(&key).await.unwrap();
        assert_eq!(info.holder, None, "extend revived an expired lease");
        let next = grant(b, &key, LONG_TTL).await;
        assert!(
            next.token > old.token,
            "the next grant has token {}, not above the expired lease's {}",
            next.token,
            old.token
        );
        assert!(
            b.release(&next).await.unwrap(),
            "release of a lease still held answered false (not held)"
        );
    }

    /// Releasing a superseded lease is a no-op: it returns false and the new holder keeps the lock.
    pub async fn stale_release_is_a_noop(s: &Setup) {
        let b = &*s.backend;
        let key = key("stale-release");
        let old = grant(b, &key, s.short_ttl()).await;
        sleep(s.past_short_ttl()).await;
        let new = grant_after_expiry(b, &key, LONG_TTL).await;
        assert!(
            !b.release(&old).await.unwrap(),
            "stale release returned true"
        );
        assert!(
            b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(),
            "stale release freed another owner's lock"
        );
        assert_eq!(
            b.inspect(&key).await.unwrap().holder,
            Some(new.fence()),
            "after a stale release, inspect does not name the new holder"
        );
        assert!(
            b.release(&new).await.unwrap(),
            "release of the new holder's lease answered false (not held)"
        );
    }

    /// The second release of a lease returns false and changes nothing.
    pub async fn double_release(s: &Setup) {
        let b = &*s.backend;
        let key = key("double-release");
        let lease = grant(b, &key, LONG_TTL).await;
        assert!(
            b.release(&lease).await.unwrap(),
            "the first release of a held lease answered false (not held)"
        );
        assert!(
            !b.release(&lease).await.unwrap(),
            "second release returned true"
        );
        let next = grant(b, &key, LONG_TTL).await;
        assert!(
            !b.release(&lease).await.unwrap(),
            "old lease released the new holder"
        );
        assert!(
            b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(),
            "a release of an old lease freed the new holder's lock"
        );
        assert!(
            b.release(&next).await.unwrap(),
            "release of the new holder's lease answered false (not held)"
        );
    }

    /// `inspect` reports the holder's fence, its remaining time and the last token.
    pub async fn inspect_reports_holder_and_token(s: &Setup) {
        let b = &*s.backend;
        let key = key("inspect");
        let empty = b.inspect(&key).await.unwrap();
        assert_eq!(
            empty.key, key,
            "inspect reports another key than the one asked about"
        );
        assert_eq!(
            empty.holder, None,
            "inspect names a holder of a never-used key"
        );
        assert_eq!(empty.last_token, None, "a never-used key reports a token");
        let lease = grant(b, &key, LONG_TTL).await;
        let held = b.inspect(&key).await.unwrap();
        assert_eq!(
            held.holder,
            Some(lease.fence()),
            "inspect does not name the holder"
        );
        let remaining = held
            .remaining
            .expect("a held lock reports its remaining time");
        assert!(
            remaining > Duration::ZERO && remaining <= LONG_TTL,
            "remaining {remaining:?}"
        );
        assert_eq!(
            held.last_token,
            Some(lease.token),
            "inspect's last token is not the holder's"
        );
        b.release(&lease).await.unwrap();
        let free = b.inspect(&key).await.unwrap();
        assert_eq!(
            free.holder, None,
            "inspect names a holder after the release"
        );
        assert_eq!(
            free.last_token,
            Some(lease.token),
            "release forgot the token"
        );
    }

    /// A backend that lists its queue (`inspect_queue` answers with a list) lists what it will
    /// grant, in order: the holder with its fence and time left, then the waiters that queued,
    /// by arrival, without one that left; a read phase lists its readers with the phase's
    /// token; a key nobody holds or waits for lists nothing. An operator reads it to see why a
    /// lock that looks free is refused (kept for the first waiter).
    pub async fn inspect_queue_lists_the_holder_then_waiters_by_arrival(s: &Setup) {
        use fencelock_core::QueueRole::{Holder, Reader, Waiting};
        let b = &*s.backend;
        let key = key("listed");
        let Some(empty) = b.inspect_queue(&key).await.unwrap() else {
            return not_applicable("inspect_queue_lists_the_holder_then_waiters_by_arrival", "the backend does not list its queue (inspect_queue answers None)");
        };
        assert!(empty.is_empty(), "a never-used key lists a queue: {empty:?}");
        let held = grant(b, &key, LONG_TTL).await;
        let waiters = [OwnerId::random(), OwnerId::random(), OwnerId::random()];
        for waiter in waiters {
            let granted = b.try_acquire_queued(&key, LONG_TTL, waiter).await.unwrap();
            assert!(granted.is_none(), "a queued try took a held lock");
        }
        b.leave_queue(&key, waiters[1]).await.unwrap();
        let listed = b.inspect_queue(&key).await.unwrap().unwrap();
        let shown: Vec<_> = listed.iter().map(|e| (e.role, e.owner)).collect();
        assert_eq!(
            shown,
            [
                (Holder, held.owner),
                (Waiting, waiters[0]),
                (Waiting, waiters[2])
            ],
            "{} lists its queue out of order: {listed:?}",
            b.name()
        );
        assert_eq!(
            listed[0].token,
            Some(held.token),
            "the queue lists the holder with another token than its grant's"
        );
        // A place's time left is not checked: etcd counts it in whole seconds, rounded down.
        assert!(
            listed[0].remaining > Duration::ZERO && listed[0].remaining <= LONG_TTL,
            "the queue lists the holder with {:?} left of a {LONG_TTL:?} ttl",
            listed[0].remaining
        );
        for waiter in [waiters[0], waiters[2]] {
            b.leave_queue(&key, waiter).await.unwrap();
        }
        assert!(
            b.release(&held).await.unwrap(),
            "release of the holder's lease answered false (not held)"
        );
        let after = b.inspect_queue(&key).await.unwrap().unwrap();
        assert!(
            after.is_empty(),
            "nobody holds or waits, yet the queue lists {after:?}"
        );

        if !b.capabilities().kinds.shared {
            return not_applicable("inspect_queue_lists_the_holder_then_waiters_by_arrival", "the backend offers no shared locks (LockKinds::shared)");
        }
        let readers = [OwnerId::random(), OwnerId::random()];
        let mut phase = None;
        for reader in readers {
            phase = b.try_acquire_shared(&key, reader, LONG_TTL).await.unwrap();
            assert!(phase.is_some(), "a reader was refused a free lock");
        }
        let phase = phase.unwrap();
        let mut listed = b.inspect_queue(&key).await.unwrap().unwrap();
        listed.sort_by_key(|e| e.owner.to_string());
        let mut expected = readers.map(|reader| (Reader, reader, Some(phase.token)));
        expected.sort_by_key(|(_, owner, _)| owner.to_string());
        let shown: Vec<_> = listed.iter().map(|e| (e.role, e.owner, e.token)).collect();
        assert_eq!(shown, expected, "{} lists its readers wrong", b.name());
        for reader in readers {
            assert!(
                b.release_shared(&phase, reader).await.unwrap(),
                "release of a reader still in the phase answered false (not held)"
            );
        }
        let after = b.inspect_queue(&key).await.unwrap().unwrap();
        assert!(after.is_empty(), "the readers left, yet the queue lists {after:?}");
    }

    /// A pass ([`LockBackend::pass`](fencelock_core::LockBackend::pass)) ends the holder's
    /// lease and begins a new owner's with a higher token in one step; a pass of a lease no
    /// longer held changes nothing. Backends that do not claim passes answer `Ok(None)`.
    pub async fn a_pass_ends_the_lease_and_grants_the_next_token(s: &Setup) {
        let b = &*s.backend;
        let key = key("pass");
        let held = grant(b, &key, LONG_TTL).await;
        let passed = b.pass(&held, LONG_TTL).await.expect("pass failed");
        if !b.capabilities().passes {
            assert!(passed.is_none(), "{}: passed without claiming passes", b.name());
            assert!(b.release(&held).await.unwrap());
            return not_applicable("a_pass_ends_the_lease_and_grants_the_next_token", "the backend does not claim passes");
        }
        let passed = passed.unwrap_or_else(|| panic!("{}: a held lease was not passed", b.name()));
        assert!(
            passed.token > held.token,
            "the passed token {} is not above the holder's {}",
            passed.token,
            held.token
        );
        assert_ne!(passed.owner, held.owner, "a pass kept the holder's owner");
        assert_eq!(passed.ttl, LONG_TTL);
        assert_eq!(
            b.inspect(&key).await.unwrap().holder,
            Some(passed.fence()),
            "inspect does not name the new owner after a pass"
        );
        assert!(
            matches!(b.extend(&held, LONG_TTL).await, Err(Error::LeaseLost { .. })),
            "the passed-on lease could still be extended"
        );
        assert!(
            !b.release(&held).await.unwrap(),
            "the passed-on lease was still released as held"
        );
        assert!(
            b.pass(&held, LONG_TTL).await.unwrap().is_none(),
            "a lease already passed on was passed again"
        );
        assert!(
            b.try_acquire(&key, LONG_TTL).await.unwrap().is_none(),
            "the key was free after a pass"
        );
        assert!(b.release(&passed).await.unwrap(), "the passed lease was not held");
        assert!(
            b.pass(&passed, LONG_TTL).await.unwrap().is_none(),
            "a released lease was passed"
        );
        let next = grant(b, &key, LONG_TTL).await;
        assert!(next.token > passed.token, "a grant after a pass repeated a token");
        assert!(b.release(&next).await.unwrap());
    }
});
