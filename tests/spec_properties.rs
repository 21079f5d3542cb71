//! Property-based: `BackendSpec::parse` on any string, and on valid specs of every scheme
//! mutated at random (characters deleted, inserted, replaced, segments repeated, cut short).
//!
//! Whatever the input: no panic; either `InvalidConfig`, or a spec whose `to_url` parses back
//! to an equal spec; and the password, wherever the input carries one (the URL's userinfo, or
//! a `password=` option), appears in no error, no `Display` and no `Debug` output, as written
//! or percent-decoded. With the `redis` and `postgres` features (CI builds all) the specs reach
//! each backend crate's own grammar; without them, the refusal must be just as discreet.
//!
//! 256 cases per property (`PROPTEST_CASES` asks for more).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::error::Error as _;

use fencelock::Error;
use fencelock::spec::BackendSpec;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

/// 256 cases, or `PROPTEST_CASES`.
fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok());
    Config::with_cases(cases.unwrap_or(256))
}

/// A password: a marker no other part of a spec contains, and URL-special characters.
fn password() -> impl Strategy<Value = String> {
    "[A-Za-z0-9!$&'()*+,;=._~:@/?#%\\[\\] -]{2,12}".prop_map(|tail| format!("Pw9{tail}"))
}

/// Percent-encodes everything but unreserved characters (valid in any part of a URL).
fn encode(text: &str) -> String {
    let mut out = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let hex = text
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(byte)) => {
                out.push(byte);
                i += 3;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A valid spec of one of the schemes, carrying `password` (the last one carries it as an
/// option, which is refused), and whether this build can parse it.
fn valid_spec() -> impl Strategy<Value = (String, bool)> {
    (
        0usize..8,
        "[a-z][a-z0-9_]{0,6}",
        password(),
        prop_oneof![
            Just("127.0.0.1".to_owned()),
            Just("[::1]".to_owned()),
            "[a-z]{1,8}"
        ],
        1u16..,
        0u8..16,
    )
        .prop_map(|(scheme, user, password, host, port, db)| {
            let secret = encode(&password);
            let built = [
                cfg!(feature = "memory"),
                cfg!(feature = "redis"),
                cfg!(all(feature = "redis", feature = "tls")),
                cfg!(feature = "redis"),
                cfg!(feature = "postgres"),
                cfg!(feature = "postgres"),
                false,
                cfg!(feature = "redis"),
            ][scheme];
            let spec = match scheme {
                0 => "memory://".to_owned(),
                1 => format!("redis://{user}:{secret}@{host}:{port}/{db}"),
                2 => format!("rediss://:{secret}@{host}:{port}?allow_eviction=true"),
                3 => format!(
                    "redlock://{user}:{secret}@{host}:{port},h2:2,h3:3?storage={}",
                    encode("redis://s:6379/1")
                ),
                4 => format!("postgres://{user}:{secret}@{host}:{port}/db{db}?backend=advisory"),
                5 => format!(
                    "postgresql://{user}:{secret}@{host}/db?schema=s{db}&application_name=a"
                ),
                7 => format!(
                    "redis+cluster://{user}:{secret}@{host}:{port},c2:7001,c3?allow_eviction=true"
                ),
                _ => format!("postgres://{user}@{host}/db?password={secret}"),
            };
            (spec, built)
        })
}

/// One edit of a spec.
#[derive(Debug, Clone)]
enum Mutation {
    Delete(prop::sample::Index, usize),
    Insert(prop::sample::Index, char),
    Replace(prop::sample::Index, char),
    Repeat(prop::sample::Index, usize),
    CutAt(prop::sample::Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let special = prop_oneof![
        3 => proptest::sample::select(vec![
            ':', '@', '/', '?', '#', '%', '&', '=', ',', '[', ']', '{', '}', ' ', '+', '\\',
            '\0', '\n', 'é', '0', '9', 'x',
        ]),
        1 => any::<char>(),
    ];
    prop_oneof![
        (any::<prop::sample::Index>(), 1usize..6).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (any::<prop::sample::Index>(), special.clone()).prop_map(|(i, c)| Mutation::Insert(i, c)),
        (any::<prop::sample::Index>(), special).prop_map(|(i, c)| Mutation::Replace(i, c)),
        (any::<prop::sample::Index>(), 1usize..12).prop_map(|(i, n)| Mutation::Repeat(i, n)),
        any::<prop::sample::Index>().prop_map(Mutation::CutAt),
    ]
}

fn mutate(spec: &str, mutations: &[Mutation]) -> String {
    let mut chars: Vec<char> = spec.chars().collect();
    for m in mutations {
        let len = chars.len();
        match m {
            Mutation::Delete(i, n) if len > 0 => {
                let at = i.index(len);
                chars.drain(at..(at + n).min(len));
            }
            Mutation::Insert(i, c) => chars.insert(i.index(len + 1), *c),
            Mutation::Replace(i, c) if len > 0 => chars[i.index(len)] = *c,
            Mutation::Repeat(i, n) if len > 0 => {
                let at = i.index(len);
                let piece: Vec<char> = chars[at..(at + n).min(len)].to_vec();
                chars.splice(at..at, piece);
            }
            Mutation::CutAt(i) if len > 0 => chars.truncate(i.index(len)),
            _ => {}
        }
    }
    chars.into_iter().collect()
}

/// The secrets `spec` carries: the password of its userinfo (what URL parsers take: the text
/// after the first `:` of what precedes the last `@` of the authority) and the values of its
/// `password=` options, as written and decoded. Only secrets long enough to tell apart, and
/// found nowhere else in the spec, are kept.
fn secrets(spec: &str) -> Vec<String> {
    let mut found = Vec::new();
    if let Some((_, rest)) = spec.split_once("://") {
        let authority = &rest[..rest.find(['/', '?', '#']).unwrap_or(rest.len())];
        if let Some(at) = authority.rfind('@')
            && let Some((_, password)) = authority[..at].split_once(':')
        {
            found.push(password.to_owned());
        }
        if let Some((_, query)) = rest.split_once('?') {
            for pair in query.split(['&', '#']) {
                if let Some(value) = pair.strip_prefix("password=") {
                    found.push(value.to_owned());
                }
            }
        }
    }
    let decoded: Vec<String> = found.iter().map(|s| decode(s)).collect();
    found.extend(decoded);
    found.retain(|s| s.chars().count() >= 5 && spec.matches(s.as_str()).count() == 1);
    found.sort();
    found.dedup();
    found
}

/// Everything a user could print about the outcome.
fn shown(outcome: &fencelock::Result<BackendSpec>) -> Vec<String> {
    match outcome {
        Ok(spec) => vec![spec.to_string(), format!("{spec:?}")],
        Err(e) => {
            let mut texts = vec![e.to_string(), format!("{e:?}")];
            let mut source = e.source();
            while let Some(cause) = source {
                texts.push(cause.to_string());
                source = cause.source();
            }
            texts
        }
    }
}

fn check(spec: &str) -> Result<(), TestCaseError> {
    let outcome = BackendSpec::parse(spec);
    for secret in secrets(spec) {
        for text in shown(&outcome) {
            prop_assert!(
                !text.contains(&secret),
                "{:?} shows the password {:?}: {}",
                spec,
                secret,
                text
            );
        }
    }
    match outcome {
        Ok(parsed) => {
            let url = parsed.to_url();
            let again = BackendSpec::parse(&url);
            prop_assert!(
                again.is_ok(),
                "{:?} -> to_url {:?} -> {:?}",
                spec,
                url,
                again
            );
            prop_assert_eq!(
                again.unwrap(),
                parsed.clone(),
                "{:?} -> to_url {:?}",
                spec,
                url
            );
            let _ = parsed.hosts();
            let _ = parsed.is_shared();
        }
        Err(Error::InvalidConfig { .. }) => {}
        Err(other) => prop_assert!(false, "{:?}: not InvalidConfig: {:?}", spec, other),
    }
    Ok(())
}

#[test]
fn valid_specs_round_trip_and_hide_their_password() {
    let mut runner = TestRunner::new(config());
    runner
        .run(&valid_spec(), |(spec, built)| {
            let secrets = secrets(&spec);
            prop_assert!(
                spec.starts_with("memory") || !secrets.is_empty(),
                "{:?}",
                spec
            );
            if built {
                let parsed = BackendSpec::parse(&spec);
                prop_assert!(parsed.is_ok(), "{:?}: {:?}", spec, parsed);
            }
            check(&spec)
        })
        .unwrap();
}

#[test]
fn mutated_specs_parse_or_refuse_without_showing_a_password() {
    let mut runner = TestRunner::new(config());
    let strategy = (valid_spec(), proptest::collection::vec(mutation(), 1..4));
    runner
        .run(&strategy, |((spec, _), mutations)| {
            check(&mutate(&spec, &mutations))
        })
        .unwrap();
}

#[test]
fn any_string_parses_or_refuses_without_showing_a_password() {
    let mut runner = TestRunner::new(config());
    let strategy = prop_oneof![
        any::<String>(),
        (
            proptest::sample::select(vec![
                "memory",
                "MEMORY",
                "redis",
                "rediss",
                "redlock",
                "redis+cluster",
                "postgres",
                "postgresql",
                "nosuch",
                "",
            ]),
            any::<String>(),
        )
            .prop_map(|(scheme, rest)| format!("{scheme}://{rest}")),
        "(redis|redlock|redis\\+cluster|postgres)://[a-z:@/?#%&=,\\[\\]0-9.]{0,30}",
    ];
    runner.run(&strategy, |spec| check(&spec)).unwrap();
}
