//! `FileStorage`: fenced values in a directory.

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;
use fencelock_core::{Fence, FenceRule, FencedStorage, LockKey, Result, Snapshot, validate_value};

use crate::layout::{BACKEND, Layout, Space, blocking};
use crate::state::DataState;

/// The largest value accepted: 16 MiB. Each write rewrites the whole file, so values are meant
/// to be small.
const MAX_VALUE_LEN: usize = 16 << 20;

/// A [`FencedStorage`] keeping one file per resource (the last admitted fence and the value)
/// in a directory, next to a [`FileLockBackend`](crate::FileLockBackend)'s locks or alone.
/// Clones share the directory.
///
/// Every fenced read and write admits its fence by [`FenceRule::Monotonic`] (DESIGN section
/// 2) under the resource's exclusive file lock, and a changed fence or value is on disk
/// (written aside, flushed, renamed, directory flushed) before the call returns, so processes
/// sharing the directory agree on every resource's fence, and a crash never takes back an
/// admitted operation. A fenced read whose fence is already the resource's writes nothing.
#[derive(Debug, Clone)]
pub struct FileStorage {
    layout: Arc<Layout>,
}

impl FileStorage {
    /// Opens the values in `dir`, creating the directory (and its parents) when missing.
    pub async fn open(dir: impl AsRef<Path>) -> Result<Self> {
        let layout = Layout::new(dir.as_ref())?;
        let created = layout.clone();
        blocking(move || created.create(&[Space::Data])).await?;
        Ok(FileStorage {
            layout: Arc::new(layout),
        })
    }

    /// The directory this storage's values live in (absolute).
    pub fn dir(&self) -> &Path {
        self.layout.root()
    }

    /// Admits `fence` for `resource` under its lock and, if admitted, stores `write`'s value
    /// (or keeps the value, for `None`). Returns the value as it is afterwards.
    async fn admit(
        &self,
        resource: &LockKey,
        fence: Fence,
        write: Option<Vec<u8>>,
    ) -> Result<Option<Vec<u8>>> {
        let layout = self.layout.clone();
        let entry = layout.entry(Space::Data, resource);
        let resource = resource.clone();
        blocking(move || {
            layout.update(&entry, |bytes| {
                let current = match bytes {
                    Some(bytes) => Some(DataState::decode(&entry.file("state"), bytes)?),
                    None => None,
                };
                let last = current.as_ref().map(|c| c.fence);
                FenceRule::Monotonic.check(resource.as_str(), last, fence)?;
                let value = current.and_then(|c| c.value);
                match write {
                    Some(value) => {
                        let next = DataState {
                            fence,
                            value: Some(value),
                        };
                        Ok((Some(next.encode()), None))
                    }
                    None if last == Some(fence) => Ok((None, value)),
                    None => {
                        let next = DataState {
                            fence,
                            value: value.clone(),
                        };
                        Ok((Some(next.encode()), value))
                    }
                }
            })
        })
        .await
    }
}

#[async_trait]
impl FencedStorage for FileStorage {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn max_value_len(&self) -> usize {
        MAX_VALUE_LEN
    }

    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        self.admit(resource, fence, None).await
    }

    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        validate_value(value, MAX_VALUE_LEN)?;
        self.admit(resource, fence, Some(value.to_vec())).await?;
        Ok(())
    }

    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        let layout = self.layout.clone();
        let entry = layout.entry(Space::Data, resource);
        blocking(move || {
            let Some(bytes) = layout.read(&entry)? else {
                return Ok(None);
            };
            let state = DataState::decode(&entry.file("state"), &bytes)?;
            Ok(Some(Snapshot {
                value: state.value,
                fence: state.fence,
            }))
        })
        .await
    }
}
