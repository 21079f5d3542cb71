//! The fair queue: a waiting request keeps its node (its place) between tries, is granted
//! when that node is the lowest live one, and watches only its predecessor.
//!
//! A place is a lock node whose data says `<token>:waiting`; its token is drawn when it
//! enters the queue (the same multi as a plain grant), so queue order is sequence order is
//! token order. Each try refreshes the place (a `setData`, which moves its mtime); a
//! contender removes a place whose mtime is older than [`PLACE_TTL`], at the version it read,
//! so a waiter that vanished without leaving holds the queue up for at most that long.

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{FencingToken, Lease, LockKey, OwnerId, Result, valid_until, validate_ttl};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::backend::{CAS_TRIES, Grant, ZkLockBackend, ms};
use crate::error::mapped;
use crate::layout::{NodeData, grant_data, parse_node_data, waiting_data};
use crate::recipe::Judged;
use crate::session::Session;

/// How long a waiting place lives past its last refresh (on the leader's clock): a waiter
/// that stopped trying for this long loses its place to the next contender.
pub(crate) const PLACE_TTL: Duration = Duration::from_secs(3);

/// The longest a waiter sleeps between tries, so that its tries refresh its place well
/// within [`PLACE_TTL`] (a quarter of it, leaving the rest for slow round trips).
pub(crate) const PLACE_REFRESH: Duration = Duration::from_millis(750);

/// A queued waiter's node, as this process last wrote it.
#[derive(Debug, Clone)]
pub(crate) struct Place {
    path: String,
    token: FencingToken,
    version: i32,
    session: Arc<Session>,
    /// Known to be the lowest node of its key: a listing taken after its creation showed no
    /// node below it, or exactly one (its predecessor) whose deletion this waiter then saw.
    /// Nodes below a node never appear later, so this stays true while the place exists.
    lowest: bool,
}

/// How one look at a place ended.
enum Turn {
    Granted(Lease),
    Waiting,
    /// The place is gone (it lapsed and a contender removed it): queue again.
    Lost,
}

impl ZkLockBackend {
    /// [`LockBackend::try_acquire_queued`](fencelock_core::LockBackend::try_acquire_queued):
    /// the waiter's first try enters its place, later tries reuse it.
    pub(crate) async fn try_queued(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: OwnerId,
    ) -> Result<Option<Lease>> {
        validate_ttl(ttl, &fencelock_core::LockBackend::capabilities(self))?;
        let session = self.sessions.get().await?;
        let dir = self.sessions.layout.key_dir(key.as_str());
        let map_key = (key.clone(), waiter);
        // A place lost (lapsed, or its session ended) is entered again once, at the back.
        for _ in 0..2 {
            let known = self
                .places()
                .get(&map_key)
                .filter(|place| Arc::ptr_eq(&place.session, &session))
                .cloned();
            let turn = match known {
                Some(place) => self.look(&session, key, &dir, place, ttl, waiter).await?,
                None => {
                    let (path, token, now) = self
                        .enter(&session, key, &dir, waiter, waiting_data)
                        .await?;
                    let place = Place {
                        path,
                        token,
                        version: 0,
                        session: session.clone(),
                        lowest: false,
                    };
                    self.places().insert(map_key.clone(), place.clone());
                    self.settle(&session, key, &dir, place, ttl, waiter, now)
                        .await?
                }
            };
            match turn {
                Turn::Granted(lease) => return Ok(Some(lease)),
                Turn::Waiting => return Ok(None),
                Turn::Lost => {
                    self.places().remove(&map_key);
                }
            }
        }
        Ok(None)
    }

