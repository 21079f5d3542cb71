//! A map split over independently locked shards.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::{Mutex, MutexGuard, PoisonError};

use fencelock_core::LockKey;

const SHARDS: usize = 16;

/// foldhash, seeded per process: a few nanoseconds per key where SipHash took most of an
/// uncontended acquire + release, and still randomly seeded so keys cannot be chosen to collide.
type RandomState = foldhash::fast::RandomState;

/// One locked shard.
pub(crate) type Guard<'a, V> = MutexGuard<'a, HashMap<LockKey, V, RandomState>>;

/// `SHARDS` maps keyed by [`LockKey`]; a key always lives in the same shard.
#[derive(Debug)]
pub(crate) struct Shards<V> {
    hasher: RandomState,
    shards: Box<[Mutex<HashMap<LockKey, V, RandomState>>]>,
}

impl<V> Shards<V> {
    pub(crate) fn new() -> Self {
        Shards {
            hasher: RandomState::default(),
            shards: (0..SHARDS)
                .map(|_| Mutex::new(HashMap::with_hasher(RandomState::default())))
                .collect(),
        }
    }

    /// Locks the shard of `key`. Callers keep the guard for a few map operations only and
    /// never across an `.await`. A poisoned shard is still consistent: every critical section
    /// leaves the map valid between statements, so poisoning is ignored.
    pub(crate) fn lock(&self, key: &LockKey) -> MutexGuard<'_, HashMap<LockKey, V, RandomState>> {
        self.shards[self.index(key)]
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on the value of `key` (a default one made if missing) under its shard's lock.
    /// Looks the key up before inserting, which would clone it on every call.
    pub(crate) fn update<R>(&self, key: &LockKey, f: impl FnOnce(&mut V) -> R) -> R
    where
        V: Default,
    {
        let mut shard = self.lock(key);
        let value = match shard.get_mut(key) {
            Some(value) => value,
            None => shard.entry(key.clone()).or_default(),
        };
        f(value)
    }

    /// Locks the shards of every key of `keys` at once, each shard once, in the shards' own
    /// order (as [`all`](Self::all) does, so two callers never wait for each other in a
    /// circle); with, for each key, the position of its shard's guard.
    pub(crate) fn lock_many(&self, keys: &[LockKey]) -> (Vec<Guard<'_, V>>, Vec<usize>) {
        let of_key: Vec<usize> = keys.iter().map(|key| self.index(key)).collect();
        let mut indices = of_key.clone();
        indices.sort_unstable();
        indices.dedup();
        let guards = indices
            .iter()
            .map(|&index| {
                self.shards[index]
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
            })
            .collect();
        let positions = of_key
            .iter()
            // Every index is in `indices`, which was built from them.
            .map(|index| indices.binary_search(index).unwrap_or_default())
            .collect();
        (guards, positions)
    }

    /// The shard of `key`; the modulo keeps it in bounds, so indexing cannot panic.
    fn index(&self, key: &LockKey) -> usize {
        (self.hasher.hash_one(key) as usize) % self.shards.len()
    }

    /// Locks each shard in turn.
    pub(crate) fn all(
        &self,
    ) -> impl Iterator<Item = MutexGuard<'_, HashMap<LockKey, V, RandomState>>> {
        self.shards
            .iter()
            .map(|shard| shard.lock().unwrap_or_else(PoisonError::into_inner))
    }
}
