//! Property-based tests of every public input of the core: keys (as text and as bytes), ttls
//! and the durations derived from them, tokens and owners read back from backends, backoff
//! settings, and the fence rule, each against a reference model written from DESIGN.md.
//!
//! 256 cases per property (`PROPTEST_CASES` asks for more); a failure prints the smallest
//! input proptest could shrink it to.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use fencelock_core::{
    Backoff, Capabilities, Error, Fence, FenceRule, FencingToken, LockKey, MIN_TTL, OwnerId,
    TimeAuthority, TokenGuarantee, WakeUp, drift_margin, valid_until, validate_ttl,
};
use proptest::prelude::*;

/// DESIGN section 4: non-empty, at most 512 bytes, no NUL or other control character.
fn key_model(key: &str) -> bool {
    !key.is_empty() && key.len() <= 512 && !key.chars().any(char::is_control)
}

/// Text keys: arbitrary Unicode, printable text around the length limit, and text salted with
/// the characters the rules single out.
fn key_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "\\PC{0,40}",
        "[a-zé€😀{}%#:/ ]{160,200}",
        "[a-z]{500,520}",
        "[a-z\\x00-\\x1f\\x7f\\u{80}-\\u{9f}{}]{0,12}",
    ]
}

/// Byte keys: arbitrary bytes, and UTF-8 with a few bytes changed.
fn key_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..600),
        (key_text(), any::<prop::sample::Index>(), any::<u8>()).prop_map(|(text, at, byte)| {
            let mut bytes = text.into_bytes();
            if !bytes.is_empty() {
                let i = at.index(bytes.len());
                bytes[i] = byte;
            }
            bytes
        }),
    ]
}

fn assert_invalid_key(result: fencelock_core::Result<LockKey>, input: &str) {
    match result {
        Err(Error::InvalidKey { key, reason }) => {
            assert!(!reason.is_empty());
            // The error shows at most the first 64 characters of the key, as given.
            assert!(key.chars().count() <= 64, "{key:?}");
            assert!(
                input.starts_with(&key),
                "{key:?} is not a prefix of {input:?}"
            );
        }
        other => panic!("{input:?}: expected InvalidKey, got {other:?}"),
    }
}

/// Tokens: mostly small (so equal tokens meet), and the extremes.
fn token() -> impl Strategy<Value = FencingToken> {
    prop_oneof![
        3 => 1u64..5,
        1 => any::<u64>().prop_map(|t| t.max(1)),
        1 => Just(u64::MAX),
    ]
    .prop_map(|t| FencingToken::new(t).unwrap())
}

/// Owners: mostly one of three (so equal owners meet), and any.
fn owner() -> impl Strategy<Value = OwnerId> {
    prop_oneof![3 => 0u128..3, 1 => any::<u128>()].prop_map(OwnerId::from_u128)
}

fn fence() -> impl Strategy<Value = Fence> {
    (token(), owner()).prop_map(|(t, o)| Fence::new(t, o))
}

fn rule() -> impl Strategy<Value = FenceRule> {
    prop_oneof![Just(FenceRule::Monotonic), Just(FenceRule::Strict)]
}

/// The rule of DESIGN section 2, as a table over how the tokens compare and whether the
/// owners are the same.
fn rule_model(rule: FenceRule, last: Option<Fence>, presented: Fence) -> bool {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let Some(last) = last else { return true };
    let same_owner = presented.owner == last.owner;
    match (rule, presented.token.cmp(&last.token), same_owner) {
        (_, Greater, _) => true,
        (_, Less, _) => false,
        (FenceRule::Monotonic, Equal, same) => same,
        (FenceRule::Strict, Equal, _) => false,
        (_, Equal, _) => unreachable!("FenceRule has two rules"),
    }
}

/// Durations from zero to `Duration::MAX`, bunched around the bounds that matter.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0u64..50_000_000).prop_map(Duration::from_nanos),
        (0u64..400 * 24 * 3600).prop_map(Duration::from_secs),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
        Just(Duration::ZERO),
        Just(MIN_TTL),
        Just(Duration::MAX),
    ]
}

fn capabilities() -> impl Strategy<Value = Capabilities> {
    (duration(), duration()).prop_map(|(min, max)| {
        Capabilities::new(
            TokenGuarantee::None,
            TimeAuthority::Client,
            WakeUp::Poll,
            max,
        )
        .with_min_ttl(min)
    })
}

/// The longest ttl any backend of this workspace accepts (the memory backend's year).
const LONGEST_TTL: Duration = Duration::from_secs(365 * 24 * 3600);

/// 256 cases, or `PROPTEST_CASES`.
fn config() -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok());
    ProptestConfig::with_cases(cases.unwrap_or(256))
}

