//! Semaphores of N permits: each permit is a slot, an exclusive lock with its own tokens.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rand::RngExt;
use tokio::task::JoinSet;

use crate::backend::LockBackend;
use crate::capabilities::Capabilities;
use crate::error::{Error, LostReason, Result};
use crate::fence::{Fence, FencingToken};
use crate::guard::LockGuard;
use crate::key::LockKey;
use crate::lease::{Lease, LockInfo};
use crate::locker::{LockRequest, Locker};

/// The most slots a waiter listens to at once for a release (a random choice of them when
/// there are more); the others are tried again after the backoff pause.
const WATCHED_SLOTS: usize = 16;

/// A semaphore of `permits` permits on `key`, over any backend. Cheap to clone.
///
/// Permit `i` is the exclusive lock on the **slot key** `<key>/permit/<i>`, so at most
/// `permits` holders exist at once, and each slot has its own token sequence: a permit's
/// [`fence`](PermitGuard::fence) fences the data of its slot (say, a resource named
/// [`PermitGuard::slot_key`], or a partition the slot owns). One counter for all slots would
/// not do: holders of different slots overlap by design, so the storage would refuse every
/// holder but the newest. Data shared by all permit holders cannot be fenced by a permit;
/// that needs a lock.
///
/// A request tries the slots from a random one on, and while all are held it waits for a
/// release of any of them (up to 16 at once), with the locker's backoff.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fencelock_core::Result<()> {
/// use fencelock_core::{Locker, Semaphore};
/// let locker = Locker::new(fencelock_memory::MemoryLockBackend::new());
/// let uploads = Semaphore::new(&locker, "uploads", 2)?;
/// let a = uploads.acquire().await?;
/// let b = uploads.acquire().await?;
/// assert_ne!(a.slot(), b.slot());
/// assert!(uploads.try_acquire().await?.is_none()); // both permits are taken
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore {
    locker: Locker,
    key: LockKey,
    slots: Arc<[LockKey]>,
}

impl Semaphore {
    /// The longest `permits` accepted.
    pub const MAX_PERMITS: usize = 100_000;

    /// A semaphore of `permits` permits on `key`, taken through `locker`.
    ///
    /// [`Error::InvalidKey`] when `key` is invalid or so long that a slot key
    /// (`<key>/permit/<permits - 1>`) would pass [`LockKey::MAX_LEN`]: with 10 permits a key
    /// may have 503 bytes, with 100 permits 502. [`Error::InvalidConfig`] for zero permits or
    /// more than [`MAX_PERMITS`](Self::MAX_PERMITS). [`Error::Unsupported`] when the
    /// backend's [`Capabilities::kinds`] does not claim semaphores. Nothing touches the
    /// backend.
    pub fn new(locker: &Locker, key: impl AsRef<str>, permits: usize) -> Result<Self> {
        let backend = locker.backend();
        if !backend.capabilities().kinds.semaphore {
            return Err(Error::unsupported(backend.name(), "semaphores"));
        }
        let key = LockKey::new(key)?;
        if permits == 0 || permits > Self::MAX_PERMITS {
            return Err(Error::config(format!(
                "a semaphore has 1 to {} permits, not {permits}",
                Self::MAX_PERMITS
            )));
        }
        let slots = (0..permits)
            .map(|slot| slot_key(&key, slot))
            .collect::<Result<Arc<[LockKey]>>>()?;
        Ok(Semaphore {
            locker: locker.clone(),
            key,
            slots,
        })
    }

    /// The semaphore's key.
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// How many permits it has.
    pub fn permits(&self) -> usize {
        self.slots.len()
    }

    /// The key of slot `slot`, `<key>/permit/<slot>`, if `slot < permits`.
    pub fn slot_key(&self, slot: usize) -> Option<&LockKey> {
        self.slots.get(slot)
    }

    /// A request for a permit; await it for a [`PermitGuard`].
    pub fn acquire(&self) -> PermitRequest {
        let slots = Arc::new(Slots {
            inner: self.locker.backend().clone(),
            slots: self.slots.clone(),
        });
        PermitRequest {
            request: self.locker.over(slots).lock(&self.key),
            slots: self.slots.clone(),
        }
    }

    /// Tries every slot once: `Ok(None)` when all permits are held.
    pub async fn try_acquire(&self) -> Result<Option<PermitGuard>> {
        super::rwlock::none_on_timeout(self.acquire().wait(Duration::ZERO).await)
    }

    /// What the backend reports for each slot, in slot order.
    pub async fn inspect(&self) -> Result<Vec<LockInfo>> {
        let backend = self.locker.backend();
        let mut infos = Vec::with_capacity(self.slots.len());
        for slot in self.slots.iter() {
            infos.push(backend.inspect(slot).await?);
        }
        Ok(infos)
    }
}

