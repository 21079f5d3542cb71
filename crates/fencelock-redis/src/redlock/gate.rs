//! One watcher per key per process: the requests of this process that wait for the same
//! Redlock key take turns at watching its nodes.
//!
//! A Redlock release cannot name the next waiter (the queues of independent nodes have no
//! common order), so it wakes every waiter of the key's channel on every node, and each
//! woken request sends a quorum try: on one hot key, one release set off one try per waiting
//! request of the process, all but one refused. With the gate, one request of the process
//! watches the nodes; the others wait for the gate, each at most its own pause, as they
//! would have waited for a wake-up. When the watcher is woken it leaves the gate to try, and
//! the next request starts watching, so a release sets off one try per process.
//!
//! The gate only decides which requests of this process wait on the nodes: a request never
//! holds anything while it waits, and one whose pause ends before its turn tries as a
//! polling waiter would, so neither safety nor progress depends on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use fencelock_core::LockKey;
use tokio::sync::OwnedMutexGuard;

type Turn = Arc<tokio::sync::Mutex<()>>;

/// The gates of one Redlock, one per key waited for.
#[derive(Debug, Default)]
pub(crate) struct Gates {
    keys: Mutex<HashMap<LockKey, Turn>>,
}

/// A request's place at the gate of one key; the entry goes when the last place does.
pub(crate) struct Place<'a> {
    gates: &'a Gates,
    key: LockKey,
    turn: Turn,
}

/// The turn to watch the nodes, held until dropped.
pub(crate) struct Watching {
    _guard: OwnedMutexGuard<()>,
}

impl Gates {
    fn keys(&self) -> MutexGuard<'_, HashMap<LockKey, Turn>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place at the gate of `key`.
    pub(crate) fn enter(&self, key: &LockKey) -> Place<'_> {
        let turn = self.keys().entry(key.clone()).or_default().clone();
        Place {
            gates: self,
            key: key.clone(),
            turn,
        }
    }

    /// How many keys have a gate (requests waiting on them).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.keys().len()
    }
}

impl Place<'_> {
    /// Waits for the turn to watch the nodes (cancel safe: a dropped wait takes no turn).
    pub(crate) async fn turn(&self) -> Watching {
        Watching {
            _guard: self.turn.clone().lock_owned().await,
        }
    }
}

impl Drop for Place<'_> {
    fn drop(&mut self) {
        let mut keys = self.gates.keys();
        // The map's handle and this place's: nobody else waits on the key.
        if Arc::strong_count(&self.turn) <= 2 {
            keys.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::time::Duration;

    use super::*;

    #[tokio::test]
    async fn one_request_at_a_time_watches_a_key_and_the_gate_goes_with_the_last() {
        let gates = Arc::new(Gates::default());
        let key = LockKey::new("k").unwrap();
        let first = gates.enter(&key);
        let watching = first.turn().await;
        let second = gates.enter(&key);
        // The second waits while the first watches...
        assert!(
            tokio::time::timeout(Duration::from_millis(50), second.turn())
                .await
                .is_err()
        );
        drop(watching);
        drop(first);
        // ...and has its turn once the first left.
        let watching = tokio::time::timeout(Duration::from_secs(5), second.turn())
            .await
            .unwrap();
        // Another key is not held up.
        let other = gates.enter(&LockKey::new("other").unwrap());
        drop(other.turn().await);
        drop(other);
        assert_eq!(gates.len(), 1);
        drop(watching);
        drop(second);
        assert_eq!(gates.len(), 0);
    }
}
