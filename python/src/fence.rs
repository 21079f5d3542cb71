//! `Fence`: the (token, owner) pair a holder presents with every storage operation.

use pyo3::prelude::*;

use fencelock::{FencingToken, OwnerId};

use crate::errors;

/// A fence: the grant's fencing token and owner. Present it with every storage operation;
/// the storage refuses a fence older than the newest it admitted (`StaleError`).
#[pyclass(module = "fencelock", frozen, eq, hash, from_py_object)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Fence {
    inner: fencelock::Fence,
}

#[pymethods]
impl Fence {
    /// A fence from its parts: `token` (1 or more) and `owner` (32 hex digits), as read back
    /// from `str(fence.owner)` and `fence.token`.
    #[new]
    fn new(token: u64, owner: &str) -> PyResult<Self> {
        let token = FencingToken::new(token)
            .ok_or_else(|| errors::invalid_argument("token=0: fencing tokens are 1 or more"))?;
        let owner = owner.parse::<OwnerId>().map_err(errors::to_py)?;
        Ok(Fence {
            inner: fencelock::Fence::new(token, owner),
        })
    }

    /// The fencing token: strictly increasing per key, grant after grant.
    #[getter]
    fn token(&self) -> u64 {
        self.inner.token.get()
    }

    /// The owner of the grant, 32 hex digits.
    #[getter]
    fn owner(&self) -> String {
        self.inner.owner.to_string()
    }

    fn __repr__(&self) -> String {
        format!(
            "Fence(token={}, owner='{}')",
            self.inner.token, self.inner.owner
        )
    }
}

impl Fence {
    /// The token, for Rust callers.
    pub(crate) fn token_value(&self) -> u64 {
        self.inner.token.get()
    }
}

impl From<fencelock::Fence> for Fence {
    fn from(inner: fencelock::Fence) -> Self {
        Fence { inner }
    }
}

impl From<Fence> for fencelock::Fence {
    fn from(fence: Fence) -> Self {
        fence.inner
    }
}
