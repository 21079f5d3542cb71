//! `FencedStorageExt`: the storage's operations by key name, like `Locker::lock` takes them.

use std::future::Future;

use crate::error::Result;
use crate::fence::Fence;
use crate::key::LockKey;
use crate::storage::{FencedStorage, Snapshot};

/// [`FencedStorage`]'s operations taking the resource as any `AsRef<str>` (a `&str`, a
/// `String`, a [`LockKey`]), as [`Locker::lock`](crate::Locker::lock) does. The name is
/// checked once, before the storage is touched: an invalid one is
/// [`Error::InvalidKey`](crate::Error::InvalidKey) and changes nothing. Implemented for every
/// storage, `dyn FencedStorage` included.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fencelock_core::Result<()> {
/// use fencelock_core::{FencedStorageExt, Locker};
/// use fencelock_memory::{MemoryLockBackend, MemoryStorage};
/// let locker = Locker::new(MemoryLockBackend::new());
/// let storage = MemoryStorage::new();
/// let guard = locker.lock("accounts/7").await?;
/// storage.write_key("accounts/7", guard.fence(), b"42").await?;
/// assert_eq!(storage.read_key("accounts/7", guard.fence()).await?, Some(b"42".to_vec()));
/// assert!(storage.peek_key("").await.is_err());
/// guard.release().await?;
/// # Ok(()) }
/// ```
pub trait FencedStorageExt: FencedStorage {
    /// [`FencedStorage::read`] of the resource named `resource`.
    fn read_key(
        &self,
        resource: impl AsRef<str>,
        fence: Fence,
    ) -> impl Future<Output = Result<Option<Vec<u8>>>> + Send {
        let resource = LockKey::new(resource);
        async move { self.read(&resource?, fence).await }
    }

    /// [`FencedStorage::write`] of the resource named `resource`.
    fn write_key(
        &self,
        resource: impl AsRef<str>,
        fence: Fence,
        value: &[u8],
    ) -> impl Future<Output = Result<()>> + Send {
        let resource = LockKey::new(resource);
        async move { self.write(&resource?, fence, value).await }
    }

    /// [`FencedStorage::peek`] of the resource named `resource`.
    fn peek_key(
        &self,
        resource: impl AsRef<str>,
    ) -> impl Future<Output = Result<Option<Snapshot>>> + Send {
        let resource = LockKey::new(resource);
        async move { self.peek(&resource?).await }
    }
}

impl<S: FencedStorage + ?Sized> FencedStorageExt for S {}
