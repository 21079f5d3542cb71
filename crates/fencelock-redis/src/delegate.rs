//! The `LockBackend` impl of every backend built on `Locks` (one server, a cluster), written
//! once.

/// Implements [`LockBackend`] for `$backend`, a struct with a `locks: Locks` field, by
/// handing every call to it.
macro_rules! delegate_lock_backend {
    ($backend:ty) => {
        // Every method forwarded, defaults included: a method added to the trait and left
        // out here would silently run the trait's default instead of `Locks`'.
        #[deny(clippy::missing_trait_methods)]
        #[async_trait::async_trait]
        impl fencelock_core::LockBackend for $backend {
            fn name(&self) -> &'static str {
                self.locks.conn.backend
            }

            fn capabilities(&self) -> fencelock_core::Capabilities {
                self.locks.capabilities
            }

            async fn try_acquire(
                &self,
                key: &fencelock_core::LockKey,
                ttl: std::time::Duration,
            ) -> fencelock_core::Result<Option<fencelock_core::Lease>> {
                self.locks.try_acquire(key, ttl).await
            }

            async fn extend(
                &self,
                lease: &fencelock_core::Lease,
                ttl: std::time::Duration,
            ) -> fencelock_core::Result<fencelock_core::Lease> {
                self.locks.extend(lease, ttl).await
            }

            async fn release(&self, lease: &fencelock_core::Lease) -> fencelock_core::Result<bool> {
                self.locks.release(lease).await
            }

            async fn wait_for_release(
                &self,
                key: &fencelock_core::LockKey,
                max: std::time::Duration,
            ) -> fencelock_core::Result<()> {
                self.locks.wait_for_release(key, max).await
            }

            async fn try_acquire_all(
                &self,
                keys: &[fencelock_core::LockKey],
                ttl: std::time::Duration,
            ) -> fencelock_core::Result<Option<Vec<fencelock_core::Lease>>> {
                self.locks.try_acquire_all(keys, ttl).await
            }

            async fn try_acquire_queued(
                &self,
                key: &fencelock_core::LockKey,
                ttl: std::time::Duration,
                waiter: fencelock_core::OwnerId,
            ) -> fencelock_core::Result<Option<fencelock_core::Lease>> {
                self.locks.try_acquire_queued(key, ttl, waiter).await
            }

            async fn wait_for_turn(
                &self,
                key: &fencelock_core::LockKey,
                waiter: fencelock_core::OwnerId,
                max: std::time::Duration,
            ) -> fencelock_core::Result<()> {
                self.locks.wait_for_turn(key, waiter, max).await
            }

            async fn wait_for_grant(
                &self,
                key: &fencelock_core::LockKey,
                waiter: fencelock_core::OwnerId,
                ttl: std::time::Duration,
                max: std::time::Duration,
            ) -> fencelock_core::Result<Option<fencelock_core::Lease>> {
                // A publish only wakes; a grant comes from the grant box's pop, whose reply
                // the server gives from the list the release script wrote (DESIGN 4.0.1).
                self.locks.wait_for_grant(key, waiter, ttl, max).await
            }

            async fn leave_queue(
                &self,
                key: &fencelock_core::LockKey,
                waiter: fencelock_core::OwnerId,
            ) -> fencelock_core::Result<()> {
                self.locks.leave_queue(key, waiter).await
            }

            async fn pass(
                &self,
                lease: &fencelock_core::Lease,
                ttl: std::time::Duration,
            ) -> fencelock_core::Result<Option<fencelock_core::Lease>> {
                self.locks.pass(lease, ttl).await
            }

            async fn inspect(
                &self,
                key: &fencelock_core::LockKey,
            ) -> fencelock_core::Result<fencelock_core::LockInfo> {
                self.locks.inspect(key).await
            }

            async fn inspect_queue(
                &self,
                key: &fencelock_core::LockKey,
            ) -> fencelock_core::Result<Option<Vec<fencelock_core::QueueEntry>>> {
                self.locks.inspect_queue(key).await
            }

            async fn watch_lost(
                &self,
                lease: &fencelock_core::Lease,
            ) -> fencelock_core::LostReason {
                self.locks.watch_lost(lease).await
            }

            async fn watch_lost_shared(
                &self,
                lease: &fencelock_core::Lease,
                reader: fencelock_core::OwnerId,
            ) -> fencelock_core::LostReason {
                self.locks.watch_lost_shared(lease, reader).await
            }

            async fn advance_token(
                &self,
                key: &fencelock_core::LockKey,
                floor: fencelock_core::FencingToken,
            ) -> fencelock_core::Result<fencelock_core::FencingToken> {
                self.locks.advance_token(key, floor).await
            }

            async fn try_acquire_shared(
                &self,
                key: &fencelock_core::LockKey,
                reader: fencelock_core::OwnerId,
                ttl: std::time::Duration,
            ) -> fencelock_core::Result<Option<fencelock_core::Lease>> {
                self.locks.try_acquire_shared(key, reader, ttl).await
            }

            async fn extend_shared(
                &self,
                lease: &fencelock_core::Lease,
                reader: fencelock_core::OwnerId,
                ttl: std::time::Duration,
            ) -> fencelock_core::Result<fencelock_core::Lease> {
                self.locks.extend_shared(lease, reader, ttl).await
            }

            async fn release_shared(
                &self,
                lease: &fencelock_core::Lease,
                reader: fencelock_core::OwnerId,
            ) -> fencelock_core::Result<bool> {
                self.locks.release_shared(lease, reader).await
            }

            async fn inspect_shared(
                &self,
                key: &fencelock_core::LockKey,
            ) -> fencelock_core::Result<Option<fencelock_core::ReadPhase>> {
                self.locks.inspect_shared(key).await
            }

            // One server's operations are decided by its one answer: no call is left
            // running after an operation returns.
            async fn finish_background(&self) {}
        }
    };
}
pub(crate) use delegate_lock_backend;
