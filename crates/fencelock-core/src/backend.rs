//! The `LockBackend` trait: the contract every lock service meets.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::capabilities::Capabilities;
use crate::error::{Error, LostReason, Result};
use crate::fence::{FencingToken, OwnerId};
use crate::key::LockKey;
use crate::kinds::ReadPhase;
use crate::lease::{Lease, LockInfo, QueueEntry};

/// The shortest ttl any backend accepts (a backend may ask for more with
/// [`Capabilities::min_ttl`]).
///
/// Below it the drift margin (`ttl / 100 + 2 ms`, see [`drift_margin`](crate::drift_margin))
/// would eat most or all of the lease: at 2 ms a grant is already past its deadline when it
/// arrives. At 10 ms a lease is valid for 7.9 ms from the moment its request is sent, and the
/// watchdog pauses about 2.6 ms between renewals.
pub const MIN_TTL: Duration = Duration::from_millis(10);

/// A lock service that grants leases with fencing tokens.
///
/// # Contract
///
/// - **Mutual exclusion while valid.** While a lease is held and its `valid_until` has not
///   passed, no other `try_acquire` of the same key succeeds, provided the backend's
///   [`TimeAuthority`](crate::TimeAuthority) and the drift margin hold. Once they fail (a
///   paused client, a jumping clock), two holders may overlap: the fence is what keeps data
///   safe then, not the lock.
/// - **Token order.** Each grant of a key carries a token strictly greater than every token
///   granted for that key before, including after release, expiry and
///   [`advance_token`](Self::advance_token), for as long as the counter survives (see
///   [`TokenGuarantee`](crate::TokenGuarantee)). Tokens are never reused.
/// - **Extend** keeps the owner and the token and never re-creates a lock that is gone: when the
///   lock expired, was released or is held by another owner, it fails with
///   [`Error::LeaseLost`] and changes nothing.
/// - **Release** deletes the lock only if this lease still holds it; it returns `false`
///   when the lease was already lost, and never releases another owner's lock.
/// - **Shared (reader) locks** are optional ([`Capabilities::kinds`]`.shared`; the default
///   methods return [`Error::Unsupported`]). A backend that offers them keeps readers and the
///   exclusive lock of a key in one state: an exclusive grant (a writer) is refused while any
///   reader's lease is valid, and a reader is refused while an exclusive lease is valid.
///   Overlapping readers form a **read phase** that has one fence: the first reader of a phase
///   takes a new token from the key's counter (the one exclusive grants use) and draws the
///   phase's owner; every reader that joins while the phase lives gets that same token and
///   owner in its [`Lease`], so [`FencedStorage`](crate::FencedStorage) admits them all, and a
///   writer granted after the phase has a greater token and fences them out. A phase ends
///   when its last reader's lease ends; the next reader starts a new phase with a new token.
///   Each reader is told apart by its own `reader` id (drawn by the caller), which extend
///   and release of that reader carry.
/// - **Input** is checked first: a ttl below [`Capabilities::min_ttl`] (never less than
///   [`MIN_TTL`]) or above [`Capabilities::max_ttl`] is [`Error::InvalidTtl`] and touches
///   nothing; [`validate_ttl`] does that check.
#[async_trait]
pub trait LockBackend: Send + Sync + Debug + 'static {
    /// A short name for logs and errors (`memory`, `redis`, `redlock`, `pg-lease`, ...).
    fn name(&self) -> &'static str;

    /// The backend's guarantees.
    fn capabilities(&self) -> Capabilities;

    /// Takes the lock if it is free, without waiting. `Ok(None)` when another owner holds it.
    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>>;

    /// Renews `lease` for `ttl` from now, keeping its owner and token.
    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease>;

    /// Releases `lease`. `Ok(false)` when it was no longer held by this owner: only when the
    /// backend knows that (its server said so, or the lease's deadline has passed). A release
    /// whose outcome is unknown (the connection failed before its answer came: it may have
    /// run) is an error, never `Ok(false)`, which callers read as a lease lost while held.
    async fn release(&self, lease: &Lease) -> Result<bool>;

    /// Waits until the lock on `key` may have been released, or at most `max`.
    ///
    /// A hint only: it may return early or spuriously, and the caller tries again. The default
    /// sleeps for `max`; backends override it with a real wake-up.
    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        let _ = key;
        tokio::time::sleep(max).await;
        Ok(())
    }

    /// [`try_acquire`](Self::try_acquire) for a request that keeps trying: `waiter` is drawn
    /// once per request and presented with each of its tries. A backend that hands a released
    /// lock to its waiters in arrival order ([`Capabilities::fair`]) keeps `waiter`'s place
    /// in a queue between tries and grants a free lock only to the first live waiter of that
    /// queue; a place lapses when its waiter stops trying for the backend's place ttl (a
    /// waiter that vanished) and is given up at once by [`leave_queue`](Self::leave_queue).
    /// The default ignores `waiter`.
    async fn try_acquire_queued(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: OwnerId,
    ) -> Result<Option<Lease>> {
        let _ = waiter;
        self.try_acquire(key, ttl).await
    }

    /// Waits until it may be `waiter`'s turn for `key` (the lock was handed to it, or its
    /// holder's time ran out), at most `max`; a fair backend also returns in time for the
    /// next try to keep the waiter's place. A hint, like
    /// [`wait_for_release`](Self::wait_for_release), which is the default.
    async fn wait_for_turn(&self, key: &LockKey, waiter: OwnerId, max: Duration) -> Result<()> {
        let _ = waiter;
        self.wait_for_release(key, max).await
    }

    /// [`wait_for_turn`](Self::wait_for_turn) on a backend that may hand a released lock to
    /// its first queued waiter itself: returns the lease when the lock was handed to
    /// `waiter` while it waited, `Ok(None)` otherwise (then the caller tries again, as after
    /// `wait_for_turn`). A handed lease has `waiter` as its owner and `ttl` (the ttl of the
    /// waiter's tries) as its ttl, but the backend granted it for a short hand-off ttl, which
    /// its `valid_until` counts conservatively: the caller renews it
    /// ([`extend`](Self::extend)) to hold it for `ttl`. Until the caller takes it up, the
    /// grant is the waiter's place: the waiter's next
    /// [`try_acquire_queued`](Self::try_acquire_queued) finds it as its own, and
    /// [`leave_queue`](Self::leave_queue) gives it up. The default waits with
    /// `wait_for_turn` and never returns a grant.
    ///
    /// A grant returned here must come from the server's own state (an answer to a request
    /// of this waiter, or a change the server reports of its data), never from a message
    /// another client could send: a backend whose hand-off is announced by a message anyone
    /// may publish (`NOTIFY`, Redis pub/sub) keeps the default, and the waiter's next
    /// [`try_acquire_queued`](Self::try_acquire_queued) takes the handed lock up.
    async fn wait_for_grant(
        &self,
        key: &LockKey,
        waiter: OwnerId,
        ttl: Duration,
        max: Duration,
    ) -> Result<Option<Lease>> {
        let _ = ttl;
        self.wait_for_turn(key, waiter, max).await.map(|()| None)
    }

    /// Gives up `waiter`'s place in the queue of `key`, if it has one: a request that timed
    /// out, failed or was cancelled, and so never took up a grant the backend handed to
    /// `waiter` ([`wait_for_grant`](Self::wait_for_grant)), which is released too. Never
    /// affects a grant of another waiter. The default does nothing.
    async fn leave_queue(&self, key: &LockKey, waiter: OwnerId) -> Result<()> {
        let _ = (key, waiter);
        Ok(())
    }

    /// Ends `lease` and grants its key to a new owner in the same write on the server, with
    /// the key's next token and `ttl`: the lock passes from one holder of this process to
    /// another without being free in between
    /// ([`Capabilities::passes`](crate::Capabilities::passes)). A
    /// [`Locker`](crate::Locker) calls it at a release when a barging waiter of the same key
    /// waits in the same locker, and hands the returned lease to that waiter.
    ///
    /// `Ok(None)` when nothing was passed and the caller releases `lease` as usual: the
    /// backend has no such step (the default), `lease` is no longer held, the key has a
    /// queued waiter (a pass never goes ahead of a fair request's place), or no token can be
    /// issued in one step (an epoch to start). The returned lease has a fresh owner, a token
    /// above `lease`'s and every earlier one of the key, and `ttl`; its `valid_until` is
    /// counted from when the pass was sent. On an error the outcome is unknown: `lease` may
    /// have ended, and a lease passed in that write lapses after `ttl`.
    async fn pass(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>> {
        let _ = (lease, ttl);
        Ok(None)
    }

    /// The current holder, its token and remaining time, and the key's last token. During a
    /// read phase the holder is the phase's shared fence.
    async fn inspect(&self, key: &LockKey) -> Result<LockInfo>;

    /// The key's queue, in the order the backend grants: the holder (or the readers of a
    /// read phase) first, then whoever waits. `Ok(None)` where the backend keeps no queue it
    /// can list (the default); an empty list when nobody holds or waits. For operators, like
    /// [`inspect`](Self::inspect): it takes nothing and decides nothing.
    async fn inspect_queue(&self, key: &LockKey) -> Result<Option<Vec<QueueEntry>>> {
        let _ = key;
        Ok(None)
    }

    /// Completes when the backend learns, between renewals, that `lease` is lost (the session
    /// holding it ended, say), with the reason; never completes while the lease may be held.
    ///
    /// A guard's supervisor awaits it beside the watchdog (on or off), so
    /// [`LockGuard::lost`](crate::LockGuard::lost) fires and `is_held()` turns false as soon
    /// as the backend knows, not at the next renewal or the deadline. The default never
    /// completes: a backend without such news leaves loss to the renewals and the deadline.
    async fn watch_lost(&self, lease: &Lease) -> LostReason {
        let _ = lease;
        std::future::pending().await
    }

    /// [`watch_lost`](Self::watch_lost) for `reader`'s lease in the read phase of `lease`
    /// (readers of a phase share one lease fence, so the reader id tells them apart). Default:
    /// never completes, like `watch_lost`.
    async fn watch_lost_shared(&self, lease: &Lease, reader: OwnerId) -> LostReason {
        let _ = (lease, reader);
        std::future::pending().await
    }

    /// Takes every key of `keys` in one atomic step without waiting: each with a token of its
    /// own key's counter and a lease of `ttl`, returned in the order of `keys`; `Ok(None)`, with
    /// nothing taken and nothing changed, when any key is held, in a read phase, or has waiters
    /// queued for it (a set never overtakes a queue). Called only on a backend whose
    /// [`Capabilities::atomic_sets`] is true, with at least two distinct keys, sorted.
    /// Default: [`Error::Unsupported`].
    async fn try_acquire_all(&self, keys: &[LockKey], ttl: Duration) -> Result<Option<Vec<Lease>>> {
        let _ = (keys, ttl);
        Err(Error::unsupported(self.name(), ATOMIC_SETS))
    }

    /// Joins (or starts) the read phase of `key` as `reader`, without waiting. `Ok(None)`
    /// while an exclusive lease is valid. The lease carries the phase's shared token and
    /// owner; asked again by a reader already in the live phase, it renews that reader.
    /// Default: [`Error::Unsupported`].
    async fn try_acquire_shared(
        &self,
        key: &LockKey,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        let _ = (key, reader, ttl);
        Err(Error::unsupported(self.name(), SHARED))
    }

    /// Renews `reader`'s lease in the phase of `lease`; [`Error::LeaseLost`] when the reader
    /// is no longer in that phase. Never re-creates a reader or a phase that is gone.
    /// Default: [`Error::Unsupported`].
    async fn extend_shared(&self, lease: &Lease, reader: OwnerId, ttl: Duration) -> Result<Lease> {
        let _ = (lease, reader, ttl);
        Err(Error::unsupported(self.name(), SHARED))
    }

    /// Removes `reader` from the phase of `lease`; `Ok(false)` when it was no longer in it.
    /// Default: [`Error::Unsupported`].
    async fn release_shared(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
        let _ = (lease, reader);
        Err(Error::unsupported(self.name(), SHARED))
    }

    /// The live read phase of `key`, if any: its fence, how many readers, the longest time
    /// left. Default: [`Error::Unsupported`].
    async fn inspect_shared(&self, key: &LockKey) -> Result<Option<ReadPhase>> {
        let _ = key;
        Err(Error::unsupported(self.name(), SHARED))
    }

    /// Raises the key's token counter to at least `floor`, so the next grant carries a token
    /// greater than `floor`. Returns the counter's value afterwards. Used to recover after a
    /// counter was lost (for example a Redis restart without persistence). A floor with no
    /// token above it (at or past the largest token the backend hands out) is
    /// [`Error::InvalidConfig`] and changes nothing ([`validate_floor`]).
    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken>;

    /// Completes once the calls this backend left running in the background have ended: a
    /// backend that answers as soon as a quorum decided (Redlock) lets the other nodes' calls
    /// finish in tasks, such as a release's past the quorum or a failed acquisition's undo.
    /// Each call is bounded by the backend's own time limits, and so is this wait.
    ///
    /// A runtime that shuts down drops those tasks, and a node whose call never went out
    /// keeps the lock until its ttl; so a program waits for this before it exits
    /// ([`Locker::shutdown`](crate::Locker::shutdown) does). Nothing it waits for decides an
    /// outcome already returned. Default: nothing is left in the background.
    async fn finish_background(&self) {}
}

