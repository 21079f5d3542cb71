//! `LockGuard`: a held lease, its watchdog and its lost signal.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until, timeout_at};
use tokio_util::sync::CancellationToken;

use crate::backend::{LockBackend, validate_ttl};
use crate::error::{Error, LostReason, Result};
use crate::fence::{Fence, FencingToken};
use crate::lease::Lease;

struct Shared {
    backend: Arc<dyn LockBackend>,
    lease: Mutex<Lease>,
    lost: CancellationToken,
    reason: OnceLock<LostReason>,
    changed: Notify,
}

impl Shared {
    fn lease(&self) -> Lease {
        self.lease
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set_lease(&self, lease: Lease) {
        *self.lease.lock().unwrap_or_else(PoisonError::into_inner) = lease;
        self.changed.notify_one();
    }

    fn mark_lost(&self, reason: LostReason) {
        let _ = self.reason.set(reason);
        self.lost.cancel();
    }

    fn reason(&self) -> LostReason {
        self.reason.get().copied().unwrap_or(LostReason::NotHeld)
    }
}

/// A held lock. Present [`fence`](Self::fence) with every storage operation.
///
/// While the guard lives a background task renews the lease at about a third of its ttl
/// (unless the request turned the watchdog off) and fires [`lost`](Self::lost) when the lease
/// is lost or cannot be renewed before `valid_until`. A renewal never re-creates a lock that
/// is gone. Dropping the guard never blocks: it spawns a best-effort release on the current
/// Tokio runtime, if there is one; otherwise the lock lapses after its ttl.
pub struct LockGuard {
    shared: Arc<Shared>,
    supervisor: Option<JoinHandle<()>>,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("lease", &self.shared.lease())
            .field("lost", &self.shared.lost.is_cancelled())
            .finish()
    }
}

impl LockGuard {
    /// Wraps `lease` and starts its supervisor on the current Tokio runtime.
    ///
    /// # Panics
    /// When called outside a Tokio runtime.
    pub fn new(backend: Arc<dyn LockBackend>, lease: Lease, watchdog: bool) -> Self {
        let shared = Arc::new(Shared {
            backend,
            lease: Mutex::new(lease),
            lost: CancellationToken::new(),
            reason: OnceLock::new(),
            changed: Notify::new(),
        });
        let supervisor = tokio::spawn(supervise(shared.clone(), watchdog));
        LockGuard {
            shared,
            supervisor: Some(supervisor),
        }
    }

    /// The current lease (renewals update its `valid_until`).
    pub fn lease(&self) -> Lease {
        self.shared.lease()
    }

    /// The grant's fencing token.
    pub fn token(&self) -> FencingToken {
        self.shared.lease().token
    }

    /// The fence to present to a [`FencedStorage`](crate::FencedStorage).
    pub fn fence(&self) -> Fence {
        self.shared.lease().fence()
    }

    /// Whether the lease is still held as far as this process can tell: not lost, and the
    /// local deadline not passed. Data safety never rests on this; the fence does that.
    pub fn is_held(&self) -> bool {
        !self.shared.lost.is_cancelled() && self.shared.lease().is_valid()
    }

    /// Completes when the lease is lost, with the reason.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        let shared = self.shared.clone();
        async move {
            shared.lost.cancelled().await;
            shared.reason()
        }
    }

    /// A token cancelled when the lease is lost, for `select!` or for handing to subtasks.
    pub fn lost_token(&self) -> CancellationToken {
        self.shared.lost.child_token()
    }

    /// Renews the lease for `ttl` from now. [`Error::LeaseLost`] if it is no longer held; the
    /// lost signal fires then too.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        validate_ttl(ttl, &self.shared.backend.capabilities())?;
        let lease = self.shared.lease();
        match self.shared.backend.extend(&lease, ttl).await {
            Ok(renewed) => {
                self.shared.set_lease(renewed);
                Ok(())
            }
            Err(e) => {
                if let Error::LeaseLost { reason, .. } = &e {
                    self.shared.mark_lost(*reason);
                }
                Err(e)
            }
        }
    }

    /// Releases the lock. `Ok(false)` if it had already been lost.
    pub async fn release(mut self) -> Result<bool> {
        if let Some(task) = self.supervisor.take() {
            task.abort();
        }
        let lease = self.shared.lease();
        let span = tracing::debug_span!(
            "fencelock.release",
            backend = self.shared.backend.name(),
            key = %lease.key,
            token = lease.token.get(),
        );
        let _enter = span.enter();
        let released = self.shared.backend.release(&lease).await;
        self.shared.mark_lost(LostReason::Released);
        tracing::debug!(outcome = ?released.as_ref().ok(), "released");
        released
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(task) = self.supervisor.take() else {
            return;
        };
        task.abort();
        self.shared.mark_lost(LostReason::Released);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let backend = self.shared.backend.clone();
            let lease = self.shared.lease();
            runtime.spawn(async move {
                if let Err(e) = backend.release(&lease).await {
                    tracing::debug!(key = %lease.key, error = %e, "release on drop failed");
                }
            });
        }
    }
}

/// Renews the lease at about ttl/3 (if `renew`), and fires the lost signal when it is lost or
/// its deadline passes unrenewed.
async fn supervise(shared: Arc<Shared>, renew: bool) {
    loop {
        let lease = shared.lease();
        let wake_at = if renew {
            renew_at(&lease)
        } else {
            lease.valid_until
        };
        tokio::select! {
            _ = sleep_until(wake_at) => {}
            _ = shared.changed.notified() => continue,
        }
        if !renew {
            if !shared.lease().is_valid() {
                shared.mark_lost(LostReason::DeadlinePassed);
                return;
            }
            continue;
        }
        if let Err(reason) = renew_once(&shared).await {
            tracing::debug!(key = %lease.key, %reason, "lease lost");
            shared.mark_lost(reason);
            return;
        }
    }
}

/// About a third of the ttl after the grant.
fn renew_at(lease: &Lease) -> Instant {
    let before_deadline = lease.ttl.saturating_mul(2) / 3;
    lease
        .valid_until
        .checked_sub(before_deadline)
        .unwrap_or_else(Instant::now)
}

/// Renews once, retrying failed attempts until the lease's deadline.
async fn renew_once(shared: &Shared) -> std::result::Result<(), LostReason> {
    loop {
        let lease = shared.lease();
        if !lease.is_valid() {
            return Err(LostReason::DeadlinePassed);
        }
        let span = tracing::debug_span!(
            "fencelock.extend",
            backend = shared.backend.name(),
            key = %lease.key,
            token = lease.token.get(),
        );
        let attempt = timeout_at(lease.valid_until, shared.backend.extend(&lease, lease.ttl));
        match tracing::Instrument::instrument(attempt, span).await {
            Ok(Ok(renewed)) => {
                *shared.lease.lock().unwrap_or_else(PoisonError::into_inner) = renewed;
                return Ok(());
            }
            Ok(Err(Error::LeaseLost { reason, .. })) => return Err(reason),
            Ok(Err(e)) => {
                tracing::debug!(key = %lease.key, error = %e, "renewal failed, retrying");
                let pause =
                    (lease.ttl / 10).clamp(Duration::from_millis(1), Duration::from_secs(1));
                sleep_until((Instant::now() + pause).min(lease.valid_until)).await;
            }
            Err(_) => return Err(LostReason::DeadlinePassed),
        }
    }
}