proptest! {
    #![proptest_config(config())]

    /// Text keys: accepted exactly when the rules allow, unchanged through every way in.
    #[test]
    fn text_keys_follow_the_rules_and_round_trip(text in key_text()) {
        let result = LockKey::new(&text);
        if key_model(&text) {
            let key = result.unwrap();
            prop_assert_eq!(key.as_str(), text.as_str());
            prop_assert_eq!(key.to_string(), text.clone());
            prop_assert_eq!(text.parse::<LockKey>().unwrap(), key.clone());
            prop_assert_eq!(LockKey::try_from(text.clone()).unwrap(), key.clone());
            prop_assert_eq!(LockKey::try_from(text.as_str()).unwrap(), key.clone());
            prop_assert_eq!(LockKey::from_bytes(text.as_bytes()).unwrap(), key.clone());
            prop_assert_eq!(format!("{key:?}"), format!("{text:?}"));
        } else {
            assert_invalid_key(result, &text);
            assert_invalid_key(text.parse::<LockKey>(), &text);
            assert_invalid_key(LockKey::from_bytes(text.as_bytes()), &text);
        }
    }

    /// Byte keys: valid UTF-8 that follows the rules is accepted; anything else is
    /// `InvalidKey`, never a panic.
    #[test]
    fn byte_keys_are_accepted_only_as_valid_text(bytes in key_bytes()) {
        let result = LockKey::from_bytes(&bytes);
        match std::str::from_utf8(&bytes) {
            Ok(text) if key_model(text) => prop_assert_eq!(result.unwrap().to_string(), text),
            Ok(text) => assert_invalid_key(result, text),
            Err(_) => match result {
                Err(Error::InvalidKey { reason, .. }) => prop_assert_eq!(reason, "not valid UTF-8"),
                other => panic!("{bytes:?}: expected InvalidKey, got {other:?}"),
            },
        }
    }

    /// Two keys are the same key exactly when their text is the same.
    #[test]
    fn keys_are_equal_exactly_when_their_text_is(a in key_text(), b in key_text()) {
        if let (Ok(ka), Ok(kb)) = (LockKey::new(&a), LockKey::new(&b)) {
            prop_assert_eq!(ka == kb, a == b);
            prop_assert_eq!(ka.cmp(&kb), a.cmp(&b));
        }
    }

    /// `validate_ttl` is a total function: within `[max(min_ttl, MIN_TTL), max_ttl]` it
    /// accepts, elsewhere it is `InvalidTtl` naming the ttl and the bound it broke.
    #[test]
    fn ttls_are_checked_against_the_bounds(ttl in duration(), caps in capabilities()) {
        let min = caps.min_ttl.max(MIN_TTL);
        prop_assert!(caps.min_ttl >= MIN_TTL);
        match validate_ttl(ttl, &caps) {
            Ok(()) => prop_assert!(min <= ttl && ttl <= caps.max_ttl),
            Err(Error::InvalidTtl { ttl: reported, reason }) => {
                prop_assert_eq!(reported, ttl);
                if ttl < min {
                    prop_assert_eq!(reason, format!("ttl must be at least {min:?}"));
                } else {
                    prop_assert!(ttl > caps.max_ttl);
                    prop_assert!(reason.contains(&format!("{:?}", caps.max_ttl)), "{}", reason);
                }
            }
            Err(other) => panic!("{ttl:?}: {other}"),
        }
    }

    /// Any ttl at all, `Duration::MAX` included: a deadline, never a panic.
    #[test]
    fn deadlines_never_overflow(ttl in duration(), ahead in 0u64..1_000_000_000) {
        let sent = tokio::time::Instant::now() + Duration::from_nanos(ahead);
        let deadline = valid_until(sent, ttl);
        prop_assert!(deadline >= sent);
        if ttl >= MIN_TTL {
            prop_assert!(deadline > sent);
        }
    }

    /// The deadline of a lease sent at `t` with any ttl a backend accepts: never before `t`,
    /// never past `t + ttl`, exactly the drift margin short of it when the ttl covers it.
    #[test]
    fn deadlines_stay_between_sending_and_expiry(
        ttl in duration().prop_map(|d| d.min(LONGEST_TTL)),
        ahead in 0u64..1_000_000_000,
    ) {
        let sent = tokio::time::Instant::now() + Duration::from_nanos(ahead);
        let margin = drift_margin(ttl);
        prop_assert_eq!(margin, ttl / 100 + Duration::from_millis(2));
        let deadline = valid_until(sent, ttl);
        prop_assert!(deadline >= sent);
        prop_assert!(deadline <= sent + ttl);
        if ttl >= margin {
            prop_assert_eq!(deadline, sent + (ttl - margin));
        } else {
            prop_assert_eq!(deadline, sent);
        }
        if ttl >= MIN_TTL {
            // Every accepted ttl gives a lease that is still valid when granted.
            prop_assert!(deadline > sent);
        }
    }

    /// Backoff caps double from `initial`, never exceed `max`, never shrink; pauses stay
    /// within the cap. Any settings, any attempt.
    #[test]
    fn backoff_pauses_stay_within_their_caps(
        initial in duration(),
        max in duration(),
        attempt in prop_oneof![0u32..40, any::<u32>()],
    ) {
        let backoff = Backoff { initial, max };
        let cap = backoff.cap(attempt);
        prop_assert!(cap <= max);
        prop_assert!(backoff.cap(attempt.saturating_add(1)) >= cap);
        if attempt < 31 {
            let doubled = initial.checked_mul(1u32 << attempt);
            prop_assert_eq!(cap, doubled.map_or(max, |d| d.min(max)));
        }
        prop_assert!(backoff.pause(attempt) <= cap);
    }

    /// The fence rule is a total function, equal to the table of DESIGN section 2, and
    /// `check` says the same with both fences in its `Stale`.
    #[test]
    fn the_fence_rule_is_the_model(
        rule in rule(),
        last in proptest::option::of(fence()),
        presented in fence(),
        resource in "\\PC{0,16}",
    ) {
        let admits = rule.admits(last, presented);
        prop_assert_eq!(admits, rule_model(rule, last, presented));
        match rule.check(&resource, last, presented) {
            Ok(()) => prop_assert!(admits),
            Err(Error::Stale { resource: r, presented: p, current }) => {
                prop_assert!(!admits);
                prop_assert_eq!(r, resource);
                prop_assert_eq!(p, presented);
                prop_assert_eq!(Some(current), last);
            }
            Err(other) => panic!("unexpected {other}"),
        }
        // The strict rule admits less, never more.
        if FenceRule::Strict.admits(last, presented) {
            prop_assert!(FenceRule::Monotonic.admits(last, presented));
        }
    }

    /// A register that admits by the rule, fed any sequence of fences: the admitted tokens
    /// never go down, and a token is admitted again only for its own owner (monotonic) or
    /// never (strict). So no operation of a superseded holder lands after its successor's.
    #[test]
    fn a_register_admits_in_token_order(
        rule in rule(),
        fences in proptest::collection::vec(fence(), 0..40),
    ) {
        let mut last: Option<Fence> = None;
        let mut admitted: Vec<Fence> = Vec::new();
        for f in fences {
            if rule.admits(last, f) {
                admitted.push(f);
                last = Some(f);
            }
        }
        for pair in admitted.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            match rule {
                FenceRule::Strict => prop_assert!(b.token > a.token),
                _ => prop_assert!(b.token > a.token || (b.token == a.token && b.owner == a.owner)),
            }
        }
    }

    /// Tokens read back from a backend or a SQL `bigint`: positive numbers are tokens, the
    /// rest a typed error; a token goes to a `bigint` and back unchanged when it fits.
    #[test]
    fn tokens_convert_only_when_they_fit(value in any::<i64>(), token in token()) {
        let read = FencingToken::try_from(value);
        let from_backend = FencingToken::from_backend("test", value);
        if value > 0 {
            prop_assert_eq!(read.unwrap().get(), value as u64);
            prop_assert_eq!(from_backend.unwrap().get(), value as u64);
        } else {
            let is_config = matches!(read, Err(Error::InvalidConfig { .. }));
            prop_assert!(is_config);
            let is_backend = matches!(from_backend, Err(Error::Backend { .. }));
            prop_assert!(is_backend);
        }
        match i64::try_from(token) {
            Ok(n) => prop_assert_eq!(FencingToken::try_from(n).unwrap(), token),
            Err(Error::InvalidConfig { message, .. }) => {
                prop_assert!(token.get() > i64::MAX as u64);
                prop_assert!(message.contains(&token.to_string()));
            }
            Err(other) => panic!("unexpected {other}"),
        }
    }

    /// Owner ids as a backend stores them: `Display` is 32 lowercase hex digits and parses
    /// back; any other text is `InvalidConfig`, a `+` and 31 hex digits included (which
    /// `u128::from_str_radix` alone lets through: a second spelling of one owner).
    #[test]
    fn owner_ids_parse_only_their_own_form(
        owner in any::<u128>(),
        text in prop_oneof!["[0-9a-fA-F]{30,34}", "[+-][0-9a-f]{31}", any::<String>()],
    ) {
        let owner = OwnerId::from_u128(owner);
        let shown = owner.to_string();
        prop_assert_eq!(shown.len(), 32);
        prop_assert_eq!(shown.parse::<OwnerId>().unwrap(), owner);
        let digits = |t: &str| t.bytes().all(|b| b.is_ascii_hexdigit());
        let hex = text.len() == 32 && digits(&text);
        match text.parse::<OwnerId>() {
            Ok(parsed) => {
                prop_assert!(hex, "{:?} parsed as {}", text, parsed);
                prop_assert_eq!(parsed.to_string(), text.to_ascii_lowercase());
            }
            Err(Error::InvalidConfig { .. }) => prop_assert!(!hex, "{:?} refused", text),
            Err(other) => panic!("unexpected {other}"),
        }
    }
}