    /// A later try of a known place: granted at once when it is the lowest, else refreshed
    /// and judged. The common hand-off is one write: [`wait_turn`](Self::wait_turn) saw the
    /// deletion of the only node below the place, so the place is the lowest without a new
    /// listing and the grant's `setData` is the only request after the release.
    async fn look(
        &self,
        session: &Session,
        key: &LockKey,
        dir: &str,
        mut place: Place,
        ttl: Duration,
        waiter: OwnerId,
    ) -> Result<Turn> {
        if place.lowest {
            return self.grant(key, place, ttl, waiter).await;
        }
        let queue = self.queue(session, dir).await?;
        match queue.iter().position(|(path, _)| *path == place.path) {
            None => return Ok(Turn::Lost),
            Some(0) => return self.grant(key, place, ttl, waiter).await,
            Some(_) => {}
        }
        let refreshed = self
            .call(
                "refresh the place",
                session.client.set_data(
                    &place.path,
                    &waiting_data(place.token),
                    Some(place.version),
                ),
            )
            .await?;
        let stat = match refreshed {
            Ok(stat) => stat,
            Err(zk::Error::NoNode | zk::Error::BadVersion) => return Ok(Turn::Lost),
            Err(e) => return Err(mapped(e, "refresh the place")),
        };
        place.version = stat.version;
        self.places().insert((key.clone(), waiter), place.clone());
        self.settle(session, key, dir, place, ttl, waiter, stat.mtime)
            .await
    }

    /// Judges a freshly written place at `now` (the leader's clock at that write).
    #[allow(clippy::too_many_arguments)]
    async fn settle(
        &self,
        session: &Session,
        key: &LockKey,
        dir: &str,
        place: Place,
        ttl: Duration,
        waiter: OwnerId,
        now: i64,
    ) -> Result<Turn> {
        match self.judge(session, dir, &place.path, now).await? {
            Judged::Lowest => self.grant(key, place, ttl, waiter).await,
            Judged::Behind => Ok(Turn::Waiting),
            Judged::Gone => Ok(Turn::Lost),
        }
    }

    /// Turns the lowest place into a grant: a `setData` of the grant's data at the version
    /// this process last wrote, which also starts the ttl (the node's new mtime). A contender
    /// that removed the place as lapsed moved nothing we hold: the write fails and the
    /// waiter queues again.
    async fn grant(
        &self,
        key: &LockKey,
        place: Place,
        ttl: Duration,
        waiter: OwnerId,
    ) -> Result<Turn> {
        let sent = Instant::now();
        let ttl_ms = ms(ttl);
        let written = self
            .call(
                "grant",
                place.session.client.set_data(
                    &place.path,
                    &grant_data(place.token, ttl_ms),
                    Some(place.version),
                ),
            )
            .await?;
        let stat = match written {
            Ok(stat) => stat,
            Err(zk::Error::NoNode | zk::Error::BadVersion) => return Ok(Turn::Lost),
            Err(e) => return Err(mapped(e, "grant")),
        };
        let map_key = (key.clone(), waiter);
        self.places().remove(&map_key);
        self.grants().insert(
            map_key,
            Grant {
                path: place.path,
                version: stat.version,
                mtime: stat.mtime,
                ttl_ms,
                session: place.session,
            },
        );
        Ok(Turn::Granted(Lease {
            key: key.clone(),
            owner: waiter,
            token: place.token,
            ttl,
            valid_until: valid_until(sent, ttl),
        }))
    }

    /// [`LockBackend::wait_for_turn`](fencelock_core::LockBackend::wait_for_turn): an
    /// `exists` watch on the place's predecessor only (no herd), at most `max` and
    /// [`PLACE_REFRESH`], so the next try keeps the place and sees a holder whose ttl ran out.
    pub(crate) async fn wait_turn(
        &self,
        key: &LockKey,
        waiter: OwnerId,
        max: Duration,
    ) -> Result<()> {
        let bound = max.min(PLACE_REFRESH);
        let Some(place) = self.places().get(&(key.clone(), waiter)).cloned() else {
            // No place (the last try failed before entering one): wait as anyone would.
            return fencelock_core::LockBackend::wait_for_release(self, key, bound).await;
        };
        if place.session.lost.is_cancelled() {
            return Ok(());
        }
        let deadline = Instant::now() + bound;
        let dir = self.sessions.layout.key_dir(key.as_str());
        let queue = self.queue(&place.session, &dir).await?;
        let Some(index) = queue.iter().position(|(path, _)| *path == place.path) else {
            return Ok(());
        };
        let Some((predecessor, _)) = index.checked_sub(1).and_then(|i| queue.get(i)) else {
            // The lowest: it is this waiter's turn.
            self.mark_lowest(key, waiter, &place.path);
            return Ok(());
        };
        // With one node below, that node's deletion makes the place the lowest.
        let sole = index == 1;
        loop {
            let watched = self
                .call(
                    "watch the predecessor",
                    place.session.client.check_and_watch_stat(predecessor),
                )
                .await?;
            match watched {
                Ok((Some(_), watcher)) => {
                    match tokio::time::timeout_at(deadline, watcher.changed()).await {
                        // The predecessor refreshed its place or was granted: still ahead.
                        Ok(event) if event.event_type == zk::EventType::NodeDataChanged => {}
                        Ok(event) => {
                            if sole && event.event_type == zk::EventType::NodeDeleted {
                                self.mark_lowest(key, waiter, &place.path);
                            }
                            return Ok(());
                        }
                        Err(_) => return Ok(()),
                    }
                }
                Ok((None, _)) => {
                    if sole {
                        self.mark_lowest(key, waiter, &place.path);
                    }
                    return Ok(());
                }
                Err(e) => return Err(mapped(e, "watch the predecessor")),
            }
        }
    }

