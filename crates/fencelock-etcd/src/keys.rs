//! Where fencelock's keys live in etcd's key space, and how their values are written.
//!
//! | key | value | lifetime |
//! |---|---|---|
//! | `<prefix>/lock/<key>` | `<owner>:<token>` (32 hex digits, decimal) | attached to the grant's lease |
//! | `<prefix>/token/<key>` | the key's last token, decimal | never deleted |
//! | `<prefix>/read/<n>:<key>/<reader>` | the read phase's `<owner>:<token>` | attached to the reader's lease |
//! | `<prefix>/fence/<resource>` | `<token, 20 digits>:<owner>` | never deleted |
//! | `<prefix>/data/<resource>` | the value's bytes | written with the fence |
//!
//! The fence's token is zero-padded to 20 digits (`u64::MAX` has 20) so that etcd's byte-wise
//! `value < x` compare orders fences by token: see [`fence_floor`].

use fencelock_core::{Error, Fence, FencingToken, LockKey, OwnerId, Result};

use crate::error::BACKEND;

/// The key names of one installation (one prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Self {
        Keys {
            prefix: prefix.to_owned(),
        }
    }

    fn key(&self, kind: &str, key: &LockKey) -> Vec<u8> {
        format!("{}/{kind}/{}", self.prefix, key.as_str()).into_bytes()
    }

    /// The lock key: present while a lease holds the lock.
    pub(crate) fn lock(&self, key: &LockKey) -> Vec<u8> {
        self.key("lock", key)
    }

    /// The prefix of the key's reader keys (one per reader of its read phase). The key's
    /// length in bytes comes first, so no key's prefix starts another's: `a`'s readers are
    /// under `read/1:a/`, and `a/b`'s under `read/3:a/b/`, outside that range.
    pub(crate) fn readers(&self, key: &LockKey) -> Vec<u8> {
        format!(
            "{}/read/{}:{}/",
            self.prefix,
            key.as_str().len(),
            key.as_str()
        )
        .into_bytes()
    }

    /// One reader's key in the key's read phase.
    pub(crate) fn reader(&self, key: &LockKey, reader: OwnerId) -> Vec<u8> {
        let mut name = self.readers(key);
        name.extend_from_slice(reader.to_string().as_bytes());
        name
    }

    /// The key's token counter.
    pub(crate) fn counter(&self, key: &LockKey) -> Vec<u8> {
        self.key("token", key)
    }

    /// The resource's last admitted fence.
    pub(crate) fn fence(&self, resource: &LockKey) -> Vec<u8> {
        self.key("fence", resource)
    }

    /// The resource's value.
    pub(crate) fn data(&self, resource: &LockKey) -> Vec<u8> {
        self.key("data", resource)
    }
}

/// The lock key's value for a grant: `<owner>:<token>`. Unique per grant, since the owner is
/// drawn at random for each one.
pub(crate) fn holder_value(owner: OwnerId, token: FencingToken) -> Vec<u8> {
    format!("{owner}:{token}").into_bytes()
}

/// Reads a lock key's value back.
pub(crate) fn parse_holder(value: &[u8]) -> Result<Fence> {
    let text = std::str::from_utf8(value).map_err(|_| malformed("lock", value))?;
    let (owner, token) = text
        .split_once(':')
        .ok_or_else(|| malformed("lock", value))?;
    let owner: OwnerId = owner.parse().map_err(|_| malformed("lock", value))?;
    let token = parse_token(token).ok_or_else(|| malformed("lock", value))?;
    Ok(Fence::new(token, owner))
}

/// A counter's value: a decimal token.
pub(crate) fn counter_value(token: FencingToken) -> Vec<u8> {
    token.to_string().into_bytes()
}

/// Reads a counter back.
pub(crate) fn parse_counter(value: &[u8]) -> Result<FencingToken> {
    std::str::from_utf8(value)
        .ok()
        .and_then(parse_token)
        .ok_or_else(|| malformed("token counter", value))
}

/// A fence record: `<token, 20 digits>:<owner>`.
pub(crate) fn fence_value(fence: Fence) -> Vec<u8> {
    format!("{:020}:{}", fence.token.get(), fence.owner).into_bytes()
}

