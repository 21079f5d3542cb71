//! `Locker`: waiting for a lock within a budget and wrapping the grant in a `LockGuard`.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::backend::{LockBackend, validate_ttl};
use crate::backoff::Backoff;
use crate::composite::LockAllRequest;
use crate::error::{Error, Result};
use crate::fence::OwnerId;
use crate::guard::LockGuard;
use crate::key::LockKey;
use crate::lease::Lease;
use crate::live_leases::LiveLeases;
use crate::metrics;

/// The lease ttl of a request that names none, where the backend allows it: 30 s.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30);

/// Default options for the requests a [`Locker`] builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockOptions {
    /// Lease ttl. Default [`DEFAULT_TTL`], 30 s; a [`Locker::new`] takes it within its
    /// backend's bounds ([`Capabilities::default_ttl`](crate::Capabilities::default_ttl)).
    pub ttl: Duration,
    /// How long to wait for a held lock. Default 10 s; zero tries once; [`Duration::MAX`] (or
    /// any budget the clock cannot add) waits without a bound.
    pub wait: Duration,
    /// Whether the guard renews the lease at about ttl/3. Default on.
    pub watchdog: bool,
    /// Pauses between tries while waiting.
    pub backoff: Backoff,
    /// Whether a waiting request keeps its place in arrival order on a backend that queues
    /// ([`Capabilities::fair`](crate::Capabilities::fair)). Default on. Off, it barges: it
    /// never queues, and waits for a release's wake-up to try again, so whichever barging
    /// request tries first after a release takes the lock (it never passes a queued fair
    /// request). See [`LockRequest::fair`].
    pub fair: bool,
}

impl Default for LockOptions {
    fn default() -> Self {
        LockOptions {
            ttl: DEFAULT_TTL,
            wait: Duration::from_secs(10),
            watchdog: true,
            backoff: Backoff::default(),
            fair: true,
        }
    }
}

/// Takes locks from one backend. Cheap to clone.
///
/// # Defaults
///
/// What a request gets unless it says otherwise ([`LockOptions`], or
/// [`with_options`](Self::with_options) for every request of a locker):
///
/// | setting | default | set with |
/// |---|---|---|
/// | lease ttl | 30 s ([`DEFAULT_TTL`]), or the backend's longest lease when shorter | [`LockRequest::ttl`] |
/// | wait for a held lock | 10 s; zero tries once | [`LockRequest::wait`], [`LockRequest::wait_forever`] |
/// | watchdog (renews at about ttl/3) | on | [`LockRequest::watchdog`] |
/// | fair queue where the backend has one | on | [`LockRequest::fair`] |
/// | pauses between tries | [`Backoff::default`](crate::Backoff) | [`LockRequest::backoff`] |
///
/// # Re-entry
///
/// Locks are not re-entrant. A `lock` (or [`lock_all`](Self::lock_all), or
/// [`try_lock`](Self::try_lock)) of a key this `Locker` value already holds fails at once with
/// [`Error::AlreadyHeld`]: it neither waits for itself until its wait budget runs out (or for
/// ever) nor takes a second grant, and it never touches the backend, so the key's token is not
/// bumped. A key counts as held from its grant until its guard is released, dropped or lost.
///
/// Each clone is a holder of its own: a clone moved into another task contends for the key
/// like any other owner (it waits for the release), while the clones still share one list of
/// guards for [`shutdown`](Self::shutdown). Give each task that may contend for a key its own
/// clone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fencelock_core::Result<()> {
/// # use std::{sync::Arc, time::Duration};
/// use fencelock_core::Locker;
/// let locker = Locker::new(Arc::new(fencelock_memory::MemoryLockBackend::new()));
/// let guard = locker.lock("reports/daily").ttl(Duration::from_secs(5)).wait(Duration::from_secs(1)).await?;
/// let fence = guard.fence(); // present this to the storage with every operation
/// assert!(guard.is_held());
/// guard.release().await?;
/// # let _ = fence;
/// # Ok(()) }
/// ```
pub struct Locker {
    backend: Arc<dyn LockBackend>,
    options: LockOptions,
    live_leases: Arc<LiveLeases>,
    holding: Arc<HeldKeys>,
}

