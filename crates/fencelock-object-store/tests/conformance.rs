//! The storage group of the conformance suite on `ObjectStorage`: on the in-memory object
//! store, through `Box<dyn FencedStorage>`, and on a real S3-compatible server (moto).
//! The tokens come from the memory lock backend: the storage is what is under test.

#![allow(clippy::unwrap_used)]

mod support;

use std::sync::Arc;

use fencelock_conformance::Setup;
use fencelock_core::FencedStorage;
use fencelock_memory::MemoryLockBackend;
use fencelock_object_store::ObjectStoreConfig;

async fn storage(url: &str) -> Arc<dyn FencedStorage> {
    let config: ObjectStoreConfig = url.parse().unwrap();
    support::moto::connected(config.connect_storage().await)
}

async fn memory_setup() -> Setup {
    Setup::for_storage(
        Arc::new(MemoryLockBackend::new()),
        storage("memory-objects://").await,
    )
}

async fn boxed_setup() -> Setup {
    let config: ObjectStoreConfig = "memory-objects://".parse().unwrap();
    let boxed: Box<dyn FencedStorage> = Box::new(config.connect_object_storage().await.unwrap());
    Setup::for_storage(Arc::new(MemoryLockBackend::new()), Arc::new(boxed))
}

async fn s3_setup() -> Setup {
    let url = support::moto::url();
    Setup::for_storage(Arc::new(MemoryLockBackend::new()), storage(&url).await)
}

mod memory {
    fencelock_conformance::storage_suite!(super::memory_setup());
}

mod boxed {
    fencelock_conformance::storage_suite!(super::boxed_setup());
}

mod s3 {
    fencelock_conformance::storage_suite!(super::s3_setup());
}
