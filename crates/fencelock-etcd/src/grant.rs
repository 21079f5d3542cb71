//! The grant: one transaction that creates the lock key on a lease and bumps the key's token
//! counter, with the lease it uses.

use std::time::Duration;

use etcd_client::{Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp};
use fencelock_core::{Error, FencingToken, Lease, LockKey, OwnerId, Result, valid_until};
use tokio::time::Instant;

use crate::backend::EtcdLockBackend;
use crate::error::{BACKEND, is_lease_not_found};
use crate::keys::{counter_value, holder_value};
use crate::leases::LeaseSlot;
use crate::reply::{Applied, applied, counter_seen, reads};
use crate::seen::{CounterSeen, HeldBy};

/// What one grant transaction did.
pub(crate) enum Grant {
    Granted(Lease),
    /// Held by another grant; the lease went back to the spares.
    Held,
    /// The lock is free but the counter moved (read again now); the lease went back to the
    /// spares.
    CounterMoved,
    /// The spare lease is gone (expired): the grant needs a fresh one.
    LeaseGone,
}

impl EtcdLockBackend {
    /// One grant transaction with `lease` and the counter as last seen; `refresh`: keep the
    /// lease alive beside the transaction (a spare last refreshed a while ago).
    pub(crate) async fn grant_once(
        &self,
        key: &LockKey,
        owner: OwnerId,
        (lease, refresh): (LeaseSlot, bool),
        counter: CounterSeen,
        ttl: Duration,
    ) -> Result<Grant> {
        let token = counter
            .last
            .checked_add(1)
            .and_then(FencingToken::new)
            .ok_or_else(|| Error::Backend {
                backend: BACKEND,
                message: format!("the token counter of {key:?} is exhausted"),
                source: None,
            })?;
        let (lock, counter_key) = (self.shared.keys.lock(key), self.shared.keys.counter(key));
        let readers = self.shared.keys.readers(key);
        let txn = Txn::new()
            .when([
                Compare::create_revision(lock.clone(), CompareOp::Equal, 0),
                // No reader key: a range compare on `version` treats an empty range as 0.
                Compare::version(readers.clone(), CompareOp::Equal, 0).with_prefix(),
                Compare::mod_revision(counter_key.clone(), CompareOp::Equal, counter.mod_revision),
            ])
            .and_then([
                TxnOp::put(
                    lock.clone(),
                    holder_value(owner, token),
                    Some(PutOptions::new().with_lease(lease.id)),
                ),
                TxnOp::put(counter_key.clone(), counter_value(token), None),
            ])
            .or_else([
                TxnOp::get(lock, None),
                TxnOp::get(counter_key, None),
                TxnOp::get(readers, Some(first_under_prefix())),
            ]);
        let sent = Instant::now();
        let (reply, refreshed) = if refresh {
            // The spare's keep-alive travels beside the transaction: one round trip.
            let (reply, refreshed) = tokio::join!(
                self.shared.call_raw_txn("granting", txn),
                self.leases.keep_alive(lease.id)
            );
            (reply?, Some(refreshed))
        } else {
            (self.shared.call_raw_txn("granting", txn).await?, None)
        };
        let response = match reply {
            Ok(response) => response,
            Err(e) if is_lease_not_found(&e) => return Ok(Grant::LeaseGone),
            Err(e) => {
                // The outcome is unknown: the lock may exist on this lease. Revoking the
                // lease deletes it.
                self.leases.revoke_in_background(lease.id);
                return Err(self.shared.error(e, "granting"));
            }
        };
        let Applied { response, revision } = applied(response, "granting")?;
        let alive_from = match refreshed {
            None => lease.alive_from,
            Some(Ok(Ok(()))) => sent,
            // The keep-alive's fate is unknown: the lease lives from its last refresh.
            Some(Ok(Err(ref e))) if !is_lease_not_found(e) => lease.alive_from,
            Some(Err(_)) => lease.alive_from,
            Some(Ok(Err(_))) => {
                if response.succeeded() {
                    // The transaction found the lease, the keep-alive did not: it expired
                    // in between and the lock goes with it.
                    return Err(Error::Unavailable {
                        backend: BACKEND,
                        message: format!(
                            "the lease of the grant of {key:?} expired while granting"
                        ),
                        source: None,
                    });
                }
                return Ok(Grant::LeaseGone);
            }
        };
        let lease = LeaseSlot {
            alive_from,
            ..lease
        };
        if response.succeeded() {
            self.seen.set_counter(
                key,
                CounterSeen {
                    last: token.get(),
                    mod_revision: revision,
                },
            );
            self.leases.track(key, owner, lease, revision);
            return Ok(Grant::Granted(Lease {
                key: key.clone(),
                owner,
                token,
                ttl,
                valid_until: valid_until(alive_from, ttl),
            }));
        }
        // The compare failed: the lease carries nothing and serves a later grant.
        self.leases.put_spare(lease);
        let [lock_kv, counter_kv, reader_kv] = reads(&response, "granting")?;
        self.seen
            .set_counter(key, counter_seen(counter_kv.as_ref())?);
        match (lock_kv, reader_kv) {
            (Some(_), _) => {
                self.seen.set_held_at(key, revision, HeldBy::Writer);
                Ok(Grant::Held)
            }
            (None, Some(_)) => {
                self.seen.set_held_at(key, revision, HeldBy::Readers);
                Ok(Grant::Held)
            }
            (None, None) => Ok(Grant::CounterMoved),
        }
    }

    /// A lease for a grant of `ttl` (`secs` seconds on the server), and whether it needs a
    /// keep-alive beside the grant: a spare refreshed (granted or kept alive) within the
    /// last tenth of `ttl` is used as it is, and the grant's deadline counts from that
    /// refresh, at most a tenth shorter than asked; an older spare is refreshed; without a
    /// spare, a new lease.
    pub(crate) async fn lease_for(&self, ttl: Duration, secs: i64) -> Result<(LeaseSlot, bool)> {
        match self.leases.take_spare(secs) {
            Some(spare) => Ok((spare, spare.alive_from.elapsed() > ttl / 10)),
            None => Ok((self.leases.grant(secs).await?, false)),
        }
    }
}

/// Reads the first key under a prefix (keys and values), enough to tell whether a read phase
/// lives and what its fence is.
pub(crate) fn first_under_prefix() -> GetOptions {
    GetOptions::new().with_prefix().with_limit(1)
}