impl Clone for Locker {
    /// A locker with the same backend, options and guard list, but a holder of its own: see
    /// "Re-entry" above.
    fn clone(&self) -> Self {
        Locker {
            backend: self.backend.clone(),
            options: self.options,
            live_leases: self.live_leases.clone(),
            holding: Arc::default(),
        }
    }
}

/// The keys one `Locker` value holds, each with its guard's lost token (cancelled once the
/// guard is released, dropped or lost), for refusing re-entry.
#[derive(Debug, Default)]
pub(crate) struct HeldKeys {
    keys: Mutex<HashMap<LockKey, CancellationToken>>,
}

impl HeldKeys {
    /// [`Error::AlreadyHeld`] if `key` is held through this locker.
    pub(crate) fn refuse_held(&self, key: &LockKey) -> Result<()> {
        let keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        match keys.get(key) {
            Some(lost) if !lost.is_cancelled() => Err(Error::AlreadyHeld {
                key: key.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// Records the grant of `key`; forgets the keys whose guards have ended.
    fn granted(&self, key: LockKey, lost: CancellationToken) {
        let mut keys = self.keys.lock().unwrap_or_else(PoisonError::into_inner);
        keys.retain(|_, lost| !lost.is_cancelled());
        keys.insert(key, lost);
    }
}

impl fmt::Debug for Locker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Locker")
            .field("backend", &self.backend.name())
            .field("options", &self.options)
            .field("live_guards", &self.live_leases.len())
            .finish()
    }
}

impl Locker {
    /// A locker over `backend` with default options. Any backend will do: one by value, an
    /// `Arc` of one, or an `Arc<dyn LockBackend>` (kept as it is, not wrapped again).
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use fencelock_core::{LockBackend, Locker};
    /// use fencelock_memory::MemoryLockBackend;
    /// let by_value = Locker::new(MemoryLockBackend::new());
    /// let shared = Locker::new(Arc::new(MemoryLockBackend::new()));
    /// let dynamic: Arc<dyn LockBackend> = Arc::new(MemoryLockBackend::new());
    /// let same = Locker::new(dynamic.clone());
    /// assert!(Arc::ptr_eq(same.backend(), &dynamic));
    /// ```
    ///
    /// The requests' default ttl is 30 s within the backend's bounds
    /// ([`Capabilities::default_ttl`](crate::Capabilities::default_ttl)): on a backend whose
    /// longest lease is shorter (a ZooKeeper session), a request that names no ttl gets the
    /// longest, where it was refused before. A ttl a request names is checked as it is.
    pub fn new<B: LockBackend>(backend: B) -> Self {
        let backend = shared_backend(backend);
        let options = LockOptions {
            ttl: backend.capabilities().default_ttl(),
            ..LockOptions::default()
        };
        Locker {
            backend,
            options,
            live_leases: Arc::default(),
            holding: Arc::default(),
        }
    }

    /// Replaces the default options of the requests this locker builds.
    pub fn with_options(mut self, options: LockOptions) -> Self {
        self.options = options;
        self
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.backend
    }

    /// A request for the lock on `key`; await it to wait for the lock. An invalid key is
    /// reported when the request is awaited, before any backend is touched.
    ///
    /// [`Error::AlreadyHeld`] at once when this locker already holds `key` (see "Re-entry").
    pub fn lock(&self, key: impl AsRef<str>) -> LockRequest {
        LockRequest {
            backend: self.backend.clone(),
            key: LockKey::new(key),
            options: self.options,
            live_leases: self.live_leases.clone(),
            holding: self.holding.clone(),
        }
    }

    /// A request for the locks on every key of `keys`, all or none; await it for a
    /// [`CompositeGuard`](crate::CompositeGuard) whose members each keep their own key's fence.
    ///
    /// The keys are deduplicated; where the backend grants sets in one step
    /// ([`Capabilities::atomic_sets`](crate::Capabilities::atomic_sets)) a set of free keys
    /// is granted at once. Otherwise, and when some key is taken, they are taken one at a
    /// time in one canonical order (sorted by key), whatever order they were given in, so two
    /// requests with overlapping sets never deadlock: each waits only for keys after the
    /// ones it holds. The wait budget covers the
    /// whole set; when a key is not obtained within it (or any member fails), the keys taken
    /// so far are released and the request fails with that member's error. Every member has
    /// the request's ttl and watchdog; the guard's [`lost`](crate::CompositeGuard::lost)
    /// fires when any member is lost.
    ///
    /// An invalid key, an empty set or a key this locker already holds
    /// ([`Error::AlreadyHeld`]) is reported when the request is awaited, before any backend
    /// is touched.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fencelock_core::Result<()> {
    /// use fencelock_core::Locker;
    /// let locker = Locker::new(fencelock_memory::MemoryLockBackend::new());
    /// let both = locker.lock_all(["accounts/b", "accounts/a"]).await?;
    /// // Each write presents its own key's fence, checked against that key's storage.
    /// let (a, b) = (both.fence("accounts/a"), both.fence("accounts/b"));
    /// assert!(a.is_some() && b.is_some());
    /// assert!(both.release().await?);
    /// # Ok(()) }
    /// ```
    pub fn lock_all<K: AsRef<str>>(&self, keys: impl IntoIterator<Item = K>) -> LockAllRequest {
        LockAllRequest::new(
            self.clone_holder(),
            keys.into_iter().map(LockKey::new).collect(),
        )
    }

    /// This locker with the same holding: the members of a composite request are this
    /// locker's own grants.
    pub(crate) fn clone_holder(&self) -> Locker {
        Locker {
            backend: self.backend.clone(),
            options: self.options,
            live_leases: self.live_leases.clone(),
            holding: self.holding.clone(),
        }
    }

    /// A guard over `lease`, a grant this locker's backend just made (a set granted in one
    /// step), registered and counted as held like a `lock` request's grant.
    pub(crate) fn adopt(&self, lease: Lease, watchdog: bool) -> LockGuard {
        let key = lease.key.clone();
        let guard = LockGuard::registered(self.backend.clone(), lease, watchdog, &self.live_leases);
        self.holding.granted(key, guard.lost_token());
        guard
    }

    /// [`Error::AlreadyHeld`] if this locker holds `key`.
    pub(crate) fn refuse_held(&self, key: &LockKey) -> Result<()> {
        self.holding.refuse_held(key)
    }

    /// A locker with this one's options and guard list over another backend: the adapters of
    /// the lock kinds (readers, permits) go through the same waiting and `shutdown`.
    pub(crate) fn over(&self, backend: Arc<dyn LockBackend>) -> Locker {
        Locker {
            backend,
            options: self.options,
            live_leases: self.live_leases.clone(),
            holding: Arc::default(),
        }
    }

    /// The default options of this locker's requests.
    pub fn options(&self) -> LockOptions {
        self.options
    }

    /// How many guards from this locker (and its clones) are alive or still releasing.
    pub fn live_guards(&self) -> usize {
        self.live_leases.len()
    }

    /// Releases every lock taken through this locker or its clones whose guard is still
    /// alive, and waits for the releases that dropped guards started and for the calls the
    /// backend still runs in the background
    /// ([`finish_background`](LockBackend::finish_background): a Redlock's nodes past the
    /// quorum); returns how many of the releases made here found the lock still held. It also
    /// waits (1 s at most) for the queue places that requests dropped while they waited are
    /// giving up ([`LockBackend::leave_queue`]), so the waiters behind them are not held up
    /// until those places lapse.
    ///
    /// Call it before the runtime ends (say, as the last line of `main`): a guard's drop only
    /// spawns its release, and a runtime that shuts down first never runs it (see
    /// [`LockGuard`]'s "Ending a guard"). The guards it releases fire
    /// [`lost`](LockGuard::lost) with [`LostReason::Released`](crate::LostReason::Released)
    /// at once; their later `release` returns `Ok(false)` and their drop does nothing.
    ///
    /// Every release is attempted; the first error is returned after all have finished (a
    /// lock whose release failed lapses after its ttl). The locker stays usable: guards taken
    /// afterwards are released by the next `shutdown`. A backend that never answers makes this
    /// wait as long as its own time-outs; bound it with `tokio::time::timeout` if needed.
    ///
    /// ```
    /// # use std::sync::Arc;
    /// # use fencelock_core::Locker;
    /// #[tokio::main(flavor = "current_thread")]
    /// async fn main() -> fencelock_core::Result<()> {
    ///     let locker = Locker::new(Arc::new(fencelock_memory::MemoryLockBackend::new()));
    ///     let nightly = locker.lock("jobs/nightly").await?;
    ///     // ... work, other tasks, early returns that drop guards ...
    ///     # let _ = nightly;
    ///     locker.shutdown().await?; // the last line: no lock is left to its ttl
    ///     Ok(())
    /// }
    /// ```
    pub async fn shutdown(&self) -> Result<usize> {
        let leases = self.live_leases.drain();
        let releases: Vec<_> = leases
            .iter()
            .filter(|held| held.claim_release())
            .map(|held| {
                let held = held.clone();
                tokio::spawn(async move { held.release_only().await })
            })
            .collect();
        let mut released = 0;
        let mut first_error = None;
        for release in releases {
            match release.await {
                Ok(Ok(true)) => released += 1,
                Ok(Ok(false)) => {}
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "release at shutdown failed");
                    first_error.get_or_insert(e);
                }
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(_) => {}
            }
        }
        for held in &leases {
            held.wait_released().await;
        }
        // The places of requests dropped while they waited (a cancelled wait, a signal): given
        // up before the process goes, not left to lapse.
        self.live_leases.wait_for_leaves().await;
        self.backend.finish_background().await;
        first_error.map_or(Ok(released), Err)
    }

