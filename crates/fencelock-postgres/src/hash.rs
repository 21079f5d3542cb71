//! Lock keys to Postgres advisory-lock ids.

use fencelock_core::LockKey;

const FNV_OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// The `bigint` advisory-lock id of `key`, as used by
/// [`PgAdvisoryBackend`](crate::PgAdvisoryBackend) and
/// [`PgStorage::transaction`](crate::PgStorage::transaction).
///
/// - A key of the form `#<n>`, where `<n>` is the canonical decimal form of an `i64` (no `+`,
///   no leading zeros, `-` only for negative numbers), is the raw id `n`: `#402` locks the same
///   thing as `SELECT pg_advisory_lock(402)` in any other client.
/// - Any other key is hashed: 64-bit FNV-1a over the key's UTF-8 bytes, the result's bits read
///   as a two's-complement `i64`. The hash is fixed forever, so every process and every
///   version of fencelock agrees on it.
///
/// Two different keys may hash to the same id (about one pair in 2^32 among 2^32 keys); they
/// then exclude each other, which costs concurrency, never safety.
///
/// ```
/// use fencelock_core::LockKey;
/// use fencelock_postgres::advisory_lock_id;
/// assert_eq!(advisory_lock_id(&LockKey::new("#402").unwrap()), 402);
/// assert_eq!(advisory_lock_id(&LockKey::new("a").unwrap()), 0xaf63_dc4c_8601_ec8c_u64 as i64);
/// ```
pub fn advisory_lock_id(key: &LockKey) -> i64 {
    raw_id(key.as_str()).unwrap_or_else(|| fnv1a_64(key.as_str().as_bytes()) as i64)
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

/// 64-bit FNV-1a.
fn fnv1a_64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(FNV_OFFSET_BASIS, |hash, byte| {
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
        assert_eq!(fnv1a_64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a_64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a_64(b"foobar"), 0x8594_4171_f739_67e8);
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
            assert_eq!(id(key), fnv1a_64(key.as_bytes()) as i64, "{key:?}");
        }
    }

    #[test]
    fn hashed_ids_are_stable() {
        assert_eq!(id("foobar"), 0x8594_4171_f739_67e8_u64 as i64);
        assert_ne!(id("orders/1"), id("orders/2"));
    }
}