/// The 20-digit token alone. A stored fence record is byte-wise less than `fence_floor(t)`
/// exactly when its token is below `t`: with equal tokens the record is longer (it goes on
/// with `:<owner>`), hence greater.
pub(crate) fn fence_floor(token: FencingToken) -> Vec<u8> {
    format!("{:020}", token.get()).into_bytes()
}

/// Reads a fence record back.
pub(crate) fn parse_fence(value: &[u8]) -> Result<Fence> {
    let text = std::str::from_utf8(value).map_err(|_| malformed("fence", value))?;
    let (token, owner) = text
        .split_once(':')
        .ok_or_else(|| malformed("fence", value))?;
    if token.len() != 20 {
        return Err(malformed("fence", value));
    }
    let token = parse_token(token).ok_or_else(|| malformed("fence", value))?;
    let owner: OwnerId = owner.parse().map_err(|_| malformed("fence", value))?;
    Ok(Fence::new(token, owner))
}

fn parse_token(text: &str) -> Option<FencingToken> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse::<u64>().ok().and_then(FencingToken::new)
}

fn malformed(what: &str, value: &[u8]) -> Error {
    let shown: String = String::from_utf8_lossy(value).chars().take(80).collect();
    Error::Backend {
        backend: BACKEND,
        message: format!("malformed {what} record {shown:?}: not written by fencelock"),
        source: None,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn token(t: u64) -> FencingToken {
        FencingToken::new(t).unwrap()
    }

    #[test]
    fn keys_keep_the_key_as_it_is() {
        let keys = Keys::new("p re/fix");
        let key = LockKey::new("a/b {c} ü").unwrap();
        assert_eq!(keys.lock(&key), b"p re/fix/lock/a/b {c} \xc3\xbc".to_vec());
        assert_eq!(keys.counter(&key), "p re/fix/token/a/b {c} ü".as_bytes());
        assert_eq!(keys.fence(&key), "p re/fix/fence/a/b {c} ü".as_bytes());
        assert_eq!(keys.data(&key), "p re/fix/data/a/b {c} ü".as_bytes());
    }

    #[test]
    fn no_key_has_its_readers_under_another_keys_readers() {
        let keys = Keys::new("p");
        let reader = OwnerId::from_u128(7);
        let names = ["a", "a/b", "a/", "1:a", "ab", "a/b/c"];
        for one in names {
            let one = LockKey::new(one).unwrap();
            for other in names {
                let other = LockKey::new(other).unwrap();
                let under = keys.reader(&other, reader).starts_with(&keys.readers(&one));
                assert_eq!(under, one == other, "{one} / {other}");
            }
        }
    }

    #[test]
    fn values_round_trip() {
        let owner = OwnerId::random();
        let holder = holder_value(owner, token(42));
        assert_eq!(parse_holder(&holder).unwrap(), Fence::new(token(42), owner));
        assert_eq!(
            parse_counter(&counter_value(token(u64::MAX))).unwrap(),
            token(u64::MAX)
        );
        let fence = Fence::new(token(7), owner);
        assert_eq!(parse_fence(&fence_value(fence)).unwrap(), fence);
        for bad in [&b""[..], b"x", b"0", b"-1", b"18446744073709551616", b"1 "] {
            assert!(parse_counter(bad).is_err(), "{bad:?}");
        }
        assert!(parse_holder(b"zz:1").is_err());
        assert!(parse_fence(b"7:00000000000000000000000000000000").is_err());
    }

    #[test]
    fn fence_records_order_by_token_bytewise() {
        let a = OwnerId::from_u128(u128::MAX);
        for (stored, presented) in [(1u64, 2u64), (9, 10), (99, 100), (1, u64::MAX)] {
            let record = fence_value(Fence::new(token(stored), a));
            assert!(
                record < fence_floor(token(presented)),
                "{stored} < {presented}"
            );
            let record = fence_value(Fence::new(token(presented), a));
            assert!(
                record > fence_floor(token(stored)),
                "{presented} > {stored}"
            );
        }
        let record = fence_value(Fence::new(token(5), OwnerId::from_u128(0)));
        assert!(record > fence_floor(token(5)), "equal tokens are not less");
    }
}
