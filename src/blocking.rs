//! A blocking API, for programs that have no async runtime: the same locks, fences and fenced
//! storage, each call waiting for its answer on the calling thread (feature `blocking`).
//!
//! A [`Locker`] owns a small runtime (one worker thread) on which its requests run and its
//! guards' watchdogs renew their leases in the background; guards and storage made from it
//! share that runtime, which stops when the last of them is dropped. Everything else is the
//! async API's: the same contract, errors and defaults.
//!
//! ```no_run
//! use std::time::Duration;
//! use fencelock::blocking::Locker;
//!
//! fn main() -> fencelock::Result<()> {
//!     let (locker, storage) = Locker::connect("redis://127.0.0.1:6379")?;
//!     let guard = locker.lock("nightly-report").ttl(Duration::from_secs(10)).acquire()?;
//!     // Work under the lock; a superseded holder's write is refused as stale.
//!     storage.write("report", guard.fence(), b"done")?;
//!     guard.release()?;
//!     Ok(())
//! }
//! ```
//!
//! A call from inside an async runtime would block one of its threads and is refused with
//! [`Error::Unsupported`]: use the async API ([`crate::Locker`]) there.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{
    Error, Fence, FencedStorage, FencingToken, Lease, LockBackend, LockKey, LockOptions, Result,
    Snapshot,
};

use crate::spec::BackendSpec;

/// How long dropping the last handle waits for the runtime's tasks (a release in flight).
const STOP_WAIT: Duration = Duration::from_secs(5);

/// The runtime every handle of one [`Locker`] runs on; stopped with the last of them.
struct Runtime(Option<tokio::runtime::Runtime>);

impl Runtime {
    fn start() -> Result<Arc<Self>> {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fencelock-blocking")
            .enable_all()
            .build()
            .map(|runtime| Arc::new(Runtime(Some(runtime))))
            .map_err(|e| Error::Backend {
                backend: "fencelock::blocking",
                message: format!("cannot start its runtime: {e}"),
                source: Some(Box::new(e)),
            })
    }

    /// Runs `future` to its end on the runtime, blocking this thread; refused inside an async
    /// runtime, where blocking would stall it.
    fn block_on<F: Future>(&self, future: F) -> Result<F::Output> {
        if tokio::runtime::Handle::try_current().is_ok() {
            return Err(Error::unsupported(
                "fencelock::blocking",
                "calls from inside an async runtime (they would block its thread; use the \
                 async API there)",
            ));
        }
        match &self.0 {
            Some(runtime) => Ok(runtime.block_on(future)),
            None => Err(Error::config(
                "fencelock::blocking: the runtime has stopped",
            )),
        }
    }

    fn handle(&self) -> Option<&tokio::runtime::Handle> {
        self.0.as_ref().map(tokio::runtime::Runtime::handle)
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if let Some(runtime) = self.0.take() {
            if tokio::runtime::Handle::try_current().is_ok() {
                runtime.shutdown_background();
            } else {
                runtime.shutdown_timeout(STOP_WAIT);
            }
        }
    }
}

impl fmt::Debug for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Runtime")
    }
}

/// Hands out locks, blocking: [`crate::Locker`] on a runtime of its own.
#[derive(Debug, Clone)]
pub struct Locker {
    inner: fencelock_core::Locker,
    runtime: Arc<Runtime>,
}

impl Locker {
    /// A locker over `backend`, with the default options.
    pub fn new<B: LockBackend>(backend: B) -> Result<Self> {
        Ok(Self::on(Runtime::start()?, backend))
    }

    /// A locker over `backend` on `runtime`, where the backend's background tasks (if it
    /// starts any) belong.
    fn on<B: LockBackend>(runtime: Arc<Runtime>, backend: B) -> Self {
        let inner = match runtime.handle() {
            Some(handle) => {
                let _entered = handle.enter();
                fencelock_core::Locker::new(backend)
            }
            None => fencelock_core::Locker::new(backend),
        };
        Locker { inner, runtime }
    }

    /// Parses the backend spec `spec` (a URL: `redis://...`, `postgres://...`, `memory://`)
    /// and connects: the locker, and the fenced storage that lives next to the backend.
    /// Errors as [`BackendSpec::parse`] and [`BackendSpec::connect`] give them.
    pub fn connect(spec: &str) -> Result<(Locker, Storage)> {
        let spec = BackendSpec::parse(spec)?;
        let runtime = Runtime::start()?;
        let connected = runtime.block_on(spec.connect())??;
        let storage = Storage {
            inner: connected.storage,
            runtime: runtime.clone(),
        };
        Ok((Self::on(runtime, connected.backend), storage))
    }

    /// The same locker with `options` as the defaults of its requests.
    pub fn with_options(self, options: LockOptions) -> Self {
        Locker {
            inner: self.inner.with_options(options),
            runtime: self.runtime,
        }
    }

    /// A request for the exclusive lock on `key`, with this locker's options; change them on
    /// the request and [`acquire`](LockRequest::acquire) it.
    pub fn lock(&self, key: impl AsRef<str>) -> LockRequest {
        LockRequest {
            inner: self.inner.lock(key),
            runtime: self.runtime.clone(),
        }
    }

    /// Takes the lock on `key` if it is free now; `None` if it is held.
    pub fn try_lock(&self, key: impl AsRef<str>) -> Result<Option<LockGuard>> {
        let guard = self.runtime.block_on(self.inner.try_lock(key))??;
        Ok(guard.map(|inner| LockGuard::new(inner, &self.runtime)))
    }

    /// Releases every lease of this locker still held, as [`crate::Locker::shutdown`].
    pub fn shutdown(&self) -> Result<usize> {
        self.runtime.block_on(self.inner.shutdown())?
    }

