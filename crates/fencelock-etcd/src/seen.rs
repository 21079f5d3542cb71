//! What this process last saw of each key's counter and lock, so that a grant can name the
//! counter's revision in its one transaction, and a waiter can watch from the revision at
//! which it saw the lock held.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use fencelock_core::{Error, FencingToken, LockKey, OwnerId, Result};

use crate::error::BACKEND;

/// Keys remembered at once; past that the table starts over (a forgotten key costs one more
/// round trip on its next grant, nothing else).
const REMEMBERED_KEYS: usize = 65_536;

/// The largest token a grant draws, 2^63 - 1: what a signed 64-bit column holds, so a fence
/// from etcd fits every fenced storage (PostgreSQL and MySQL `bigint`, ZooKeeper's and Redis's
/// signed counters), as every other backend's tokens do.
pub(crate) const LAST_TOKEN: u64 = i64::MAX.unsigned_abs();

/// The counter of a key as last seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct CounterSeen {
    /// The last token handed out (0: none yet).
    pub(crate) last: u64,
    /// The counter key's `mod_revision` (0: the key does not exist).
    pub(crate) mod_revision: i64,
}

impl CounterSeen {
    /// The token a grant of `key` draws from this counter: the last one + 1, or an error when
    /// the counter has none left. Tokens stop at [`LAST_TOKEN`], as on every other backend.
    pub(crate) fn next_token(&self, key: &LockKey) -> Result<FencingToken> {
        self.last
            .checked_add(1)
            .filter(|next| *next <= LAST_TOKEN)
            .and_then(FencingToken::new)
            .ok_or_else(|| Error::Backend {
                backend: BACKEND,
                message: format!(
                    "the token counter of {key:?} is exhausted (tokens stop at 2^63 - 1)"
                ),
                source: None,
            })
    }
}

/// The queued waiter behind a grant, as last seen: whom its release hands the lock to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Successor {
    /// Its place's key.
    pub(crate) place: Vec<u8>,
    /// Its place's create revision (its arrival).
    pub(crate) created: i64,
    /// The place lease the handed grant goes on.
    pub(crate) lease: i64,
    /// The waiter, owner of the handed grant.
    pub(crate) waiter: OwnerId,
}

#[derive(Debug, Clone, Copy, Default)]
struct KeySeen {
    counter: CounterSeen,
    /// A revision at which the lock was seen held, and by whom.
    held_at: Option<(i64, HeldBy)>,
}

/// Who held a lock when a grant found it taken: what a waiter watches for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeldBy {
    /// The exclusive lock key: its deletion frees the lock.
    Writer,
    /// A read phase: the deletion of its last reader key frees the lock.
    Readers,
    /// Nobody, but waiters are queued: the deletion of a place (a grant, a waiter that left or
    /// lapsed) may let a try that does not queue in.
    Queue,
}

/// The table, one per backend.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    keys: Mutex<HashMap<LockKey, KeySeen>>,
}

impl Seen {
    fn keys(&self) -> MutexGuard<'_, HashMap<LockKey, KeySeen>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The counter as last seen; a key never seen is guessed to have no counter yet.
    pub(crate) fn counter(&self, key: &LockKey) -> CounterSeen {
        self.keys().get(key).map(|k| k.counter).unwrap_or_default()
    }

    /// Records the counter as read or written at some revision.
    pub(crate) fn set_counter(&self, key: &LockKey, counter: CounterSeen) {
        let mut keys = self.keys();
        if keys.len() >= REMEMBERED_KEYS && !keys.contains_key(key) {
            keys.clear();
        }
        keys.entry(key.clone()).or_default().counter = counter;
    }

    /// Records the counter as this process wrote it: `last` at `revision`.
    pub(crate) fn wrote(&self, key: &LockKey, last: u64, revision: i64) {
        self.set_counter(
            key,
            CounterSeen {
                last,
                mod_revision: revision,
            },
        );
    }

    /// Records that the lock was held at `revision`, by `by`.
    pub(crate) fn set_held_at(&self, key: &LockKey, revision: i64, by: HeldBy) {
        let mut keys = self.keys();
        if keys.len() >= REMEMBERED_KEYS && !keys.contains_key(key) {
            keys.clear();
        }
        keys.entry(key.clone()).or_default().held_at = Some((revision, by));
    }

    /// The last revision at which the lock was seen held, if any.
    pub(crate) fn held_at(&self, key: &LockKey) -> Option<(i64, HeldBy)> {
        self.keys().get(key).and_then(|k| k.held_at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_stop_at_the_largest_signed_64_bit_value() {
        let key = LockKey::new("k").unwrap_or_else(|_| unreachable!("a valid key"));
        let near = CounterSeen {
            last: LAST_TOKEN - 1,
            mod_revision: 1,
        };
        assert_eq!(
            near.next_token(&key).ok().map(FencingToken::get),
            Some(LAST_TOKEN)
        );
        for last in [LAST_TOKEN, LAST_TOKEN + 1, u64::MAX] {
            let used_up = CounterSeen {
                last,
                mod_revision: 1,
            };
            assert!(used_up.next_token(&key).is_err(), "{last}");
        }
    }
}
