//! The blocking API (`fencelock.sync`): `fencelock::blocking` under Python, every wait made
//! with the GIL released so other Python threads run meanwhile.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use pyo3::prelude::*;
use pyo3::types::PyBytes;

use fencelock::blocking;
use fencelock::{Error, LostReason};

use crate::args;
use crate::errors::to_py;
use crate::fence::Fence;

/// Takes locks from one backend, blocking (`Locker.connect(url)`); safe to share between
/// threads. Each `lock()` call is a holder of its own, so threads sharing one `Locker`
/// contend for a key like two processes.
#[pyclass(name = "Locker", module = "fencelock.sync", frozen)]
#[derive(Debug)]
pub(crate) struct Locker {
    inner: blocking::Locker,
    storage: blocking::Storage,
}

#[pymethods]
impl Locker {
    /// Connects to the backend `url` names, on a runtime of the locker's own.
    #[staticmethod]
    fn connect(py: Python<'_>, url: String) -> PyResult<Self> {
        let (inner, storage) = py
            .detach(|| blocking::Locker::connect(&url))
            .map_err(to_py)?;
        Ok(Locker { inner, storage })
    }

    /// Waits for the lock on `key` (up to `wait` seconds; `None`: without a bound) and returns
    /// its `Guard`, usable as `with`; `TimeoutError` when the wait runs out.
    #[pyo3(signature = (key, *, ttl=None, wait=Some(args::DEFAULT_WAIT_SECS), watchdog=true, fair=true))]
    fn lock(
        &self,
        py: Python<'_>,
        key: String,
        ttl: Option<f64>,
        wait: Option<f64>,
        watchdog: bool,
        fair: bool,
    ) -> PyResult<Guard> {
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
        let guard = py.detach(|| request.acquire()).map_err(to_py)?;
        Ok(Guard::new(key, guard))
    }

    /// Tries the lock on `key` once: its `Guard`, or `None` while another holder has it.
    #[pyo3(signature = (key, *, ttl=None, watchdog=true))]
    fn try_lock(
        &self,
        py: Python<'_>,
        key: String,
        ttl: Option<f64>,
        watchdog: bool,
    ) -> PyResult<Option<Guard>> {
        let mut request = self
            .inner
            .clone()
            .lock(&key)
            .wait(Duration::ZERO)
            .watchdog(watchdog);
        if let Some(ttl) = ttl {
            request = request.ttl(args::seconds("ttl", ttl)?);
        }
        match py.detach(|| request.acquire()) {
            Ok(guard) => Ok(Some(Guard::new(key, guard))),
            Err(Error::Timeout { .. }) => Ok(None),
            Err(e) => Err(to_py(e)),
        }
    }

    /// The fenced storage that lives next to this backend.
    fn storage(&self) -> Storage {
        Storage {
            inner: self.storage.clone(),
        }
    }

    /// Releases every guard taken through this locker that is still alive; returns how many
    /// were still held.
    fn shutdown(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.inner.shutdown()).map_err(to_py)
    }

    fn __repr__(&self) -> String {
        format!("Locker({})", self.inner.as_async().backend().name())
    }
}

/// A held lock, blocking. Use it as `with`, or call `release()`.
#[pyclass(name = "Guard", module = "fencelock.sync", frozen)]
#[derive(Debug)]
pub(crate) struct Guard {
    key: String,
    fence: Fence,
    /// `None` once released.
    inner: Mutex<Option<blocking::LockGuard>>,
}

impl Guard {
    fn new(key: String, guard: blocking::LockGuard) -> Self {
        Guard {
            key,
            fence: guard.fence().into(),
            inner: Mutex::new(Some(guard)),
        }
    }

    fn take(&self) -> Option<blocking::LockGuard> {
        self.inner
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn release_now(&self, py: Python<'_>) -> PyResult<bool> {
        match self.take() {
            Some(guard) => py.detach(|| guard.release()).map_err(to_py),
            None => Ok(false),
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
    #[getter]
    fn lost(&self) -> bool {
        match self.inner.try_lock() {
            Ok(guard) => guard.as_ref().is_none_or(|g| !g.is_held()),
            // Another thread is extending or releasing it.
            Err(_) => false,
        }
    }

    /// Renews the lease for `ttl` seconds from now; `LockLostError` if it is no longer held.
    fn extend(&self, py: Python<'_>, ttl: f64) -> PyResult<()> {
        let ttl = args::seconds("ttl", ttl)?;
        py.detach(|| {
            let guard = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
            match guard.as_ref() {
                Some(guard) => guard.extend(ttl),
                None => Err(Error::LeaseLost {
                    key: self.key.clone(),
                    reason: LostReason::Released,
                }),
            }
        })
        .map_err(to_py)
    }

    /// Releases the lock: `True` if it was still held, `False` if it had been lost or
    /// released already.
    fn release(&self, py: Python<'_>) -> PyResult<bool> {
        self.release_now(py)
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    /// Releases the lock; a release error is raised only when the block raised none.
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyAny>>,
        _exc: Option<Bound<'_, PyAny>>,
        _traceback: Option<Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        let raising = exc_type.is_some_and(|t| !t.is_none());
        match self.release_now(py) {
            Err(e) if !raising => Err(e),
            _ => Ok(false),
        }
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
    /// A guard Python drops unreleased is released, with the GIL let go while it waits.
    fn drop(&mut self) {
        if let Some(guard) = self.take() {
            Python::attach(|py| py.detach(|| drop(guard)));
        }
    }
}

/// Fenced storage, blocking.
#[pyclass(name = "Storage", module = "fencelock.sync", frozen)]
#[derive(Debug)]
pub(crate) struct Storage {
    inner: blocking::Storage,
}

#[pymethods]
impl Storage {
    /// Connects to the backend `url` names and gives its fenced storage.
    #[staticmethod]
    fn connect(py: Python<'_>, url: String) -> PyResult<Self> {
        let (_, inner) = py
            .detach(|| blocking::Locker::connect(&url))
            .map_err(to_py)?;
        Ok(Storage { inner })
    }

    /// Writes `data` to `key` under `fence`; `StaleError` (nothing written) if a newer fence
    /// came by.
    fn write(&self, py: Python<'_>, key: &str, fence: Fence, data: &[u8]) -> PyResult<()> {
        let data = data.to_vec();
        py.detach(|| self.inner.write(key, fence.into(), &data))
            .map_err(to_py)
    }

    /// Reads `key` under `fence`: the bytes, or `None`; `StaleError` if a newer fence came by.
    fn read<'py>(
        &self,
        py: Python<'py>,
        key: &str,
        fence: Fence,
    ) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let value = py
            .detach(|| self.inner.read(key, fence.into()))
            .map_err(to_py)?;
        Ok(value.map(|value| PyBytes::new(py, &value)))
    }

    /// The stored value and the newest fence admitted for `key`, without fencing.
    fn peek<'py>(
        &self,
        py: Python<'py>,
        key: &str,
    ) -> PyResult<Option<(Option<Bound<'py, PyBytes>>, Fence)>> {
        let snapshot = py.detach(|| self.inner.peek(key)).map_err(to_py)?;
        Ok(snapshot.map(|s| {
            (
                s.value.map(|value| PyBytes::new(py, &value)),
                Fence::from(s.fence),
            )
        }))
    }

    fn __repr__(&self) -> String {
        format!("Storage({})", self.inner.as_async().name())
    }
}
