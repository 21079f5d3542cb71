//! Redis key names: one hash tag per user key, so a lock, its counter, its read phase and its
//! channel share a Redis Cluster slot.

use fencelock_core::{Error, LockKey, Result};

/// The prefix used when none is configured.
pub(crate) const DEFAULT_PREFIX: &str = "fencelock";

/// Names the Redis keys of one prefix.
///
/// A user key `k` becomes the hash tag `{enc(k)}`, where `enc` percent-encodes `%`, `{` and
/// `}` (as `%25`, `%7B`, `%7D`) and leaves everything else as it is. Redis hashes the text
/// between the first `{` and the next `}`; since the prefix may not contain braces and
/// `enc(k)` contains no `}`, that text is exactly `enc(k)`, never empty, so every key of `k`
/// lands in the same slot. `enc` is injective, so distinct keys never share names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeySpace {
    prefix: String,
}

impl KeySpace {
    /// Checks `prefix`: non-empty, no braces (they would move the hash tag), no whitespace or
    /// control characters.
    pub(crate) fn new(prefix: &str) -> Result<Self> {
        if prefix.is_empty() {
            return Err(Error::config("redis key prefix must not be empty"));
        }
        if prefix
            .chars()
            .any(|c| c == '{' || c == '}' || c.is_whitespace() || c.is_control())
        {
            return Err(Error::config(format!(
                "redis key prefix {prefix:?} must not contain braces, whitespace or control characters"
            )));
        }
        Ok(KeySpace {
            prefix: prefix.to_owned(),
        })
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    fn name(&self, key: &LockKey, suffix: &str) -> String {
        let mut name =
            String::with_capacity(self.prefix.len() + key.as_str().len() + suffix.len() + 4);
        name.push_str(&self.prefix);
        name.push(':');
        push_tag(&mut name, key);
        name.push(':');
        name.push_str(suffix);
        name
    }

    /// Whether `name` lies in this prefix's key space (`{prefix}:...`), where fencelock keeps
    /// its own keys.
    pub(crate) fn owns(&self, name: &str) -> bool {
        name.strip_prefix(self.prefix.as_str())
            .is_some_and(|rest| rest.starts_with(':'))
    }

    /// `{prefix}:{<key>}:lock`: the lock, a string `<owner>:<token>` with a PX expiry; while
    /// a read phase lives, `<owner>:<token>:read`, the phase's fence, expiring with the phase.
    pub(crate) fn lock(&self, key: &LockKey) -> String {
        self.name(key, "lock")
    }

    /// `{prefix}:{<key>}:token`: the key's token counter; never expires, never deleted.
    pub(crate) fn token(&self, key: &LockKey) -> String {
        self.name(key, "token")
    }

    /// `{prefix}:{<key>}:readers`: the readers of the key's read phase, a hash of each
    /// reader's expiry by the server's clock, expiring with its last reader.
    pub(crate) fn readers(&self, key: &LockKey) -> String {
        self.name(key, "readers")
    }

    /// `{prefix}:{<key>}:queue`: the waiters queued for the lock (one server only), a sorted
    /// set of waiter ids by arrival (the server's clock, in ms), expiring with its last place.
    pub(crate) fn queue(&self, key: &LockKey) -> String {
        self.name(key, "queue")
    }

    /// `{prefix}:{<key>}:places`: when each queued waiter's place lapses unless it tries
    /// again, a sorted set of waiter ids by the server's clock in ms.
    pub(crate) fn places(&self, key: &LockKey) -> String {
        self.name(key, "places")
    }

    /// `{prefix}:{<key>}:asks`: the ttl each queued waiter asked for (one server only), a
    /// hash of waiter id to milliseconds, for a release that hands the lock to it; expiring
    /// with its last place.
    pub(crate) fn asks(&self, key: &LockKey) -> String {
        self.name(key, "asks")
    }

    /// `{prefix}:{<key>}:released`: the pub/sub channel a release publishes on.
    pub(crate) fn channel(&self, key: &LockKey) -> String {
        self.name(key, "released")
    }

    /// `{prefix}:box:<id>`: a process's grant box (one server only), a list of the grants
    /// hand-offs made to its waiters, `<waiter> <token> <ms>`, which it pops with `BLMPOP`;
    /// expiring with the hand-off ttl of its last grant.
    pub(crate) fn grant_box(&self, id: &fencelock_core::OwnerId) -> String {
        format!("{}:box:{id}", self.prefix)
    }

    /// `{prefix}:{<resource>}:data`: the hash of a fenced-storage resource.
    pub(crate) fn data(&self, resource: &LockKey) -> String {
        self.name(resource, "data")
    }

    /// `{prefix}:{<resource>}:fence`: the fence record guarding a resource's keys of the
    /// user's own (a hash with fields `token` and `owner`).
    pub(crate) fn fence(&self, resource: &LockKey) -> String {
        self.name(resource, "fence")
    }
}

/// `{enc(key)}`: the hash tag every key name of `key` carries.
pub(crate) fn tag(key: &LockKey) -> String {
    let mut tag = String::with_capacity(key.as_str().len() + 2);
    push_tag(&mut tag, key);
    tag
}

/// Appends `{enc(key)}`, copying the runs between the characters it encodes whole (every
/// grant names five keys, so this is on each operation's path).
fn push_tag(name: &mut String, key: &LockKey) {
    name.push('{');
    for piece in key.as_str().split_inclusive(['%', '{', '}']) {
        if let Some(text) = piece.strip_suffix('%') {
            name.push_str(text);
            name.push_str("%25");
        } else if let Some(text) = piece.strip_suffix('{') {
            name.push_str(text);
            name.push_str("%7B");
        } else if let Some(text) = piece.strip_suffix('}') {
            name.push_str(text);
            name.push_str("%7D");
        } else {
            name.push_str(piece);
        }
    }
    name.push('}');
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn hash_tag(name: &str) -> &str {
        std::str::from_utf8(crate::slot::hashed_part(name.as_bytes())).unwrap()
    }

    #[test]
    fn plain_keys_are_readable() {
        let space = KeySpace::new("fencelock").unwrap();
        let key = LockKey::new("orders/42").unwrap();
        assert_eq!(space.lock(&key), "fencelock:{orders/42}:lock");
        assert_eq!(space.token(&key), "fencelock:{orders/42}:token");
        assert_eq!(space.readers(&key), "fencelock:{orders/42}:readers");
    }

    #[test]
    fn braces_keep_one_slot_and_stay_distinct() {
        let space = KeySpace::new("p").unwrap();
        let keys = ["}", "{", "{}", "a}b", "}{", "%7D", "%", "x}:token", "x"];
        let mut seen = std::collections::HashSet::new();
        for k in keys {
            let key = LockKey::new(k).unwrap();
            let (lock, token, data) = (space.lock(&key), space.token(&key), space.data(&key));
            let (fence, readers) = (space.fence(&key), space.readers(&key));
            assert_eq!(hash_tag(&lock), hash_tag(&token), "{k:?}");
            assert_eq!(hash_tag(&lock), hash_tag(&readers), "{k:?}");
            assert_eq!(hash_tag(&lock), hash_tag(&data), "{k:?}");
            assert_eq!(hash_tag(&lock), hash_tag(&fence), "{k:?}");
            assert_eq!(format!("{{{}}}", hash_tag(&lock)), tag(&key), "{k:?}");
            assert_ne!(hash_tag(&lock), lock, "{k:?} has no tag");
            for name in [lock, token, data, fence, readers] {
                assert!(seen.insert(name.clone()), "{name} named twice");
            }
        }
    }

    #[test]
    fn the_prefix_owns_its_key_space() {
        let space = KeySpace::new("fencelock").unwrap();
        assert!(space.owns("fencelock:{x}:fence"));
        assert!(space.owns("fencelock:"));
        assert!(!space.owns("fencelocks:x"));
        assert!(!space.owns("fencelock"));
        assert!(!space.owns("balance:{x}"));
    }

    #[test]
    fn bad_prefixes_are_refused() {
        for p in ["", "a{b", "a}", "a b", "a\nb"] {
            assert!(
                matches!(KeySpace::new(p), Err(Error::InvalidConfig { .. })),
                "{p:?}"
            );
        }
    }
}