/// What [`Error::Unsupported`] names for a backend that grants no set in one step.
const ATOMIC_SETS: &str = "sets of keys granted in one atomic step";

/// What [`Error::Unsupported`] names for a backend without shared locks.
const SHARED: &str = "shared (reader) locks";

/// Checks `ttl` against the backend's bounds: at least [`Capabilities::min_ttl`] (and never
/// less than [`MIN_TTL`]), at most [`Capabilities::max_ttl`]. The error names the bound.
pub fn validate_ttl(ttl: Duration, capabilities: &Capabilities) -> Result<()> {
    let min = capabilities.min_ttl.max(MIN_TTL);
    if ttl < min {
        return Err(Error::InvalidTtl {
            ttl,
            reason: format!("ttl must be at least {min:?}"),
        });
    }
    if ttl > capabilities.max_ttl {
        let raise = capabilities
            .max_ttl_setting
            .map(|setting| format!(" (raise it with {setting})"))
            .unwrap_or_default();
        return Err(Error::InvalidTtl {
            ttl,
            reason: format!(
                "ttl must be at most {:?} on this backend{raise}",
                capabilities.max_ttl
            ),
        });
    }
    Ok(())
}

/// Checks a floor for [`LockBackend::advance_token`] against `largest`, the greatest token the
/// backend can hand out (`counter` says whose: "a Redis counter"). The next grant must carry a
/// token above the floor, so a floor of `largest` or more is [`Error::InvalidConfig`] and
/// touches nothing: raised that far, the counter could never grant again.
pub fn validate_floor(floor: FencingToken, largest: u64, counter: &str) -> Result<()> {
    if floor.get() >= largest {
        return Err(Error::config(format!(
            "token floor {floor} leaves no token above it: {counter} goes up to {largest}"
        )));
    }
    Ok(())
}

