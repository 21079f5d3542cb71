//! The fair queue (DESIGN.md 4.0.1 and 5.5): a waiting request keeps a place in the key's queue
//! between tries, is granted only when no place is ahead of it, and watches only the place
//! just before it.
//!
//! A place is the key `<prefix>/queue/<n>:<key>/<waiter>` on a short lease of its own (the
//! place lease, [`PlaceTiming::secs`]), so a waiter that dies loses its place when that lease
//! runs out, and etcd deletes it. Its create revision is its arrival: the place with the
//! lowest one is the head. A waiter's first try is the plain grant's transaction, which also
//! puts the place when it is refused (one write either way). While it waits, it keeps the
//! place lease alive and watches the place just ahead (and the lock key, when it is next);
//! a try that is not its turn keeps the lease alive and looks with a read, writing nothing.
//! When the last look says it is its turn, the try sends the grant's transaction, which
//! compares that no place is older and deletes the place, in the one transaction that bumps
//! the token. So a release is followed by one grant, of the head; and a holder that knows the
//! waiter behind it hands the lock over in its release (`handoff.rs`), which the waiter sees on
//! its watch of the lock key, or at its next look or try.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use etcd_client::{GetOptions, Txn, TxnOp};
use fencelock_core::{Lease, LockKey, OwnerId, Result, valid_until, validate_ttl};
use tokio::time::Instant;

use crate::backend::{EtcdLockBackend, GRANT_ATTEMPTS};
use crate::cluster::Shared;
use crate::error::{is_lease_not_found, protocol};
use crate::grant::{Grant, InLine, Refusal, ahead_of, first_under_prefix, ranges};
use crate::handoff::{Handed, behind_of, handed_to};
use crate::leases::{LeaseSlot, Leases, Made};
use crate::reply::{Applied, applied};
use crate::seen::HeldBy;

mod watch;
use watch::{Watched, covered, next_events, open_watches};

/// The place lease's ttl asked for, in seconds (the cluster may raise it to its minimum): a
/// waiter that stopped trying keeps the waiters behind it from a free lock this long at most.
const PLACE_SECS: i64 = 3;

/// How long a place lease and its refresh interval are on this cluster.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PlaceTiming {
    /// The place lease's ttl in whole seconds.
    pub(crate) secs: i64,
    /// How often a waiter keeps its place lease alive (its tries, or keep-alives while it
    /// waits): a quarter of the place ttl, with room for slow round trips.
    pub(crate) refresh: Duration,
}

impl PlaceTiming {
    fn new(min_lease_secs: i64) -> Self {
        let secs = PLACE_SECS.max(min_lease_secs);
        PlaceTiming {
            secs,
            refresh: Duration::from_secs(secs.unsigned_abs()) / 4,
        }
    }
}

/// A queued waiter's place, as this process last saw it.
#[derive(Debug, Clone)]
struct Place {
    name: Vec<u8>,
    lease: LeaseSlot,
    /// The place's create revision: its arrival.
    created: i64,
    /// The last look at the queue (a refused grant's, a read's, a watch's).
    seen: Refusal,
}

impl Place {
    /// Whether the last look found the lock free and no place ahead.
    fn turn(&self) -> bool {
        self.seen.held.is_none() && self.seen.ahead.is_none() && self.seen.place.is_some()
    }
}

/// How one try at a place ended.
enum Turn {
    Granted(Lease),
    Waiting,
    /// The place is gone (its lease lapsed): queue again, at the back.
    Lost,
}

/// The places of one backend's waiting requests, and their leases.
#[derive(Debug)]
pub(crate) struct Queue {
    places: Mutex<HashMap<(LockKey, OwnerId), Place>>,
    /// Place leases: spares are leases whose place a grant deleted (never one a waiter left or
    /// a failed request may have written to; those are revoked, which deletes what they carry).
    leases: Leases,
    pub(crate) timing: PlaceTiming,
}

