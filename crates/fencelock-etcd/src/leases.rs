//! etcd leases for lock grants: granted, kept alive, handed from a released grant to the next
//! one, revoked.
//!
//! A lease carries at most one grant's lock key at any time. Leases that carry nothing
//! (never attached, or whose lock was deleted by its own release) wait in a small pool of
//! *spares*, one list per ttl in whole seconds, so the next grant of that ttl needs no
//! `LeaseGrant`: it sends its transaction and a keep-alive of the spare side by side, one
//! round trip. A spare is used only while at least half of its ttl is left, so the
//! transaction finds it alive; if it is gone anyway, the grant takes a fresh lease.
//!
//! The one hazard of reuse is a renewal of the previous grant refreshing the lease after it
//! carries the next grant's lock (that lock would then live longer than its own ttl). So a
//! lease goes back to the pool only when its grant's release finds no renewal of that grant
//! in flight (the table below counts them), and a renewal that finds no entry (the grant was
//! released, or taken by another process) never keeps a lease alive: it moves the lock to a
//! new lease under a compare on the lock's value instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use fencelock_core::{LockKey, OwnerId, Result};
use tokio::time::Instant;

use crate::cluster::Shared;
use crate::seen::Successor;

/// Spares kept per ttl; more are revoked.
const SPARES_PER_TTL: usize = 16;

/// Grants tracked at once; past that a grant is renewed by moving it to a new lease.
const TRACKED_GRANTS: usize = 65_536;

/// A lease in hand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeaseSlot {
    pub(crate) id: i64,
    /// Its ttl in whole seconds, as granted.
    pub(crate) secs: i64,
    /// When the request of its last confirmed grant or keep-alive was sent: the lease lives
    /// at least `secs` from then.
    pub(crate) alive_from: Instant,
}

impl LeaseSlot {
    fn ttl(&self) -> Duration {
        Duration::from_secs(self.secs.unsigned_abs())
    }
}

/// How a tracked grant was made, for its release.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Made {
    /// The revision that created the lock key.
    pub(crate) create_revision: i64,
    /// The revision of the grant: the counter was written at it (0: not known).
    pub(crate) granted_at: i64,
    /// Whether the lock is on the waiter's place lease (a grant a release handed over).
    pub(crate) on_place_lease: bool,
}

impl Made {
    /// A grant by this process's own transaction, which created the lock key at `revision`.
    pub(crate) fn at(revision: i64) -> Self {
        Made {
            create_revision: revision,
            granted_at: revision,
            on_place_lease: false,
        }
    }

    /// A grant whose lock key was created at `create_revision`, by a grant this record does
    /// not know the revision of (a renewal found it, or moved it).
    pub(crate) fn created_at(create_revision: i64) -> Self {
        Made {
            create_revision,
            granted_at: 0,
            on_place_lease: false,
        }
    }
}

/// A grant this backend made (or was handed) and has not released.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    pub(crate) lease: LeaseSlot,
    pub(crate) made: Made,
    /// The queued waiter behind this grant when it was made, if one was seen: its release
    /// hands the lock to that waiter (`handoff.rs`).
    pub(crate) next: Option<Successor>,
    /// Renewals of this grant in flight.
    extending: u32,
}

/// The spare leases and the grants of one backend.
#[derive(Debug)]
pub(crate) struct Leases {
    shared: Arc<Shared>,
    spares: Mutex<HashMap<i64, Vec<LeaseSlot>>>,
    grants: Mutex<HashMap<(LockKey, OwnerId), Held>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Leases {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Leases {
            shared,
            spares: Mutex::new(HashMap::new()),
            grants: Mutex::new(HashMap::new()),
        }
    }

    /// The lease ttl for a lock ttl: whole seconds, rounded up, at least the cluster's
    /// minimum. (`ttl` is at most the backend's `max_ttl`, so it fits.)
    pub(crate) fn secs_for(&self, ttl: Duration) -> i64 {
        let whole = ttl.as_secs() + u64::from(ttl.subsec_nanos() > 0);
        i64::try_from(whole)
            .unwrap_or(i64::MAX)
            .max(self.shared.min_lease_secs)
    }

    /// Grants a new lease of `secs` seconds.
    pub(crate) async fn grant(&self, secs: i64) -> Result<LeaseSlot> {
        let alive_from = Instant::now();
        let granted = self
            .shared
            .call("granting a lease", || {
                let mut client = self.shared.client.lease_client();
                async move { client.grant(secs, None).await }
            })
            .await?;
        Ok(LeaseSlot {
            id: granted.id(),
            secs: granted.ttl().max(secs),
            alive_from,
        })
    }

    /// A spare lease of `secs` seconds with at least half its ttl left, if there is one.
    /// Older spares found on the way are revoked.
    pub(crate) fn take_spare(&self, secs: i64) -> Option<LeaseSlot> {
        let now = Instant::now();
        let mut stale = Vec::new();
        let found = {
            let mut spares = lock(&self.spares);
            let list = spares.get_mut(&secs)?;
            let mut found = None;
            while let Some(spare) = list.pop() {
                if now.saturating_duration_since(spare.alive_from) < spare.ttl() / 2 {
                    found = Some(spare);
                    break;
                }
                stale.push(spare.id);
            }
            found
        };
        for id in stale {
            self.revoke_in_background(id);
        }
        found
    }

