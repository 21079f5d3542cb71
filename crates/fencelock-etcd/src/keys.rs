//! Where fencelock's keys live in etcd's key space, and how their values are written.
//!
//! | key | value | lifetime |
//! |---|---|---|
//! | `<prefix>/lock/<key>` | `<owner>:<token>` (32 hex digits, decimal) | attached to the grant's lease (a handed grant: to the waiter's place lease) |
//! | `<prefix>/token/<key>` | the key's last token, decimal | never deleted |
//! | `<prefix>/read/<n>:<key>/<reader>` | the read phase's `<owner>:<token>` | attached to the reader's lease |
//! | `<prefix>/queue/<n>:<key>/<waiter>` | empty: a queued waiter's place | attached to the waiter's place lease |
//! | `<prefix>/fence/<resource>` | `<token, 20 digits>:<owner>` | never deleted |
//! | `<prefix>/data/<resource>` | the value's bytes | written with the fence |
//!
//! Nothing else is written under `<prefix>/`: the sweep of a benchmark run's keys
//! ([`Keys::by_key_under`], [`Keys::lock_key_of`]) relies on this table being whole.
//!
//! The fence's token is zero-padded to 20 digits (`u64::MAX` has 20) so that etcd's byte-wise
//! `value < x` compare orders fences by token: see [`fence_floor`].

use fencelock_core::{Error, Fence, FencingToken, LockKey, OwnerId, Result};

use crate::error::BACKEND;

/// The families of keys named `<prefix>/<family>/<key>`: a key prefix of one family is a
/// prefix of etcd's key space too.
const LOCK: &str = "lock";
const TOKEN: &str = "token";
const FENCE: &str = "fence";
const DATA: &str = "data";
/// Every family named `<prefix>/<family>/<key>`, for sweeps.
const BY_KEY: [&str; 4] = [LOCK, TOKEN, FENCE, DATA];
/// The reader keys, `<prefix>/read/<len>:<key>/<reader>`: not prefix-ordered by key.
const READ: &str = "read";
/// The queued waiters' places, `<prefix>/queue/<len>:<key>/<waiter>`: not prefix-ordered by
/// key either.
const QUEUE: &str = "queue";
/// The families named `<prefix>/<family>/<len>:<key>/<id>`, one key per reader or waiter.
pub(crate) const BY_ID: [&str; 2] = [READ, QUEUE];
/// Every family: the names no `/`-separated part of a prefix may be ([`family_in_prefix`]).
pub(crate) const FAMILIES: [&str; 6] = [LOCK, TOKEN, FENCE, DATA, READ, QUEUE];

