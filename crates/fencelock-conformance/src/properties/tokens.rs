//! A token is handed out once per key and only ever grows, whatever ended the previous lease,
//! so a storage can order any two holders by their tokens.

use std::collections::HashSet;

use fencelock_core::{FencingToken, TokenGuarantee};
use tokio::time::sleep;

use super::support::{not_applicable, LONG_TTL, grant, grant_after_expiry, key};
use crate::Setup;

declare_properties!(__fencelock_conformance_tokens, {
    /// A backend whose capabilities claim durable tokens keeps its counters when it is opened
    /// again (a restarted process, a new client to the same server): the next grant's token
    /// is above every token before. A claim without a [`Setup::reopen`] hook cannot be checked
    /// and fails, naming the hook.
    pub async fn durable_tokens_survive_reopening(s: &Setup) {
        let b = &*s.backend;
        let durable = matches!(
            b.capabilities().tokens,
            TokenGuarantee::Durable
                | TokenGuarantee::DurableIfServerPersists {
                    server_persists: Some(true)
                }
        );
        if !durable {
            return not_applicable("durable_tokens_survive_reopening", "the backend does not claim durable tokens");
        }
        let reopen = s.reopen.as_ref().unwrap_or_else(|| {
            panic!(
                "{} claims durable tokens, but its Setup has no reopen hook \
                 (Setup::with_reopen) through which the suite can check the claim",
                b.name()
            )
        });
        let key = key("reopen");
        let mut last = None;
        for _ in 0..3 {
            let lease = grant(b, &key, LONG_TTL).await;
            assert!(
                b.release(&lease).await.unwrap(),
                "release of a lease still held answered false (not held)"
            );
            last = Some(lease.token);
        }
        let last = last.unwrap();
        let reopened = reopen().await;
        let lease = grant(&*reopened, &key, LONG_TTL).await;
        assert!(
            lease.token > last,
            "token {} after reopening, {last} before: the counter did not survive",
            lease.token
        );
        assert!(
            reopened.release(&lease).await.unwrap(),
            "after reopening, release of a lease still held answered false (not held)"
        );
    }

    /// Tokens strictly increase over 1,000 grants of one key.
    pub async fn tokens_increase_over_1000_grants(s: &Setup) {
        let b = &*s.backend;
        let key = key("thousand");
        let mut last: Option<FencingToken> = None;
        for round in 0..1000 {
            let lease = grant(b, &key, LONG_TTL).await;
            if let Some(last) = last {
                assert!(
                    lease.token > last,
                    "grant {round}: token {} after {last}",
                    lease.token
                );
            }
            last = Some(lease.token);
            assert!(
                b.release(&lease).await.unwrap(),
                "grant {round}: release of a lease still held answered false (not held)"
            );
        }
    }

    /// No token is handed out twice, whether the previous lease was released, expired, or the
    /// counter was advanced.
    pub async fn tokens_never_reused_after_release_expiry_or_advance(s: &Setup) {
        let b = &*s.backend;
        let key = key("reuse");
        let mut seen = HashSet::new();
        let mut last = 0u64;
        let mut note = |token: FencingToken, how: &str| {
            assert!(seen.insert(token), "token {token} reused after {how}");
            assert!(
                token.get() > last,
                "token {token} not above {last} after {how}"
            );
            last = token.get();
        };
        let released = grant(b, &key, LONG_TTL).await;
        note(released.token, "first grant");
        b.release(&released).await.unwrap();
        let expired = grant(b, &key, s.short_ttl()).await;
        note(expired.token, "release");
        sleep(s.past_short_ttl()).await;
        let after_expiry = grant_after_expiry(b, &key, LONG_TTL).await;
        note(after_expiry.token, "expiry");
        b.release(&after_expiry).await.unwrap();
        let floor = FencingToken::new(after_expiry.token.get() + 10).unwrap();
        s.operator().advance_token(&key, floor).await.unwrap();
        let advanced = grant(b, &key, LONG_TTL).await;
        assert!(
            advanced.token > floor,
            "grant after advance_token is not above the floor"
        );
        note(advanced.token, "advance_token");
        b.release(&advanced).await.unwrap();
    }

    /// `advance_token` raises the next grant past the floor and never lowers the counter.
    pub async fn advance_token_raises_next_grant(s: &Setup) {
        let b = &*s.backend;
        let key = key("advance");
        let first = grant(b, &key, LONG_TTL).await;
        b.release(&first).await.unwrap();
        let floor = FencingToken::new(first.token.get() + 1000).unwrap();
        let counter = s.operator().advance_token(&key, floor).await.unwrap();
        assert!(
            counter >= floor,
            "advance_token returned {counter} below floor {floor}"
        );
        let lowered = s.operator().advance_token(&key, FencingToken::MIN).await.unwrap();
        assert!(
            lowered >= counter,
            "advance_token lowered the counter to {lowered}"
        );
        let next = grant(b, &key, LONG_TTL).await;
        assert!(
            next.token > floor,
            "next grant {} not above floor {floor}",
            next.token
        );
        b.release(&next).await.unwrap();
        // On a key never used, advance_token starts the counter.
        let fresh = self::key("advance-fresh");
        let floor = FencingToken::new(77).unwrap();
        let fresh_counter = s.operator().advance_token(&fresh, floor).await.unwrap();
        assert!(
            fresh_counter >= floor,
            "advance_token on a never-used key returned {fresh_counter}, below the floor {floor}"
        );
        let lease = grant(b, &fresh, LONG_TTL).await;
        assert!(
            lease.token > floor,
            "the first grant on a key advanced to {floor} has token {}, not above it",
            lease.token
        );
        b.release(&lease).await.unwrap();
    }
});