    /// Tries once: `Ok(None)` if another owner holds the lock.
    pub async fn try_lock(&self, key: impl AsRef<str>) -> Result<Option<LockGuard>> {
        match self.lock(key).wait(Duration::ZERO).await {
            Ok(guard) => Ok(Some(guard)),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

/// `backend` behind an `Arc<dyn LockBackend>`; one that already is one is returned as it is.
fn shared_backend<B: LockBackend>(backend: B) -> Arc<dyn LockBackend> {
    if let Some(shared) = (&backend as &dyn Any).downcast_ref::<Arc<dyn LockBackend>>() {
        return shared.clone();
    }
    Arc::new(backend)
}

/// A lock request built by [`Locker::lock`]; `.await` it for a [`LockGuard`].
///
/// Waiting alternates tries with [`LockBackend::wait_for_release`] bounded by a backoff pause
/// with full jitter, until the wait budget is spent ([`Error::Timeout`]). On a backend that
/// queues its waiters ([`Capabilities::fair`](crate::Capabilities::fair)) the request instead
/// keeps one place in the key's queue through its tries
/// ([`LockBackend::try_acquire_queued`]) and sleeps until its turn
/// ([`LockBackend::wait_for_grant`]), taking up the grant when the backend handed the lock to
/// it; a request that ends without the lock gives its place up, and such a grant with it
/// ([`LockBackend::leave_queue`]). Retryable backend errors are retried within the budget.
/// Dropping the future cancels the wait and gives the place up in a task; a grant in flight
/// at that moment lapses after its ttl.
#[must_use = "a lock request does nothing until awaited"]
#[derive(Debug)]
pub struct LockRequest {
    backend: Arc<dyn LockBackend>,
    key: Result<LockKey>,
    options: LockOptions,
    live_leases: Arc<LiveLeases>,
    holding: Arc<HeldKeys>,
}

impl LockRequest {
    /// The lease ttl.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.options.ttl = ttl;
        self
    }

    /// How long to wait for a held lock; zero tries once. [`Duration::MAX`] (or any budget
    /// the clock cannot add) waits without a bound, like [`wait_forever`](Self::wait_forever).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = wait;
        self
    }

    /// Waits for the lock without a bound: the request ends with the lock, with an error that
    /// is not retryable, or when its future is dropped (for example by `tokio::time::timeout`
    /// or a `select!` on a shutdown signal).
    pub fn wait_forever(self) -> Self {
        self.wait(Duration::MAX)
    }

    /// Whether the guard renews the lease in the background.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.options.watchdog = on;
        self
    }

