//! [`CountingTries`]: a backend that counts the tries sent through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fencelock_core::{
    Capabilities, FencingToken, Lease, LockBackend, LockInfo, LockKey, LostReason, OwnerId,
    QueueEntry, ReadPhase, Result, async_trait,
};

/// Wraps a backend and counts every try of an exclusive lock answered through it, plain or
/// queued ([`LockBackend::try_acquire`], [`LockBackend::try_acquire_queued`]), whatever its
/// outcome (an error too), once its answer came back: a count of `n` means `n` tries have
/// had their effect (a queued waiter's place is kept). Every other call is forwarded
/// untouched.
///
/// For tests of a fair backend's hand-off: a [`Locker`](fencelock_core::Locker) over it
/// shows how many tries its requests needed, so a release that wakes every waiter (each
/// one trying again for one grant) is told apart from one that wakes the next waiter alone.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fencelock_core::Result<()> {
/// use std::sync::Arc;
/// use fencelock_conformance::CountingTries;
/// use fencelock_core::Locker;
///
/// let counting = Arc::new(CountingTries::new(fencelock_memory::MemoryLockBackend::new()));
/// let guard = Locker::new(counting.clone()).lock("report").await?;
/// assert_eq!(counting.tries(), 1, "a lock of a free key is not counted as one try");
/// guard.release().await?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct CountingTries {
    inner: Arc<dyn LockBackend>,
    tries: AtomicUsize,
    queued: AtomicUsize,
    passes: AtomicUsize,
}

impl CountingTries {
    /// Counts the tries sent to `inner`, from zero.
    pub fn new(inner: impl LockBackend + 'static) -> Self {
        Self::over(Arc::new(inner))
    }

    /// [`new`](Self::new) for a backend already shared.
    pub fn over(inner: Arc<dyn LockBackend>) -> Self {
        CountingTries {
            inner,
            tries: AtomicUsize::new(0),
            queued: AtomicUsize::new(0),
            passes: AtomicUsize::new(0),
        }
    }

    /// The tries answered so far.
    pub fn tries(&self) -> usize {
        self.tries.load(Ordering::SeqCst)
    }

    /// The passes ([`LockBackend::pass`]) that handed the lock to a new owner.
    pub fn passes(&self) -> usize {
        self.passes.load(Ordering::SeqCst)
    }

    /// The queued tries among [`tries`](Self::tries).
    pub fn queued_tries(&self) -> usize {
        self.queued.load(Ordering::SeqCst)
    }

    /// The backend the tries go to.
    pub fn inner(&self) -> &Arc<dyn LockBackend> {
        &self.inner
    }
}

// Every method forwarded, defaults included: one left out would run the trait's default
// instead of the inner backend's (a queue never kept, a wake-up never heard).
#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl LockBackend for CountingTries {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        let outcome = self.inner.try_acquire(key, ttl).await;
        self.tries.fetch_add(1, Ordering::SeqCst);
        outcome
    }
    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.inner.extend(lease, ttl).await
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }
    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        self.inner.wait_for_release(key, max).await
    }
    async fn try_acquire_queued(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: OwnerId,
    ) -> Result<Option<Lease>> {
        let outcome = self.inner.try_acquire_queued(key, ttl, waiter).await;
        self.queued.fetch_add(1, Ordering::SeqCst);
        self.tries.fetch_add(1, Ordering::SeqCst);
        outcome
    }
    async fn wait_for_turn(&self, key: &LockKey, waiter: OwnerId, max: Duration) -> Result<()> {
        self.inner.wait_for_turn(key, waiter, max).await
    }
    async fn wait_for_grant(
        &self,
        key: &LockKey,
        waiter: OwnerId,
        ttl: Duration,
        max: Duration,
    ) -> Result<Option<Lease>> {
        self.inner.wait_for_grant(key, waiter, ttl, max).await
    }
    async fn leave_queue(&self, key: &LockKey, waiter: OwnerId) -> Result<()> {
        self.inner.leave_queue(key, waiter).await
    }
    async fn pass(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>> {
        let outcome = self.inner.pass(lease, ttl).await;
        if matches!(outcome, Ok(Some(_))) {
            self.passes.fetch_add(1, Ordering::SeqCst);
        }
        outcome
    }
    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        self.inner.inspect(key).await
    }
    async fn inspect_queue(&self, key: &LockKey) -> Result<Option<Vec<QueueEntry>>> {
        self.inner.inspect_queue(key).await
    }
    async fn watch_lost(&self, lease: &Lease) -> LostReason {
        self.inner.watch_lost(lease).await
    }
    async fn watch_lost_shared(&self, lease: &Lease, reader: OwnerId) -> LostReason {
        self.inner.watch_lost_shared(lease, reader).await
    }
    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        self.inner.advance_token(key, floor).await
    }
    async fn try_acquire_all(&self, keys: &[LockKey], ttl: Duration) -> Result<Option<Vec<Lease>>> {
        self.inner.try_acquire_all(keys, ttl).await
    }
    async fn try_acquire_shared(
        &self,
        key: &LockKey,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        self.inner.try_acquire_shared(key, reader, ttl).await
    }
    async fn extend_shared(&self, lease: &Lease, reader: OwnerId, ttl: Duration) -> Result<Lease> {
        self.inner.extend_shared(lease, reader, ttl).await
    }
    async fn release_shared(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
        self.inner.release_shared(lease, reader).await
    }
    async fn inspect_shared(&self, key: &LockKey) -> Result<Option<ReadPhase>> {
        self.inner.inspect_shared(key).await
    }
    async fn finish_background(&self) {
        self.inner.finish_background().await
    }
}
