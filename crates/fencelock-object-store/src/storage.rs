//! `ObjectStorage`: the `FencedStorage` of DESIGN section 2 on an object store, one object per
//! resource.

use std::fmt;

use async_trait::async_trait;
use fencelock_core::{Fence, FenceRule, FencedStorage, LockKey, Result, Snapshot};
use object_store::path::{Path, PathPart};
use sha2::{Digest, Sha256};

use crate::fence::ObjectFence;

/// The longest encoded resource name kept readable; longer ones are named by their hash, so
/// that every object name fits S3's 1,024 bytes under a prefix of up to 256.
const MAX_READABLE_NAME: usize = 512;

/// A [`FencedStorage`] on an object store: each resource is one object under a prefix,
/// holding its last admitted fence and its value ([`ObjectFence`] does the fencing).
///
/// A resource `r` is the object `<prefix>/r/<r percent-encoded as one path segment>`, or,
/// when that encoding is longer than 512 bytes, `<prefix>/h/<SHA-256 of r in hex>`.
///
/// ```
/// # async fn demo() -> fencelock_core::Result<()> {
/// use std::sync::Arc;
///
/// use fencelock_core::{FencedStorage, Fence, FencingToken, LockKey, OwnerId};
/// use fencelock_object_store::ObjectStorage;
/// use object_store::memory::InMemory;
/// use object_store::path::Path;
///
/// let storage = ObjectStorage::connect(Arc::new(InMemory::new()), Path::from("app/fenced")).await?;
/// let resource = LockKey::new("ledger")?;
/// let fence = Fence::new(FencingToken::new(1).unwrap(), OwnerId::random());
/// assert_eq!(storage.read(&resource, fence).await?, None);
/// storage.write(&resource, fence, b"balance=100").await?;
/// assert_eq!(storage.peek(&resource).await?.unwrap().value.as_deref(), Some(&b"balance=100"[..]));
/// # Ok(()) }
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(demo()).unwrap();
/// ```
#[derive(Clone)]
pub struct ObjectStorage {
    fence: ObjectFence,
    prefix: Path,
}

impl fmt::Debug for ObjectStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ObjectStorage")
            .field("fence", &self.fence)
            .field("prefix", &self.prefix.as_ref())
            .finish()
    }
}

impl ObjectStorage {
    /// A storage of objects under `prefix` of `store`, once the store has passed the check of
    /// [`ObjectFence::connect`] (with its probe object under `prefix`).
    pub async fn connect(
        store: std::sync::Arc<dyn object_store::ObjectStore>,
        prefix: Path,
    ) -> Result<Self> {
        let fence = ObjectFence::connect(store, &prefix).await?;
        Ok(Self::from_fence(fence, prefix))
    }

    /// A storage of objects under `prefix`, fenced by `fence` (its store, rule, size limit
    /// and time-out).
    pub fn from_fence(fence: ObjectFence, prefix: Path) -> Self {
        ObjectStorage { fence, prefix }
    }

    /// The same storage with `rule` (default [`FenceRule::Monotonic`]).
    pub fn with_rule(mut self, rule: FenceRule) -> Self {
        self.fence = self.fence.with_rule(rule);
        self
    }

    /// The fencing underneath, for the application's own objects on the same store.
    pub fn fence(&self) -> &ObjectFence {
        &self.fence
    }

    /// The prefix every resource's object is under.
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The object that holds `resource`.
    pub fn object_path(&self, resource: &LockKey) -> Path {
        let readable = PathPart::from(resource.as_str());
        if readable.as_ref().len() <= MAX_READABLE_NAME {
            return self.prefix.clone().join("r").join(readable);
        }
        let digest = Sha256::digest(resource.as_str().as_bytes());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        self.prefix.clone().join("h").join(hex)
    }
}

#[async_trait]
impl FencedStorage for ObjectStorage {
    fn name(&self) -> &'static str {
        crate::error::BACKEND
    }

    fn max_value_len(&self) -> usize {
        self.fence.max_value_len()
    }

    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        let path = self.object_path(resource);
        let value = self
            .fence
            .get(&path, fence)
            .await
            .map_err(|e| named(e, resource))?;
        Ok(value.map(|bytes| bytes.to_vec()))
    }

    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        let path = self.object_path(resource);
        self.fence
            .put(&path, fence, value)
            .await
            .map_err(|e| named(e, resource))
    }

    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        let path = self.object_path(resource);
        let object = self.fence.peek(&path).await?;
        Ok(object.map(|object| Snapshot {
            value: object.value.map(|bytes| bytes.to_vec()),
            fence: object.fence,
        }))
    }
}

/// A refusal names the resource, not the object path it is stored under.
fn named(error: fencelock_core::Error, resource: &LockKey) -> fencelock_core::Error {
    match error {
        fencelock_core::Error::Stale {
            presented, current, ..
        } => fencelock_core::Error::Stale {
            resource: resource.to_string(),
            presented,
            current,
        },
        other => other,
    }
}