impl Queue {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Queue {
            places: Mutex::new(HashMap::new()),
            timing: PlaceTiming::new(shared.min_lease_secs),
            leases: Leases::new(shared),
        }
    }

    fn places(&self) -> MutexGuard<'_, HashMap<(LockKey, OwnerId), Place>> {
        self.places.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A place lease: a spare with at least half its ttl left, or a new one.
    async fn lease(&self) -> Result<LeaseSlot> {
        match self.leases.take_spare(self.timing.secs) {
            Some(spare) => Ok(spare),
            None => self.leases.grant(self.timing.secs).await,
        }
    }

    /// Keeps a place lease that carries nothing any more for the next waiter's place.
    pub(crate) fn spare_place_lease(&self, lease: LeaseSlot) {
        self.leases.put_spare(lease);
    }

    /// Stores `place` for `map_key`, unless the request gave it up in the meantime.
    fn update(&self, map_key: &(LockKey, OwnerId), place: Place) {
        if let Some(known) = self.places().get_mut(map_key) {
            *known = place;
        }
    }
}

impl EtcdLockBackend {
    /// [`LockBackend::try_acquire_queued`](fencelock_core::LockBackend::try_acquire_queued):
    /// the waiter's first try enters its place, later tries keep it.
    pub(crate) async fn try_queued(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: OwnerId,
    ) -> Result<Option<Lease>> {
        validate_ttl(ttl, &fencelock_core::LockBackend::capabilities(self))?;
        let secs = self.leases.secs_for(ttl);
        let map_key = (key.clone(), waiter);
        // A place lost (its lease lapsed) is entered again once, at the back.
        for _ in 0..2 {
            let known = self.queue.places().get(&map_key).cloned();
            let turn = match known {
                None => self.enter(key, ttl, secs, waiter).await?,
                Some(place) => self.at_place(key, ttl, secs, waiter, place).await?,
            };
            match turn {
                Turn::Granted(lease) => return Ok(Some(lease)),
                Turn::Waiting => return Ok(None),
                Turn::Lost => {
                    if let Some(place) = self.queue.places().remove(&map_key) {
                        self.queue.leases.revoke_in_background(place.lease.id);
                    }
                }
            }
        }
        Ok(None)
    }

    /// A waiter's first try: the grant's transaction, which puts the place when refused.
    async fn enter(
        &self,
        key: &LockKey,
        ttl: Duration,
        secs: i64,
        waiter: OwnerId,
    ) -> Result<Turn> {
        let name = self.shared.keys.place(key, waiter);
        let owner = OwnerId::random();
        let mut place_lease = match self.queue.leases.take_spare(self.queue.timing.secs) {
            Some(spare) => spare,
            None => {
                // No place lease at hand: a plain try first, so that a request that finds
                // the lock free never waits for a lease it does not need.
                let plain = fencelock_core::LockBackend::try_acquire(self, key, ttl).await?;
                if let Some(granted) = plain {
                    return Ok(Turn::Granted(granted));
                }
                self.queue.leases.grant(self.queue.timing.secs).await?
            }
        };
        let mut lease = self.lease_for(ttl, secs).await?;
        for _ in 0..GRANT_ATTEMPTS {
            let counter = self.seen.counter(key);
            let in_line = InLine::Enter {
                place: &name,
                lease: place_lease.id,
            };
            let refusal = match self
                .grant_once(key, owner, lease, counter, ttl, in_line)
                .await
            {
                Ok(Grant::Granted(granted)) => {
                    // The place was never put: its lease carries nothing.
                    self.queue.leases.put_spare(place_lease);
                    return Ok(Turn::Granted(granted));
                }
                Ok(Grant::Refused(refusal)) => refusal,
                Ok(Grant::CounterMoved) => {
                    lease = self.lease_for(ttl, secs).await?;
                    continue;
                }
                Ok(Grant::LeaseGone) => {
                    // Either lease may be the one that is gone: both are replaced.
                    self.queue.leases.revoke_in_background(place_lease.id);
                    place_lease = self.queue.lease().await?;
                    lease = (self.leases.grant(secs).await?, false);
                    continue;
                }
                Err(e) => {
                    // The place may have been put: revoking its lease deletes it.
                    self.queue.leases.revoke_in_background(place_lease.id);
                    return Err(e);
                }
            };
            let Some(created) = refusal.place else {
                // The transaction put the place and read it back: a reply without it is not
                // etcd's.
                self.queue.leases.revoke_in_background(place_lease.id);
                return Err(protocol("entering the queue"));
            };
            let place = Place {
                name,
                lease: place_lease,
                created,
                seen: refusal,
            };
            self.queue
                .places()
                .insert((key.clone(), waiter), place.clone());
            if place.turn() {
                // Refused only because the counter moved: the place is the head already.
                return self.at_place(key, ttl, secs, waiter, place).await;
            }
            return Ok(Turn::Waiting);
        }
        self.queue.leases.put_spare(place_lease);
        Ok(Turn::Waiting)
    }

