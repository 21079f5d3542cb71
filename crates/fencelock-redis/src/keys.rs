//! Redis key names: one hash tag per user key, so a lock, its counter, its read phase and its
//! channel share a Redis Cluster slot.

use fencelock_core::{COMPANION_SUFFIX, Error, LockKey, Result};

/// The prefix used when none is configured.
pub(crate) const DEFAULT_PREFIX: &str = "fencelock";

/// Names the Redis keys of one prefix.
///
/// A user key `k` becomes the hash tag `{enc(k)}`, where `enc` percent-encodes `%`, `{` and
/// `}` (as `%25`, `%7B`, `%7D`) and leaves everything else as it is. Redis hashes the text
/// between the first `{` and the next `}`; since the prefix may not contain braces and
/// `enc(k)` contains no `}`, that text is exactly `enc(k)`, never empty, so every key of `k`
/// lands in the same slot. `enc` is injective, so distinct keys never share names.
///
/// On a cluster ([`clustered`](Self::clustered)) an upgradeable reader's companion lock
/// `k/upgrader` is named `{prefix}:{enc(k)}/upgrader:...` (and its own companion
/// `{enc(k)}/upgrader/upgrader`): its keys share `k`'s slot, so a failover loses or keeps the
/// two together, as one server would (DESIGN 5.2, *The companion's slot*). Names stay
/// injective: the tag holds the key less every trailing `/upgrader` (never empty), the run of
/// `/upgrader` between the tag's closing brace and the next `:` holds the rest, and `enc` is
/// injective.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeySpace {
    prefix: String,
    companions_in_base_slot: bool,
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
            companions_in_base_slot: false,
        })
    }

    /// The key space of a cluster: a companion lock's keys in its key's slot (see the type's
    /// documentation).
    pub(crate) fn clustered(prefix: &str) -> Result<Self> {
        Ok(KeySpace {
            companions_in_base_slot: true,
            ..KeySpace::new(prefix)?
        })
    }

    pub(crate) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The name of a lock's key: a companion's in its key's slot on a cluster.
    fn name(&self, key: &LockKey, suffix: &str) -> String {
        let text = key.as_str();
        if !self.companions_in_base_slot {
            return self.named(text, "", suffix);
        }
        // A companion's companion too: every trailing suffix goes after the tag.
        let mut base = text;
        while let Some(rest) = base.strip_suffix(COMPANION_SUFFIX)
            && !rest.is_empty()
        {
            base = rest;
        }
        self.named(base, &text[base.len()..], suffix)
    }

    /// `{prefix}:{enc(tagged)}<after>:<suffix>`.
    fn named(&self, tagged: &str, after: &str, suffix: &str) -> String {
        let mut name = String::with_capacity(
            self.prefix.len() + tagged.len() + after.len() + suffix.len() + 4,
        );
        name.push_str(&self.prefix);
        name.push(':');
        push_tag(&mut name, tagged);
        name.push_str(after);
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
        self.named(resource.as_str(), "", "data")
    }

    /// `{prefix}:{<resource>}:fence`: the fence record guarding a resource's keys of the
    /// user's own (a hash with fields `token` and `owner`).
    pub(crate) fn fence(&self, resource: &LockKey) -> String {
        self.named(resource.as_str(), "", "fence")
    }
}

/// `{enc(key)}`: the hash tag every key name of `key` carries.
pub(crate) fn tag(key: &LockKey) -> String {
    let mut tag = String::with_capacity(key.as_str().len() + 2);
    push_tag(&mut tag, key.as_str());
    tag
}

/// Appends `{enc(key)}`, copying the runs between the characters it encodes whole (every
/// grant names five keys, so this is on each operation's path).
fn push_tag(name: &mut String, key: &str) {
    name.push('{');
    for piece in key.split_inclusive(['%', '{', '}']) {
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
    fn a_companion_shares_its_keys_slot_on_a_cluster() {
        let clustered = KeySpace::clustered("p").unwrap();
        let plain = KeySpace::new("p").unwrap();
        let companion = LockKey::new("orders/42/upgrader").unwrap();
        assert_eq!(clustered.lock(&companion), "p:{orders/42}/upgrader:lock");
        assert_eq!(plain.lock(&companion), "p:{orders/42/upgrader}:lock");
        let mut named = std::collections::HashMap::new();
        for k in [
            "x",
            "x/upgrader",
            "x/upgrader/upgrader",
            "/upgrader",
            "a}",
            "%",
            "a/b",
        ] {
            let key = LockKey::new(k).unwrap();
            let companion = LockKey::new(format!("{k}{COMPANION_SUFFIX}")).unwrap();
            assert_eq!(
                hash_tag(&clustered.lock(&companion)),
                hash_tag(&clustered.lock(&key)),
                "{k:?}"
            );
            for key in [key, companion] {
                let names = [
                    clustered.lock(&key),
                    clustered.token(&key),
                    clustered.readers(&key),
                    clustered.queue(&key),
                    clustered.channel(&key),
                ];
                for name in names {
                    let earlier = named.insert(name.clone(), key.as_str().to_owned());
                    assert!(
                        earlier.as_deref().is_none_or(|e| e == key.as_str()),
                        "{name} names {key} and {earlier:?}"
                    );
                }
                // A resource's storage keys are named as everywhere else.
                assert_eq!(clustered.data(&key), plain.data(&key));
                assert_eq!(clustered.fence(&key), plain.fence(&key));
            }
        }
        // A key that is only the suffix has no key to share a slot with.
        let bare = LockKey::new(COMPANION_SUFFIX).unwrap();
        assert_eq!(clustered.lock(&bare), plain.lock(&bare));
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
