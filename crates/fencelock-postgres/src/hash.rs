//! Lock keys to Postgres advisory-lock ids.

use fencelock_core::LockKey;

use crate::config::DEFAULT_SCHEMA;

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The `bigint` advisory-lock id of `key` in the default schema ([`DEFAULT_SCHEMA`],
/// `fencelock`): [`advisory_lock_id_in`]`(DEFAULT_SCHEMA, key)`. A database in another schema
/// uses [`PgDatabase::advisory_lock_id`](crate::PgDatabase::advisory_lock_id).
///
/// ```
/// use fencelock_core::LockKey;
/// use fencelock_postgres::advisory_lock_id;
/// assert_eq!(advisory_lock_id(&LockKey::new("#402").unwrap()), 402);
/// assert_eq!(advisory_lock_id(&LockKey::new("a").unwrap()), 0xaf63_dc4c_8601_ec8c_u64 as i64);
/// ```
pub fn advisory_lock_id(key: &LockKey) -> i64 {
    advisory_lock_id_in(DEFAULT_SCHEMA, key)
}

/// The `bigint` advisory-lock id of `key` for the fencelock installation in `schema`, as used
/// by [`PgAdvisoryBackend`](crate::PgAdvisoryBackend) and
/// [`PgStorage::transaction`](crate::PgStorage::transaction) on a database in that schema.
///
/// - A key of the form `#<n>`, where `<n>` is the canonical decimal form of an `i64` (no `+`,
///   no leading zeros, `-` only for negative numbers), is the raw id `n` in every schema:
///   `#402` locks the same thing as `SELECT pg_advisory_lock(402)` in any other client.
/// - Any other key is hashed with 64-bit FNV-1a, the result's bits read as a two's-complement
///   `i64`: over the key's UTF-8 bytes in the default schema (`fencelock`, the ids fencelock
///   has always used there), and over the schema name, a zero byte and the key's bytes in any
///   other schema. So two installations in one database (two schemas) do not contend for
///   each other's keys, while raw ids stay shared with plain SQL. The hash is fixed forever,
///   so every process and every version of fencelock agrees on it.
///
/// Two different keys may hash to the same id (about one pair in 2^32 among 2^32 keys); they
/// then exclude each other, which costs concurrency, never safety.
///
/// ```
/// use fencelock_core::LockKey;
/// use fencelock_postgres::advisory_lock_id_in;
/// let key = LockKey::new("orders/1").unwrap();
/// assert_ne!(advisory_lock_id_in("fencelock", &key), advisory_lock_id_in("billing", &key));
/// let raw = LockKey::new("#402").unwrap();
/// assert_eq!(advisory_lock_id_in("billing", &raw), 402);
/// ```
pub fn advisory_lock_id_in(schema: &str, key: &LockKey) -> i64 {
    if let Some(id) = raw_id(key.as_str()) {
        return id;
    }
    let hash = if schema == DEFAULT_SCHEMA {
        fnv1a_64(FNV_OFFSET_BASIS, key.as_str().as_bytes())
    } else {
        // Neither a schema name nor a key holds a zero byte, so the input names one
        // (schema, key) pair.
        let seed = fnv1a_64(FNV_OFFSET_BASIS, schema.as_bytes());
        fnv1a_64(fnv1a_64(seed, &[0]), key.as_str().as_bytes())
    };
    hash as i64
}

/// The key that stands for the raw advisory-lock id `id`: `#<id>`.
///
/// ```
/// use fencelock_postgres::{advisory_lock_id, raw_lock_key};
/// assert_eq!(raw_lock_key(-7).as_str(), "#-7");
/// assert_eq!(advisory_lock_id(&raw_lock_key(i64::MIN)), i64::MIN);
/// ```
pub fn raw_lock_key(id: i64) -> LockKey {
    // "#" followed by at most 20 ASCII digit/sign characters is always a valid key.
    LockKey::new(format!("#{id}")).unwrap_or_else(|_| unreachable!("raw id keys are valid"))
}

fn raw_id(key: &str) -> Option<i64> {
    let digits = key.strip_prefix('#')?;
    let id: i64 = digits.parse().ok()?;
    (id.to_string() == digits).then_some(id)
}

/// 64-bit FNV-1a of `bytes`, continuing from `hash` (the offset basis to start).
fn fnv1a_64(hash: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(hash, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(FNV_PRIME)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn id(key: &str) -> i64 {
        advisory_lock_id(&LockKey::new(key).unwrap())
    }

    #[test]
    fn fnv1a_known_vectors() {
        assert_eq!(fnv1a_64(FNV_OFFSET_BASIS, b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(FNV_OFFSET_BASIS, b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(FNV_OFFSET_BASIS, b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn raw_ids_are_taken_verbatim() {
        assert_eq!(id("#402"), 402);
        assert_eq!(id("#0"), 0);
        assert_eq!(id("#-1"), -1);
        assert_eq!(id("#9223372036854775807"), i64::MAX);
        assert_eq!(id("#-9223372036854775808"), i64::MIN);
    }

    #[test]
    fn non_canonical_forms_are_hashed() {
        for key in [
            "#0402",
            "#+402",
            "# 402",
            "#402 ",
            "#",
            "402",
            "#9223372036854775808",
        ] {
            assert_eq!(
                id(key),
                fnv1a_64(FNV_OFFSET_BASIS, key.as_bytes()) as i64,
                "{key:?}"
            );
        }
    }

    #[test]
    fn other_schemas_hash_the_schema_too() {
        let key = LockKey::new("orders/1").unwrap();
        // FNV-1a over "billing\0orders/1", continued byte by byte: one input, fixed forever.
        let mut expected = FNV_OFFSET_BASIS;
        for byte in b"billing\0orders/1" {
            expected = (expected ^ u64::from(*byte)).wrapping_mul(FNV_PRIME);
        }
        assert_eq!(advisory_lock_id_in("billing", &key), expected as i64);
        assert_ne!(
            advisory_lock_id_in("billing", &key),
            advisory_lock_id_in("fencelock", &key)
        );
        assert_ne!(
            advisory_lock_id_in("billing", &key),
            advisory_lock_id_in("billing2", &key)
        );
        assert_eq!(advisory_lock_id_in("fencelock", &key), id("orders/1"));
        for raw in ["#402", "#-7", "#0"] {
            let raw = LockKey::new(raw).unwrap();
            assert_eq!(advisory_lock_id_in("billing", &raw), advisory_lock_id(&raw));
        }
    }

    #[test]
    fn hashed_ids_are_stable() {
        assert_eq!(id("foobar"), 0x8594_4171_f739_67e8_u64 as i64);
        assert_ne!(id("orders/1"), id("orders/2"));
    }
}
