//! The `FencedStorage` trait: the data side that refuses superseded holders.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::{Error, Result};
use crate::fence::Fence;
use crate::key::LockKey;

/// What a storage holds for one resource, as seen by [`FencedStorage::peek`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The value, `None` if only a fenced read has touched the resource.
    pub value: Option<Vec<u8>>,
    /// The last fence admitted for the resource.
    pub fence: Fence,
}

/// Storage that admits an operation only if its fence is not older than the last one admitted
/// for the same resource.
///
/// # Contract (DESIGN section 2)
///
/// Per resource the storage keeps the last admitted fence `last`, and admits an operation with
/// fence `f` iff [`FenceRule::admits`](crate::FenceRule::admits)`(last, f)`: by default `f.token > last.token`, or the same
/// token with the same owner. Admitting sets `last = f`. A refused operation changes nothing
/// and returns [`Error::Stale`] with both fences.
///
/// **Reads are fenced too.** [`read`](Self::read) advances the fence exactly like a write, even
/// when the resource has no value yet, so a holder that read under an old token can no longer
/// write after a newer holder read. [`peek`](Self::peek) is the unfenced observer read.
///
/// With this rule the admitted operations on a resource are serialisable in token order, so
/// data stays safe even when the lock service fails (two holders at once, repeated tokens):
/// the worst a misbehaving lock service causes is a refused holder, never a lost update.
/// Operations on *different* resources are fenced independently: a holder touching several
/// resources can be refused half way.
#[async_trait]
pub trait FencedStorage: Send + Sync + Debug + 'static {
    /// A short name for logs and errors.
    fn name(&self) -> &'static str;

    /// The largest value [`write`](Self::write) accepts, in bytes.
    fn max_value_len(&self) -> usize;

    /// A fenced read: admits `fence` (advancing the resource's fence) and returns the value.
    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>>;

    /// A fenced write: admits `fence` and stores `value`.
    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()>;

    /// The value and last admitted fence, without fencing. `None` if nothing was ever admitted.
    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>>;
}

/// Checks `value` against `max`: [`Error::ValueTooLarge`] when it does not fit.
pub fn validate_value(value: &[u8], max: usize) -> Result<()> {
    if value.len() > max {
        return Err(Error::ValueTooLarge {
            size: value.len(),
            max,
        });
    }
    Ok(())
}

macro_rules! forward_fenced_storage {
    ($($ptr:ident),*) => {$(
        // Every method forwarded, defaults included: a method added to the trait and left
        // out here would silently run the default instead of the pointee's.
        #[deny(clippy::missing_trait_methods)]
        #[async_trait]
        impl<T: FencedStorage + ?Sized> FencedStorage for $ptr<T> {
            fn name(&self) -> &'static str {
                (**self).name()
            }
            fn max_value_len(&self) -> usize {
                (**self).max_value_len()
            }
            async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
                (**self).read(resource, fence).await
            }
            async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
                (**self).write(resource, fence, value).await
            }
            async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
                (**self).peek(resource).await
            }
        }
    )*};
}

forward_fenced_storage!(Arc, Box);
