//! The state of one held lease, shared by its guard, its watchdog and its locker's list of live leases:
//! renewals one at a time, the lost signal, and the one release.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError, Weak};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::backend::LockBackend;
use crate::error::{Error, LostReason, Result};
use crate::lease::{self, Lease};
use crate::live_leases::{LiveLeases, backend_id};
use crate::metrics;

/// What a renewal is for.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Renewal {
    /// [`LockGuard::extend`](crate::LockGuard::extend) with this ttl.
    Manual(Duration),
    /// The watchdog, which decided to renew after seeing the renewal numbered `seen`; skipped
    /// when another renewal was stored in the meantime.
    Watchdog {
        /// [`LeaseState::snapshot`]'s `renewals` when the watchdog decided.
        seen: u64,
    },
}

struct State {
    lease: Lease,
    /// When `lease` was stored; the watchdog counts its pause from here.
    stored_at: Instant,
    /// How many renewals were stored.
    renewals: u64,
    /// The shortest ttl of the renewals whose outcome is unknown (an error other than
    /// `LeaseLost`): the server may still process one of them after a later renewal.
    unconfirmed_ttl: Option<Duration>,
}

/// Where a lease is registered, so the end of its release takes it off its locker's list.
#[derive(Debug)]
pub(crate) struct Registration {
    pub(crate) live_leases: Weak<LiveLeases>,
    pub(crate) id: u64,
}

/// The shortest and the longest bound on the release of a lease already lost.
const LOST_RELEASE_MIN: Duration = Duration::from_millis(50);
const LOST_RELEASE_MAX: Duration = Duration::from_secs(1);

/// One held lease.
pub(crate) struct LeaseState {
    pub(crate) backend: Arc<dyn LockBackend>,
    state: Mutex<State>,
    /// When the lease was granted (stored here), for the hold time.
    granted_at: Instant,
    /// Held for a renewal's whole round trip: one request in flight per guard.
    renewing: tokio::sync::Mutex<()>,
    pub(crate) lost: CancellationToken,
    reason: OnceLock<LostReason>,
    /// Wakes the watchdog when the stored lease changed.
    pub(crate) changed: Notify,
    /// Set by whoever starts the release (the guard's `release`, its drop, or
    /// `Locker::shutdown`).
    release_claimed: AtomicBool,
    /// Cancelled once the release finished (or was given up for want of a runtime).
    released: CancellationToken,
    registration: Option<Registration>,
}

