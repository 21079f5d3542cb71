//! The sessions that hold a lock: one pooled connection per lease, taken out of the session
//! pool for the life of the lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use fencelock_core::{FencingToken, Lease, LockKey, OwnerId, Result};
use sqlx::MySql;
use sqlx::mysql::MySqlConnection;
use sqlx::pool::PoolConnection;
use tokio::time::Instant;

use crate::error::protocol;

/// How long after its last known deadline an abandoned lease's connection is closed.
const ABANDONED_GRACE: Duration = Duration::from_secs(1);

/// A lease, as the map of held sessions knows it.
pub(crate) type LeaseId = (LockKey, OwnerId, FencingToken);

pub(crate) fn lease_id(lease: &Lease) -> LeaseId {
    (lease.key.clone(), lease.owner, lease.token)
}

/// A connection that holds (or is about to hold) a `GET_LOCK`. Dropping it closes the
/// connection, and the server lets go of every lock of a session that ends; only
/// [`give_back`](Self::give_back), after a clean release, returns it to the pool.
#[derive(Debug)]
pub(crate) struct Holder(Option<PoolConnection<MySql>>);

impl Holder {
    pub(crate) fn new(conn: PoolConnection<MySql>) -> Self {
        Holder(Some(conn))
    }

    pub(crate) fn conn(&mut self) -> Result<&mut MySqlConnection> {
        match self.0.as_mut() {
            Some(conn) => Ok(&mut **conn),
            None => Err(protocol("the holding connection is already gone")),
        }
    }

    /// Returns the connection to the pool: only when it holds no lock.
    pub(crate) fn give_back(mut self) {
        drop(self.0.take());
    }
}

impl Drop for Holder {
    fn drop(&mut self) {
        if let Some(conn) = self.0.take() {
            // Detached, the connection is closed when dropped instead of going back to the pool.
            drop(conn.detach());
        }
    }
}

/// One held lease: its connection and when the server will end its session if nothing is
/// sent on it.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) holder: tokio::sync::Mutex<Option<Holder>>,
    pub(crate) id: u64,
    deadline: Mutex<Instant>,
}

impl Session {
    pub(crate) fn new(holder: Holder, id: u64, deadline: Instant) -> Self {
        Session {
            holder: tokio::sync::Mutex::new(Some(holder)),
            id,
            deadline: Mutex::new(deadline),
        }
    }

    pub(crate) fn set_deadline(&self, deadline: Instant) {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner) = deadline;
    }

    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Every lease a backend (and its clones) holds a session for.
#[derive(Debug, Default)]
pub(crate) struct Sessions {
    held: Mutex<HashMap<LeaseId, Arc<Session>>>,
}

impl Sessions {
    fn map(&self) -> MutexGuard<'_, HashMap<LeaseId, Arc<Session>>> {
        // Every update is a single insert or remove, so the map is consistent after a panic.
        self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn insert(&self, lease: &Lease, session: Session) {
        self.map().insert(lease_id(lease), Arc::new(session));
    }

    pub(crate) fn get(&self, lease: &Lease) -> Option<Arc<Session>> {
        self.map().get(&lease_id(lease)).cloned()
    }

    pub(crate) fn remove(&self, lease: &Lease) -> Option<Arc<Session>> {
        self.map().remove(&lease_id(lease))
    }

    pub(crate) fn len(&self) -> usize {
        self.map().len()
    }

    pub(crate) fn ids(&self) -> Vec<u64> {
        self.map().values().map(|s| s.id).collect()
    }

    /// Closes the connections of leases whose holders dropped them without releasing: past
    /// their deadline the server has ended (or is about to end) those sessions anyway.
    pub(crate) fn sweep_abandoned(&self) {
        let now = Instant::now();
        let abandoned: Vec<Arc<Session>> = {
            let mut map = self.map();
            let expired: Vec<LeaseId> = map
                .iter()
                .filter(|(_, session)| session.deadline() + ABANDONED_GRACE < now)
                .map(|(id, _)| id.clone())
                .collect();
            expired.iter().filter_map(|id| map.remove(id)).collect()
        };
        // Dropping the last reference closes the connection.
        drop(abandoned);
    }
}