/// `<key>/permit/<slot>`, refused when it passes [`LockKey::MAX_LEN`].
fn slot_key(key: &LockKey, slot: usize) -> Result<LockKey> {
    let name = format!("{key}/permit/{slot}");
    if name.len() > LockKey::MAX_LEN {
        return Err(Error::InvalidKey {
            key: key.as_str().chars().take(64).collect(),
            reason: "too long for a semaphore of this many permits: \
                     its slot keys <key>/permit/<n> would pass 512 bytes",
        });
    }
    LockKey::new(name)
}

/// A request built by [`Semaphore::acquire`]; `.await` it for a [`PermitGuard`].
#[must_use = "a lock request does nothing until awaited"]
#[derive(Debug)]
pub struct PermitRequest {
    request: LockRequest,
    slots: Arc<[LockKey]>,
}

forward_request_options!(PermitRequest);

impl IntoFuture for PermitRequest {
    type Output = Result<PermitGuard>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<PermitGuard>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        let slots = self.slots;
        Box::pin(async move {
            let guard = self.request.await?;
            let key = guard.lease().key;
            let slot = slots
                .iter()
                .position(|s| *s == key)
                .ok_or_else(|| Error::Backend {
                    backend: "semaphore",
                    message: format!("granted {key:?}, which is none of the semaphore's slots"),
                    source: None,
                })?;
            Ok(PermitGuard { guard, slot })
        })
    }
}

/// A held permit: slot [`slot`](Self::slot) of the semaphore. Renewal, `lost()`, release and
/// drop are those of [`LockGuard`].
pub struct PermitGuard {
    guard: LockGuard,
    slot: usize,
}

impl fmt::Debug for PermitGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitGuard")
            .field("slot", &self.slot)
            .field("guard", &self.guard)
            .finish()
    }
}

impl PermitGuard {
    /// Which slot this permit holds, `0..permits`.
    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The slot's key, `<key>/permit/<slot>`.
    pub fn slot_key(&self) -> LockKey {
        self.guard.lease().key
    }

    /// The slot's fence: present it with operations on the slot's data.
    pub fn fence(&self) -> Fence {
        self.guard.fence()
    }

    /// The slot's token.
    pub fn token(&self) -> FencingToken {
        self.guard.token()
    }

    /// Whether the permit is still held as far as this process can tell.
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Completes when the permit is lost.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.guard.lost()
    }

    /// The guard underneath, kept as it is (renewal and all), for code that handles any
    /// [`LockGuard`].
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }

    /// The guard underneath.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Gives the permit back. `Ok(false)` if it was already lost.
    pub async fn release(self) -> Result<bool> {
        self.guard.release().await
    }
}

/// The slots seen as one [`LockBackend`]: a grant is a grant of any free slot, whose lease
/// (slot key and all) the inner backend renews and releases as it is.
#[derive(Debug)]
struct Slots {
    inner: Arc<dyn LockBackend>,
    slots: Arc<[LockKey]>,
}

#[async_trait]
impl LockBackend for Slots {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        // A set in one step is the inner backend's exclusive grant, not this kind's; and a
        // permit is taken by plain tries of its slots, which hold no place in any queue, so
        // its request waits with backoff pauses (which also bound how long a permit freed
        // in a slot it does not watch goes unseen), not as a fair backend's queued waiter.
        self.inner
            .capabilities()
            .with_atomic_sets(false)
            .with_fair(false)
            .with_passes(false)
    }

    async fn try_acquire(&self, _key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        let start = rand::rng().random_range(0..self.slots.len());
        let mut failure = None;
        for slot in self.slots[start..].iter().chain(&self.slots[..start]) {
            match self.inner.try_acquire(slot, ttl).await {
                Ok(Some(lease)) => return Ok(Some(lease)),
                Ok(None) => {}
                // A retryable failure of one slot should not hide a free one further on.
                Err(e) if e.is_retryable() => failure = Some(e),
                Err(e) => return Err(e),
            }
        }
        failure.map_or(Ok(None), Err)
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.inner.extend(lease, ttl).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }

    async fn wait_for_release(&self, _key: &LockKey, max: Duration) -> Result<()> {
        let mut watched: Vec<LockKey> = self.slots.to_vec();
        if watched.len() > WATCHED_SLOTS {
            let mut rng = rand::rng();
            for i in 0..WATCHED_SLOTS {
                let j = rng.random_range(i..watched.len());
                watched.swap(i, j);
            }
            watched.truncate(WATCHED_SLOTS);
        }
        let mut waits = JoinSet::new();
        for slot in watched {
            let inner = self.inner.clone();
            waits.spawn(async move { inner.wait_for_release(&slot, max).await });
        }
        // The first slot that may have been released ends the wait; dropping the set stops
        // the others.
        match waits.join_next().await {
            Some(Ok(outcome)) => outcome,
            Some(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            _ => Ok(()),
        }
    }

    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        self.inner.inspect(key).await
    }

    async fn watch_lost(&self, lease: &Lease) -> LostReason {
        self.inner.watch_lost(lease).await
    }

    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        self.inner.advance_token(key, floor).await
    }
}