    /// The async locker underneath, for the lock kinds this module does not wrap.
    pub fn as_async(&self) -> &fencelock_core::Locker {
        &self.inner
    }
}

/// A request for one lock: the options of [`crate::LockRequest`], then
/// [`acquire`](Self::acquire).
#[must_use = "a lock request does nothing until acquired"]
#[derive(Debug)]
pub struct LockRequest {
    inner: fencelock_core::LockRequest,
    runtime: Arc<Runtime>,
}

impl LockRequest {
    /// The lease ttl.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.map(|r| r.ttl(ttl))
    }

    /// How long to wait for a held lock; zero tries once.
    pub fn wait(self, wait: Duration) -> Self {
        self.map(|r| r.wait(wait))
    }

    /// Waits for the lock without a bound.
    pub fn wait_forever(self) -> Self {
        self.map(fencelock_core::LockRequest::wait_forever)
    }

    /// Whether the guard renews the lease in the background.
    pub fn watchdog(self, on: bool) -> Self {
        self.map(|r| r.watchdog(on))
    }

    /// Whether the request waits its turn in arrival order (the default) or barges.
    pub fn fair(self, fair: bool) -> Self {
        self.map(|r| r.fair(fair))
    }

    /// Waits for the lock (within the request's wait budget) and returns its guard.
    pub fn acquire(self) -> Result<LockGuard> {
        let inner = self.runtime.block_on(self.inner.into_future())??;
        Ok(LockGuard::new(inner, &self.runtime))
    }

    fn map(
        self,
        change: impl FnOnce(fencelock_core::LockRequest) -> fencelock_core::LockRequest,
    ) -> Self {
        LockRequest {
            inner: change(self.inner),
            runtime: self.runtime,
        }
    }
}

/// A held lock, blocking: [`crate::LockGuard`]. Dropping it releases the lock and waits for
/// the release's answer.
#[derive(Debug)]
pub struct LockGuard {
    inner: Option<fencelock_core::LockGuard>,
    runtime: Arc<Runtime>,
}

impl LockGuard {
    fn new(inner: fencelock_core::LockGuard, runtime: &Arc<Runtime>) -> Self {
        LockGuard {
            inner: Some(inner),
            runtime: runtime.clone(),
        }
    }

    fn inner(&self) -> &fencelock_core::LockGuard {
        // Taken only by `release` and `drop`, which consume the guard.
        self.inner
            .as_ref()
            .unwrap_or_else(|| unreachable!("a guard's lock is taken only when it ends"))
    }

    /// The current lease (renewals update its `valid_until`).
    pub fn lease(&self) -> Lease {
        self.inner().lease()
    }

    /// The grant's fencing token.
    pub fn token(&self) -> FencingToken {
        self.inner().token()
    }

    /// The fence to present to the fenced storage.
    pub fn fence(&self) -> Fence {
        self.inner().fence()
    }

    /// Whether the lease is still held as far as this process can tell. Data safety never
    /// rests on this; the fence does that.
    pub fn is_held(&self) -> bool {
        self.inner().is_held()
    }

    /// Renews the lease for `ttl` from now; [`Error::LeaseLost`] if it is no longer held.
    pub fn extend(&self, ttl: Duration) -> Result<()> {
        self.runtime.block_on(self.inner().extend(ttl))?
    }

    /// Releases the lock; `Ok(false)` if it had already been lost.
    pub fn release(mut self) -> Result<bool> {
        match self.inner.take() {
            Some(inner) => self.runtime.block_on(inner.release())?,
            None => Ok(false),
        }
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        let Some(inner) = self.inner.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            // Inside an async runtime a blocking release would stall it: the guard releases
            // in the background on its own runtime, as the async guard does when dropped.
            if let Some(handle) = self.runtime.handle() {
                let _entered = handle.enter();
                drop(inner);
            }
            return;
        }
        // The release's error, if any, leaves the lease to lapse at its ttl, as a dropped
        // async guard's would.
        let _ = self.runtime.block_on(inner.release());
    }
}

/// Fenced storage, blocking: [`FencedStorage`] on the runtime of the [`Locker`] it came with.
#[derive(Debug, Clone)]
pub struct Storage {
    inner: Arc<dyn FencedStorage>,
    runtime: Arc<Runtime>,
}

impl Storage {
    /// The storage `storage`, run on `locker`'s runtime.
    pub fn new(storage: Arc<dyn FencedStorage>, locker: &Locker) -> Self {
        Storage {
            inner: storage,
            runtime: locker.runtime.clone(),
        }
    }

    /// Reads `resource`, admitting `fence` first ([`Error::Stale`] if a newer fence wrote).
    pub fn read(&self, resource: impl AsRef<str>, fence: Fence) -> Result<Option<Vec<u8>>> {
        let resource = LockKey::new(resource.as_ref())?;
        self.runtime.block_on(self.inner.read(&resource, fence))?
    }

    /// Writes `value` to `resource` under `fence` ([`Error::Stale`] if a newer fence wrote).
    pub fn write(&self, resource: impl AsRef<str>, fence: Fence, value: &[u8]) -> Result<()> {
        let resource = LockKey::new(resource.as_ref())?;
        self.runtime
            .block_on(self.inner.write(&resource, fence, value))?
    }

    /// The stored value and fence of `resource`, without admitting anything.
    pub fn peek(&self, resource: impl AsRef<str>) -> Result<Option<Snapshot>> {
        let resource = LockKey::new(resource.as_ref())?;
        self.runtime.block_on(self.inner.peek(&resource))?
    }

    /// The async storage underneath.
    pub fn as_async(&self) -> &Arc<dyn FencedStorage> {
        &self.inner
    }
}
