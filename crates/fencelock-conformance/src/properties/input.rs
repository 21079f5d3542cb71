//! Input at the edges: keys, ttls and wait budgets a caller can pass.

use std::time::Duration;

use fencelock_core::{Error, FencingToken, LockKey, Locker, OwnerId};

use super::support::{LONG_TTL, PATIENCE, grant, key, peek};
use crate::Setup;

declare_properties!(__fencelock_conformance_input, {
    /// Empty, overlong and control-character keys are `InvalidKey` before any backend call.
    pub async fn bad_keys_are_refused(s: &Setup) {
        let locker = Locker::new(s.backend.clone());
        let long = "k".repeat(LockKey::MAX_LEN + 1);
        for bad in [
            "",
            "nul\0inside",
            "tab\tinside",
            "line\nbreak",
            "bell\u{7}",
            long.as_str(),
        ] {
            assert!(
                matches!(LockKey::new(bad), Err(Error::InvalidKey { .. })),
                "LockKey accepted {bad:?}"
            );
            match locker.lock(bad).wait(Duration::ZERO).await {
                Err(Error::InvalidKey { .. }) => {}
                other => panic!("locker accepted bad key {bad:?}: {other:?}"),
            }
        }
        let not_utf8 = LockKey::from_bytes(b"\xff\xfe");
        assert!(
            matches!(not_utf8, Err(Error::InvalidKey { .. })),
            "LockKey::from_bytes answered {not_utf8:?} for bytes that are not UTF-8"
        );
    }

    /// Keys with braces, quotes, spaces, Unicode and the full 512 bytes work and stay distinct.
    pub async fn unusual_keys_round_trip(s: &Setup) {
        let (b, st) = (&*s.backend, &*s.storage);
        let tag = OwnerId::random().to_string();
        let mut names = vec![
            format!("{{{tag}}}"),
            format!("{tag}}}{{"),
            format!("{tag}:{{x}}:lock"),
            format!("quote\"s and 'apostrophes' {tag}"),
            format!("with spaces {tag}"),
            format!("ünïcødé ✓ 🔒 {tag}"),
            format!("percent%s and \\backslash {tag}"),
        ];
        let pad = LockKey::MAX_LEN - tag.len();
        names.push(format!("{tag}{}", "x".repeat(pad)));
        names.push(format!("{tag}{}", "€".repeat(pad / 3)));
        let mut leases = Vec::new();
        for name in &names {
            let key = LockKey::new(name).unwrap();
            let lease = grant(b, &key, LONG_TTL).await;
            let info = b.inspect(&key).await.unwrap();
            assert_eq!(
                info.holder,
                Some(lease.fence()),
                "inspect lost key {name:?}"
            );
            st.write(&key, lease.fence(), name.as_bytes())
                .await
                .unwrap();
            leases.push(lease);
        }
        for (name, lease) in names.iter().zip(&leases) {
            let snapshot = peek(st, &lease.key).await.unwrap();
            assert_eq!(
                snapshot.value.as_deref(),
                Some(name.as_bytes()),
                "keys collided"
            );
            assert!(
                b.release(lease).await.unwrap(),
                "release failed for {name:?}"
            );
        }
    }

    /// Zero, sub-millisecond and too-long ttls are `InvalidTtl` and change nothing.
    pub async fn bad_ttls_are_refused_and_change_nothing(s: &Setup) {
        let b = &*s.backend;
        let key = key("bad-ttl");
        let max = b.capabilities().max_ttl;
        let bad = [
            Duration::ZERO,
            Duration::from_micros(500),
            max + Duration::from_millis(1),
            Duration::MAX,
        ];
        for ttl in bad {
            match b.try_acquire(&key, ttl).await {
                Err(Error::InvalidTtl { .. }) => {}
                other => panic!("try_acquire with ttl {ttl:?}: expected InvalidTtl, got {other:?}"),
            }
        }
        let untouched = b.inspect(&key).await.unwrap();
        assert_eq!(
            (untouched.holder, untouched.last_token),
            (None, None),
            "a refused ttl touched the key"
        );
        let lease = grant(b, &key, LONG_TTL).await;
        for ttl in bad {
            match b.extend(&lease, ttl).await {
                Err(Error::InvalidTtl { .. }) => {}
                other => panic!("extend with ttl {ttl:?}: expected InvalidTtl, got {other:?}"),
            }
        }
        let locker = Locker::new(s.backend.clone());
        let zero_ttl = locker.lock(key.as_str()).ttl(Duration::ZERO).await;
        assert!(
            matches!(zero_ttl, Err(Error::InvalidTtl { .. })),
            "a lock with a zero ttl answered {zero_ttl:?}, not InvalidTtl"
        );
        let info = b.inspect(&key).await.unwrap();
        assert_eq!(
            info.holder,
            Some(lease.fence()),
            "a refused extend changed the lease"
        );
        assert_eq!(
            info.last_token,
            Some(lease.token),
            "a refused extend moved the token"
        );
        assert!(
            b.release(&lease).await.unwrap(),
            "release of the lease after refused extends answered false (not held)"
        );
    }

    /// `advance_token` to `u64::MAX`, a floor no counter has a token above, is `InvalidConfig`
    /// and changes nothing: the key still grants.
    pub async fn advance_token_past_every_token_is_refused(s: &Setup) {
        let b = &*s.backend;
        let key = key("floor-max");
        let floor = FencingToken::new(u64::MAX).unwrap();
        match s.operator().advance_token(&key, floor).await {
            Err(Error::InvalidConfig { .. }) => {}
            other => panic!("advance_token to {floor}: expected InvalidConfig, got {other:?}"),
        }
        assert_eq!(
            b.inspect(&key).await.unwrap().last_token,
            None,
            "a refused floor touched the key"
        );
        let lease = grant(b, &key, LONG_TTL).await;
        assert!(
            b.release(&lease).await.unwrap(),
            "release of a lease still held answered false (not held)"
        );
    }

    /// A wait without a bound (`Duration::MAX`) is not an error: on a free key it grants at
    /// once, and the grant is an ordinary one that releases.
    pub async fn unbounded_wait_grants_a_free_lock(s: &Setup) {
        let locker = Locker::new(s.backend.clone());
        let key = key("unbounded");
        let guard = tokio::time::timeout(PATIENCE, locker.lock(key.as_str()).wait(Duration::MAX))
            .await
            .expect("an unbounded wait on a free key did not grant")
            .unwrap();
        assert!(
            guard.is_held(),
            "a guard granted by an unbounded wait says it does not hold"
        );
        assert!(
            guard.release().await.unwrap(),
            "release of the guard of an unbounded wait answered false (not held)"
        );
        let info = s.backend.inspect(&key).await.unwrap();
        assert_eq!(info.holder, None, "the released lock is still held");
    }
});