    /// Keeps a lease that carries no key for a later grant (or revokes it when the pool is
    /// full).
    pub(crate) fn put_spare(&self, spare: LeaseSlot) {
        let kept = {
            let mut spares = lock(&self.spares);
            let list = spares.entry(spare.secs).or_default();
            if list.len() < SPARES_PER_TTL {
                list.push(spare);
                true
            } else {
                false
            }
        };
        if !kept {
            self.revoke_in_background(spare.id);
        }
    }

    /// Refreshes lease `id` to its full ttl: `Ok(Ok(()))` when the server confirmed it,
    /// `Ok(Err(e))` with etcd's error (a lease that is gone among them).
    pub(crate) async fn keep_alive(
        &self,
        id: i64,
    ) -> Result<std::result::Result<(), etcd_client::Error>> {
        let result = self
            .shared
            .call_raw("keeping a lease alive", || {
                let mut client = self.shared.client.lease_client();
                async move { client.keep_alive(id).await }
            })
            .await?;
        // Dropping the keeper and its stream ends the keep-alive stream.
        Ok(result.map(drop))
    }

    /// Revokes lease `id` without waiting for the answer (best effort: a lease that is not
    /// revoked expires on its own).
    pub(crate) fn revoke_in_background(&self, id: i64) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let mut client = self.shared.client.lease_client();
        let limit = self.shared.operation_timeout;
        runtime.spawn(async move {
            let _ = tokio::time::timeout(limit, client.revoke(id)).await;
        });
    }

    /// Records a new grant of `key` by `owner`, made as `made` says, with the waiter seen
    /// queued behind it.
    pub(crate) fn track(
        &self,
        key: &LockKey,
        owner: OwnerId,
        lease: LeaseSlot,
        made: Made,
        next: Option<Successor>,
    ) {
        let mut grants = lock(&self.grants);
        if grants.len() < TRACKED_GRANTS {
            grants.insert(
                (key.clone(), owner),
                Held {
                    lease,
                    made,
                    next,
                    extending: 0,
                },
            );
        }
    }

    /// The grant of `key` by `owner`, counted as being renewed until
    /// [`end_renewal`](Self::end_renewal).
    pub(crate) fn begin_renewal(&self, key: &LockKey, owner: OwnerId) -> Option<Held> {
        let mut grants = lock(&self.grants);
        let held = grants.get_mut(&(key.clone(), owner))?;
        held.extending += 1;
        Some(held.clone())
    }

    /// Ends a renewal begun with [`begin_renewal`](Self::begin_renewal); `renewed` is the
    /// lease the grant now has, if the renewal confirmed one.
    pub(crate) fn end_renewal(&self, key: &LockKey, owner: OwnerId, renewed: Option<LeaseSlot>) {
        let mut grants = lock(&self.grants);
        if let Some(held) = grants.get_mut(&(key.clone(), owner)) {
            held.extending = held.extending.saturating_sub(1);
            if let Some(lease) = renewed {
                held.lease = lease;
            }
        }
    }

    /// Whether the renewal of the grant of `key` by `owner` that asks is the only one in
    /// flight.
    pub(crate) fn sole_renewal(&self, key: &LockKey, owner: OwnerId) -> bool {
        lock(&self.grants)
            .get(&(key.clone(), owner))
            .is_some_and(|held| held.extending == 1)
    }

    /// Moves a grant to another lease (after a renewal that re-attached its lock).
    pub(crate) fn moved(
        &self,
        key: &LockKey,
        owner: OwnerId,
        lease: LeaseSlot,
        create_revision: i64,
    ) {
        let mut grants = lock(&self.grants);
        let full = grants.len() >= TRACKED_GRANTS;
        match grants.get_mut(&(key.clone(), owner)) {
            Some(held) => {
                held.lease = lease;
                held.made.on_place_lease = false;
            }
            None if !full => {
                grants.insert(
                    (key.clone(), owner),
                    Held {
                        lease,
                        made: Made::created_at(create_revision),
                        next: None,
                        extending: 0,
                    },
                );
            }
            None => {}
        }
    }

    /// Forgets the grant of `key` by `owner` as its release starts. Returns it, and whether
    /// its lease may go back to the pool once the release deleted the lock (no renewal of it
    /// is in flight).
    pub(crate) fn forget(&self, key: &LockKey, owner: OwnerId) -> Option<(Held, bool)> {
        let held = lock(&self.grants).remove(&(key.clone(), owner))?;
        let no_renewal = held.extending == 0;
        Some((held, no_renewal))
    }

    /// After a release: the lease of `held` goes back to the pool when `reusable`, else it
    /// is revoked.
    pub(crate) fn after_release(&self, held: Held, reusable: bool) {
        if reusable {
            self.put_spare(held.lease);
        } else {
            self.revoke_in_background(held.lease.id);
        }
    }
}
