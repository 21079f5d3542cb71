//! The asyncio API: `Locker`, `Guard` and `Storage`, each call an awaitable that runs on the
//! tokio runtime of `pyo3-async-runtimes`.
//!
//! Cancelling the asyncio task that awaits a call drops its Rust future (pyo3-async-runtimes
//! propagates the cancellation), so a cancelled `lock()` gives its queue place back as a dropped
//! `LockRequest` does in Rust.

use std::future::{Future, IntoFuture};
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use pyo3_async_runtimes::tokio::get_runtime;
use tokio::sync::RwLock;
use tokio_util::sync::CancellationToken;

use fencelock::spec::{BackendSpec, StorageSpec};
use fencelock::{Error, FencedStorage, LockKey, LostReason};

use crate::args;
use crate::errors::to_py;
use crate::fence::Fence;

/// `future`, run on the tokio runtime, as a Python coroutine (`fencelock._aio.awaiting`):
/// `asyncio.create_task` takes it, and cancelling its task drops `future`.
fn awaitable<F, T>(py: Python<'_>, future: F) -> PyResult<Bound<'_, PyAny>>
where
    F: Future<Output = PyResult<T>> + Send + 'static,
    T: for<'py> IntoPyObject<'py> + Send + 'static,
{
    let running = pyo3_async_runtimes::tokio::future_into_py(py, future)?;
    py.import("fencelock._aio")?
        .getattr("awaiting")?
        .call1((running,))
}

/// Takes locks from one backend (`await Locker.connect(url)`).
///
/// Each `lock()` call is a holder of its own (a clone of the Rust locker), so two tasks or
/// threads sharing one `Locker` contend for a key like two processes; `shutdown()` still
/// releases every guard taken through it.
#[pyclass(module = "fencelock", frozen)]
#[derive(Debug)]
pub(crate) struct Locker {
    inner: fencelock::Locker,
    storage: Arc<dyn FencedStorage>,
}

#[pymethods]
impl Locker {
    /// Connects to the backend `url` names (`memory://`, `redis://host:6379`,
    /// `postgres://user@host/db`, `mysql://user@host/db`, ...); awaitable.
    #[staticmethod]
    fn connect(py: Python<'_>, url: String) -> PyResult<Bound<'_, PyAny>> {
        awaitable(py, async move {
            let spec = BackendSpec::parse(&url).map_err(to_py)?;
            let connected = spec.connect().await.map_err(to_py)?;
            Ok(Locker {
                inner: fencelock::Locker::new(connected.backend),
                storage: connected.storage,
            })
        })
    }

    /// Waits for the lock on `key`, up to `wait` seconds (`None`: without a bound; `0`: one
    /// try), and returns its `Guard`; `TimeoutError` when the wait runs out. `ttl` is the lease
    /// in seconds (`None`: the backend's default, 30 s within its bounds); the guard's
    /// watchdog renews it in the background unless `watchdog=False`.
    #[pyo3(signature = (key, *, ttl=None, wait=Some(args::DEFAULT_WAIT_SECS), watchdog=true, fair=true))]
    fn lock<'py>(
        &self,
        py: Python<'py>,
        key: String,
        ttl: Option<f64>,
        wait: Option<f64>,
        watchdog: bool,
        fair: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut request = self
            .inner
            .clone()
            .lock(&key)
            .wait(args::wait(wait)?)
            .watchdog(watchdog)
            .fair(fair);
        if let Some(ttl) = ttl {
            request = request.ttl(args::seconds("ttl", ttl)?);
        }
        let request = request.into_future();
        awaitable(py, async move {
            let guard = request.await.map_err(to_py)?;
            Ok(Guard::new(key, guard))
        })
    }

    /// Tries the lock on `key` once: its `Guard`, or `None` while another holder has it.
    #[pyo3(signature = (key, *, ttl=None, watchdog=true))]
    fn try_lock<'py>(
        &self,
        py: Python<'py>,
        key: String,
        ttl: Option<f64>,
        watchdog: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let mut request = self
            .inner
            .clone()
            .lock(&key)
            .wait(std::time::Duration::ZERO)
            .watchdog(watchdog);
        if let Some(ttl) = ttl {
            request = request.ttl(args::seconds("ttl", ttl)?);
        }
        let request = request.into_future();
        awaitable(py, async move {
            match request.await {
                Ok(guard) => Ok(Some(Guard::new(key, guard))),
                Err(Error::Timeout { .. }) => Ok(None),
                Err(e) => Err(to_py(e)),
            }
        })
    }

    /// The fenced storage that lives next to this backend (same server, same connection
    /// settings).
    fn storage(&self) -> Storage {
        Storage {
            inner: self.storage.clone(),
        }
    }

    /// Releases every guard taken through this locker that is still alive and waits for the
    /// releases of dropped ones; returns how many were still held. Await it before the program
    /// ends.
    fn shutdown<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let locker = self.inner.clone();
        awaitable(py, async move { locker.shutdown().await.map_err(to_py) })
    }

    fn __repr__(&self) -> String {
        format!("Locker({})", self.inner.backend().name())
    }
}