    /// A later try at a known place: the grant's transaction when the last look said it was
    /// the waiter's turn (with a keep-alive of the place lease beside it when the lease was
    /// last refreshed a refresh interval ago), else a keep-alive and a look, writing nothing.
    async fn at_place(
        &self,
        key: &LockKey,
        ttl: Duration,
        secs: i64,
        waiter: OwnerId,
        mut place: Place,
    ) -> Result<Turn> {
        let map_key = (key.clone(), waiter);
        if let Some(handed) = place.seen.handed {
            return Ok(self.take_handed(key, ttl, waiter, &place, handed));
        }
        let stale = place.lease.alive_from.elapsed() >= self.queue.timing.refresh;
        let sent = Instant::now();
        if !place.turn() {
            let (alive, look) = tokio::join!(
                self.queue.leases.keep_alive(place.lease.id),
                self.look(key, waiter, &place)
            );
            match alive? {
                Ok(()) => place.lease.alive_from = sent,
                Err(e) if is_lease_not_found(&e) => return Ok(Turn::Lost),
                Err(e) => return Err(self.shared.error(e, "keeping a place in the queue")),
            }
            place.seen = look?;
            if let Some(handed) = place.seen.handed {
                return Ok(self.take_handed(key, ttl, waiter, &place, handed));
            }
            if place.seen.place.is_none() {
                return Ok(Turn::Lost);
            }
            if !place.turn() {
                self.queue.update(&map_key, place);
                return Ok(Turn::Waiting);
            }
            let (turn, kept) = self.grant_at(key, ttl, secs, &map_key, place).await?;
            return Ok(self.keep(&map_key, turn, kept));
        }
        let id = place.lease.id;
        let refresh = async {
            if stale {
                Some(self.queue.leases.keep_alive(id).await)
            } else {
                None
            }
        };
        let (outcome, alive) =
            tokio::join!(self.grant_at(key, ttl, secs, &map_key, place), refresh);
        let (turn, kept) = outcome?;
        let kept = match (kept, alive) {
            (Some(mut place), Some(Ok(Ok(())))) => {
                place.lease.alive_from = sent;
                Some(place)
            }
            (Some(_), Some(Ok(Err(e)))) if is_lease_not_found(&e) => return Ok(Turn::Lost),
            (kept, _) => kept,
        };
        Ok(self.keep(&map_key, turn, kept))
    }

    /// Stores the place a refused grant kept, and passes its outcome on.
    fn keep(&self, map_key: &(LockKey, OwnerId), turn: Turn, kept: Option<Place>) -> Turn {
        if let Some(place) = kept {
            self.queue.update(map_key, place);
        }
        turn
    }

