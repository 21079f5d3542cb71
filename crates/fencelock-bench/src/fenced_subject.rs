//! The fenced lock under test: a fencelock backend and its fenced storage, as a benchmark
//! subject.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use async_trait::async_trait;
use fencelock_core::{FencedStorage, Lease, LockBackend, LockKey, Locker};

use fencelock_core::Result;

use crate::error::harness;
use crate::subject::{Op, Subject, TTL};

/// The fenced lock under test: a [`LockBackend`] and its [`FencedStorage`], driven the way an
/// application drives them (leases, `Locker`, fenced writes).
///
/// Any backend can be measured: build it from the backend's `Arc<dyn LockBackend>` and
/// `Arc<dyn FencedStorage>`, then put it in a [`Suite`](crate::Suite).
#[derive(Clone)]
pub struct FencedSubject {
    backend: Arc<dyn LockBackend>,
    storage: Arc<dyn FencedStorage>,
    locker: Locker,
    /// Whether contended requests wait their turn (the default) or barge.
    fair: bool,
    /// The contended requests in flight, the barging clone's included.
    in_flight: Arc<InFlight>,
}

/// How long [`FencedSubject::shutdown`] waits for the requests of a stopped run to end.
const STOPPING: Duration = Duration::from_secs(2);

/// A count of requests in flight, and a wake-up when it falls to zero.
#[derive(Debug, Default)]
struct InFlight {
    count: AtomicUsize,
    idle: Notify,
}

/// One request in flight, counted until dropped.
struct Entered(Arc<InFlight>);

impl InFlight {
    fn enter(self: &Arc<Self>) -> Entered {
        self.count.fetch_add(1, Ordering::SeqCst);
        Entered(self.clone())
    }

    /// Waits until no request is in flight, at most `limit`.
    async fn idle(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, async {
            loop {
                let idle = self.idle.notified();
                if self.count.load(Ordering::SeqCst) == 0 {
                    return;
                }
                idle.await;
            }
        })
        .await;
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl fmt::Debug for FencedSubject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FencedSubject")
            .field("backend", &self.backend.name())
            .finish_non_exhaustive()
    }
}

impl FencedSubject {
    /// The lock of `backend`, writing to `storage`.
    pub fn new(backend: Arc<dyn LockBackend>, storage: Arc<dyn FencedStorage>) -> Self {
        FencedSubject {
            locker: Locker::new(backend.clone()),
            backend,
            storage,
            fair: true,
            in_flight: Arc::default(),
        }
    }

    /// The same lock, its contended requests barging
    /// ([`fair`](fencelock_core::LockRequest::fair) off): measured beside the fair default on
    /// a backend that queues.
    pub fn barging(&self) -> Self {
        FencedSubject {
            fair: false,
            ..self.clone()
        }
    }

    /// Ends the subject's requests as a process ends its `Locker`: first waits (at most
    /// 2 s) for the contended requests of a stopped run to be dropped (their tasks are aborted
    /// when the run is, but a task ends only when the runtime next runs it, and its request
    /// sends its queue leave only then), then [`Locker::shutdown`]: held leases released and
    /// those leaves awaited. Called before the run's rows are removed, so no leave lands
    /// after the removal.
    pub async fn shutdown(&self) -> fencelock_core::Result<()> {
        self.in_flight.idle(STOPPING).await;
        self.locker.shutdown().await.map(drop)
    }

    /// The backend.
    pub fn backend(&self) -> &Arc<dyn LockBackend> {
        &self.backend
    }

    /// The storage.
    pub fn storage(&self) -> &Arc<dyn FencedStorage> {
        &self.storage
    }

    /// The locker over the backend (the lock kinds are taken through it).
    pub fn locker(&self) -> &Locker {
        &self.locker
    }

    // Calls go through `&dyn LockBackend`: on the `Arc` itself they would take the forwarding
    // impl for `Arc<T>` and box every future twice.
    async fn grant(&self, key: &LockKey) -> Result<Lease> {
        self.backend
            .as_ref()
            .try_acquire(key, TTL)
            .await?
            .ok_or_else(|| fencelock_core::tools::held_by_someone_else("fencelock", key))
    }

