//! The leases a `Locker` has handed out and not yet finished releasing, for
//! [`Locker::shutdown`](crate::Locker::shutdown).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;

use crate::backend::LockBackend;
use crate::key::LockKey;
use crate::lease::Lease;
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
    /// The barging waiters a release of the same key may pass the lock to, by backend and
    /// key (DESIGN 4.0.2).
    takers: Mutex<HashMap<(usize, LockKey), Takers>>,
}

/// The most passes in a row on one key: then a release frees the lock, so the waiters of
/// other processes get their chance at it (DESIGN 4.0.2, *Passing within a process*).
pub(crate) const PASS_STREAK: u32 = 16;

/// The waiters of one key that a release may pass the lock to, in arrival order.
#[derive(Default)]
struct Takers {
    waiting: VecDeque<Taker>,
    /// Passes since the lock was last freed.
    streak: u32,
}

impl Takers {
    /// A new waiter at the back of the line, for a lease of `ttl`: the receiver of the lease
    /// passed to it.
    fn line_up(&mut self, ttl: Duration) -> oneshot::Receiver<Lease> {
        let (to, passed) = oneshot::channel();
        self.waiting.push_back(Taker { ttl, to });
        passed
    }
}

/// A barging waiter a release may pass the lock to: the ttl it asked for, and where the
/// passed lease goes.
pub(crate) struct Taker {
    pub(crate) ttl: Duration,
    pub(crate) to: oneshot::Sender<Lease>,
}

/// A waiter's offer to take a pass: yields the lease passed to it. Dropped with a lease
/// passed but not taken (its request was cancelled as the pass arrived), it releases that
/// lease in a task that [`Locker::shutdown`](crate::Locker::shutdown) waits for, so the lock
/// is not left held for the lease's ttl.
pub(crate) struct PassOffer {
    passed: oneshot::Receiver<Lease>,
    backend: Arc<dyn LockBackend>,
    live_leases: Arc<LiveLeases>,
}

impl Future for PassOffer {
    type Output = std::result::Result<Lease, oneshot::error::RecvError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.passed).poll(cx)
    }
}

impl Drop for PassOffer {
    fn drop(&mut self) {
        self.passed.close();
        let Ok(lease) = self.passed.try_recv() else {
            return;
        };
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let backend = self.backend.clone();
            self.live_leases.spawn_leave(&runtime, async move {
                if let Err(e) = backend.release(&lease).await {
                    tracing::debug!(error = %e, "releasing a pass nobody took failed");
                }
            });
        }
    }
}

