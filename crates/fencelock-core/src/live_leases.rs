//! The leases a `Locker` has handed out and not yet finished releasing, for
//! [`Locker::shutdown`](crate::Locker::shutdown).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio_util::task::TaskTracker;

use crate::lease_state::{LeaseState, Registration};
use crate::supervisors::Supervisors;

/// Every lease from one locker (and its clones) until its release finished.
#[derive(Default)]
pub(crate) struct LiveLeases {
    live: Mutex<HashMap<u64, Arc<LeaseState>>>,
    next_id: AtomicU64,
    /// The watchdogs of every guard of this locker, driven by one task per runtime.
    pub(crate) supervisors: Supervisors,
    /// Queue leaves in flight: those of requests dropped while they waited, which
    /// [`Locker::shutdown`](crate::Locker::shutdown) waits for.
    leaves: TaskTracker,
}

/// The longest [`Locker::shutdown`](crate::Locker::shutdown) waits for queue leaves in
/// flight: each is one round trip to a server that answers; one that does not answer would
/// keep a leave for its whole call time-out, and its place lapses by itself anyway.
pub(crate) const LEAVES_BOUND: Duration = Duration::from_secs(1);

impl fmt::Debug for LiveLeases {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LiveLeases")
            .field("live", &self.len())
            .finish()
    }
}

impl LiveLeases {
    fn live(&self) -> MutexGuard<'_, HashMap<u64, Arc<LeaseState>>> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A registration for a lease about to be [`insert`](Self::insert)ed.
    pub(crate) fn register(self: &Arc<Self>) -> Registration {
        Registration {
            live_leases: Arc::downgrade(self),
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
        }
    }

    pub(crate) fn insert(&self, id: u64, held: Arc<LeaseState>) {
        self.live().insert(id, held);
    }

    pub(crate) fn remove(&self, id: u64) {
        self.live().remove(&id);
    }

    /// Takes every lease off the list.
    pub(crate) fn drain(&self) -> Vec<Arc<LeaseState>> {
        self.live().drain().map(|(_, held)| held).collect()
    }

    pub(crate) fn len(&self) -> usize {
        self.live().len()
    }

    /// Runs `leave` (a dropped request giving its queue place up) on `runtime`, tracked so
    /// that [`wait_for_leaves`](Self::wait_for_leaves) can wait for it.
    pub(crate) fn spawn_leave(
        &self,
        runtime: &tokio::runtime::Handle,
        leave: impl Future<Output = ()> + Send + 'static,
    ) {
        self.leaves.spawn_on(leave, runtime);
    }

    /// Waits for the leaves in flight, at most [`LEAVES_BOUND`]; a leave started later is
    /// tracked again.
    pub(crate) async fn wait_for_leaves(&self) {
        self.leaves.close();
        let _ = tokio::time::timeout(LEAVES_BOUND, self.leaves.wait()).await;
        self.leaves.reopen();
    }
}
