//! `MemoryStorage`.

use std::sync::Arc;

use async_trait::async_trait;
use fencelock_core::{Fence, FenceRule, FencedStorage, LockKey, Result, Snapshot, validate_value};

use crate::BACKEND;
use crate::shards::Shards;

/// The default largest value: 16 MiB.
const DEFAULT_MAX_VALUE_LEN: usize = 16 << 20;

/// An in-process [`FencedStorage`]. Clones share the same data.
#[derive(Debug, Clone)]
pub struct MemoryStorage {
    slots: Arc<Shards<Snapshot>>,
    rule: FenceRule,
    max_value_len: usize,
}

impl Default for MemoryStorage {
    fn default() -> Self {
        Self::new()
    }
}

impl MemoryStorage {
    /// An empty storage applying [`FenceRule::Monotonic`].
    pub fn new() -> Self {
        MemoryStorage {
            slots: Arc::new(Shards::new()),
            rule: FenceRule::Monotonic,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
        }
    }

    /// Applies `rule` instead of the default.
    pub fn with_rule(mut self, rule: FenceRule) -> Self {
        self.rule = rule;
        self
    }

    /// Accepts values up to `max` bytes (default 16 MiB).
    pub fn with_max_value_len(mut self, max: usize) -> Self {
        self.max_value_len = max;
        self
    }

    /// Admits `fence` for `resource` and, if admitted, applies `update` to the slot.
    fn admit<T>(
        &self,
        operation: &'static str,
        resource: &LockKey,
        fence: Fence,
        update: impl FnOnce(&mut Option<Vec<u8>>) -> T,
    ) -> Result<T> {
        let mut shard = self.slots.lock(resource);
        let last = shard.get(resource).map(|s| s.fence);
        if let Err(stale) = self.rule.check(resource.as_str(), last, fence) {
            tracing::debug!(
                backend = BACKEND,
                operation,
                resource = %resource,
                token = fence.token.get(),
                outcome = "stale",
            );
            return Err(stale);
        }
        tracing::trace!(
            backend = BACKEND,
            operation,
            resource = %resource,
            token = fence.token.get(),
            outcome = "admitted",
        );
        let slot = shard
            .entry(resource.clone())
            .or_insert(Snapshot { value: None, fence });
        slot.fence = fence;
        Ok(update(&mut slot.value))
    }
}

#[async_trait]
impl FencedStorage for MemoryStorage {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn max_value_len(&self) -> usize {
        self.max_value_len
    }

    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        self.admit("fenced_read", resource, fence, |value| value.clone())
    }

    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        validate_value(value, self.max_value_len)?;
        self.admit("fenced_write", resource, fence, |slot| {
            *slot = Some(value.to_vec())
        })
    }

    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        Ok(self.slots.lock(resource).get(resource).cloned())
    }
}
