//! `LockGuard`: a held lease, its watchdog and its lost signal.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::backend::{LockBackend, validate_ttl};
use crate::error::{Error, LostReason, Result};
use crate::fence::{Fence, FencingToken};
use crate::lease::Lease;
use crate::lease_state::{LeaseState, Renewal};
use crate::live_leases::LiveLeases;
use crate::supervisors::Watch;
use crate::watchdog::supervise;

/// A held lock. Present [`fence`](Self::fence) with every storage operation.
///
/// While the guard lives its watchdog renews the lease at about a third of its validity
/// (unless the request turned the watchdog off; one task per [`Locker`](crate::Locker) drives the
/// watchdogs of all its guards) and fires [`lost`](Self::lost) when the lease
/// is lost or cannot be renewed before `valid_until`. A renewal never re-creates a lock that
/// is gone.
///
/// # Ending a guard
///
/// - [`release`](Self::release)`.await` releases the lock and says whether it was still held.
///   Prefer it: it is the only way to know the release happened.
/// - **Dropping** the guard never blocks. It stops the watchdog, fires `lost()`, and spawns the
///   release as a task on the current Tokio runtime. That task is best effort: if there is no
///   runtime, or the runtime shuts down before the task has finished (a guard dropped as
///   `main` returns, a runtime dropped right after), the release never reaches the backend and
///   the lock stays held until its ttl runs out. Nothing is unsafe then (the lease expires,
///   the fence still refuses the old holder), but the next holder waits up to a ttl.
/// - [`Locker::shutdown`](crate::Locker::shutdown)`.await`, before the runtime ends,
///   releases every guard of that locker still alive and waits for the releases that drops
///   started, so nothing is left to the ttl.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fencelock_core::Result<()> {
/// use std::time::Duration;
/// use fencelock_core::{FencedStorageExt, Locker};
/// use fencelock_memory::{MemoryLockBackend, MemoryStorage};
///
/// let locker = Locker::new(MemoryLockBackend::new());
/// let storage = MemoryStorage::new();
/// let guard = locker.lock("report/daily").ttl(Duration::from_secs(30)).await?;
/// tokio::select! {
///     // The work, every write fenced with this grant's fence...
///     written = storage.write_key("report/daily", guard.fence(), b"done") => written?,
///     // ...abandoned the moment the lease is lost.
///     reason = guard.lost() => return Err(fencelock_core::Error::lease_lost(&guard.lease().key, reason)),
/// }
/// assert!(guard.is_held());
/// assert!(guard.release().await?, "released while still held");
/// # Ok(()) }
/// ```
pub struct LockGuard {
    held: Arc<LeaseState>,
    /// Ends this guard's supervision (watchdog and backend loss watch), wherever it is polled.
    supervision: CancellationToken,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lease", &self.held.lease())
            .field("lost", &self.held.lost.is_cancelled())
            .finish()
    }
}

impl LockGuard {
    /// Wraps `lease` and starts its supervisor on the current Tokio runtime. The guard
    /// belongs to no [`Locker`](crate::Locker), so no `shutdown` releases it.
    ///
    /// # Panics
    /// When called outside a Tokio runtime.
    pub fn new(backend: Arc<dyn LockBackend>, lease: Lease, watchdog: bool) -> Self {
        let held = Arc::new(LeaseState::new(backend, lease, None));
        let (supervision, watch) = Self::supervision(&held, watchdog);
        tokio::spawn(watch);
        LockGuard { held, supervision }
    }

    /// A guard on the locker's list of live leases, for its locker's `shutdown`.
    pub(crate) fn registered(
        backend: Arc<dyn LockBackend>,
        lease: Lease,
        watchdog: bool,
        live_leases: &Arc<LiveLeases>,
    ) -> Self {
        let registration = live_leases.register();
        let id = registration.id;
        let held = Arc::new(LeaseState::new(backend, lease, Some(registration)));
        live_leases.insert(id, held.clone());
        let (supervision, watch) = Self::supervision(&held, watchdog);
        live_leases.supervisors.watch(watch);
        LockGuard { held, supervision }
    }