    /// Fenced writes of `resource`, under a lease taken now and released by
    /// `Op::finish`.
    pub async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        let lease = self.grant(resource).await?;
        Ok(Box::new(FencedWriter {
            backend: self.backend.clone(),
            storage: self.storage.clone(),
            lease,
            value: vec![7; 64],
        }))
    }

    /// Renewals (`extend`) of a lease on `key`, taken now and released by `Op::finish`.
    pub async fn renewer(&self, key: &LockKey) -> Result<Box<dyn Op>> {
        let lease = self.grant(key).await?;
        Ok(Box::new(Renewer {
            backend: self.backend.clone(),
            lease: Mutex::new(lease),
        }))
    }

    /// Hand-offs on `key`: each takes the lock, starts a waiter in `Locker::lock(..).wait(..)`,
    /// lets it block for `settle`, releases, and measures from the start of the release call
    /// to the waiter's guard. With `watchdog` the waiter's guard is renewed in the background
    /// (the `Locker`'s default), so a grant the release handed over for a short hand-off ttl
    /// is returned at once; without it, the waiter first extends such a grant to its ttl.
    pub fn handoff(&self, key: &LockKey, settle: Duration, watchdog: bool) -> Box<dyn Op> {
        Box::new(Handoff {
            locker: self.locker.clone(),
            key: key.clone(),
            settle,
            watchdog,
        })
    }
}

#[async_trait]
impl Subject for FencedSubject {
    fn label(&self) -> String {
        if self.fair {
            format!("fencelock {}", self.backend.name())
        } else {
            format!("fencelock {} (barging)", self.backend.name())
        }
    }

    async fn acquire_release(&self, key: &LockKey) -> Result<()> {
        let lease = self.grant(key).await?;
        self.backend.as_ref().release(&lease).await?;
        Ok(())
    }

    async fn lock_release(&self, key: &LockKey, wait: Duration) -> Result<()> {
        // Counted until the request ends or is dropped (declared first, dropped last).
        let _entered = self.in_flight.enter();
        // Contending tasks share this subject: each call is a holder of its own (a `Locker`
        // value refuses to re-enter a key it holds), as each task of an application would be.
        let locker = self.locker.clone();
        let guard = locker
            .lock(key.as_str())
            .ttl(TTL)
            .wait(wait)
            .fair(self.fair)
            .await?;
        guard.release().await?;
        Ok(())
    }
}

struct FencedWriter {
    backend: Arc<dyn LockBackend>,
    storage: Arc<dyn FencedStorage>,
    lease: Lease,
    value: Vec<u8>,
}

#[async_trait]
impl Op for FencedWriter {
    async fn once(&self) -> Result<Option<Duration>> {
        self.storage
            .write(&self.lease.key, self.lease.fence(), &self.value)
            .await?;
        Ok(None)
    }

    async fn finish(self: Box<Self>) -> Result<()> {
        self.backend.as_ref().release(&self.lease).await?;
        Ok(())
    }
}

struct Renewer {
    backend: Arc<dyn LockBackend>,
    lease: Mutex<Lease>,
}

impl Renewer {
    fn lease(&self) -> Lease {
        self.lease
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

#[async_trait]
impl Op for Renewer {
    async fn once(&self) -> Result<Option<Duration>> {
        let renewed = self.backend.as_ref().extend(&self.lease(), TTL).await?;
        *self.lease.lock().unwrap_or_else(PoisonError::into_inner) = renewed;
        Ok(None)
    }

    async fn finish(self: Box<Self>) -> Result<()> {
        self.backend.as_ref().release(&self.lease()).await?;
        Ok(())
    }
}

struct Handoff {
    locker: Locker,
    key: LockKey,
    settle: Duration,
    watchdog: bool,
}

#[async_trait]
impl Op for Handoff {
    async fn once(&self) -> Result<Option<Duration>> {
        let wait = Duration::from_secs(30);
        let holder = self
            .locker
            .lock(self.key.as_str())
            .ttl(TTL)
            .wait(wait)
            .watchdog(false)
            .await?;
        let (locker, key, watchdog) = (self.locker.clone(), self.key.clone(), self.watchdog);
        let waiter = tokio::spawn(async move {
            let guard = locker
                .lock(key.as_str())
                .ttl(TTL)
                .wait(wait)
                .watchdog(watchdog)
                .await?;
            let granted = Instant::now();
            guard.release().await?;
            Ok::<_, fencelock_core::Error>(granted)
        });
        tokio::time::sleep(self.settle).await;
        let released = Instant::now();
        holder.release().await?;
        let granted = waiter
            .await
            .map_err(|e| harness(format!("the waiter task died: {e}")))??;
        Ok(Some(granted.saturating_duration_since(released)))
    }
}
