//! The conformance suite on the memory backend: directly, through `Box<dyn LockBackend>` and
//! through `Arc<dyn LockBackend>` (so the forwarding impls are exercised too).

use std::sync::Arc;

use fencelock::memory::{MemoryLockBackend, MemoryStorage};
use fencelock::{FencedStorage, LockBackend};
use fencelock_conformance::{Outage, Setup};

fn outage(backend: &MemoryLockBackend) -> Outage {
    let backend = backend.clone();
    Box::new(move || {
        backend.close();
        Box::pin(async {})
    })
}

fn storage() -> Arc<dyn FencedStorage> {
    Arc::new(MemoryStorage::new())
}

mod direct {
    use super::*;

    async fn setup() -> Setup {
        let backend = MemoryLockBackend::new();
        Setup::new(Arc::new(backend.clone()), storage(), outage(&backend))
    }

    fencelock_conformance::conformance_suite!(setup());
}

mod boxed_dyn {
    use super::*;

    async fn setup() -> Setup {
        let backend = MemoryLockBackend::new();
        let boxed: Box<dyn LockBackend> = Box::new(backend.clone());
        let storage: Box<dyn FencedStorage> = Box::new(MemoryStorage::new());
        Setup::new(Arc::new(boxed), Arc::new(storage), outage(&backend))
    }

    fencelock_conformance::conformance_suite!(setup());
}

mod arc_dyn {
    use super::*;

    async fn setup() -> Setup {
        let backend = MemoryLockBackend::new();
        let shared: Arc<dyn LockBackend> = Arc::new(backend.clone());
        Setup::new(Arc::new(shared), Arc::new(storage()), outage(&backend))
    }

    fencelock_conformance::conformance_suite!(setup());
}