/// A held lock. Use it as `async with`, or `await guard.release()`.
///
/// Dropping a guard without releasing it releases the lock in the background.
#[pyclass(module = "fencelock", frozen)]
#[derive(Debug)]
pub(crate) struct Guard {
    key: String,
    fence: Fence,
    /// `None` once released; a lock, not a mutex, so `extend` calls may overlap.
    inner: Arc<RwLock<Option<fencelock::LockGuard>>>,
    lost: CancellationToken,
}

impl Guard {
    fn new(key: String, guard: fencelock::LockGuard) -> Self {
        Guard {
            key,
            fence: guard.fence().into(),
            lost: guard.lost_token(),
            inner: Arc::new(RwLock::new(Some(guard))),
        }
    }

    fn released(key: &str) -> Error {
        Error::LeaseLost {
            key: key.to_owned(),
            reason: LostReason::Released,
        }
    }
}

#[pymethods]
impl Guard {
    /// The key this guard holds.
    #[getter]
    fn key(&self) -> &str {
        &self.key
    }

    /// The fence to present with every storage operation.
    #[getter]
    fn fence(&self) -> Fence {
        self.fence
    }

    /// The grant's fencing token (`guard.fence.token`).
    #[getter]
    fn token(&self) -> u64 {
        self.fence.token_value()
    }

    /// Whether the lease is gone as far as this process can tell: lost, expired or released.
    /// Data safety never rests on it; the fence does that.
    #[getter]
    fn lost(&self) -> bool {
        if self.lost.is_cancelled() {
            return true;
        }
        match self.inner.try_read() {
            Ok(guard) => guard.as_ref().is_none_or(|g| !g.is_held()),
            // A release is under way.
            Err(_) => true,
        }
    }

    /// Completes when the lease is lost, with the reason (`"released"`, `"superseded"`,
    /// `"not_held"`, `"session_ended"`, `"deadline_passed"`); awaitable.
    fn wait_lost<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let lost = match self.inner.try_read() {
            Ok(guard) => guard.as_ref().map(fencelock::LockGuard::lost),
            Err(_) => None,
        };
        awaitable(py, async move {
            Ok(match lost {
                Some(lost) => lost.await.word(),
                None => LostReason::Released.word(),
            })
        })
    }

    /// Renews the lease for `ttl` seconds from now; `LockLostError` if it is no longer held.
    fn extend<'py>(&self, py: Python<'py>, ttl: f64) -> PyResult<Bound<'py, PyAny>> {
        let ttl = args::seconds("ttl", ttl)?;
        let (inner, key) = (self.inner.clone(), self.key.clone());
        awaitable(py, async move {
            match inner.read().await.as_ref() {
                Some(guard) => guard.extend(ttl).await.map_err(to_py),
                None => Err(to_py(Guard::released(&key))),
            }
        })
    }

    /// Releases the lock: `True` if it was still held, `False` if it had been lost or
    /// released already.
    fn release<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        awaitable(py, async move {
            let guard = inner.write().await.take();
            match guard {
                Some(guard) => guard.release().await.map_err(to_py),
                None => Ok(false),
            }
        })
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let guard = slf.unbind();
        awaitable(py, async move { Ok(guard) })
    }

    /// Releases the lock. A release error is raised only when the block ended without an
    /// exception of its own (which is never hidden); the exception, if any, goes on.
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        exc_type: Option<Bound<'py, PyAny>>,
        _exc: Option<Bound<'py, PyAny>>,
        _traceback: Option<Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let inner = self.inner.clone();
        let raising = exc_type.is_some_and(|t| !t.is_none());
        awaitable(py, async move {
            let guard = inner.write().await.take();
            if let Some(guard) = guard {
                match guard.release().await {
                    Err(e) if !raising => return Err(to_py(e)),
                    _ => {}
                }
            }
            Ok(false)
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "Guard(key={:?}, token={}, lost={})",
            self.key,
            self.fence.token_value(),
            self.lost()
        )
    }
}

