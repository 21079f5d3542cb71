//! Metrics through the [`metrics`](https://docs.rs/metrics) facade, with the `metrics`
//! feature: the application installs whichever recorder it uses (Prometheus, StatsD, ...) and
//! fencelock's figures show up there. Without the feature every call here compiles to nothing.
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `fencelock_grants_total` | counter | `backend` | locks granted through [`Locker`](crate::Locker) |
//! | `fencelock_passes_total` | counter | `backend` | releases that passed the lock to a barging waiter of the same locker (DESIGN 4.0.2) |
//! | `fencelock_wait_seconds` | histogram | `backend`, `outcome` (`granted`, `timeout`, `error`) | from the request to its outcome |
//! | `fencelock_hold_seconds` | histogram | `backend` | from the grant to the end of the lease (release, drop or loss) |
//! | `fencelock_renewals_total` | counter | `backend`, `outcome` (`renewed`, `lost`, `error`) | renewals by the watchdog and `extend` |
//! | `fencelock_renewal_seconds` | histogram | `backend` | the round trip of each renewal |
//! | `fencelock_leases_lost_total` | counter | `backend`, `reason` ([`LostReason`] as a word) | leases that ended without their holder releasing them |
//! | `fencelock_backend_errors_total` | counter | `backend`, `operation`, `kind` ([`Error::kind`]) | errors a backend returned to `Locker` or a guard |
//! | `fencelock_storage_operations_total` | counter | `storage`, `operation`, `outcome` (`admitted`, `stale`, `error`) | operations of a [`MeteredStorage`] |
//!
//! Stale operations are refused by the storage, not by the lock, so they are counted by
//! wrapping the storage: `MeteredStorage::new(storage)` forwards every call and counts its
//! outcome.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::{Error, LostReason, Result};
use crate::fence::Fence;
use crate::key::LockKey;
use crate::storage::{FencedStorage, Snapshot};

/// A request for a lock ended: granted, given up at its wait budget, or failed.
pub(crate) fn waited(backend: &'static str, waited: Duration, outcome: Result<(), &Error>) {
    #[cfg(feature = "metrics")]
    {
        let label = match outcome {
            Ok(()) => "granted",
            Err(Error::Timeout { .. }) => "timeout",
            Err(_) => "error",
        };
        metrics::histogram!("fencelock_wait_seconds", "backend" => backend, "outcome" => label)
            .record(waited.as_secs_f64());
        if outcome.is_ok() {
            metrics::counter!("fencelock_grants_total", "backend" => backend).increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, waited, outcome);
}

/// A release passed the lock to a waiter of its locker.
pub(crate) fn passed(backend: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("fencelock_passes_total", "backend" => backend).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = backend;
}

/// A backend call made by `Locker` or a guard failed.
pub(crate) fn backend_error(backend: &'static str, operation: &'static str, error: &Error) {
    #[cfg(feature = "metrics")]
    metrics::counter!(
        "fencelock_backend_errors_total",
        "backend" => backend,
        "operation" => operation,
        "kind" => error.kind(),
    )
    .increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, operation, error);
}

/// A renewal came back after `latency`.
pub(crate) fn renewed(backend: &'static str, latency: Duration, outcome: Result<(), &Error>) {
    #[cfg(feature = "metrics")]
    {
        let label = match outcome {
            Ok(()) => "renewed",
            Err(Error::LeaseLost { .. }) => "lost",
            Err(_) => "error",
        };
        metrics::counter!("fencelock_renewals_total", "backend" => backend, "outcome" => label)
            .increment(1);
        metrics::histogram!("fencelock_renewal_seconds", "backend" => backend)
            .record(latency.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, latency, outcome);
}

/// A lease ended after being held for `held`, for `reason`.
pub(crate) fn ended(backend: &'static str, held: Duration, reason: LostReason) {
    #[cfg(feature = "metrics")]
    {
        metrics::histogram!("fencelock_hold_seconds", "backend" => backend)
            .record(held.as_secs_f64());
        if reason != LostReason::Released {
            metrics::counter!(
                "fencelock_leases_lost_total",
                "backend" => backend,
                "reason" => reason.word(),
            )
            .increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, held, reason);
}

fn storage_outcome<T>(storage: &'static str, operation: &'static str, outcome: &Result<T>) {
    #[cfg(feature = "metrics")]
    {
        let label = match outcome {
            Ok(_) => "admitted",
            Err(Error::Stale { .. }) => "stale",
            Err(_) => "error",
        };
        metrics::counter!(
            "fencelock_storage_operations_total",
            "storage" => storage,
            "operation" => operation,
            "outcome" => label,
        )
        .increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (storage, operation, outcome);
}

/// A [`FencedStorage`] that forwards every call to `S` and counts the outcome of each fenced
/// read and write (`admitted`, `stale`, `error`) as `fencelock_storage_operations_total`,
/// with the `metrics` feature. Without the feature it only forwards.
///
/// ```
/// use fencelock_core::metrics::MeteredStorage;
/// # fn wrap<S: fencelock_core::FencedStorage>(storage: S) {
/// let storage = MeteredStorage::new(storage);
/// # let _ = storage;
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct MeteredStorage<S> {
    inner: S,
}

impl<S: FencedStorage> MeteredStorage<S> {
    /// Wraps `inner`.
    pub fn new(inner: S) -> Self {
        MeteredStorage { inner }
    }

    /// The wrapped storage.
    pub fn inner(&self) -> &S {
        &self.inner
    }
}

#[async_trait]
impl<S: FencedStorage> FencedStorage for MeteredStorage<S> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn max_value_len(&self) -> usize {
        self.inner.max_value_len()
    }

    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        let outcome = self.inner.read(resource, fence).await;
        storage_outcome(self.inner.name(), "read", &outcome);
        outcome
    }

    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        let outcome = self.inner.write(resource, fence, value).await;
        storage_outcome(self.inner.name(), "write", &outcome);
        outcome
    }

    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        self.inner.peek(resource).await
    }
}
