//! The suite can fail: deliberately broken backends, each with one fault, fail the properties
//! that target that fault (and a correct backend passes the same properties in
//! `conformance_memory.rs`).

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock::memory::{MemoryLockBackend, MemoryStorage};
use fencelock::{
    Capabilities, Error, Fence, FencedStorage, FencingToken, Lease, LockBackend, LockInfo, LockKey,
    QueueEntry, QueueRole, Result, Snapshot, TokenGuarantee, WakeUp, async_trait, validate_value,
};
use fencelock_conformance::{Setup, properties};

/// Fault: hands every grant the same token.
#[derive(Debug, Default)]
struct ReusesTokens(MemoryLockBackend);

/// Fault: releases whoever holds the lock, not only the lease's owner.
#[derive(Debug, Default)]
struct ReleasesAnyOwner(MemoryLockBackend);

/// Fault: keeps every lock for an hour, whatever ttl it was asked for; the lease it answers
/// still says the ttl asked for, so only the server side outlives it.
#[derive(Debug, Default)]
struct NeverExpires(MemoryLockBackend);

/// Fault: admits every operation, whatever its fence (a plain map, as storage without fencing).
#[derive(Debug, Default)]
struct SkipsFenceCheck(Mutex<HashMap<LockKey, Snapshot>>);

macro_rules! delegate_backend {
    ($ty:ident, release: $release:expr, try_acquire: $acquire:expr) => {
        #[async_trait]
        impl LockBackend for $ty {
            fn name(&self) -> &'static str {
                stringify!($ty)
            }
            fn capabilities(&self) -> fencelock::Capabilities {
                self.0.capabilities()
            }
            async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
                $acquire(&self.0, key, ttl).await
            }
            async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
                self.0.extend(lease, ttl).await
            }
            async fn release(&self, lease: &Lease) -> Result<bool> {
                $release(&self.0, lease).await
            }
            async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
                self.0.wait_for_release(key, max).await
            }
            async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
                self.0.inspect(key).await
            }
            async fn advance_token(
                &self,
                key: &LockKey,
                floor: FencingToken,
            ) -> Result<FencingToken> {
                self.0.advance_token(key, floor).await
            }
        }
    };
}

async fn honest_release(inner: &MemoryLockBackend, lease: &Lease) -> Result<bool> {
    inner.release(lease).await
}

async fn honest_acquire(
    inner: &MemoryLockBackend,
    key: &LockKey,
    ttl: Duration,
) -> Result<Option<Lease>> {
    inner.try_acquire(key, ttl).await
}

async fn same_token_acquire(
    inner: &MemoryLockBackend,
    key: &LockKey,
    ttl: Duration,
) -> Result<Option<Lease>> {
    let granted = inner.try_acquire(key, ttl).await?;
    Ok(granted.map(|lease| Lease {
        token: FencingToken::MIN,
        ..lease
    }))
}

/// Takes the lock for an hour and answers a lease of the ttl asked for.
async fn hour_long_acquire(
    inner: &MemoryLockBackend,
    key: &LockKey,
    ttl: Duration,
) -> Result<Option<Lease>> {
    let granted = inner.try_acquire(key, Duration::from_secs(3600)).await?;
    Ok(granted.map(|lease| Lease {
        ttl,
        valid_until: tokio::time::Instant::now() + ttl,
        ..lease
    }))
}

async fn release_any_owner(inner: &MemoryLockBackend, lease: &Lease) -> Result<bool> {
    let info = inner.inspect(&lease.key).await?;
    let Some(holder) = info.holder else {
        return Ok(false);
    };
    let theirs = Lease {
        owner: holder.owner,
        token: holder.token,
        ..lease.clone()
    };
    inner.release(&theirs).await
}

delegate_backend!(ReusesTokens, release: honest_release, try_acquire: same_token_acquire);
delegate_backend!(ReleasesAnyOwner, release: release_any_owner, try_acquire: honest_acquire);
delegate_backend!(NeverExpires, release: honest_release, try_acquire: hour_long_acquire);

#[async_trait]
impl FencedStorage for SkipsFenceCheck {
    fn name(&self) -> &'static str {
        "SkipsFenceCheck"
    }
    fn max_value_len(&self) -> usize {
        16 << 20
    }
    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        let mut map = self.0.lock().unwrap();
        let slot = map
            .entry(resource.clone())
            .or_insert(Snapshot { value: None, fence });
        slot.fence = fence;
        Ok(slot.value.clone())
    }
    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        validate_value(value, self.max_value_len())?;
        let snapshot = Snapshot {
            value: Some(value.to_vec()),
            fence,
        };
        self.0.lock().unwrap().insert(resource.clone(), snapshot);
        Ok(())
    }
    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        Ok(self.0.lock().unwrap().get(resource).cloned())
    }
}

