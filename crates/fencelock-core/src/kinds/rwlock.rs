//! Read/write locks: readers share one read fence per phase, a writer is the key's
//! exclusive lock.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::backend::LockBackend;
use crate::capabilities::Capabilities;
use crate::error::{LostReason, Result};
use crate::fence::{Fence, FencingToken, OwnerId};
use crate::guard::LockGuard;
use crate::key::LockKey;
use crate::lease::{Lease, LockInfo};
use crate::locker::{LockRequest, Locker};

use super::upgrade::{UpgradeableReadGuard, UpgradeableReadRequest, WriteRequest};

/// A live read phase as [`LockBackend::inspect_shared`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadPhase {
    /// The fence every reader of the phase presents: the phase's token and shared owner.
    pub fence: Fence,
    /// How many readers hold a valid lease in the phase.
    pub readers: usize,
    /// The time left on the longest reader lease, as the backend sees it.
    pub remaining: Duration,
}

/// Read/write locks over one backend. Cheap to clone.
///
/// A **writer** is the key's exclusive lock (the same one [`Locker::lock`] takes), so its
/// grant takes a new token. **Readers** that overlap share one read fence: the first reader
/// of a phase takes a new token and the phase draws one owner, which every reader joining
/// while the phase lives presents too, so a [`FencedStorage`](crate::FencedStorage) admits
/// all of them, and a writer granted after them (whose token is greater) refuses them. The
/// contract is that of [`LockBackend::try_acquire_shared`]; a backend without it
/// ([`Capabilities::kinds`]`.shared` false) refuses readers with
/// [`Error::Unsupported`](crate::Error::Unsupported).
///
/// There is no writer preference: a stream of overlapping readers can keep a waiting writer
/// out. Readers should only read under their fence; two readers may both be admitted.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fencelock_core::Result<()> {
/// use fencelock_core::{Locker, RwLocker};
/// let rw = RwLocker::new(Locker::new(fencelock_memory::MemoryLockBackend::new()));
/// let a = rw.read("catalog").await?;
/// let b = rw.read("catalog").await?;
/// let read_fence = a.fence();
/// assert_eq!(read_fence, b.fence()); // one read fence for the phase
/// assert!(rw.try_write("catalog").await?.is_none()); // readers keep writers out
/// a.release().await?;
/// b.release().await?;
/// let w = rw.write("catalog").await?;
/// assert!(w.token() > read_fence.token); // a writer's token exceeds the read fence before it
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RwLocker {
    locker: Locker,
}

impl RwLocker {
    /// Read/write locks taken through `locker` (its options, its `shutdown`).
    pub fn new(locker: Locker) -> Self {
        RwLocker { locker }
    }

    /// The locker underneath. Its `lock(key)` excludes this key's readers and writers, but
    /// not its upgradeable reader's upgrade: where upgradeable readers are used, write through
    /// [`write`](Self::write).
    pub fn locker(&self) -> &Locker {
        &self.locker
    }

    /// A request to join the read phase of `key`; await it for a [`ReadGuard`].
    pub fn read(&self, key: impl AsRef<str>) -> ReadRequest {
        let reader = OwnerId::random();
        let backend = Arc::new(Reader {
            inner: self.locker.backend().clone(),
            reader,
        });
        ReadRequest {
            request: self.locker.over(backend).lock(key),
            reader,
        }
    }

    /// A request for the writer's (exclusive) lock on `key`. Where the backend offers shared
    /// locks, it takes the key's companion lock first, so that it is never granted between
    /// an upgradeable reader's read and its upgrade ([`WriteRequest`]).
    pub fn write(&self, key: impl AsRef<str>) -> WriteRequest {
        WriteRequest::new(&self.locker, key.as_ref())
    }

    /// A request for the upgradeable reader of `key`: a reader of the key's read phase that
    /// may later [`upgrade`](UpgradeableReadGuard::upgrade) to the writer, with no other
    /// writer in between. One at a time per key, beside plain readers
    /// ([`UpgradeableReadRequest`]); [`Error::Unsupported`](crate::Error::Unsupported) on a
    /// backend without shared locks.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> fencelock_core::Result<()> {
    /// use std::time::Duration;
    /// use fencelock_core::{Locker, RwLocker};
    /// let backend = fencelock_memory::MemoryLockBackend::new();
    /// let rw = RwLocker::new(Locker::new(backend.clone()));
    /// let other = RwLocker::new(Locker::new(backend));
    /// let upgradeable = rw.upgradeable_read("catalog").await?;
    /// let read_fence = upgradeable.fence();
    /// let plain = other.read("catalog").await?; // plain readers join beside it
    /// assert_eq!(plain.fence(), read_fence);
    /// assert!(other.try_upgradeable_read("catalog").await?.is_none()); // one at a time
    /// plain.release().await?;
    /// let writer = upgradeable.upgrade(Duration::from_secs(1)).await?;
    /// assert!(writer.token() > read_fence.token); // a new token: the read fence is now stale
    /// let reader = writer.downgrade().await?;
    /// assert!(reader.token() > read_fence.token);
    /// reader.release().await?;
    /// # Ok(()) }
    /// ```
    pub fn upgradeable_read(&self, key: impl AsRef<str>) -> UpgradeableReadRequest {
        UpgradeableReadRequest::new(self, key.as_ref())
    }