    /// The pauses between tries.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.options.backoff = backoff;
        self
    }

    /// Whether the request waits its turn in arrival order (the default) or barges.
    ///
    /// Fair, on a backend that queues its waiters, the request keeps one place in the key's
    /// queue and the release hands the lock to the first live place: no waiter starves, and
    /// the p99 wait is about the queue's length times one hold. Barging, it never queues: it
    /// waits for a release's wake-up (or its pause) and tries, and the first try after the
    /// release wins, which on a hot key keeps the lock with whoever is quickest (often the
    /// process that just released it) at the price of a long tail. A barging request never
    /// takes a free lock a queued fair request waits for. On a backend without a queue every
    /// request barges. Where the backend passes
    /// ([`Capabilities::passes`](crate::Capabilities::passes)), a guard of this locker (or a
    /// clone) released while barging requests of its key wait here passes the lock to the
    /// first of them in one step, with the next token, and a new barging request lines up
    /// behind them: within one locker barging requests are served in arrival order (DESIGN.md
    /// 4.0.2). BENCHMARKS.md measures both.
    pub fn fair(mut self, fair: bool) -> Self {
        self.options.fair = fair;
        self
    }

    /// The wait itself, as one future: its state is the request's fields and the loop's,
    /// with nothing held twice, so the box `into_future` makes stays a small allocation.
    /// `key` has passed the request's checks (`into_future`).
    fn wait_for(
        backend: Arc<dyn LockBackend>,
        key: LockKey,
        options: LockOptions,
        live_leases: Arc<LiveLeases>,
        holding: Arc<HeldKeys>,
    ) -> impl Future<Output = Result<LockGuard>> + Send {
        let span = tracing::debug_span!(
            "fencelock.acquire",
            backend = backend.name(),
            key = %key,
            ttl_ms = options.ttl.as_millis() as u64,
        );
        async move {
            let started = Instant::now();
            // `None`: a budget the clock cannot add, waited out without a bound.
            let deadline = started.checked_add(options.wait);
            let before_deadline = |now: Instant| deadline.is_none_or(|deadline| now < deadline);
            let name = backend.name();
            // A fair request that waits on a backend that queues keeps a place; one that
            // tries once, or barges, never does.
            let queued = backend.capabilities().fair && options.fair && !options.wait.is_zero();
            let mut place = QueuePlace {
                backend: backend.clone(),
                key,
                waiter: OwnerId::random(),
                taken: false,
                live_leases: live_leases.clone(),
            };
            let mut attempt = 0u32;
            // A grant the backend handed to the waiter, taken up in place of the next try.
            let mut handed = None;
            // A barging waiter on a backend that passes: offered, from its first wait, to the
            // releases of the same key in this locker, which pass the lock on to it
            // (DESIGN 4.0.2). Dropped with the request, which withdraws the offer.
            let passes = !queued && !options.wait.is_zero() && backend.capabilities().passes;
            // Where this locker's waiters already line up for the key, a new one goes behind
            // them at once: its try would be refused (the key is held), and would go ahead of
            // them if the key were just freed.
            let mut offered = passes
                .then(|| live_leases.offer_pass_behind_others(&backend, &place.key, options.ttl))
                .flatten();
            let mut skip_try = offered.is_some();
            // The loop's results are matched where they are made, in blocks of their own, so
            // none is kept in the future's state across the awaits after it.
            let outcome = loop {
                {
                    let tried = if let Some(lease) = handed.take() {
                        Ok(Some(lease))
                    } else if std::mem::take(&mut skip_try) {
                        Ok(None)
                    } else if queued {
                        place.taken = true;
                        backend
                            .try_acquire_queued(&place.key, options.ttl, place.waiter)
                            .await
                    } else {
                        backend.try_acquire(&place.key, options.ttl).await
                    };
                    match tried {
                        Ok(Some(lease)) => {
                            place.granted();
                            tracing::debug!(
                                token = lease.token.get(),
                                waited_ms = started.elapsed().as_millis() as u64,
                                "acquired"
                            );
                            let guard = LockGuard::registered(
                                backend.clone(),
                                lease,
                                options.watchdog,
                                &live_leases,
                            );
                            holding.granted(place.key.clone(), guard.lost_token());
                            break Ok(guard);
                        }
                        Ok(None) => {}
                        Err(e) if e.is_retryable() && before_deadline(Instant::now()) => {
                            metrics::backend_error(name, "acquire", &e);
                            tracing::debug!(error = %e, "acquire failed, retrying");
                        }
                        Err(e) => {
                            metrics::backend_error(name, "acquire", &e);
                            break Err(e);
                        }
                    }
                }
                let now = Instant::now();
                if !before_deadline(now) {
                    tracing::debug!(outcome = "timeout", "not acquired");
                    break Err(Error::Timeout {
                        key: place.key.to_string(),
                        waited: now - started,
                    });
                }
                let left = deadline.map_or(Duration::MAX, |deadline| deadline - now);
                let mut pause = options.backoff.pause(attempt).min(left);
                attempt = attempt.saturating_add(1);
                // `Some(pause)` after a wait that failed in a way worth trying again.
                let retry = {
                    let waited = if queued {
                        // The backend wakes the waiter at its turn, and returns in time for
                        // the next try to keep the place: no backoff between tries.
                        pause = left;
                        let turn = backend
                            .wait_for_grant(&place.key, place.waiter, options.ttl, left)
                            .await;
                        match turn {
                            // Under the watchdog a handed grant is taken up as it is: the
                            // watchdog renews it within a third of its short validity.
                            Ok(Some(lease)) if options.watchdog => {
                                handed = Some(lease);
                                continue;
                            }
                            // Rare (no watchdog): boxed, so its state takes no room in every
                            // request's.
                            Ok(Some(lease)) => match Box::pin(take_up(&*backend, lease)).await {
                                Ok(Some(lease)) => {
                                    handed = Some(lease);
                                    continue;
                                }
                                Ok(None) => Ok(()),
                                Err(e) => Err(e),
                            },
                            Ok(None) => Ok(()),
                            Err(e) => Err(e),
                        }
                    } else if passes {
                        let offer = offered.get_or_insert_with(|| {
                            live_leases.offer_pass(&backend, &place.key, options.ttl)
                        });
                        tokio::select! {
                            biased;
                            passed = offer => match passed {
                                Ok(lease) => {
                                    handed = Some(lease);
                                    continue;
                                }
                                // The offer was dropped unanswered: made again at the next wait.
                                Err(_) => {
                                    offered = None;
                                    Ok(())
                                }
                            },
                            waited = backend.wait_for_release(&place.key, pause) => waited,
                        }
                    } else {
                        backend.wait_for_release(&place.key, pause).await
                    };
                    match waited {
                        Ok(()) => None,
                        Err(e) => {
                            metrics::backend_error(name, "wait_for_release", &e);
                            if !e.is_retryable() {
                                break Err(e);
                            }
                            Some(options.backoff.pause(attempt).min(pause))
                        }
                    }
                };
                if let Some(retry) = retry {
                    // Rare (a failed wait): boxed, so its timer takes no room in every
                    // request's state.
                    Box::pin(tokio::time::sleep_until(Instant::now() + retry)).await;
                }
            };
            // A request that ends without the lock gives its place up (a grant took the
            // waiter out of the queue: nothing to give up then).
            if outcome.is_err() {
                place.leave().await;
            }
            metrics::waited(name, started.elapsed(), outcome.as_ref().map(|_| ()));
            outcome
        }
        .instrument(span)
    }
}