impl Drop for Guard {
    /// A guard Python drops unreleased releases in the background, on the runtime its
    /// watchdog runs on (a Rust guard dropped outside a runtime could not).
    fn drop(&mut self) {
        if let Ok(mut guard) = self.inner.try_write()
            && let Some(guard) = guard.take()
        {
            let _entered = get_runtime().enter();
            drop(guard);
        }
    }
}

/// Fenced storage: values written and read under a fence, a superseded fence refused with
/// `StaleError`.
#[pyclass(module = "fencelock", frozen)]
#[derive(Debug)]
pub(crate) struct Storage {
    inner: Arc<dyn FencedStorage>,
}

#[pymethods]
impl Storage {
    /// Connects to the fenced storage `url` names (any backend spec, or a storage-only one
    /// this build has); awaitable.
    #[staticmethod]
    fn connect(py: Python<'_>, url: String) -> PyResult<Bound<'_, PyAny>> {
        awaitable(py, async move {
            let spec = StorageSpec::parse(&url).map_err(to_py)?;
            let inner = spec.connect().await.map_err(to_py)?;
            Ok(Storage { inner })
        })
    }

    /// Writes `data` to `key` under `fence`; `StaleError` (nothing written) if a newer fence
    /// came by.
    fn write<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        fence: Fence,
        data: &[u8],
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = LockKey::new(key).map_err(to_py)?;
        let (storage, data) = (self.inner.clone(), data.to_vec());
        awaitable(py, async move {
            storage
                .write(&key, fence.into(), &data)
                .await
                .map_err(to_py)
        })
    }

    /// Reads `key` under `fence` (admitting it, so older fences are refused from then on):
    /// the bytes, or `None` if nothing was written; `StaleError` if a newer fence came by.
    fn read<'py>(&self, py: Python<'py>, key: &str, fence: Fence) -> PyResult<Bound<'py, PyAny>> {
        let key = LockKey::new(key).map_err(to_py)?;
        let storage = self.inner.clone();
        awaitable(py, async move {
            let value = storage.read(&key, fence.into()).await.map_err(to_py)?;
            Ok(value.map(|value| Python::attach(|py| PyBytes::new(py, &value).unbind())))
        })
    }

    /// The stored value and the newest fence admitted for `key`, without fencing:
    /// `(bytes | None, Fence)`, or `None` if no fence was ever admitted.
    fn peek<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyAny>> {
        let key = LockKey::new(key).map_err(to_py)?;
        let storage = self.inner.clone();
        awaitable(py, async move {
            let snapshot = storage.peek(&key).await.map_err(to_py)?;
            Ok(snapshot.map(|snapshot| {
                let value = snapshot
                    .value
                    .map(|value| Python::attach(|py| PyBytes::new(py, &value).unbind()));
                (value, Fence::from(snapshot.fence))
            }))
        })
    }

    fn __repr__(&self) -> String {
        format!("Storage({})", self.inner.name())
    }
}