macro_rules! forward_lock_backend {
    ($($ptr:ident),*) => {$(
        // Every method forwarded, defaults included: a method added to the trait and left
        // out here would silently run the default instead of the pointee's.
        #[deny(clippy::missing_trait_methods)]
        #[async_trait]
        impl<T: LockBackend + ?Sized> LockBackend for $ptr<T> {
            fn name(&self) -> &'static str {
                (**self).name()
            }
            fn capabilities(&self) -> Capabilities {
                (**self).capabilities()
            }
            async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
                (**self).try_acquire(key, ttl).await
            }
            async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
                (**self).extend(lease, ttl).await
            }
            async fn release(&self, lease: &Lease) -> Result<bool> {
                (**self).release(lease).await
            }
            async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
                (**self).wait_for_release(key, max).await
            }
            async fn try_acquire_queued(
                &self,
                key: &LockKey,
                ttl: Duration,
                waiter: OwnerId,
            ) -> Result<Option<Lease>> {
                (**self).try_acquire_queued(key, ttl, waiter).await
            }
            async fn wait_for_turn(&self, key: &LockKey, waiter: OwnerId, max: Duration) -> Result<()> {
                (**self).wait_for_turn(key, waiter, max).await
            }
            async fn wait_for_grant(
                &self,
                key: &LockKey,
                waiter: OwnerId,
                ttl: Duration,
                max: Duration,
            ) -> Result<Option<Lease>> {
                (**self).wait_for_grant(key, waiter, ttl, max).await
            }
            async fn leave_queue(&self, key: &LockKey, waiter: OwnerId) -> Result<()> {
                (**self).leave_queue(key, waiter).await
            }
            async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
                (**self).inspect(key).await
            }
            async fn inspect_queue(&self, key: &LockKey) -> Result<Option<Vec<QueueEntry>>> {
                (**self).inspect_queue(key).await
            }
            async fn watch_lost(&self, lease: &Lease) -> LostReason {
                (**self).watch_lost(lease).await
            }
            async fn watch_lost_shared(&self, lease: &Lease, reader: OwnerId) -> LostReason {
                (**self).watch_lost_shared(lease, reader).await
            }
            async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
                (**self).advance_token(key, floor).await
            }
            async fn try_acquire_all(&self, keys: &[LockKey], ttl: Duration) -> Result<Option<Vec<Lease>>> {
                (**self).try_acquire_all(keys, ttl).await
            }
            async fn try_acquire_shared(
                &self,
                key: &LockKey,
                reader: OwnerId,
                ttl: Duration,
            ) -> Result<Option<Lease>> {
                (**self).try_acquire_shared(key, reader, ttl).await
            }
            async fn extend_shared(&self, lease: &Lease, reader: OwnerId, ttl: Duration) -> Result<Lease> {
                (**self).extend_shared(lease, reader, ttl).await
            }
            async fn release_shared(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
                (**self).release_shared(lease, reader).await
            }
            async fn inspect_shared(&self, key: &LockKey) -> Result<Option<ReadPhase>> {
                (**self).inspect_shared(key).await
            }
            async fn pass(&self, lease: &Lease, ttl: Duration) -> Result<Option<Lease>> {
                (**self).pass(lease, ttl).await
            }
            async fn finish_background(&self) {
                (**self).finish_background().await
            }
        }
    )*};
}

