//! Property-based: any key text through the Redis key encoding, pure and on a real server.
//!
//! - `hash_tag` is `{enc(key)}` as documented (`%`, `{`, `}` percent-encoded): Redis hashes
//!   exactly the text between the braces, it decodes back to the key, so distinct keys never
//!   share a tag.
//! - On a server (spawned by the test), a set of distinct keys gives distinct locks and
//!   resources, `inspect` and `peek` give each key back, and the key names fencelock writes
//!   are exactly `{prefix}:{tag}:lock|token|data|fence` (DESIGN 5.2), plus the user's own key
//!   named with the tag, which `RedisFence` accepts as the resource's slot (when that name is
//!   a valid key: at most 512 bytes).
//!
//! 256 cases (`PROPTEST_CASES` asks for more).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;
use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, Locker};
use fencelock_redis::servers::RedisServer;
use fencelock_redis::{RedisConfig, hash_tag, redis};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const PREFIX: &str = "props";

/// 256 cases, or `PROPTEST_CASES`.
fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|n| n.parse().ok());
    Config::with_cases(cases.unwrap_or(256))
}

fn key_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z{}%#:/\"' é€😀]{1,12}",
        "(%7[BbDd]|%25|[{}%a])*",
        "[a-z{}]{505,515}",
        "[a-z\\x00-\\x1f\\x7f{}]{0,6}",
    ]
}

/// The documented encoding, undone: `%7B` is `{`, `%7D` is `}`, `%25` is `%`.
fn decode(encoded: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = encoded;
    while let Some(at) = rest.find(['%', '{', '}']) {
        out.push_str(&rest[..at]);
        let escape = rest.get(at..at + 3)?;
        out.push(match escape {
            "%7B" => '{',
            "%7D" => '}',
            "%25" => '%',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// What Redis Cluster hashes: the text between the first `{` and the next `}`, if not empty.
fn hashed_part(name: &str) -> &str {
    if let Some(open) = name.find('{')
        && let Some(len) = name[open + 1..].find('}')
        && len > 0
    {
        return &name[open + 1..open + 1 + len];
    }
    name
}

#[test]
fn hash_tags_are_the_documented_encoding() {
    let mut runner = TestRunner::new(config());
    runner
        .run(&(key_text(), key_text()), |(a, b)| {
            let (Ok(ka), Ok(kb)) = (LockKey::new(&a), LockKey::new(&b)) else {
                return Ok(());
            };
            let tag = hash_tag(&ka);
            let inner = &tag[1..tag.len() - 1];
            prop_assert!(tag.starts_with('{') && tag.ends_with('}'), "{}", tag);
            prop_assert!(!inner.contains(['{', '}']), "{}", tag);
            prop_assert_eq!(decode(inner), Some(a.clone()));
            // Any name that carries the tag after braceless text hashes the encoded key.
            for name in [
                format!("{PREFIX}:{tag}:lock"),
                format!("balance:{tag}"),
                tag.clone(),
            ] {
                prop_assert_eq!(hashed_part(&name), inner);
            }
            prop_assert_eq!(hash_tag(&kb) == tag, a == b);
            Ok(())
        })
        .unwrap();
}

#[test]
fn keys_round_trip_through_a_server_and_never_collide() {
    let server = RedisServer::spawn();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (backend, raw) = runtime.block_on(async {
        let backend = RedisConfig::new(server.url())
            .prefix(PREFIX)
            .connect()
            .await
            .unwrap_or_else(|e| panic!("connect to the spawned redis-server: {e}"));
        let raw = redis::Client::open(server.url())
            .unwrap()
            .get_multiplexed_async_connection()
            .await
            .unwrap();
        (backend, raw)
    });
    let storage = backend.storage();
    let ttl = Duration::from_secs(60);
    let mut runner = TestRunner::new(config());
    let strategy = proptest::collection::vec(key_text(), 1..6);
    runner
        .run(&strategy, |texts| {
            let mut raw = raw.clone();
            runtime.block_on(async {
                let _: () = redis::cmd("FLUSHDB").query_async(&mut raw).await.unwrap();
                let accepted: BTreeSet<&str> = texts
                    .iter()
                    .map(String::as_str)
                    .filter(|t| LockKey::new(t).is_ok())
                    .collect();
                let mut expected = BTreeSet::new();
                let mut leases = Vec::new();
                for text in &accepted {
                    let key = LockKey::new(text).unwrap();
                    let lease = backend.try_acquire(&key, ttl).await.unwrap();
                    let lease = lease.unwrap_or_else(|| panic!("{text:?} collided"));
                    let info = backend.inspect(&key).await.unwrap();
                    assert_eq!(info.key.as_str(), *text);
                    assert_eq!(info.holder, Some(lease.fence()));
                    storage
                        .write(&key, lease.fence(), text.as_bytes())
                        .await
                        .unwrap();
                    let tag = hash_tag(&key);
                    let user_key = format!("user:{tag}");
                    let committed = backend
                        .fence()
                        .set(user_key.clone(), text.as_bytes())
                        .commit(&key, lease.fence())
                        .await;
                    // The user's own key names are checked as keys (at most 512 bytes), and a
                    // tag is up to three times its key's length: a long key, or one full of
                    // braces, has no key name of the user's own that fits.
                    if user_key.len() > LockKey::MAX_LEN {
                        assert!(
                            matches!(
                                committed,
                                Err(Error::InvalidKey {
                                    reason: "longer than 512 bytes",
                                    ..
                                })
                            ),
                            "{user_key:?}: {committed:?}"
                        );
                    } else {
                        assert_eq!(
                            committed.unwrap_or_else(|e| panic!("{text:?}: {e}")).len(),
                            1
                        );
                        expected.insert(format!("{PREFIX}:{tag}:fence"));
                        expected.insert(user_key);
                    }
                    for suffix in ["lock", "token", "data"] {
                        expected.insert(format!("{PREFIX}:{tag}:{suffix}"));
                    }
                    leases.push((key, lease));
                }
                let names: Vec<String> = redis::cmd("KEYS")
                    .arg("*")
                    .query_async(&mut raw)
                    .await
                    .unwrap();
                let names: BTreeSet<String> = names.into_iter().collect();
                assert_eq!(names, expected, "the key names on the server");
                for (key, lease) in &leases {
                    let snapshot = storage.peek(key).await.unwrap().unwrap();
                    assert_eq!(snapshot.value.as_deref(), Some(key.as_str().as_bytes()));
                    assert_eq!(snapshot.fence, lease.fence());
                    assert!(backend.release(lease).await.unwrap(), "{key:?}");
                }
                for text in texts.iter().filter(|t| !accepted.contains(t.as_str())) {
                    let refused = Locker::new(backend.clone()).lock(text).await;
                    assert!(matches!(refused, Err(Error::InvalidKey { .. })), "{text:?}");
                }
            });
            Ok(())
        })
        .unwrap();
}