/// Which backend value a waiter waits on: its address. Takers are kept by it and the key, so
/// a reader's or a permit's backend (another value over the same server) never takes
/// another's pass.
pub(crate) fn backend_id(backend: &Arc<dyn LockBackend>) -> usize {
    Arc::as_ptr(backend) as *const () as usize
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

    fn takers(&self) -> MutexGuard<'_, HashMap<(usize, LockKey), Takers>> {
        self.takers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Offers a barging waiter of `key` on `backend` as a taker of a pass, for a lease of
    /// `ttl`: the offer yields the passed lease, and dropping it withdraws it.
    pub(crate) fn offer_pass(
        self: &Arc<Self>,
        backend: &Arc<dyn LockBackend>,
        key: &LockKey,
        ttl: Duration,
    ) -> PassOffer {
        let passed = self.offer_taker(backend_id(backend), key, ttl);
        self.pass_offer(backend, passed)
    }

    /// [`offer_pass`](Self::offer_pass) if a waiter of `key` on `backend` is already offered
    /// (the key is held, and this locker's waiters line up for it): the new waiter goes
    /// behind them, without a try of its own first. `None` when nobody waits.
    pub(crate) fn offer_pass_behind_others(
        self: &Arc<Self>,
        backend: &Arc<dyn LockBackend>,
        key: &LockKey,
        ttl: Duration,
    ) -> Option<PassOffer> {
        let passed = {
            let mut takers = self.takers();
            let entry = takers.get_mut(&(backend_id(backend), key.clone()))?;
            entry.waiting.retain(|taker| !taker.to.is_closed());
            if entry.waiting.is_empty() {
                return None;
            }
            entry.line_up(ttl)
        };
        Some(self.pass_offer(backend, passed))
    }

    fn pass_offer(
        self: &Arc<Self>,
        backend: &Arc<dyn LockBackend>,
        passed: oneshot::Receiver<Lease>,
    ) -> PassOffer {
        PassOffer {
            passed,
            backend: backend.clone(),
            live_leases: self.clone(),
        }
    }

    /// [`offer_pass`](Self::offer_pass)'s place in line, by backend id: the receiver of the
    /// passed lease.
    fn offer_taker(
        &self,
        backend: usize,
        key: &LockKey,
        ttl: Duration,
    ) -> oneshot::Receiver<Lease> {
        let mut takers = self.takers();
        let entry = takers.entry((backend, key.clone())).or_default();
        entry.waiting.retain(|taker| !taker.to.is_closed());
        entry.line_up(ttl)
    }

    /// The first waiter of `key` on `backend` still offered, unless the key was passed
    /// [`PASS_STREAK`] times in a row; counted as a pass. `None` frees the lock: the streak
    /// starts again.
    pub(crate) fn next_taker(&self, backend: usize, key: &LockKey) -> Option<Taker> {
        let mut takers = self.takers();
        let at = (backend, key.clone());
        let entry = takers.get_mut(&at)?;
        let taker = if entry.streak < PASS_STREAK {
            std::iter::from_fn(|| entry.waiting.pop_front()).find(|taker| !taker.to.is_closed())
        } else {
            None
        };
        match taker {
            Some(taker) => {
                entry.streak += 1;
                Some(taker)
            }
            None => {
                entry.streak = 0;
                if entry.waiting.is_empty() {
                    takers.remove(&at);
                }
                None
            }
        }
    }

    /// `taker` was not passed the lock (the backend refused the pass): first in line again,
    /// and the lock is freed, so the streak starts again.
    pub(crate) fn not_passed(&self, backend: usize, key: &LockKey, taker: Taker) {
        let mut takers = self.takers();
        let entry = takers.entry((backend, key.clone())).or_default();
        entry.streak = 0;
        if !taker.to.is_closed() {
            entry.waiting.push_front(taker);
        }
    }

    /// Waits for the leaves in flight, at most [`LEAVES_BOUND`]; a leave started later is
    /// tracked again.
    pub(crate) async fn wait_for_leaves(&self) {
        self.leaves.close();
        let _ = tokio::time::timeout(LEAVES_BOUND, self.leaves.wait()).await;
        self.leaves.reopen();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_passed_at_most_the_streak_in_a_row_then_freed() {
        let live = LiveLeases::default();
        let backend = 1;
        let key = LockKey::new("hot").unwrap();
        let _offers: Vec<_> = (0..PASS_STREAK * 2 + 2)
            .map(|_| live.offer_taker(backend, &key, Duration::from_secs(1)))
            .collect();
        for _ in 0..PASS_STREAK {
            assert!(live.next_taker(backend, &key).is_some());
        }
        assert!(
            live.next_taker(backend, &key).is_none(),
            "passed more than the streak in a row"
        );
        assert!(
            live.next_taker(backend, &key).is_some(),
            "the streak did not start again after the lock was freed"
        );
    }

    #[test]
    fn takers_come_in_arrival_order_and_a_withdrawn_one_is_skipped() {
        let live = LiveLeases::default();
        let (backend, other) = (1, 2);
        let key = LockKey::new("k").unwrap();
        let first = live.offer_taker(backend, &key, Duration::from_secs(1));
        let second = live.offer_taker(backend, &key, Duration::from_secs(2));
        let _third = live.offer_taker(backend, &key, Duration::from_secs(3));
        assert!(
            live.next_taker(other, &key).is_none(),
            "another backend's release took this backend's waiter"
        );
        drop(first);
        let taker = live.next_taker(backend, &key).unwrap();
        assert_eq!(
            taker.ttl,
            Duration::from_secs(2),
            "a withdrawn waiter was taken"
        );
        live.not_passed(backend, &key, taker);
        assert_eq!(
            live.next_taker(backend, &key).unwrap().ttl,
            Duration::from_secs(2),
            "a waiter not passed to lost its turn"
        );
        drop(second);
    }
}
