//! The lock kinds of fencelock-core as benchmark operations: a grant and release of each
//! (the exclusive lock through `Locker`, which the others are counted in, a reader, a writer,
//! a permit), and an election's failover.

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fencelock_core::{
    Election, Error, FencedStorage, LockBackend, LockKey, Locker, RwLocker, Semaphore,
};

use fencelock_core::Result;

use crate::error::harness;
use crate::scenario::PERMITS;
use crate::subject::{Op, TTL};

/// How long a standby may campaign before the failover step is called failed.
const FAILOVER_WAIT: Duration = Duration::from_secs(60);

/// Which grant a [`KindGrant`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// `Locker::lock`.
    Exclusive,
    /// `RwLocker::read`.
    Reader,
    /// `RwLocker::write`.
    Writer,
    /// `Semaphore::acquire`, of [`PERMITS`] permits.
    Permit,
}

/// Takes a free grant of one kind on its key, without waiting and with the watchdog off (as
/// the exclusive lock's acquire+release does), and releases it.
pub(crate) struct KindGrant {
    kind: Kind,
    locker: Locker,
    key: LockKey,
    /// The semaphore on `key`, for permits.
    semaphore: Option<Semaphore>,
}

impl KindGrant {
    /// Grants of `kind` on `key` through `locker`.
    pub(crate) fn new(kind: Kind, locker: &Locker, key: &LockKey) -> Result<Self> {
        let semaphore = match kind {
            Kind::Permit => Some(Semaphore::new(locker, key.as_str(), PERMITS)?),
            Kind::Exclusive | Kind::Reader | Kind::Writer => None,
        };
        Ok(KindGrant {
            kind,
            locker: locker.clone(),
            key: key.clone(),
            semaphore,
        })
    }
}

#[async_trait]
impl Op for KindGrant {
    async fn once(&self) -> Result<Option<Duration>> {
        let key = self.key.as_str();
        let rw = || RwLocker::new(self.locker.clone());
        let released = match (self.kind, &self.semaphore) {
            (Kind::Exclusive, _) => {
                let request = self.locker.lock(key);
                let guard = request
                    .ttl(TTL)
                    .wait(Duration::ZERO)
                    .watchdog(false)
                    .await?;
                guard.release().await?
            }
            (Kind::Writer, _) => {
                let request = rw().write(key);
                let guard = request
                    .ttl(TTL)
                    .wait(Duration::ZERO)
                    .watchdog(false)
                    .await?;
                guard.release().await?
            }
            (Kind::Reader, _) => {
                let request = rw().read(key);
                let guard = request
                    .ttl(TTL)
                    .wait(Duration::ZERO)
                    .watchdog(false)
                    .await?;
                guard.release().await?
            }
            (Kind::Permit, Some(semaphore)) => {
                let request = semaphore.acquire();
                let guard = request
                    .ttl(TTL)
                    .wait(Duration::ZERO)
                    .watchdog(false)
                    .await?;
                guard.release().await?
            }
            (Kind::Permit, None) => false,
        };
        if released {
            Ok(None)
        } else {
            Err(harness(format!(
                "the {:?} grant on {key} was gone before its release",
                self.kind
            )))
        }
    }
}

/// An election's failover: a leader granted with `ttl` writes and is killed (never renews,
/// never releases); a standby blocked in `Election::campaign` takes over and writes. Timed
/// from the kill to the standby's admitted write. The killed leader's grant is taken with
/// `try_acquire` on the election's key, which is what a campaign's grant is: a kill right
/// after it (or after a renewal) leaves the whole ttl to run, the longest failover. The old
/// leader's write after that (a paused leader waking up) must be refused.
pub(crate) struct Failover {
    backend: Arc<dyn LockBackend>,
    storage: Arc<dyn FencedStorage>,
    election: Election,
    resource: LockKey,
    ttl: Duration,
}

impl Failover {
    /// Failovers of the election on `key`, the leaders writing `resource`, with leases of
    /// `ttl`.
    pub(crate) fn new(
        backend: Arc<dyn LockBackend>,
        storage: Arc<dyn FencedStorage>,
        key: &LockKey,
        resource: &LockKey,
        ttl: Duration,
    ) -> Result<Self> {
        let election = Election::new(&Locker::new(backend.clone()), key.as_str())?;
        Ok(Failover {
            backend,
            storage,
            election,
            resource: resource.clone(),
            ttl,
        })
    }
}

#[async_trait]
impl Op for Failover {
    async fn once(&self) -> Result<Option<Duration>> {
        let key = self.election.key();
        // The previous step's standby resigned; on a backend whose waiters hold a session in
        // the server's own wait (MySQL's `GET_LOCK`), that session may take the lock and let
        // go again a moment later, so a refused try is tried again until the release.
        let free_by = Instant::now() + FAILOVER_WAIT;
        let leader = loop {
            if let Some(lease) = self.backend.as_ref().try_acquire(key, self.ttl).await? {
                break lease;
            }
            let left = free_by.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(harness(format!(
                    "the election {key} still had a leader {FAILOVER_WAIT:?} after the last \
                     one resigned"
                )));
            }
            self.backend
                .wait_for_release(key, left.min(self.ttl))
                .await?;
        };
        self.storage
            .write(&self.resource, leader.fence(), b"leader")
            .await?;
        let killed = Instant::now();
        let standby = tokio::spawn({
            let (election, storage) = (self.election.clone(), self.storage.clone());
            let (resource, ttl) = (self.resource.clone(), self.ttl);
            async move {
                let next = election.campaign().ttl(ttl).wait(FAILOVER_WAIT).await?;
                storage.write(&resource, next.fence(), b"standby").await?;
                Ok::<_, Error>((next, Instant::now()))
            }
        });
        let (next, written) = standby
            .await
            .map_err(|e| harness(format!("the standby task died: {e}")))??;
        let stale = self
            .storage
            .write(&self.resource, leader.fence(), b"leader")
            .await;
        next.resign().await?;
        match stale {
            Err(Error::Stale { .. }) => Ok(Some(written.saturating_duration_since(killed))),
            Ok(()) => Err(harness(format!(
                "the killed leader's write on {} was admitted after its successor's",
                self.resource
            ))),
            Err(e) => Err(e),
        }
    }
}