/// A memory backend that may claim more than it does, or break one rule, as an author's
/// backend might: each fault is one flag.
#[derive(Debug, Clone, Default)]
struct Claims {
    inner: MemoryLockBackend,
    /// Capabilities that say the tokens are durable.
    durable: bool,
    /// Capabilities that say a release notifies waiters, while `wait_for_release` sleeps out
    /// its `max` as a polling backend's default does.
    notify_but_polls: bool,
    /// `extend` of the caller's own expired lease takes the lock again instead of
    /// `LeaseLost`.
    extend_revives: bool,
}

#[async_trait]
impl LockBackend for Claims {
    fn name(&self) -> &'static str {
        "claims"
    }
    fn capabilities(&self) -> Capabilities {
        let mut caps = self.inner.capabilities();
        if self.durable {
            caps.tokens = TokenGuarantee::Durable;
        }
        if self.notify_but_polls {
            caps.wake_up = WakeUp::Notify;
        }
        caps
    }
    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        self.inner.try_acquire(key, ttl).await
    }
    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        match self.inner.extend(lease, ttl).await {
            Err(Error::LeaseLost { .. }) if self.extend_revives => {
                match self.inner.try_acquire(&lease.key, ttl).await? {
                    Some(again) => Ok(Lease {
                        owner: lease.owner,
                        token: lease.token,
                        ..again
                    }),
                    None => Err(Error::lease_lost(
                        &lease.key,
                        fencelock::LostReason::Superseded,
                    )),
                }
            }
            other => other,
        }
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }
    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        if self.notify_but_polls {
            tokio::time::sleep(max).await;
            return Ok(());
        }
        self.inner.wait_for_release(key, max).await
    }
    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        self.inner.inspect(key).await
    }
    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        self.inner.advance_token(key, floor).await
    }
}

/// Fault: claims fairness, and queues its waiters, but grants the newest one first, and its
/// tries that do not queue pass the queue by.
#[derive(Debug, Default)]
struct Lifo {
    inner: MemoryLockBackend,
    queues: Mutex<HashMap<LockKey, Vec<fencelock::OwnerId>>>,
}

#[async_trait]
impl LockBackend for Lifo {
    fn name(&self) -> &'static str {
        "lifo"
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().with_fair(true)
    }
    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        self.inner.try_acquire(key, ttl).await
    }
    async fn try_acquire_queued(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: fencelock::OwnerId,
    ) -> Result<Option<Lease>> {
        let newest = {
            let mut queues = self.queues.lock().unwrap();
            let queue = queues.entry(key.clone()).or_default();
            if !queue.contains(&waiter) {
                queue.push(waiter);
            }
            queue.last() == Some(&waiter)
        };
        if !newest {
            return Ok(None);
        }
        let granted = self.inner.try_acquire(key, ttl).await?;
        if granted.is_some() {
            self.leave_queue(key, waiter).await?;
        }
        Ok(granted)
    }
    async fn wait_for_turn(
        &self,
        key: &LockKey,
        _waiter: fencelock::OwnerId,
        max: Duration,
    ) -> Result<()> {
        self.inner
            .wait_for_release(key, max.min(Duration::from_millis(20)))
            .await
    }
    async fn leave_queue(&self, key: &LockKey, waiter: fencelock::OwnerId) -> Result<()> {
        if let Some(queue) = self.queues.lock().unwrap().get_mut(key) {
            queue.retain(|w| *w != waiter);
        }
        Ok(())
    }
    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        self.inner.extend(lease, ttl).await
    }
    async fn release(&self, lease: &Lease) -> Result<bool> {
        self.inner.release(lease).await
    }
    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        self.inner.inspect(key).await
    }
    /// The holder, then the waiters in the order this backend grants them: newest first.
    async fn inspect_queue(&self, key: &LockKey) -> Result<Option<Vec<QueueEntry>>> {
        let held = self.inner.inspect(key).await?;
        let mut listed: Vec<QueueEntry> = held
            .holder
            .map(|fence| QueueEntry {
                owner: fence.owner,
                role: QueueRole::Holder,
                token: Some(fence.token),
                remaining: held.remaining.unwrap_or_default(),
            })
            .into_iter()
            .collect();
        let queues = self.queues.lock().unwrap();
        let waiting = queues.get(key).into_iter().flatten().rev();
        listed.extend(waiting.map(|waiter| QueueEntry {
            owner: *waiter,
            role: QueueRole::Waiting,
            token: None,
            remaining: Duration::from_secs(2),
        }));
        Ok(Some(listed))
    }
    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        self.inner.advance_token(key, floor).await
    }
}

/// A backend claiming durable tokens, reopened by `reopen` from the backend it was made with.
fn durable(reopen: fn(&Claims) -> Claims) -> Setup {
    let backend = Claims {
        durable: true,
        ..Claims::default()
    };
    let kept = backend.clone();
    setup(backend, MemoryStorage::new()).with_reopen(Box::new(move || {
        let again: Arc<dyn LockBackend> = Arc::new(reopen(&kept));
        Box::pin(async move { again })
    }))
}