    /// The grant's transaction at the head of the queue; with the place to keep when it was
    /// refused.
    async fn grant_at(
        &self,
        key: &LockKey,
        ttl: Duration,
        secs: i64,
        map_key: &(LockKey, OwnerId),
        mut place: Place,
    ) -> Result<(Turn, Option<Place>)> {
        let owner = OwnerId::random();
        let waiter = map_key.1;
        let mut lease = self.lease_for(ttl, secs).await?;
        for _ in 0..GRANT_ATTEMPTS {
            let counter = self.seen.counter(key);
            let in_line = InLine::At {
                place: &place.name,
                created: place.created,
                waiter,
            };
            match self
                .grant_once(key, owner, lease, counter, ttl, in_line)
                .await
            {
                Ok(Grant::Granted(granted)) => {
                    // The grant deleted the place, and no other request of this waiter is in
                    // flight: its lease carries nothing and serves another place.
                    self.queue.places().remove(map_key);
                    self.queue.leases.put_spare(place.lease);
                    return Ok((Turn::Granted(granted), None));
                }
                Ok(Grant::Refused(refusal)) => {
                    if let Some(handed) = refusal.handed {
                        return Ok((self.take_handed(key, ttl, waiter, &place, handed), None));
                    }
                    if refusal.place.is_none() {
                        return Ok((Turn::Lost, None));
                    }
                    place.seen = refusal;
                    return Ok((Turn::Waiting, Some(place)));
                }
                Ok(Grant::CounterMoved) => lease = self.lease_for(ttl, secs).await?,
                // The place lease is not in this transaction: the grant's lease is gone.
                Ok(Grant::LeaseGone) => lease = (self.leases.grant(secs).await?, false),
                Err(e) => {
                    // The outcome is unknown (the place may be deleted, the lock granted on a
                    // lease being revoked): the waiter queues again.
                    if let Some(place) = self.queue.places().remove(map_key) {
                        self.queue.leases.revoke_in_background(place.lease.id);
                    }
                    return Err(e);
                }
            }
        }
        Ok((Turn::Waiting, Some(place)))
    }

    /// Reads, at one revision and writing nothing, who holds the lock (and whether it is a
    /// grant handed to `waiter`), whether the place still exists, the place just ahead of it
    /// and the one just behind.
    async fn look(&self, key: &LockKey, waiter: OwnerId, place: &Place) -> Result<Refusal> {
        let keys_only = || Some(GetOptions::new().with_keys_only());
        let queue = self.shared.keys.queue(key);
        let txn = Txn::new().and_then([
            TxnOp::get(self.shared.keys.lock(key), None),
            TxnOp::get(
                self.shared.keys.readers(key),
                Some(first_under_prefix().with_keys_only()),
            ),
            TxnOp::get(place.name.clone(), keys_only()),
            TxnOp::get(queue.clone(), Some(ahead_of(place.created))),
            TxnOp::get(queue, Some(behind_of(place.created))),
        ]);
        let what = "looking at the queue";
        let response = self.shared.txn(what, txn).await?;
        let Applied { response, revision } = applied(response, what)?;
        let [lock, readers, own, ahead, behind] =
            <[_; 5]>::try_from(ranges(&response)?).map_err(|_| protocol(what))?;
        let held = match (lock.is_empty(), readers.is_empty()) {
            (false, _) => Some(HeldBy::Writer),
            (true, false) => Some(HeldBy::Readers),
            (true, true) => None,
        };
        Ok(Refusal {
            revision,
            held,
            place: own
                .first()
                .map(|kv| kv.create_revision())
                .filter(|&created| created == place.created),
            ahead: ahead.first().map(|kv| kv.key().to_vec()),
            next_in_line: ahead.len() == 1,
            behind: behind.first().and_then(|kv| self.successor_of(key, kv)),
            handed: lock.first().and_then(|kv| handed_to(kv, waiter)),
        })
    }

    /// Takes up a grant the previous holder's release handed to `waiter` at `place`: the
    /// place is gone (the hand-off deleted it), and the grant lives on the place lease, which
    /// the waiter kept alive, so it is valid for the place ttl from the last refresh (or the
    /// waiter's ttl, if shorter). A grant on another lease than the place's (the place was
    /// put again on a new lease in between) is not taken up: that lease is revoked, which
    /// frees the lock, and the waiter queues again.
    fn take_handed(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: OwnerId,
        place: &Place,
        handed: Handed,
    ) -> Turn {
        self.queue.places().remove(&(key.clone(), waiter));
        if handed.lease != place.lease.id {
            self.leases.revoke_in_background(handed.lease);
            return Turn::Lost;
        }
        self.seen.wrote(key, handed.token.get(), handed.revision);
        self.leases.track(
            key,
            waiter,
            place.lease,
            Made {
                create_revision: handed.create_revision,
                granted_at: handed.revision,
                on_place_lease: true,
            },
            place.seen.behind.clone(),
        );
        let place_ttl = Duration::from_secs(place.lease.secs.unsigned_abs());
        Turn::Granted(Lease {
            key: key.clone(),
            owner: waiter,
            token: handed.token,
            ttl,
            valid_until: valid_until(place.lease.alive_from, ttl.min(place_ttl)),
        })
    }