/// A lease the backend handed to a waiter ([`LockBackend::wait_for_grant`]), made the grant
/// of a request without a watchdog: renewed for its whole ttl first (under the watchdog it is
/// taken as it is). `Ok(None)` when that renewal failed in a way the next try mends: it finds
/// the grant if it is still the waiter's, and a grant that lapsed was never this request's to
/// use.
async fn take_up(backend: &dyn LockBackend, handed: Lease) -> Result<Option<Lease>> {
    match backend.extend(&handed, handed.ttl).await {
        Ok(lease) => Ok(Some(lease)),
        Err(e) if e.is_retryable() || matches!(e, Error::LeaseLost { .. }) => {
            tracing::debug!(error = %e, "taking up a handed grant failed, trying again");
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// A request's place in a fair backend's queue: given up when the request ends without the
/// lock, in a task when its future is dropped half way.
struct QueuePlace {
    backend: Arc<dyn LockBackend>,
    key: LockKey,
    waiter: OwnerId,
    /// Whether a queued try was sent since the last grant, so the backend may hold a place.
    taken: bool,
    /// The locker's, which tracks a leave spawned at a drop for `Locker::shutdown`.
    live_leases: Arc<LiveLeases>,
}

impl QueuePlace {
    /// A grant took the waiter out of the queue: nothing to give up.
    fn granted(&mut self) {
        self.taken = false;
    }

    async fn leave(&mut self) {
        if std::mem::take(&mut self.taken)
            && let Err(e) = self.backend.leave_queue(&self.key, self.waiter).await
        {
            // The place lapses by itself after the backend's place ttl.
            tracing::debug!(error = %e, "leaving the queue failed");
        }
    }
}

impl Drop for QueuePlace {
    fn drop(&mut self) {
        if !self.taken {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (backend, key, waiter) = (self.backend.clone(), self.key.clone(), self.waiter);
            // Tracked: `Locker::shutdown` waits for it, so a process that shuts its locker
            // down after a cancelled wait (a signal) leaves no place behind.
            self.live_leases.spawn_leave(&runtime, async move {
                if let Err(e) = backend.leave_queue(&key, waiter).await {
                    tracing::debug!(error = %e, "leaving the queue failed");
                }
            });
        }
    }
}

impl IntoFuture for LockRequest {
    type Output = Result<LockGuard>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<LockGuard>> + Send>>;

    /// The request's checks (the key, the ttl, and that this locker does not hold the key
    /// already) are made here, at once: they touch no backend, and a refused request's future
    /// is only its error.
    fn into_future(self) -> Self::IntoFuture {
        let LockRequest {
            backend,
            key,
            options,
            live_leases,
            holding,
        } = self;
        let checked = key.and_then(|key| {
            validate_ttl(options.ttl, &backend.capabilities())?;
            holding.refuse_held(&key)?;
            Ok(key)
        });
        match checked {
            Ok(key) => Box::pin(LockRequest::wait_for(
                backend,
                key,
                options,
                live_leases,
                holding,
            )),
            Err(e) => Box::pin(std::future::ready(Err(e))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The size of the future `f` returns.
    fn future_size<F, Fut>(_: F) -> usize
    where
        F: FnOnce(
            Arc<dyn LockBackend>,
            LockKey,
            LockOptions,
            Arc<LiveLeases>,
            Arc<HeldKeys>,
        ) -> Fut,
    {
        std::mem::size_of::<Fut>()
    }

    /// Every request that passes its checks boxes this future, and it is freed at the grant.
    /// glibc serves blocks of up to 1,032 bytes from a per-thread cache; a larger one takes
    /// the general path, which consolidates the free lists first. The loop's results are
    /// kept in scopes of their own and the rare waits boxed apart, so the future stays well
    /// within that (it was 1,584 bytes with the request's arguments held whole and the
    /// results kept to the loop's end).
    #[test]
    fn a_lock_request_stays_a_small_allocation() {
        let size = future_size(LockRequest::wait_for);
        assert!(size <= 768, "a lock request's future is {size} bytes");
    }
}