    /// `held`'s supervision, and the token that ends it.
    fn supervision(held: &Arc<LeaseState>, watchdog: bool) -> (CancellationToken, Watch) {
        let supervision = CancellationToken::new();
        let stop = supervision.clone();
        let held = held.clone();
        let watch = Box::pin(async move {
            tokio::select! {
                // In order: a stopped guard's watch ends without polling the rest.
                biased;
                _ = stop.cancelled() => {}
                _ = supervise(held, watchdog) => {}
            }
        });
        (supervision, watch)
    }

    /// The current lease (renewals update its `valid_until`).
    pub fn lease(&self) -> Lease {
        self.held.lease()
    }

    /// The grant's fencing token.
    pub fn token(&self) -> FencingToken {
        self.held.lease().token
    }

    /// The fence to present to a [`FencedStorage`](crate::FencedStorage).
    pub fn fence(&self) -> Fence {
        self.held.lease().fence()
    }

    /// Whether the lease is still held as far as this process can tell: not lost, and the
    /// local deadline not passed. Data safety never rests on this; the fence does that.
    pub fn is_held(&self) -> bool {
        !self.held.lost.is_cancelled() && self.held.lease().is_valid()
    }

    /// Completes when the lease is lost, with the reason.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let held = self.held.clone();
        async move {
            held.lost.cancelled().await;
            held.reason()
        }
    }

    /// A token cancelled when the lease is lost, for `select!` or for handing to subtasks.
    pub fn lost_token(&self) -> CancellationToken {
        self.held.lost.child_token()
    }

    /// Renews the lease for `ttl` from now. [`Error::LeaseLost`] if it is no longer held; the
    /// lost signal fires then too.
    ///
    /// Renewals of one guard, this one and the watchdog's, are sent one at a time: each waits
    /// for the previous reply to be stored, so the guard's deadline is always that of the last
    /// renewal the server processed. The renewal runs in a task of its own: cancelling this
    /// future stops the wait, not the renewal, whose reply is still stored when it comes.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        validate_ttl(ttl, &self.held.backend.capabilities())?;
        let lease = self.held.lease();
        let span = tracing::debug_span!(
            "fencelock.extend",
            backend = self.held.backend.name(),
            key = %lease.key,
            token = lease.token.get(),
            ttl_ms = ttl.as_millis() as u64,
        );
        let held = self.held.clone();
        let renewal =
            tokio::spawn(async move { held.renew(Renewal::Manual(ttl)).await }.instrument(span));
        match renewal.await {
            Ok(outcome) => outcome.map(drop),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => Err(Error::Backend {
                backend: self.held.backend.name(),
                message: "the renewal was cancelled: the runtime is shutting down".into(),
                source: None,
            }),
        }
    }

    /// Releases the lock. `Ok(false)` if it had already been lost, or released by
    /// [`Locker::shutdown`](crate::Locker::shutdown) (whose release this then waits for).
    ///
    /// The guard is marked lost ([`LostReason::Released`], unless it was lost before) before
    /// the release is sent, so [`lost`](Self::lost) fires and [`is_held`](Self::is_held) turns
    /// false even if this future is cancelled; a cancelled release is finished in the
    /// background on the current runtime.
    pub async fn release(self) -> Result<bool> {
        self.supervision.cancel();
        if !self.held.claim_release() {
            self.held.wait_released().await;
            return Ok(false);
        }
        let unfinished = ReleaseOnCancel(Some(self.held.clone()));
        let released = self.held.release().await;
        unfinished.finished();
        released
    }
}

/// Finishes a release in the background if the future awaiting it is dropped first.
struct ReleaseOnCancel(Option<Arc<LeaseState>>);

impl ReleaseOnCancel {
    fn finished(mut self) {
        self.0 = None;
    }
}

impl Drop for ReleaseOnCancel {
    fn drop(&mut self) {
        if let Some(held) = self.0.take() {
            held.release_in_background();
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        self.supervision.cancel();
        if self.held.claim_release() {
            self.held.release_in_background();
        }
    }
}