    /// [`LockBackend::wait_for_grant`](fencelock_core::LockBackend::wait_for_grant): waits as
    /// [`wait_turn`](Self::wait_turn) does, and returns the grant when the release of the
    /// holder before handed the lock to `waiter` meanwhile.
    pub(crate) async fn wait_grant(
        &self,
        key: &LockKey,
        waiter: OwnerId,
        ttl: Duration,
        max: Duration,
    ) -> Result<Option<Lease>> {
        self.wait_turn(key, waiter, max).await?;
        let handed = self
            .queue
            .places()
            .get(&(key.clone(), waiter))
            .and_then(|place| Some((place.clone(), place.seen.handed?)));
        let Some((place, handed)) = handed else {
            return Ok(None);
        };
        match self.take_handed(key, ttl, waiter, &place, handed) {
            Turn::Granted(lease) => Ok(Some(lease)),
            Turn::Waiting | Turn::Lost => Ok(None),
        }
    }

    /// [`LockBackend::wait_for_turn`](fencelock_core::LockBackend::wait_for_turn): watches
    /// the place just ahead for its deletion, and the lock key too when that place is the
    /// head (at the head, the lock key alone, or the read phase), at most `max`, keeping the
    /// place lease alive meanwhile (every refresh interval), so one watch serves the wait.
    ///
    /// The watches start at the current revision, never in the past: etcd delivers a watch
    /// that starts in its history only once it caught up, up to 100 ms later. When the store
    /// moved since the last look, the waiter looks again once they are open, so a deletion in
    /// between is seen by the look, and one after it by the watch. The next waiter watches
    /// the lock key already, so when the head's grant deletes its place it only looks (a
    /// read) while the head holds, and the head's release is its turn.
    pub(crate) async fn wait_turn(
        &self,
        key: &LockKey,
        waiter: OwnerId,
        max: Duration,
    ) -> Result<()> {
        let map_key = (key.clone(), waiter);
        let Some(mut place) = self.queue.places().get(&map_key).cloned() else {
            // No place (the last try failed before entering one): wait as anyone would.
            let bound = max.min(self.queue.timing.refresh);
            return fencelock_core::LockBackend::wait_for_release(self, key, bound).await;
        };
        let deadline = Instant::now().checked_add(max);
        let lock = self.shared.keys.lock(key);
        loop {
            if place.turn() || place.seen.place.is_none() || place.seen.handed.is_some() {
                return Ok(());
            }
            let targets = self.targets(key, &place.seen);
            if targets.is_empty() {
                return Ok(());
            }
            let Some((mut stream, opened)) = open_watches(&self.shared, &targets).await else {
                // No watch to rely on: the next try looks, as a poller would.
                let pause = Instant::now() + self.queue.timing.refresh;
                tokio::time::sleep_until(deadline.map_or(pause, |d| d.min(pause))).await;
                return Ok(());
            };
            if opened > place.seen.revision {
                place.seen = self.look(key, waiter, &place).await?;
                self.queue.update(&map_key, place.clone());
                if place.turn() || place.seen.handed.is_some() {
                    return Ok(());
                }
                if !covered(&self.targets(key, &place.seen), &targets) {
                    continue;
                }
            }
            // Waits on this stream while what it watches still covers what to wait for.
            'stream: loop {
                let refresh_at = place.lease.alive_from + self.queue.timing.refresh;
                let until = deadline.map_or(refresh_at, |d| d.min(refresh_at));
                let events = match tokio::time::timeout_at(until, next_events(&mut stream)).await {
                    Ok(events) => events,
                    Err(_) if deadline.is_some_and(|d| Instant::now() >= d) => return Ok(()),
                    Err(_) => {
                        // Still waiting: keep the place, as a try would.
                        let sent = Instant::now();
                        match self.queue.leases.keep_alive(place.lease.id).await? {
                            Ok(()) => {}
                            Err(e) if is_lease_not_found(&e) => return Ok(()),
                            Err(e) => {
                                return Err(self.shared.error(e, "keeping a place in the queue"));
                            }
                        }
                        place.lease.alive_from = sent;
                        self.queue.update(&map_key, place.clone());
                        continue;
                    }
                };
                for watched in events {
                    match watched {
                        Watched::Put(kv) if kv.key() == lock.as_slice() => {
                            if let Some(handed) = handed_to(&kv, waiter) {
                                // The holder's release handed the lock to this waiter (and
                                // deleted its place in the same transaction).
                                place.seen = Refusal {
                                    revision: handed.revision,
                                    place: None,
                                    handed: Some(handed),
                                    ..place.seen
                                };
                                self.queue.update(&map_key, place);
                                return Ok(());
                            }
                            // Granted or handed to another waiter, or moved to another lease:
                            // still held.
                        }
                        // A place is put once, when its waiter enters: nothing to look at.
                        Watched::Put(_) => {}
                        Watched::Deleted {
                            key: deleted,
                            revision,
                        } if deleted == lock => {
                            if place.seen.ahead.is_none() && revision > place.seen.revision {
                                // Nothing ahead at the last look, and a place created later
                                // is behind: the lock is free at that revision, and it is
                                // this waiter's turn.
                                place.seen = Refusal {
                                    revision,
                                    held: None,
                                    ..place.seen
                                };
                                self.queue.update(&map_key, place);
                                return Ok(());
                            }
                            // Freed while a place was still ahead: the head's turn, not this
                            // waiter's.
                        }
                        Watched::Deleted { .. } | Watched::Ended => {
                            let ended = matches!(watched, Watched::Ended);
                            place.seen = self.look(key, waiter, &place).await?;
                            self.queue.update(&map_key, place.clone());
                            if place.seen.handed.is_some() {
                                return Ok(());
                            }
                            if ended || place.turn() {
                                break 'stream;
                            }
                            if !covered(&self.targets(key, &place.seen), &targets) {
                                break 'stream;
                            }
                        }
                    }
                }
            }
        }
    }

    /// What a waiter that saw `seen` watches: the place ahead (and the lock key when that place
    /// is the head), or at the head the lock key or the read phase.
    fn targets(&self, key: &LockKey, seen: &Refusal) -> Vec<(Vec<u8>, bool)> {
        match (&seen.ahead, seen.held) {
            (Some(ahead), _) if seen.next_in_line => {
                vec![(ahead.clone(), false), (self.shared.keys.lock(key), false)]
            }
            (Some(ahead), _) => vec![(ahead.clone(), false)],
            (None, Some(HeldBy::Writer)) => vec![(self.shared.keys.lock(key), false)],
            (None, Some(HeldBy::Readers)) => vec![(self.shared.keys.readers(key), true)],
            (None, Some(HeldBy::Queue) | None) => Vec::new(),
        }
    }

    /// [`LockBackend::leave_queue`](fencelock_core::LockBackend::leave_queue): revokes the
    /// place's lease, which deletes the place (and anything a try in flight may still put on
    /// it); without a known place, deletes the waiter's place by its name. Never touches a
    /// lock key.
    pub(crate) async fn leave(&self, key: &LockKey, waiter: OwnerId) -> Result<()> {
        let place = self.queue.places().remove(&(key.clone(), waiter));
        match place {
            Some(place) => {
                let id = place.lease.id;
                let revoked = self
                    .shared
                    .call_raw("leaving the queue", || {
                        let mut leases = self.shared.client.lease_client();
                        async move { leases.revoke(id).await }
                    })
                    .await?;
                match revoked {
                    Ok(_) => Ok(()),
                    Err(e) if is_lease_not_found(&e) => Ok(()),
                    Err(e) => Err(self.shared.error(e, "leaving the queue")),
                }
            }
            None => {
                let name = self.shared.keys.place(key, waiter);
                self.shared
                    .call("leaving the queue", || {
                        let mut kv = self.shared.client.kv_client();
                        let name = name.clone();
                        async move { kv.delete(name, None).await }
                    })
                    .await?;
                Ok(())
            }
        }
    }
}
