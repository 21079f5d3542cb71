//! The hand-off made by the release (DESIGN.md 4.0.1 and 5.5): a holder that knows the queued
//! waiter after it releases by writing that waiter's grant, in one transaction, so a lock
//! passes down the queue in one consensus write instead of a release and a grant.
//!
//! The release puts the lock key with the next waiter's `<waiter>:<token>` on the waiter's
//! **place lease**, bumps the counter and deletes the place, *if* the lock key is still the
//! releaser's grant, that place still exists with the create revision seen, no place is older,
//! no reader key exists and the counter is at the revision the releaser's grant wrote it;
//! *else* it is the plain release (a nested transaction that deletes the lock key if it is
//! still the grant's), and the waiters take it from there as before. The waiter sees its grant on the lock key's
//! watch (or its next look, or its next try) and takes it up as the core's `wait_for_grant`
//! says: the grant lives on the place lease, which the waiter kept alive, so a waiter that
//! vanished holds it for one place ttl at most.

use etcd_client::{
    Compare, CompareOp, GetOptions, KeyValue, PutOptions, SortOrder, SortTarget, Txn, TxnOp,
    TxnOpResponse,
};
use fencelock_core::{FencingToken, Lease, LockKey, OwnerId, Result};

use crate::backend::EtcdLockBackend;
use crate::keys::{counter_value, holder_value, parse_holder};
use crate::reply::{Applied, applied};
use crate::seen::{CounterSeen, Successor};

/// A grant the release of the previous holder wrote for a waiter: the lock key's
/// `<waiter>:<token>` on the waiter's place lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Handed {
    pub(crate) token: FencingToken,
    /// The lease the lock key is on (the waiter's place lease).
    pub(crate) lease: i64,
    /// The lock key's create revision (kept from the first grant of a hand-off chain).
    pub(crate) create_revision: i64,
    /// The revision of the hand-off: the counter was written at it too.
    pub(crate) revision: i64,
}

/// Reads (under the queue's prefix) the oldest place created after revision `created`: the
/// waiter behind a waiter whose place was created then.
pub(crate) fn behind_of(created: i64) -> GetOptions {
    GetOptions::new()
        .with_prefix()
        .with_keys_only()
        .with_min_create_revision(created + 1)
        .with_sort(SortTarget::Create, SortOrder::Ascend)
        .with_limit(1)
}

/// The grant a lock key `kv` carries for `waiter`, if the release of the previous holder
/// handed it to that waiter.
pub(crate) fn handed_to(kv: &KeyValue, waiter: OwnerId) -> Option<Handed> {
    let holder = parse_holder(kv.value()).ok()?;
    (holder.owner == waiter).then(|| Handed {
        token: holder.token,
        lease: kv.lease(),
        create_revision: kv.create_revision(),
        revision: kv.mod_revision(),
    })
}

impl EtcdLockBackend {
    /// The waiter whose place `kv` is, under the queue of `key`; `None` for a key that is not
    /// a place of that queue or a place on no lease.
    pub(crate) fn successor_of(&self, key: &LockKey, kv: &KeyValue) -> Option<Successor> {
        let waiter = self.shared.keys.waiter_of(key, kv.key())?;
        (kv.lease() != 0).then(|| Successor {
            place: kv.key().to_vec(),
            created: kv.create_revision(),
            lease: kv.lease(),
            waiter,
        })
    }

    /// Releases `lease` (a grant of this backend, its lock key created at `create_revision`) by
    /// handing the lock to `next`, or, when that waiter is no longer the head (or anything else
    /// moved), by the plain release. `Ok(true)` when the grant's lock key was handed over or
    /// deleted.
    pub(crate) async fn release_handing_off(
        &self,
        lease: &Lease,
        create_revision: i64,
        next: &Successor,
        counter: CounterSeen,
    ) -> Result<bool> {
        let key = &lease.key;
        let token = counter.next_token(key)?;
        let (lock, counter_key) = (self.shared.keys.lock(key), self.shared.keys.counter(key));
        let ours = [
            Compare::value(
                lock.clone(),
                CompareOp::Equal,
                holder_value(lease.owner, lease.token),
            ),
            Compare::create_revision(lock.clone(), CompareOp::Equal, create_revision),
        ];
        let mut compares = ours.to_vec();
        compares.extend([
            Compare::create_revision(next.place.clone(), CompareOp::Equal, next.created),
            // ...on the lease seen, which the grant goes on.
            Compare::lease(next.place.clone(), CompareOp::Equal, next.lease),
            // Every place of the queue created at or after the next waiter's: it is the head.
            Compare::create_revision(
                self.shared.keys.queue(key),
                CompareOp::Greater,
                next.created - 1,
            )
            .with_prefix(),
            // No reader key: a range compare on `version` treats an empty range as 0.
            Compare::version(self.shared.keys.readers(key), CompareOp::Equal, 0).with_prefix(),
            Compare::mod_revision(counter_key.clone(), CompareOp::Equal, counter.mod_revision),
        ]);
        let plain = Txn::new()
            .when(ours)
            .and_then([TxnOp::delete(lock.clone(), None)]);
        let txn = Txn::new()
            .when(compares)
            .and_then([
                TxnOp::put(
                    lock,
                    holder_value(next.waiter, token),
                    Some(PutOptions::new().with_lease(next.lease)),
                ),
                TxnOp::put(counter_key, counter_value(token), None),
                TxnOp::delete(next.place.clone(), None),
            ])
            .or_else([TxnOp::txn(plain)]);
        let what = "releasing";
        let response = self.shared.txn(what, txn).await?;
        let Applied { response, revision } = applied(response, what)?;
        if response.succeeded() {
            self.seen.wrote(key, token.get(), revision);
            return Ok(true);
        }
        match response.op_responses().first() {
            Some(TxnOpResponse::Txn(plain)) => Ok(plain.succeeded()),
            _ => Err(crate::error::protocol(what)),
        }
    }
}
