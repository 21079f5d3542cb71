//! Moving a key from one lock service to another without a stale write: [`move_past`].

use crate::backend::LockBackend;
use crate::error::Result;
use crate::fence::FencingToken;
use crate::key::LockKey;

/// What [`move_past`] found on the old service and did on the new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum MovedPast {
    /// The new service's counter for the key is at `counter`, at or above `last_grant`, the
    /// last token the old service granted: every grant of the new service carries a token
    /// above every token of the old one.
    Moved {
        /// The old service's last grant for the key, or, where it lost its record of the
        /// key's tokens, the largest token it may have granted
        /// ([`LockInfo::granted_at_most`](crate::LockInfo::granted_at_most)).
        last_grant: FencingToken,
        /// The new service's counter afterwards.
        counter: FencingToken,
        /// The token of a holder the old service still shows: its writes are admitted only
        /// until a holder of the new service writes, then refused as stale. Stop it first.
        still_held: Option<FencingToken>,
    },
    /// The old service never granted the key: nothing to move past, nothing changed (check
    /// the key and the old service's prefix or schema).
    NeverGranted,
}

/// Moves `key` from the lock service `from` to `to`: reads the last token `from` granted
/// (its [`inspect`](LockBackend::inspect)) and raises `to`'s counter past it
/// ([`advance_token`](LockBackend::advance_token)), so that the two services' grants form
/// one increasing sequence. Raising the new counter past the storage's fence instead is not
/// enough: the fence is the last token that wrote, and an old holder with a larger token that
/// has not written yet would be admitted after a new holder's write.
///
/// *The one step this cannot check:* call it once no client takes the lock on `from` any
/// more (switch the clients first); a grant `from` makes afterwards may carry a token the new
/// service also hands out. DESIGN section 2 (consequence 4) gives the argument.
/// `fencelock advance-token --past OLD_SPEC` is this call from the command line.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fencelock_core::Result<()> {
/// use std::time::Duration;
/// use fencelock_core::{LockBackend, LockKey, MovedPast, move_past};
/// use fencelock_memory::MemoryLockBackend;
///
/// let (old, new) = (MemoryLockBackend::new(), MemoryLockBackend::new());
/// let key = LockKey::new("nightly-report")?;
/// for _ in 0..5 {
///     let lease = old.try_acquire(&key, Duration::from_secs(1)).await?.unwrap();
///     old.release(&lease).await?;
/// }
/// let moved = move_past(&old, &new, &key).await?;
/// assert!(matches!(moved, MovedPast::Moved { last_grant, .. } if last_grant.get() == 5));
/// let lease = new.try_acquire(&key, Duration::from_secs(1)).await?.unwrap();
/// assert!(lease.token.get() > 5);
/// # Ok(()) }
/// ```
pub async fn move_past(
    from: &dyn LockBackend,
    to: &dyn LockBackend,
    key: &LockKey,
) -> Result<MovedPast> {
    let info = from.inspect(key).await?;
    // A bound above the real last grant moves the new counter further than needed, never
    // too little.
    let Some(last_grant) = info.last_token.or(info.granted_at_most) else {
        return Ok(MovedPast::NeverGranted);
    };
    let counter = to.advance_token(key, last_grant).await?;
    Ok(MovedPast::Moved {
        last_grant,
        counter,
        still_held: info.holder.map(|fence| fence.token),
    })
}