forward_lock_backend!(Arc, Box);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capabilities::{TimeAuthority, TokenGuarantee, WakeUp};

    fn capabilities() -> Capabilities {
        Capabilities::new(
            TokenGuarantee::None,
            TimeAuthority::Client,
            WakeUp::Notify,
            Duration::from_secs(60),
        )
    }

    fn refusal(ttl: Duration, capabilities: &Capabilities) -> String {
        match validate_ttl(ttl, capabilities) {
            Err(Error::InvalidTtl { reason, .. }) => reason,
            other => panic!("ttl {ttl:?}: expected InvalidTtl, got {other:?}"),
        }
    }

    #[test]
    fn ttls_below_the_minimum_are_refused_naming_it() {
        let caps = capabilities();
        assert_eq!(caps.min_ttl, MIN_TTL);
        for ttl in [
            Duration::ZERO,
            Duration::from_millis(1),
            Duration::from_millis(2),
            MIN_TTL - Duration::from_nanos(1),
        ] {
            assert_eq!(refusal(ttl, &caps), "ttl must be at least 10ms");
        }
        validate_ttl(MIN_TTL, &caps).unwrap();
        assert_eq!(
            refusal(Duration::from_secs(61), &caps),
            "ttl must be at most 60s on this backend"
        );
    }

    #[test]
    fn a_floor_without_a_token_above_it_is_refused() {
        let largest = i64::MAX.unsigned_abs();
        validate_floor(
            FencingToken::new(largest - 1).unwrap(),
            largest,
            "a counter",
        )
        .unwrap();
        for floor in [largest, largest + 1, u64::MAX] {
            match validate_floor(FencingToken::new(floor).unwrap(), largest, "a counter") {
                Err(Error::InvalidConfig { message, .. }) => assert!(
                    message.contains("no token above it") && message.contains("a counter"),
                    "{message}"
                ),
                other => panic!("floor {floor}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_backend_may_raise_the_minimum_but_not_lower_it() {
        let raised = capabilities().with_min_ttl(Duration::from_millis(50));
        assert_eq!(
            refusal(Duration::from_millis(20), &raised),
            "ttl must be at least 50ms"
        );
        validate_ttl(Duration::from_millis(50), &raised).unwrap();
        let lowered = capabilities().with_min_ttl(Duration::from_millis(1));
        assert_eq!(lowered.min_ttl, MIN_TTL);
        assert_eq!(
            refusal(Duration::from_millis(5), &lowered),
            "ttl must be at least 10ms"
        );
    }
}
