//! Lock kinds beyond one exclusive lock: read/write locks, semaphores, leader election.
//!
//! Each is a [`LockGuard`](crate::LockGuard) underneath, so waiting, the watchdog, `lost()`,
//! drop and [`Locker::shutdown`](crate::Locker::shutdown) behave as they do for
//! [`Locker`](crate::Locker). The adapters in this module present each kind to the locker's
//! request machinery as a [`LockBackend`](crate::LockBackend) of its own.

/// The option setters of [`LockRequest`](crate::LockRequest), forwarded by a request type
/// that wraps one in its `request` field.
macro_rules! forward_request_options {
    ($request:ident) => {
        impl $request {
            /// The lease ttl.
            pub fn ttl(mut self, ttl: std::time::Duration) -> Self {
                self.request = self.request.ttl(ttl);
                self
            }

            /// How long to wait; zero tries once, [`Duration::MAX`](std::time::Duration::MAX)
            /// waits without a bound.
            pub fn wait(mut self, wait: std::time::Duration) -> Self {
                self.request = self.request.wait(wait);
                self
            }

            /// Waits without a bound (until granted, a non-retryable error, or the future is
            /// dropped).
            pub fn wait_forever(mut self) -> Self {
                self.request = self.request.wait_forever();
                self
            }

            /// Whether the guard renews the lease in the background.
            pub fn watchdog(mut self, on: bool) -> Self {
                self.request = self.request.watchdog(on);
                self
            }

            /// The pauses between tries.
            pub fn backoff(mut self, backoff: crate::Backoff) -> Self {
                self.request = self.request.backoff(backoff);
                self
            }
        }
    };
}

mod election;
mod rwlock;
mod semaphore;
mod upgrade;

pub use election::{CampaignRequest, Election, LeaderChange, Leadership, Observer};
pub use rwlock::{ReadGuard, ReadPhase, ReadRequest, RwLocker};
pub use semaphore::{PermitGuard, PermitRequest, Semaphore};
pub use upgrade::{
    COMPANION_SUFFIX, UpgradeableReadGuard, UpgradeableReadRequest, UpgradedGuard, WriteRequest,
};
