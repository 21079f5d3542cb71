//! The `GET_LOCK` name of a key: the key itself when the server can take it as it is, else a
//! collision-resistant hash of it, never a truncation.

use fencelock_core::LockKey;
use sha2::{Digest, Sha256};

/// The start of every hashed lock name. A key that itself starts with it is hashed too, so no
/// key can name the lock of another.
pub const HASHED_NAME_PREFIX: &str = "fencelock#";

/// The longest name MySQL's `GET_LOCK` takes, in characters (MySQL 5.7 and later).
pub const MAX_LOCK_NAME_CHARS: usize = 64;

/// The longest name MariaDB's `GET_LOCK` takes, in bytes.
const MAX_LOCK_NAME_BYTES: usize = 192;

/// Bytes of SHA-256 kept in a hashed name: 192 bits, so finding two keys with one name takes
/// about 2^96 work.
const HASH_BYTES: usize = 24;

/// The name [`MySqlLockBackend`](crate::MySqlLockBackend) passes to `GET_LOCK` for `key`.
///
/// - A key of at most 64 characters and 192 bytes, with no character outside the Basic
///   Multilingual Plane (MySQL keeps lock names in 3-byte UTF-8) and not starting with
///   [`HASHED_NAME_PREFIX`], is its own name: `SELECT GET_LOCK('invoices/2026-11', 10)` in any
///   client excludes fencelock's lock on the key `invoices/2026-11`, and the other way round.
/// - Any other key is named `fencelock#` followed by the first 24 bytes of the SHA-256 of the
///   key, in lowercase hex (58 characters). Distinct keys get distinct names (a collision
///   would need a SHA-256 collision on 192 bits); nothing is truncated.
///
/// `GET_LOCK` names are server-wide: the same key locked through two databases or two table
/// prefixes of one server is one lock (each keeps its own tokens). MariaDB compares names
/// byte for byte; MySQL compares them case-insensitively, so there two keys that differ only
/// in letter case exclude each other. Both only ever add exclusion, never remove it.
///
/// ```
/// use fencelock_core::LockKey;
/// use fencelock_mysql::lock_name;
/// assert_eq!(lock_name(&LockKey::new("invoices/2026-11")?), "invoices/2026-11");
/// let long = lock_name(&LockKey::new("k".repeat(65))?);
/// assert!(long.starts_with("fencelock#") && long.len() == 58);
/// # Ok::<(), fencelock_core::Error>(())
/// ```
pub fn lock_name(key: &LockKey) -> String {
    let key = key.as_str();
    let verbatim = key.len() <= MAX_LOCK_NAME_BYTES
        && key.chars().count() <= MAX_LOCK_NAME_CHARS
        && key.chars().all(|c| u32::from(c) <= 0xFFFF)
        && !key.starts_with(HASHED_NAME_PREFIX);
    if verbatim {
        return key.to_owned();
    }
    let digest = Sha256::digest(key.as_bytes());
    let mut name = String::with_capacity(HASHED_NAME_PREFIX.len() + 2 * HASH_BYTES);
    name.push_str(HASHED_NAME_PREFIX);
    for byte in &digest[..HASH_BYTES] {
        name.push(char::from(HEX[usize::from(byte >> 4)]));
        name.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    name
}

const HEX: &[u8; 16] = b"0123456789abcdef";

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn name(key: &str) -> String {
        lock_name(&LockKey::new(key).unwrap())
    }

    #[test]
    fn short_keys_are_their_own_name() {
        for key in [
            "a",
            "invoices/2026-11",
            "with space ",
            "ünïcødé ✓",
            &"x".repeat(64),
        ] {
            assert_eq!(name(key), key);
        }
    }

    #[test]
    fn long_or_unusual_keys_are_hashed_not_truncated() {
        let a = format!("{}a", "x".repeat(64));
        let b = format!("{}b", "x".repeat(64));
        assert_ne!(name(&a), name(&b), "keys sharing 64 characters collided");
        for key in [
            a.as_str(),
            b.as_str(),
            "lock 🔒",
            "fencelock#abc",
            &"€".repeat(65),
        ] {
            let hashed = name(key);
            assert!(hashed.starts_with(HASHED_NAME_PREFIX), "{key}: {hashed}");
            assert_eq!(hashed.chars().count(), 58);
            assert_ne!(hashed, key);
        }
        assert_eq!(name(&a), name(&a), "hashing is not stable");
        // 64 three-byte characters are 192 bytes: still verbatim.
        assert_eq!(name(&"€".repeat(64)), "€".repeat(64));
        assert!(name("abc\u{1F512}").starts_with("fencelock#"));
    }

    #[test]
    fn the_hash_is_sha256() {
        let key = "k".repeat(65);
        let digest = Sha256::digest(key.as_bytes());
        let expected: String = digest[..HASH_BYTES]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(name(&key), format!("fencelock#{expected}"));
    }
}
