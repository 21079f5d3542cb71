//! The leases a `Locker` has handed out and not yet finished releasing, for
//! [`Locker::shutdown`](crate::Locker::shutdown).

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::held::{Held, Registration};
use crate::supervisors::Supervisors;

/// Every lease from one locker (and its clones) until its release finished.
#[derive(Default)]
pub(crate) struct Registry {
    live: Mutex<HashMap<u64, Arc<Held>>>,
    next_id: AtomicU64,
    /// The watchdogs of every guard of this locker, driven by one task per runtime.
    pub(crate) supervisors: Supervisors,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("live", &self.len())
            .finish()
    }
}

impl Registry {
    fn live(&self) -> MutexGuard<'_, HashMap<u64, Arc<Held>>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A registration for a lease about to be [`insert`](Self::insert)ed.
    pub(crate) fn register(self: &Arc<Self>) -> Registration {
        Registration {
            registry: Arc::downgrade(self),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub(crate) fn insert(&self, id: u64, held: Arc<Held>) {
        self.live().insert(id, held);
    }

    pub(crate) fn remove(&self, id: u64) {
        self.live().remove(&id);
    }

    /// Takes every lease off the list.
    pub(crate) fn drain(&self) -> Vec<Arc<Held>> {
        self.live().drain().map(|(_, held)| held).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.live().len()
    }
}
