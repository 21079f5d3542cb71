//! Redis key names: one hash tag per user key, so a lock, its counter and its channel share a
//! Redis Cluster slot.

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
        let key = key.as_str();
        let mut name = String::with_capacity(self.prefix.len() + key.len() + suffix.len() + 4);
        name.push_str(&self.prefix);
        name.push_str(":{");
        for c in key.chars() {
            match c {
                '%' => name.push_str("%25"),
                '{' => name.push_str("%7B"),
                '}' => name.push_str("%7D"),
                c => name.push(c),
            }
        }
        name.push_str("}:");
        name.push_str(suffix);
        name
    }

    /// `{prefix}:{<key>}:lock`: the lock, a string `<owner>:<token>` with a PX expiry.
    pub(crate) fn lock(&self, key: &LockKey) -> String {
        self.name(key, "lock")
    }

    /// `{prefix}:{<key>}:token`: the key's token counter; never expires, never deleted.
    pub(crate) fn token(&self, key: &LockKey) -> String {
        self.name(key, "token")
    }

    /// `{prefix}:{<key>}:released`: the pub/sub channel a release publishes on.
    pub(crate) fn channel(&self, key: &LockKey) -> String {
        self.name(key, "released")
    }

    /// `{prefix}:{<resource>}:data`: the hash of a fenced-storage resource.
    pub(crate) fn data(&self, resource: &LockKey) -> String {
        self.name(resource, "data")
    }
}

/// The hash tag Redis Cluster would hash for `name`: the text between the first `{` and the
/// next `}`, or the whole name when there is none or it is empty.
#[cfg(test)]
fn hash_tag(name: &str) -> &str {
    if let Some(open) = name.find('{')
        && let Some(len) = name[open + 1..].find('}')
        && len > 0
    {
        return &name[open + 1..open + 1 + len];
    }
    name
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn plain_keys_are_readable() {
        let space = KeySpace::new("fencelock").unwrap();
        let key = LockKey::new("orders/42").unwrap();
        assert_eq!(space.lock(&key), "fencelock:{orders/42}:lock");
        assert_eq!(space.token(&key), "fencelock:{orders/42}:token");
    }

    #[test]
    fn braces_keep_one_slot_and_stay_distinct() {
        let space = KeySpace::new("p").unwrap();
        let keys = ["}", "{", "{}", "a}b", "}{", "%7D", "%", "x}:token", "x"];
        let mut seen = std::collections::HashSet::new();
        for k in keys {
            let key = LockKey::new(k).unwrap();
            let (lock, token, data) = (space.lock(&key), space.token(&key), space.data(&key));
            assert_eq!(hash_tag(&lock), hash_tag(&token), "{k:?}");
            assert_eq!(hash_tag(&lock), hash_tag(&data), "{k:?}");
            assert_ne!(hash_tag(&lock), lock, "{k:?} has no tag");
            for name in [lock, token, data] {
                assert!(seen.insert(name.clone()), "{name} named twice");
            }
        }
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