    /// Tries once to take the upgradeable reader: `Ok(None)` while another upgradeable
    /// reader or a writer holds the key.
    pub async fn try_upgradeable_read(
        &self,
        key: impl AsRef<str>,
    ) -> Result<Option<UpgradeableReadGuard>> {
        none_on_timeout(self.upgradeable_read(key).wait(Duration::ZERO).await)
    }

    /// Tries once to join the read phase: `Ok(None)` while a writer holds the key.
    pub async fn try_read(&self, key: impl AsRef<str>) -> Result<Option<ReadGuard>> {
        none_on_timeout(self.read(key).wait(Duration::ZERO).await)
    }

    /// Tries once to take the writer's lock: `Ok(None)` while readers or a writer hold it.
    pub async fn try_write(&self, key: impl AsRef<str>) -> Result<Option<LockGuard>> {
        none_on_timeout(self.write(key).wait(Duration::ZERO).await)
    }
}

pub(super) fn none_on_timeout<T>(outcome: Result<T>) -> Result<Option<T>> {
    match outcome {
        Ok(guard) => Ok(Some(guard)),
        Err(crate::Error::Timeout { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A request built by [`RwLocker::read`]; `.await` it for a [`ReadGuard`]. Waits while a
/// writer holds the key, as [`LockRequest`] does.
#[must_use = "a lock request does nothing until awaited"]
#[derive(Debug)]
pub struct ReadRequest {
    request: LockRequest,
    reader: OwnerId,
}

forward_request_options!(ReadRequest);

impl IntoFuture for ReadRequest {
    type Output = Result<ReadGuard>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<ReadGuard>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        let reader = self.reader;
        Box::pin(async move {
            let guard = self.request.await?;
            Ok(ReadGuard { guard, reader })
        })
    }
}

/// A reader's place in a read phase. Present [`fence`](Self::fence) (the phase's shared
/// fence) with every read. Renewal, `lost()`, release and drop are those of [`LockGuard`].
pub struct ReadGuard {
    guard: LockGuard,
    reader: OwnerId,
}

impl fmt::Debug for ReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadGuard")
            .field("reader", &self.reader)
            .field("guard", &self.guard)
            .finish()
    }
}

impl ReadGuard {
    /// The phase's fence, shared by every reader of the phase.
    pub fn fence(&self) -> Fence {
        self.guard.fence()
    }

    /// The phase's token.
    pub fn token(&self) -> FencingToken {
        self.guard.token()
    }

    /// This reader's own id (not part of the fence).
    pub fn reader(&self) -> OwnerId {
        self.reader
    }

    /// The lease: the phase's token and owner, this reader's deadline.
    pub fn lease(&self) -> Lease {
        self.guard.lease()
    }

    /// Whether this reader's lease is still held as far as this process can tell.
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Completes when this reader's lease is lost.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.guard.lost()
    }

    /// The guard underneath, kept as it is (renewal and all), for code that handles any
    /// [`LockGuard`].
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }

    /// The guard underneath, for `lost_token`, `extend` and the rest.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Leaves the read phase. `Ok(false)` if this reader's lease was already lost.
    pub async fn release(self) -> Result<bool> {
        self.guard.release().await
    }
}

/// One reader seen as a [`LockBackend`], so its lease rides a [`LockGuard`]: grant, renew
/// and release go to the `*_shared` methods with this reader's id.
#[derive(Debug)]
struct Reader {
    inner: Arc<dyn LockBackend>,
    reader: OwnerId,
}

#[async_trait]
impl LockBackend for Reader {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn capabilities(&self) -> Capabilities {
        // A set in one step, and a pass, are the inner backend's exclusive grant, not this
        // kind's.
        self.inner
            .capabilities()
            .with_atomic_sets(false)
            .with_passes(false)
    }

    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        self.inner.try_acquire_shared(key, self.reader, ttl).await
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.inner.extend_shared(lease, self.reader, ttl).await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release_shared(lease, self.reader).await
    }

    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        self.inner.wait_for_release(key, max).await
    }

    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        self.inner.inspect(key).await
    }

    async fn watch_lost(&self, lease: &Lease) -> LostReason {
        self.inner.watch_lost_shared(lease, self.reader).await
    }

    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        self.inner.advance_token(key, floor).await
    }
}