/// The first `/`-separated part of `prefix` that is a family's name, if any.
///
/// Two installations whose prefixes have no such part never share a key. A key is
/// `P/f/k` (`f` a family, `k` anything). If `P1/f1/k1 == P2/f2/k2` with `P1 != P2`, one
/// prefix starts the other, say `P2 = P1 + t` with `t` not empty. Then `t + "/f2/k2" ==
/// "/f1/k1"`: `t` starts with `/`, and since `P2` is followed by `/` and no family holds a
/// `/`, `t` is `/f1` or starts with `/f1/`. So `f1` is a whole part of `P2`. Refusing such
/// prefixes keeps `app2/lock/x`'s counter of `y` (`app2/lock/x/token/y`) from being `app2`'s
/// lock on `x/token/y`.
pub(crate) fn family_in_prefix(prefix: &str) -> Option<&'static str> {
    prefix
        .split('/')
        .find_map(|part| FAMILIES.iter().find(|family| **family == part).copied())
}

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

    /// `<prefix>/<family>/<start>`: one key of the family when `start` is a whole key, the
    /// start of every key of the family under it when it is a key prefix.
    fn key(&self, family: &str, start: &str) -> Vec<u8> {
        format!("{}/{family}/{start}", self.prefix).into_bytes()
    }

    /// The lock key: present while a lease holds the lock.
    pub(crate) fn lock(&self, key: &LockKey) -> Vec<u8> {
        self.key(LOCK, key.as_str())
    }

    /// `<prefix>/<family>/<len>:<key>/`: the key's length in bytes comes first, so no key's
    /// prefix starts another's: `a`'s are under `<family>/1:a/`, and `a/b`'s under
    /// `<family>/3:a/b/`, outside that range.
    fn by_id(&self, family: &str, key: &LockKey) -> Vec<u8> {
        let key = key.as_str();
        format!("{}/{family}/{}:{key}/", self.prefix, key.len()).into_bytes()
    }

    /// The prefix of the key's reader keys (one per reader of its read phase).
    pub(crate) fn readers(&self, key: &LockKey) -> Vec<u8> {
        self.by_id(READ, key)
    }

    /// One reader's key in the key's read phase.
    pub(crate) fn reader(&self, key: &LockKey, reader: OwnerId) -> Vec<u8> {
        let mut name = self.readers(key);
        name.extend_from_slice(reader.to_string().as_bytes());
        name
    }

    /// The reader whose key in the read phase of `key` is `name` ([`reader`](Self::reader));
    /// `None` for a name that is not one.
    pub(crate) fn reader_of(&self, key: &LockKey, name: &[u8]) -> Option<OwnerId> {
        let rest = name.strip_prefix(self.readers(key).as_slice())?;
        std::str::from_utf8(rest).ok()?.parse().ok()
    }

    /// The prefix of the key's queue: one place per queued waiter, ordered by create revision.
    pub(crate) fn queue(&self, key: &LockKey) -> Vec<u8> {
        self.by_id(QUEUE, key)
    }

    /// One waiter's place in the key's queue.
    pub(crate) fn place(&self, key: &LockKey, waiter: OwnerId) -> Vec<u8> {
        let mut name = self.queue(key);
        name.extend_from_slice(waiter.to_string().as_bytes());
        name
    }

    /// The waiter whose place in the queue of `key` is `name` ([`place`](Self::place)); `None`
    /// for a name that is not one.
    pub(crate) fn waiter_of(&self, key: &LockKey, name: &[u8]) -> Option<OwnerId> {
        let rest = name.strip_prefix(self.queue(key).as_slice())?;
        std::str::from_utf8(rest).ok()?.parse().ok()
    }

    /// The key's token counter.
    pub(crate) fn counter(&self, key: &LockKey) -> Vec<u8> {
        self.key(TOKEN, key.as_str())
    }

    /// The resource's last admitted fence.
    pub(crate) fn fence(&self, resource: &LockKey) -> Vec<u8> {
        self.key(FENCE, resource.as_str())
    }

    /// The resource's value.
    pub(crate) fn data(&self, resource: &LockKey) -> Vec<u8> {
        self.key(DATA, resource.as_str())
    }

    /// The starts of every lock, counter, fence and value key of the keys and resources that
    /// start with `key_prefix`: each one etcd prefix range.
    pub(crate) fn by_key_under(&self, key_prefix: &str) -> Vec<Vec<u8>> {
        BY_KEY
            .iter()
            .map(|family| self.key(family, key_prefix))
            .collect()
    }

    /// The start of every key of `family` (one of [`BY_ID`]) in the installation. Such a key
    /// puts its lock key's length first, so the ones of the keys under a key prefix are no
    /// one etcd range: [`lock_key_of`](Self::lock_key_of) picks them out.
    pub(crate) fn all_of(&self, family: &str) -> Vec<u8> {
        self.key(family, "")
    }

    /// The lock key of a reader key or a place ([`reader`](Self::reader),
    /// [`place`](Self::place)) of `family`, as bytes; `None` for a name that is not one.
    pub(crate) fn lock_key_of<'a>(&self, family: &str, name: &'a [u8]) -> Option<&'a [u8]> {
        let rest = name.strip_prefix(self.all_of(family).as_slice())?;
        let colon = rest.iter().position(|&b| b == b':')?;
        let (len, rest) = rest.split_at(colon);
        let len: usize = std::str::from_utf8(len).ok()?.parse().ok()?;
        let rest = rest.get(1..)?;
        let (key, rest) = (rest.get(..len)?, rest.get(len..)?);
        rest.starts_with(b"/").then_some(key)
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

    /// Every name an installation writes for `key` (readers and places of one id).
    fn names(keys: &Keys, key: &LockKey) -> Vec<Vec<u8>> {
        let id = OwnerId::random();
        vec![
            keys.lock(key),
            keys.counter(key),
            keys.fence(key),
            keys.data(key),
            keys.reader(key, id),
            keys.place(key, id),
        ]
    }

    #[test]
    fn prefixes_that_pass_never_share_a_key() {
        // The issue's case: `app2/lock/x`'s counter of `y` is `app2`'s lock on `x/token/y`.
        let (nested, outer) = (Keys::new("app2/lock/x"), Keys::new("app2"));
        let y = LockKey::new("y").unwrap();
        let x_token_y = LockKey::new("x/token/y").unwrap();
        assert_eq!(nested.counter(&y), outer.lock(&x_token_y));
        assert_eq!(family_in_prefix("app2/lock/x"), Some("lock"));
        // Prefixes nested in each other, ending in `/`, or holding a family's name inside a
        // part pass, and no two of them share a name for keys that nest as well.
        let prefixes = [
            "app",
            "app/",
            "app//",
            "app/x",
            "app/x/y",
            "app/locks",
            "app/lockx",
            "xlock",
            "app/tokens/y",
            "app/x/datas",
        ];
        let keys = [
            "y",
            "x/y",
            "lock/y",
            "x/token/y",
            "token/y",
            "/",
            "a//b",
            "data/x/y",
        ];
        let mut seen = std::collections::HashMap::new();
        for prefix in prefixes {
            assert_eq!(family_in_prefix(prefix), None, "{prefix}");
            let installation = Keys::new(prefix);
            for key in keys {
                let key = LockKey::new(key).unwrap();
                for name in names(&installation, &key) {
                    if let Some(other) = seen.insert(name.clone(), prefix) {
                        assert_eq!(
                            other,
                            prefix,
                            "{:?} is a key of both {other:?} and {prefix:?}",
                            String::from_utf8_lossy(&name)
                        );
                    }
                }
            }
        }
        for refused in [
            "lock",
            "a/token",
            "a/read/b",
            "queue/",
            "/fence",
            "a//data//b",
        ] {
            assert!(family_in_prefix(refused).is_some(), "{refused}");
        }
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
    fn no_key_has_its_readers_or_places_under_another_keys() {
        let keys = Keys::new("p");
        let reader = OwnerId::from_u128(7);
        let names = ["a", "a/b", "a/", "1:a", "ab", "a/b/c"];
        for one in names {
            let one = LockKey::new(one).unwrap();
            for other in names {
                let other = LockKey::new(other).unwrap();
                let under = keys.reader(&other, reader).starts_with(&keys.readers(&one));
                assert_eq!(under, one == other, "{one} / {other}");
                let queued = keys.place(&other, reader).starts_with(&keys.queue(&one));
                assert_eq!(queued, one == other, "{one} / {other}");
                assert!(!keys.place(&other, reader).starts_with(&keys.readers(&one)));
            }
        }
    }

    #[test]
    fn a_place_names_its_waiter_and_no_other_key_does() {
        let keys = Keys::new("p");
        let (a, ab) = (LockKey::new("a").unwrap(), LockKey::new("a/b").unwrap());
        let waiter = OwnerId::random();
        assert_eq!(keys.waiter_of(&a, &keys.place(&a, waiter)), Some(waiter));
        // Another key's place, the queue itself, a reader key, the lock key: none.
        assert_eq!(keys.waiter_of(&a, &keys.place(&ab, waiter)), None);
        assert_eq!(keys.waiter_of(&ab, &keys.place(&a, waiter)), None);
        assert_eq!(keys.waiter_of(&a, &keys.queue(&a)), None);
        assert_eq!(keys.waiter_of(&a, &keys.reader(&a, waiter)), None);
        assert_eq!(keys.waiter_of(&a, &keys.lock(&a)), None);
        let mut longer = keys.place(&a, waiter);
        longer.extend_from_slice(b"/x");
        assert_eq!(keys.waiter_of(&a, &longer), None);
    }

    #[test]
    fn a_sweep_of_a_key_prefix_finds_every_key_under_it_and_no_other() {
        let keys = Keys::new("p/x");
        let reader = OwnerId::from_u128(7);
        let swept = |key: &str| {
            let key = LockKey::new(key).unwrap();
            // Every key the backend and the storage write for `key`.
            let written = [
                keys.lock(&key),
                keys.counter(&key),
                keys.fence(&key),
                keys.data(&key),
            ];
            let ranges = keys.by_key_under("run/");
            let by_key = written
                .iter()
                .map(|name| ranges.iter().any(|start| name.starts_with(start)))
                .collect::<Vec<_>>();
            let mut of_run = Vec::new();
            for (family, name) in BY_ID
                .iter()
                .zip([keys.reader(&key, reader), keys.place(&key, reader)])
            {
                assert!(name.starts_with(&keys.all_of(family)));
                let of = keys.lock_key_of(family, &name).unwrap();
                assert_eq!(of, key.as_str().as_bytes());
                of_run.push(of.starts_with(b"run/"));
            }
            assert_eq!(of_run[0], of_run[1]);
            (by_key, of_run[0])
        };
        for key in ["run/", "run/a", "run/a/1:b/c", "run/ü"] {
            assert_eq!(swept(key), (vec![true; 4], true), "{key}");
        }
        for key in ["run", "ru/n/a", "other/run/a", "1:run/a"] {
            assert_eq!(swept(key), (vec![false; 4], false), "{key}");
        }
        for name in [
            &b"p/x/read/"[..],
            b"p/x/read/3:ab/r",
            b"p/x/read/x:a/r",
            b"p/y/read/1:a/r",
        ] {
            assert_eq!(keys.lock_key_of(READ, name), None, "{name:?}");
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