impl LeaseState {
    pub(crate) fn new(
        backend: Arc<dyn LockBackend>,
        lease: Lease,
        registration: Option<Registration>,
    ) -> Self {
        LeaseState {
            backend,
            state: Mutex::new(State {
                lease,
                stored_at: Instant::now(),
                renewals: 0,
                unconfirmed_ttl: None,
            }),
            granted_at: Instant::now(),
            renewing: tokio::sync::Mutex::new(()),
            lost: CancellationToken::new(),
            reason: OnceLock::new(),
            changed: Notify::new(),
            release_claimed: AtomicBool::new(false),
            released: CancellationToken::new(),
            registration,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn lease(&self) -> Lease {
        self.state().lease.clone()
    }

    /// The lease, when it was stored, and how many renewals were stored before it.
    pub(crate) fn snapshot(&self) -> (Lease, Instant, u64) {
        let state = self.state();
        (state.lease.clone(), state.stored_at, state.renewals)
    }

    pub(crate) fn mark_lost(&self, reason: LostReason) {
        if self.reason.set(reason).is_ok() {
            metrics::ended(self.backend.name(), self.granted_at.elapsed(), reason);
        }
        self.lost.cancel();
    }

    pub(crate) fn reason(&self) -> LostReason {
        self.reason.get().copied().unwrap_or(LostReason::NotHeld)
    }

    /// Renews the lease. Renewals of one lease are sent one at a time, each after the previous
    /// one's reply was stored, so the server processes them in the order they are stored and
    /// the stored deadline is always that of the last renewal the server processed.
    ///
    /// `Ok(false)`: a watchdog renewal skipped because another one was stored meanwhile.
    pub(crate) async fn renew(&self, renewal: Renewal) -> Result<bool> {
        let _turn = self.renewing.lock().await;
        let (lease, _, renewals) = self.snapshot();
        let ttl = match renewal {
            Renewal::Manual(ttl) => ttl,
            Renewal::Watchdog { seen } if seen != renewals => return Ok(false),
            Renewal::Watchdog { .. } => lease.ttl,
        };
        let sent = Instant::now();
        // The server may process this renewal the moment it arrives and count its ttl from
        // then, so while it is in flight the lease is only known to last until `sent + ttl`.
        self.cap_deadline(sent, ttl);
        let outcome = self.backend.extend(&lease, ttl).await;
        metrics::renewed(
            self.backend.name(),
            sent.elapsed(),
            outcome.as_ref().map(|_| ()),
        );
        match outcome {
            Ok(renewed) => {
                self.store(renewed, sent);
                Ok(true)
            }
            Err(e) => {
                match &e {
                    Error::LeaseLost { reason, .. } => self.mark_lost(*reason),
                    _ => {
                        metrics::backend_error(self.backend.name(), "extend", &e);
                        self.unconfirmed(sent, ttl);
                    }
                }
                Err(e)
            }
        }
    }

    /// Stores a confirmed renewal sent at `sent`. A renewal whose outcome is unknown may still
    /// be processed after this one and leave the server with its shorter ttl, counted from no
    /// earlier than `sent`; the deadline stays within that.
    fn store(&self, mut renewed: Lease, sent: Instant) {
        let mut state = self.state();
        if let Some(shortest) = state.unconfirmed_ttl
            && shortest < renewed.ttl
        {
            renewed.valid_until = renewed.valid_until.min(lease::valid_until(sent, shortest));
        }
        state.lease = renewed;
        state.stored_at = Instant::now();
        state.renewals += 1;
        drop(state);
        self.changed.notify_one();
    }

    /// Records a renewal sent at `sent` whose outcome is unknown: if the server processed it
    /// last, its lease ends no earlier than `sent + ttl`, so the deadline moves no later than
    /// that.
    fn unconfirmed(&self, sent: Instant, ttl: Duration) {
        {
            let mut state = self.state();
            state.unconfirmed_ttl = Some(state.unconfirmed_ttl.map_or(ttl, |t| t.min(ttl)));
        }
        self.cap_deadline(sent, ttl);
    }

    /// Moves the stored deadline no later than that of a renewal with `ttl` sent at `sent`.
    fn cap_deadline(&self, sent: Instant, ttl: Duration) {
        let mut state = self.state();
        let cap = lease::valid_until(sent, ttl);
        if cap < state.lease.valid_until {
            state.lease.valid_until = cap;
            drop(state);
            self.changed.notify_one();
        }
    }

    /// Claims the one release of this lease and marks it lost, so `lost()` fires before any
    /// release is awaited. `false` when another path claimed it first.
    pub(crate) fn claim_release(&self) -> bool {
        if self.release_claimed.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.mark_lost(LostReason::Released);
        true
    }

    /// Releases the lease on the backend; only after [`claim_release`](Self::claim_release).
    /// A lease still held is passed instead to a barging waiter of the same key in its
    /// locker, where the backend can ([`pass_on`](Self::pass_on)).
    pub(crate) async fn release(&self) -> Result<bool> {
        self.release_or_pass(true).await
    }

    /// Releases the lease on the backend without passing it to a waiter:
    /// [`Locker::shutdown`](crate::Locker::shutdown)'s releases leave no lock behind them.
    pub(crate) async fn release_only(&self) -> Result<bool> {
        self.release_or_pass(false).await
    }

    async fn release_or_pass(&self, may_pass: bool) -> Result<bool> {
        let lease = self.lease();
        let span = tracing::debug_span!(
            "fencelock.release",
            backend = self.backend.name(),
            key = %lease.key,
            token = lease.token.get(),
        );
        let may_pass = may_pass && !self.lost_before_release();
        let release = async {
            if may_pass && let Some(passed) = self.pass_on(&lease).await {
                return passed;
            }
            self.backend.release(&lease).await
        }
        .instrument(span.clone());
        // A lease already lost (its deadline passed, or the server said so) is released as a
        // courtesy to the next holder: bounded by a quarter of its ttl (at most 1 s, at least
        // 50 ms), since a server that let it lapse may not be answering at all, and whoever
        // waits for this release (a `run` about to exit, `Locker::shutdown`) must not wait a
        // whole call time-out for it. Past the bound the lease is reported not held, which it
        // is not, by the client's own clock.
        let released = if self.lost_before_release() {
            let bound = (lease.ttl / 4).clamp(LOST_RELEASE_MIN, LOST_RELEASE_MAX);
            tokio::time::timeout(bound, release)
                .await
                .unwrap_or(Ok(false))
        } else {
            release.await
        };
        if let Err(e) = &released {
            metrics::backend_error(self.backend.name(), "release", e);
        }
        span.in_scope(|| tracing::debug!(outcome = ?released.as_ref().ok(), "released"));
        self.release_finished();
        released
    }

    /// Passes the lock to the first barging waiter of the same key in this lease's locker,
    /// where the backend can ([`LockBackend::pass`]; DESIGN 4.0.2): `Some(Ok(true))` when the
    /// lock went to that waiter, `None` when nothing was passed and the lease is to be
    /// released as usual, `Some(Err(_))` when the pass's outcome is unknown.
    async fn pass_on(&self, lease: &Lease) -> Option<Result<bool>> {
        let live_leases = self.registration.as_ref()?.live_leases.upgrade()?;
        if !self.backend.capabilities().passes {
            return None;
        }
        let backend = backend_id(&self.backend);
        let taker = live_leases.next_taker(backend, &lease.key)?;
        match self.backend.pass(lease, taker.ttl).await {
            // A pass that answers no higher token of the same key is the server's (or the
            // backend's) fault: reported, never handed to the waiter.
            Ok(Some(passed)) if passed.key != lease.key || passed.token <= lease.token => {
                live_leases.not_passed(backend, &lease.key, taker);
                Some(Err(Error::Backend {
                    backend: self.backend.name(),
                    message: format!(
                        "a pass of {} answered token {} of {} for a lease of token {}",
                        lease.key,
                        passed.token.get(),
                        passed.key,
                        lease.token.get()
                    ),
                    source: None,
                }))
            }
            Ok(Some(passed)) => {
                if let Err(passed) = taker.to.send(passed) {
                    // The waiter went while the pass was on its way: its lease is freed.
                    if let Err(e) = self.backend.release(&passed).await {
                        tracing::debug!(error = %e, "releasing a pass nobody took failed");
                    }
                }
                metrics::passed(self.backend.name());
                Some(Ok(true))
            }
            Ok(None) => {
                live_leases.not_passed(backend, &lease.key, taker);
                None
            }
            Err(e) => {
                live_leases.not_passed(backend, &lease.key, taker);
                Some(Err(e))
            }
        }
    }

    /// Whether the lease was lost before its release was claimed (the claim marks it lost
    /// with [`LostReason::Released`] only when nothing did first).
    fn lost_before_release(&self) -> bool {
        self.reason
            .get()
            .is_some_and(|reason| *reason != LostReason::Released)
    }

    /// Releases the lease in a task of the current runtime, if there is one; only after
    /// [`claim_release`](Self::claim_release).
    pub(crate) fn release_in_background(self: &Arc<Self>) {
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let held = self.clone();
                runtime.spawn(async move {
                    if let Err(e) = held.release().await {
                        tracing::debug!(error = %e, "release in the background failed");
                    }
                });
            }
            Err(_) => self.release_finished(),
        }
    }

    /// Takes the lease off its locker's list and wakes whoever waits for the release.
    fn release_finished(&self) {
        if let Some(registration) = &self.registration
            && let Some(live_leases) = registration.live_leases.upgrade()
        {
            live_leases.remove(registration.id);
        }
        self.released.cancel();
    }

    /// Completes once the release finished.
    pub(crate) async fn wait_released(&self) {
        self.released.cancelled().await;
    }
}
