//! What a backend hands the suite.

use std::any::Any;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use fencelock_core::{FencedStorage, LockBackend};

/// A boxed future, as returned by an [`Outage`].
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

/// Makes the backend unreachable for the rest of the test: kill the server, black-hole its
/// connections, end its sessions. Called at most once per test.
pub type Outage = Box<dyn Fn() -> BoxFuture<()> + Send + Sync>;

/// Opens the backend again on the same durable state (a new client to the same server, the
/// same directory reopened), as a restarted process would: the durability properties grant
/// through it.
pub type Reopen = Box<dyn Fn() -> BoxFuture<Arc<dyn LockBackend>> + Send + Sync>;

/// One backend under test, fresh for each property.
pub struct Setup {
    /// The lock backend.
    pub backend: Arc<dyn LockBackend>,
    /// A fenced storage of the same family (or any storage, for lock-only backends).
    pub storage: Arc<dyn FencedStorage>,
    /// Takes the backend away, for the `lost()` property.
    pub outage: Outage,
    /// Whatever must live as long as the test: spawned servers, throwaway schemas.
    pub keep_alive: Vec<Box<dyn Any + Send + Sync>>,
    /// Reopens the backend on the same state. Required when its capabilities claim durable
    /// tokens: the suite checks the claim through it.
    pub reopen: Option<Reopen>,
    /// The same backend as an operator reaches it, for the operator's steps
    /// (`advance_token`), when the role under test may not take them. `None`: the backend.
    pub operator: Option<Arc<dyn LockBackend>>,
}

impl fmt::Debug for Setup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Setup")
            .field("backend", &self.backend)
            .field("storage", &self.storage)
            .finish_non_exhaustive()
    }
}

impl Setup {
    /// A setup without anything to keep alive.
    pub fn new(
        backend: Arc<dyn LockBackend>,
        storage: Arc<dyn FencedStorage>,
        outage: Outage,
    ) -> Self {
        Setup {
            backend,
            storage,
            outage,
            keep_alive: Vec::new(),
            reopen: None,
            operator: None,
        }
    }

    /// With `reopen`, which opens the backend again on the same durable state.
    pub fn with_reopen(mut self, reopen: Reopen) -> Self {
        self.reopen = Some(reopen);
        self
    }

    /// With `operator`, the same backend (the same server and namespace) as an operator
    /// reaches it: the suite takes the operator's steps (`advance_token`) through it. For a
    /// backend under test that runs as a role without the operator's rights.
    pub fn with_operator(mut self, operator: Arc<dyn LockBackend>) -> Self {
        self.operator = Some(operator);
        self
    }

    /// The backend the operator's steps go through: [`operator`](Self::operator) if set,
    /// otherwise the backend under test.
    pub fn operator(&self) -> &dyn LockBackend {
        self.operator.as_deref().unwrap_or(&*self.backend)
    }

    /// A setup for [`storage_suite!`](crate::storage_suite): `backend` only supplies fencing
    /// tokens for `storage`, the storage under test. The storage properties never take the
    /// backend away, so its [`Outage`] panics, saying so, if anything calls it.
    pub fn for_storage(backend: Arc<dyn LockBackend>, storage: Arc<dyn FencedStorage>) -> Self {
        Setup::new(
            backend,
            storage,
            Box::new(|| -> BoxFuture<()> {
                panic!("a Setup::for_storage has no outage: run it with storage_suite!")
            }),
        )
    }

    /// Keeps `value` alive for the duration of the test.
    pub fn keep(mut self, value: impl Any + Send + Sync) -> Self {
        self.keep_alive.push(Box::new(value));
        self
    }
}
