//! Property-based: any key text through the Postgres key encodings.
//!
//! - `advisory_lock_id` is a pure function: the canonical `#<i64>` form is that id, and
//!   `raw_lock_key` its inverse; every other key is 64-bit FNV-1a over its UTF-8 bytes (in
//!   the default schema), as documented, so every process and version agrees on it.
//! - On the server at `FENCELOCK_PG_URL` (a throwaway schema), a set of distinct keys gives
//!   distinct locks on both backends and distinct resources in `PgStorage`, and each key comes
//!   back unchanged from `inspect` and `peek`; rejected keys are `InvalidKey` before anything
//!   is sent.
//!
//! 256 cases (`PROPTEST_CASES` asks for more).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use fencelock_core::{Error, FencedStorage, LockBackend, LockKey, Locker};
use fencelock_postgres::sqlx::postgres::PgPoolOptions;
use fencelock_postgres::{PgDatabase, advisory_lock_id, raw_lock_key};
use fencelock_testkit::postgres::{PgSchema, pg_options};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

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
        "#[-+0 ]?[0-9]{1,20}",
        "[a-z]{505,515}",
        "[a-z\\x00-\\x1f\\x7f]{0,6}",
    ]
}

/// 64-bit FNV-1a, written from its definition.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The documented mapping: `#<n>` with `n` in its canonical decimal form is `n`.
fn id_model(key: &str) -> i64 {
    let canonical = key
        .strip_prefix('#')
        .and_then(|n| n.parse::<i64>().ok().filter(|id| id.to_string() == n));
    canonical.unwrap_or(fnv1a(key.as_bytes()) as i64)
}

#[test]
fn advisory_ids_are_the_documented_function() {
    let mut runner = TestRunner::new(config());
    runner
        .run(&(key_text(), any::<i64>()), |(text, id)| {
            let raw = raw_lock_key(id);
            prop_assert_eq!(raw.as_str(), format!("#{id}"));
            prop_assert_eq!(advisory_lock_id(&raw), id);
            if let Ok(key) = LockKey::new(&text) {
                let first = advisory_lock_id(&key);
                prop_assert_eq!(first, id_model(&text));
                prop_assert_eq!(advisory_lock_id(&LockKey::new(&text).unwrap()), first);
            }
            Ok(())
        })
        .unwrap();
}

#[test]
fn keys_round_trip_through_the_server_and_never_collide() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // A schema serves one lock mechanism: one for the lease backend and the storage, one for
    // the advisory backend.
    let open = || async {
        let schema = PgSchema::create().await;
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .connect_with(pg_options())
            .await
            .unwrap();
        let db = PgDatabase::from_pool(pool, schema.name()).unwrap();
        db.migrate().await.expect("migrating the test schema");
        (schema, db)
    };
    let ((schema, db), (advisory_schema, advisory_db)) =
        runtime.block_on(async { (open().await, open().await) });
    let lease = db.lease_backend();
    let advisory = advisory_db.advisory_backend();
    let storage = db.storage();
    let ttl = Duration::from_secs(60);
    let mut runner = TestRunner::new(config());
    let strategy = proptest::collection::vec(key_text(), 1..6);
    runner
        .run(&strategy, |texts| {
            runtime.block_on(async {
                let accepted: BTreeSet<&str> = texts
                    .iter()
                    .map(String::as_str)
                    .filter(|t| LockKey::new(t).is_ok())
                    .collect();
                let keys: Vec<LockKey> =
                    accepted.iter().map(|t| LockKey::new(t).unwrap()).collect();
                let mut leases = Vec::new();
                for key in &keys {
                    let granted = lease.try_acquire(key, ttl).await.unwrap();
                    let granted = granted.unwrap_or_else(|| panic!("{key:?} collided"));
                    let info = lease.inspect(key).await.unwrap();
                    assert_eq!(&info.key, key);
                    assert_eq!(info.holder, Some(granted.fence()));
                    storage
                        .write(key, granted.fence(), key.as_str().as_bytes())
                        .await
                        .unwrap_or_else(|e| panic!("{key:?}: {e}"));
                    leases.push(granted);
                }
                for (key, granted) in keys.iter().zip(&leases) {
                    let snapshot = storage.peek(key).await.unwrap().unwrap();
                    assert_eq!(snapshot.value.as_deref(), Some(key.as_str().as_bytes()));
                    assert_eq!(snapshot.fence, granted.fence());
                    assert!(lease.release(granted).await.unwrap(), "{key:?}");
                }
                // Advisory locks: distinct ids are distinct locks (keys that share an id, as
                // `#5` and a key hashing to 5 could, exclude each other by design).
                let mut by_id: BTreeMap<i64, &LockKey> = BTreeMap::new();
                for key in &keys {
                    by_id
                        .entry(advisory_db.advisory_lock_id(key))
                        .or_insert(key);
                }
                let mut held = Vec::new();
                for key in by_id.values() {
                    let granted = advisory.try_acquire(key, ttl).await.unwrap();
                    let granted = granted.unwrap_or_else(|| panic!("{key:?} collided"));
                    let info = advisory.inspect(key).await.unwrap();
                    assert_eq!(&info.key, *key);
                    assert_eq!(info.holder, Some(granted.fence()));
                    held.push(granted);
                }
                for granted in &held {
                    assert!(advisory.release(granted).await.unwrap());
                }
                for text in texts.iter().filter(|t| !accepted.contains(t.as_str())) {
                    let refused = Locker::new(lease.clone()).lock(text).await;
                    assert!(matches!(refused, Err(Error::InvalidKey { .. })), "{text:?}");
                }
            });
            Ok(())
        })
        .unwrap();
    runtime.block_on(async {
        db.close().await;
        advisory_db.close().await;
        schema.cleanup().await;
        advisory_schema.cleanup().await;
    });
}
