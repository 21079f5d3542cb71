//! [`queue_refused`]: waiters queued behind a held lock, for tests of a fair backend.

use std::time::Duration;

use fencelock_core::{LockBackend, LockKey, OwnerId};

/// Queues each of `waiters` on `key`, in the order given, with one queued try each
/// ([`LockBackend::try_acquire_queued`] asking for `ttl`) that must be refused: the lock is
/// held, or kept for a waiter ahead. Each waiter then keeps a place behind the ones before it,
/// for the backend's place ttl. Panics, naming the backend, when a try is granted or fails.
pub async fn queue_refused(
    backend: &dyn LockBackend,
    key: &LockKey,
    ttl: Duration,
    waiters: &[OwnerId],
) {
    for &waiter in waiters {
        match backend.try_acquire_queued(key, ttl, waiter).await {
            Ok(None) => {}
            Ok(Some(lease)) => panic!(
                "{}: a queued try was granted {key} (token {}), which should be held or kept \
                 for a waiter ahead",
                backend.name(),
                lease.token.get()
            ),
            Err(e) => panic!("{}: a queued try of {key} failed: {e}", backend.name()),
        }
    }
}