    /// Records that the place at `path` (if it is still the waiter's) is the lowest node of
    /// its key, so the next try grants it without listing the key again.
    fn mark_lowest(&self, key: &LockKey, waiter: OwnerId, path: &str) {
        if let Some(place) = self.places().get_mut(&(key.clone(), waiter))
            && place.path == path
        {
            place.lowest = true;
        }
    }

    /// [`LockBackend::leave_queue`](fencelock_core::LockBackend::leave_queue): deletes the
    /// place by its own path (at any version: it is this waiter's alone) and forgets it.
    pub(crate) async fn leave(&self, key: &LockKey, waiter: OwnerId) -> Result<()> {
        let map_key = (key.clone(), waiter);
        let place = self.places().remove(&map_key);
        let (session, paths) = match place {
            Some(place) if place.session.lost.is_cancelled() => return Ok(()),
            Some(place) => (place.session, vec![place.path]),
            None => {
                // A try dropped after its place was created but before it was remembered:
                // the place carries the waiter's id in its name. A grant this process
                // knows of is never touched.
                if self.grants().contains_key(&map_key) {
                    return Ok(());
                }
                let session = self.sessions.get().await?;
                let dir = self.sessions.layout.key_dir(key.as_str());
                let paths = self
                    .queue(&session, &dir)
                    .await?
                    .into_iter()
                    .filter(|(_, owner)| *owner == waiter)
                    .map(|(path, _)| path)
                    .collect();
                (session, paths)
            }
        };
        for path in paths {
            match self
                .call("leave the queue", session.client.delete(&path, None))
                .await?
            {
                Ok(()) | Err(zk::Error::NoNode | zk::Error::SessionExpired) => {}
                Err(e) => return Err(mapped(e, "leave the queue")),
            }
        }
        Ok(())
    }

    /// After `advance_token(floor)`: removes (at the version read) every waiting place whose
    /// token is at or below `floor`, so the next grant carries a token above it; those
    /// waiters queue again, at the back, with new tokens.
    pub(crate) async fn drop_places_at_or_below(
        &self,
        session: &Session,
        dir: &str,
        floor: FencingToken,
    ) -> Result<()> {
        for (path, _) in self.queue(session, dir).await? {
            // A refresh between our read and our delete moves the version: read again.
            for _ in 0..CAS_TRIES {
                let (data, stat) = match self
                    .call("read a place", session.client.get_data(&path))
                    .await?
                {
                    Ok(found) => found,
                    Err(zk::Error::NoNode) => break,
                    Err(e) => return Err(mapped(e, "read a place")),
                };
                match parse_node_data(&data) {
                    Some(NodeData::Waiting { token }) if token <= floor => {}
                    // A grant (perhaps made concurrently with the advance, as a try in
                    // flight is), or a place already above the floor.
                    _ => break,
                }
                match self
                    .call(
                        "drop a place below the floor",
                        session.client.delete(&path, Some(stat.version)),
                    )
                    .await?
                {
                    Ok(()) | Err(zk::Error::NoNode) => break,
                    Err(zk::Error::BadVersion) => continue,
                    Err(e) => return Err(mapped(e, "drop a place below the floor")),
                }
            }
        }
        Ok(())
    }
}
