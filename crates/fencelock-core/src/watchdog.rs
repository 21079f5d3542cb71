//! The task behind each guard: renews the lease at about a third of its validity and fires the
//! lost signal when the lease is lost or its deadline passes unrenewed.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::{Instant, sleep, sleep_until};
use tracing::Instrument;

use crate::error::{Error, LostReason};
use crate::lease_state::{LeaseState, Renewal};

/// Watches `held` until it is lost; renews it if `renew`. A loss the backend reports between
/// renewals ([`LockBackend::watch_lost`](crate::LockBackend::watch_lost)) fires the lost signal
/// at once.
pub(crate) async fn supervise(held: Arc<LeaseState>, renew: bool) {
    let lease = held.lease();
    tokio::select! {
        // In order: each branch ends the supervision, so none needs a fair turn.
        biased;
        _ = held.lost.cancelled() => {}
        _ = watch(&held, renew) => {}
        reason = held.backend.watch_lost(&lease) => {
            tracing::debug!(key = %lease.key, %reason, "lease lost, as the backend reported");
            held.mark_lost(reason);
        }
    }
}

async fn watch(held: &LeaseState, renew: bool) {
    if !renew {
        // Unrenewed, the lease ends at its stored deadline, however `extend` moves it.
        deadline_passed(held).await;
        held.mark_lost(LostReason::DeadlinePassed);
        return;
    }
    loop {
        let (lease, stored_at, renewals) = held.snapshot();
        tokio::select! {
            _ = sleep_until(renew_at(stored_at, lease.valid_until)) => {}
            _ = held.changed.notified() => continue,
        }
        // Boxed: the renewal's future is most of this one's size, and it runs only every
        // third of a ttl, where the supervision is allocated at every grant (see the test).
        if let Err(reason) = Box::pin(renew_once(held, renewals)).await {
            tracing::debug!(key = %lease.key, %reason, "lease lost");
            held.mark_lost(reason);
            return;
        }
    }
}

/// A third of the way from `stored_at` to `valid_until`: the first try leaves two thirds of
/// the lease's validity for retries, and any lease still valid when stored gets a pause.
pub(crate) fn renew_at(stored_at: Instant, valid_until: Instant) -> Instant {
    stored_at + valid_until.saturating_duration_since(stored_at) / 3
}

/// Renews once (unless another renewal was stored after the one numbered `seen`), retrying
/// failed attempts, until the lease's deadline: the stored one, which a user's shorter
/// `extend` may move earlier while this runs.
async fn renew_once(held: &LeaseState, seen: u64) -> Result<(), LostReason> {
    tokio::select! {
        outcome = renew_retrying(held, seen) => outcome,
        _ = deadline_passed(held) => Err(LostReason::DeadlinePassed),
    }
}

async fn renew_retrying(held: &LeaseState, seen: u64) -> Result<(), LostReason> {
    loop {
        let lease = held.lease();
        let span = tracing::debug_span!(
            "fencelock.extend",
            backend = held.backend.name(),
            key = %lease.key,
            token = lease.token.get(),
        );
        match held
            .renew(Renewal::Watchdog { seen })
            .instrument(span)
            .await
        {
            Ok(_) => return Ok(()),
            Err(Error::LeaseLost { reason, .. }) => return Err(reason),
            Err(e) => {
                tracing::debug!(key = %lease.key, error = %e, "renewal failed, retrying");
                let pause =
                    (lease.ttl / 10).clamp(Duration::from_millis(1), Duration::from_secs(1));
                sleep(pause).await;
            }
        }
    }
}

/// Completes once the stored deadline has passed, following every change to it.
async fn deadline_passed(held: &LeaseState) {
    loop {
        let lease = held.lease();
        if !lease.is_valid() {
            return;
        }
        tokio::select! {
            _ = sleep_until(lease.valid_until) => {}
            _ = held.changed.notified() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `f` returns.
    fn future_size<F, Fut>(_: F) -> usize
    where
        F: FnOnce(Arc<LeaseState>, bool) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// Every grant boxes its guard's supervision (this future and the stop token's wait), and
    /// a short-held lock frees it again at once. glibc serves blocks of up to 1,032 bytes from
    /// a per-thread cache; a larger one takes the general path, which consolidates the free
    /// lists first. The renewal, which runs only every third of a ttl, is boxed apart so the
    /// rest stays well within that (it was 1,136 bytes with the renewal inline).
    #[test]
    fn a_supervision_stays_a_small_allocation() {
        let size = future_size(supervise);
        assert!(size <= 768, "supervise's future is {size} bytes");
    }
}
