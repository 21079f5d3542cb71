//! What the properties share: time margins, random keys, grants, fence pairs and the `Stale`
//! check.

use std::time::Duration;

use crate::Setup;
use fencelock_core::{
    Error, Fence, FencedStorage, Lease, LockBackend, LockGuard, LockKey, Locker, OwnerId, Result,
    Snapshot,
};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep};

/// A ttl short enough to wait out in a test, on a backend that accepts it.
const SHORT_TTL: Duration = Duration::from_millis(300);
/// A ttl no test outlives.
pub(super) const LONG_TTL: Duration = Duration::from_secs(30);
/// How long a test waits for something that should happen "at once".
pub(super) const PATIENCE: Duration = Duration::from_secs(10);

impl Setup {
    /// A ttl short enough to wait out: [`SHORT_TTL`], or the backend's
    /// [`min_ttl`](fencelock_core::Capabilities::min_ttl) where that is longer (etcd grants
    /// whole seconds), so every property runs on every backend instead of being skipped.
    pub(super) fn short_ttl(&self) -> Duration {
        short_ttl(&*self.backend)
    }

    /// Waiting this long after a [`short_ttl`](Self::short_ttl) grant is past its expiry on
    /// any honest backend: three times the ttl.
    pub(super) fn past_short_ttl(&self) -> Duration {
        self.short_ttl() * 3
    }
}

fn short_ttl(backend: &dyn LockBackend) -> Duration {
    SHORT_TTL.max(backend.capabilities().min_ttl)
}

/// A key no other call uses, so properties may share a server.
pub(super) fn key(name: &str) -> LockKey {
    LockKey::new(format!("conformance/{name}/{}", OwnerId::random())).unwrap()
}

/// A request for `key` through `locker`, for a `LONG_TTL` with a wait of three `PATIENCE`s,
/// running in a task: a waiter to queue behind a holder.
pub(super) fn spawn_waiter(locker: &Locker, key: &LockKey) -> JoinHandle<Result<LockGuard>> {
    tokio::spawn(
        locker
            .lock(key.as_str())
            .ttl(LONG_TTL)
            .wait(PATIENCE * 3)
            .into_future(),
    )
}

/// [`spawn_waiter`] for a request that barges (`fair(false)`): it never queues.
pub(super) fn spawn_barging(locker: &Locker, key: &LockKey) -> JoinHandle<Result<LockGuard>> {
    tokio::spawn(
        locker
            .lock(key.as_str())
            .ttl(LONG_TTL)
            .wait(PATIENCE * 3)
            .fair(false)
            .into_future(),
    )
}

pub(super) async fn grant(backend: &dyn LockBackend, key: &LockKey, ttl: Duration) -> Lease {
    backend
        .try_acquire(key, ttl)
        .await
        .expect("try_acquire failed")
        .unwrap_or_else(|| panic!("{} refused a free key {key:?}", backend.name()))
}

/// The first grant of `key` in a try every 20 ms for up to [`PATIENCE`], or `None`.
///
/// For a key the server should free on its own soon: after its last lease was waited out
/// ([`Setup::past_short_ttl`]), or once a dropped guard's release is on its way. A server lets
/// go of an expired lease on its own schedule (etcd's leader revokes expired leases in rounds,
/// and later when it is loaded), so a single try at a fixed time would test the load as much
/// as the backend. A lease the server never lets go is still refused throughout.
pub(super) async fn grant_within_patience(
    backend: &dyn LockBackend,
    key: &LockKey,
    ttl: Duration,
) -> Option<Lease> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(lease) = backend
            .try_acquire(key, ttl)
            .await
            .expect("try_acquire failed")
        {
            return Some(lease);
        }
        if Instant::now() >= deadline {
            return None;
        }
        sleep(Duration::from_millis(20)).await;
    }
}

/// A grant of `key` once its last lease ran out ([`grant_within_patience`]); panics if the
/// server keeps the key held for [`PATIENCE`] after the ttl was waited out.
pub(super) async fn grant_after_expiry(
    backend: &dyn LockBackend,
    key: &LockKey,
    ttl: Duration,
) -> Lease {
    grant_within_patience(backend, key, ttl)
        .await
        .unwrap_or_else(|| {
            panic!(
                "{} kept {key:?} held for {PATIENCE:?} after its last lease ran out",
                backend.name()
            )
        })
}

/// Two grants of the same key, the first expired before the second: fences with increasing
/// tokens and different owners, as a paused client and its successor would hold.
pub(super) async fn successive_fences(backend: &dyn LockBackend, key: &LockKey) -> (Fence, Fence) {
    let old = grant(backend, key, short_ttl(backend)).await;
    assert!(
        backend.release(&old).await.unwrap(),
        "release of a lease still held answered false (not held)"
    );
    let new = grant(backend, key, LONG_TTL).await;
    assert!(new.token > old.token, "token did not increase");
    backend.release(&new).await.unwrap();
    (old.fence(), new.fence())
}

pub(super) fn assert_stale(
    result: Result<impl std::fmt::Debug, Error>,
    presented: Fence,
    current: Fence,
) {
    match result {
        Err(Error::Stale {
            presented: p,
            current: c,
            ..
        }) => {
            assert_eq!(p, presented, "Stale reports the wrong presented fence");
            assert_eq!(c, current, "Stale reports the wrong current fence");
        }
        other => panic!(
            "expected Error::Stale (presented {presented}, current {current}), got {other:?}"
        ),
    }
}

pub(super) async fn peek(storage: &dyn FencedStorage, resource: &LockKey) -> Option<Snapshot> {
    storage.peek(resource).await.expect("peek failed")
}

/// Says on the test run's own stderr (not the captured output, so the run shows it) that
/// `property` does not apply to the backend under test, and why: a property whose capability
/// the backend does not claim passes at once, and would otherwise look checked.
pub(super) fn not_applicable(property: &str, why: &str) {
    use std::io::Write as _;
    let line = format!("fencelock-conformance: {property}: not applicable: {why}\n");
    // Written to the process's stderr directly: the test harness captures only `eprint!`.
    let _ = std::io::stderr().write_all(line.as_bytes());
}