fn setup(backend: impl LockBackend, storage: impl FencedStorage) -> Setup {
    Setup::new(
        Arc::new(backend),
        Arc::new(storage),
        Box::new(|| Box::pin(async {})),
    )
}

/// Runs `property` and asserts that it panicked.
async fn must_fail<F: Future<Output = ()> + Send + 'static>(name: &str, property: F) {
    let outcome = tokio::spawn(property).await;
    assert!(
        outcome.as_ref().is_err_and(|e| e.is_panic()),
        "property {name} passed on a broken backend"
    );
}

macro_rules! fails {
    ($test:ident: $property:ident on $make:expr) => {
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let setup = $make;
            must_fail(stringify!($property), async move {
                properties::$property(&setup).await
            })
            .await;
        }
    };
}

fn reused_tokens() -> Setup {
    setup(ReusesTokens::default(), MemoryStorage::new())
}
fn any_owner_release() -> Setup {
    setup(ReleasesAnyOwner::default(), MemoryStorage::new())
}
fn unfenced_storage() -> Setup {
    setup(MemoryLockBackend::new(), SkipsFenceCheck::default())
}

fails!(reused_tokens_fail_grant_contend_release: grant_contend_release on reused_tokens());
fails!(reused_tokens_fail_thousand_grants: tokens_increase_over_1000_grants on reused_tokens());
fails!(reused_tokens_fail_never_reused: tokens_never_reused_after_release_expiry_or_advance on reused_tokens());
fails!(reused_tokens_fail_paused_client: paused_client_is_refused on reused_tokens());
fails!(any_owner_release_fails_stale_release: stale_release_is_a_noop on any_owner_release());
fails!(any_owner_release_fails_double_release: double_release on any_owner_release());
fails!(any_owner_release_fails_lost_takeover: lost_fires_when_lease_is_taken_over on any_owner_release());
// Waited out, then tried for the suite's patience (10 s): the key is still held.
fails!(never_expiring_fails_expiry: expiry_hands_over on setup(NeverExpires::default(), MemoryStorage::new()));
fails!(unfenced_storage_fails_paused_client: paused_client_is_refused on unfenced_storage());
fails!(unfenced_storage_fails_older_token: storage_refuses_older_token on unfenced_storage());
fails!(unfenced_storage_fails_equal_token: storage_refuses_equal_token_other_owner on unfenced_storage());
fails!(unfenced_storage_fails_lost_update: fenced_reads_prevent_lost_update on unfenced_storage());
fails!(unfenced_storage_fails_refused_changes_nothing: refused_operation_changes_nothing on unfenced_storage());

fails!(extend_reviving_fails_own_expired: extend_of_own_expired_lease_is_lease_lost on setup(Claims { extend_revives: true, ..Claims::default() }, MemoryStorage::new()));
fails!(polling_notify_claim_fails_wake_up: notify_wake_up_comes_with_the_release on setup(Claims { notify_but_polls: true, ..Claims::default() }, MemoryStorage::new()));
// Reopened as a new, empty backend: the counters are gone although the capabilities claim them.
fails!(lost_counters_fail_durability: durable_tokens_survive_reopening on durable(|_| Claims { durable: true, ..Claims::default() }));
fails!(lifo_fails_arrival_order: fair_waiters_are_granted_in_arrival_order on setup(Lifo::default(), MemoryStorage::new()));
fails!(lifo_try_jumps_the_queue: a_try_does_not_jump_the_queue on setup(Lifo::default(), MemoryStorage::new()));
fails!(lifo_lists_its_queue_newest_first: inspect_queue_lists_the_holder_then_waiters_by_arrival on setup(Lifo::default(), MemoryStorage::new()));
fails!(unchecked_durability_claim_fails: durable_tokens_survive_reopening on setup(Claims { durable: true, ..Claims::default() }, MemoryStorage::new()));

/// The same properties pass on the honest memory backend, so the failures above are the faults'.
mod honest_control {
    use super::*;

    async fn honest() -> Setup {
        setup(MemoryLockBackend::new(), MemoryStorage::new())
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn targeted_properties_pass() {
        properties::grant_contend_release(&honest().await).await;
        properties::expiry_hands_over(&honest().await).await;
        properties::stale_release_is_a_noop(&honest().await).await;
        properties::double_release(&honest().await).await;
        properties::paused_client_is_refused(&honest().await).await;
        properties::storage_refuses_older_token(&honest().await).await;
        properties::extend_of_own_expired_lease_is_lease_lost(&honest().await).await;
        properties::notify_wake_up_comes_with_the_release(&honest().await).await;
        properties::fair_waiters_are_granted_in_arrival_order(&honest().await).await;
        properties::a_try_does_not_jump_the_queue(&honest().await).await;
        properties::inspect_queue_lists_the_holder_then_waiters_by_arrival(&honest().await).await;
        // Reopened on the same state (a clone shares the memory backend's tables).
        properties::durable_tokens_survive_reopening(&durable(Claims::clone)).await;
    }
}
