//! Work under a lock as one call: [`scope`] takes the lock, hands the work its fence, stops
//! the work when the lease is lost, and releases the lock after.

use std::future::{Future, IntoFuture};

use crate::composite::CompositeGuard;
use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::guard::LockGuard;
use crate::key::LockKey;
use crate::kinds::{Leadership, PermitGuard, ReadGuard, UpgradeableReadGuard, UpgradedGuard};

/// A held lock of any kind, as [`scope`] runs work under it: what the work is handed, when
/// the lock is lost, and its release.
pub trait Held: Send + Sized + 'static {
    /// What the work is handed: the fence to present to storage (a set's members' keys and
    /// fences, in key order).
    type Fences: Send + 'static;

    /// The fences of the held lock.
    fn fences(&self) -> Self::Fences;

    /// Completes when the lock is lost, with the [`Error::LeaseLost`] that says which key and
    /// why.
    fn lost_error(&self) -> impl Future<Output = Error> + Send + 'static;

    /// Releases the lock (resigns, for a leadership); `Ok(false)` when it was already lost.
    fn release_held(self) -> impl Future<Output = Result<bool>> + Send;
}

/// Runs `work` under the lock `request` asks for: waits for the grant as the request says,
/// calls `work` with the lock's fences, and releases the lock when the work is done.
///
/// When the lease is lost first, the work is dropped at its next `.await` (its writes that
/// reached storage were fenced, so a superseded one was refused there) and the call returns
/// [`Error::LeaseLost`] naming the key and the reason. A release that fails after the work
/// finished is logged and the lease lapses at its ttl; the work's output is returned all the
/// same. Dropping the call's future drops the work and releases the lock as a dropped guard
/// does.
///
/// Every request of fencelock's lock kinds works here: [`Locker::lock`](crate::Locker::lock),
/// [`Locker::lock_all`](crate::Locker::lock_all), the readers and writers of
/// [`RwLocker`](crate::RwLocker), [`Semaphore`](crate::Semaphore) permits and
/// [`Election`](crate::Election) campaigns.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fencelock_core::Result<()> {
/// use std::time::Duration;
/// use fencelock_core::{FencedStorageExt, Locker, scope};
/// use fencelock_memory::{MemoryLockBackend, MemoryStorage};
///
/// let storage = MemoryStorage::new();
/// let locker = Locker::new(MemoryLockBackend::new());
/// let request = locker.lock("nightly-report").ttl(Duration::from_secs(30));
/// scope(request, |fence| async move {
///     // Every write presents the fence: a holder superseded meanwhile is refused.
///     storage.write_key("nightly-report", fence, b"done").await
/// })
/// .await??; // the lock's error, then the work's own
/// # Ok(()) }
/// ```
pub async fn scope<R, G, F, Fut, T>(request: R, work: F) -> Result<T>
where
    R: IntoFuture<Output = Result<G>>,
    G: Held,
    F: FnOnce(G::Fences) -> Fut,
    Fut: Future<Output = T>,
{
    let held = request.await?;
    let lost = held.lost_error();
    let outcome = tokio::select! {
        // A loss seen before the work's next step wins: the work does not go on past it.
        biased;
        error = lost => Err(error),
        done = work(held.fences()) => Ok(done),
    };
    match held.release_held().await {
        Ok(_) => {}
        Err(e) if outcome.is_ok() => {
            tracing::warn!(error = %e, "releasing after a scope's work failed; the lease lapses at its ttl");
        }
        Err(_) => {}
    }
    outcome
}

/// The loss of the lock on `key`, as the error [`scope`] returns.
async fn lost_on(key: LockKey, lost: impl Future<Output = crate::LostReason>) -> Error {
    Error::lease_lost(&key, lost.await)
}

/// [`Held`] for guards of one fence: how to name the key of a loss, and the method that
/// gives the guard up.
macro_rules! held_with_one_fence {
    ($($guard:ty => |$g:ident| $key:expr, $give_up:ident;)*) => {$(
        impl Held for $guard {
            type Fences = Fence;

            fn fences(&self) -> Fence {
                self.fence()
            }

            fn lost_error(&self) -> impl Future<Output = Error> + Send + 'static {
                let $g = self;
                lost_on($key, self.lost())
            }

            fn release_held(self) -> impl Future<Output = Result<bool>> + Send {
                <$guard>::$give_up(self)
            }
        }
    )*};
}

held_with_one_fence! {
    LockGuard => |g| g.lease().key, release;
    ReadGuard => |g| g.lease().key, release;
    PermitGuard => |g| g.slot_key(), release;
    Leadership => |g| g.guard().lease().key, resign;
    UpgradeableReadGuard => |g| g.key().clone(), release;
    UpgradedGuard => |g| g.key().clone(), release;
}

impl Held for CompositeGuard {
    /// Every member's key and fence, in key order.
    type Fences = Vec<(LockKey, Fence)>;

    fn fences(&self) -> Vec<(LockKey, Fence)> {
        CompositeGuard::fences(self).collect()
    }

    fn lost_error(&self) -> impl Future<Output = Error> + Send + 'static {
        let lost = self.lost();
        async move {
            let member = lost.await;
            Error::lease_lost(&member.key, member.reason)
        }
    }

    fn release_held(self) -> impl Future<Output = Result<bool>> + Send {
        self.release()
    }
}
