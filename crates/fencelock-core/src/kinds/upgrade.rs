//! Upgradeable readers, and the writer's request that keeps them sound: both take the key's
//! **companion** lock (`<key>/upgrader`, an exclusive lock) before the key itself, so between
//! an upgrader's read release and its write grant no other writer can be granted.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::LockBackend;
use crate::error::{Error, LostReason, Result};
use crate::fence::{Fence, FencingToken};
use crate::guard::LockGuard;
use crate::key::LockKey;
use crate::locker::{LockOptions, Locker};

use super::rwlock::{ReadGuard, RwLocker};

/// What a key's companion lock is named: the key, then this.
pub const COMPANION_SUFFIX: &str = "/upgrader";

/// The companion lock of `key`: `<key>/upgrader`. `InvalidKey` when the key is too long to
/// have one (it may be at most 512 - 9 bytes).
pub(crate) fn companion_of(key: &LockKey) -> Result<LockKey> {
    let name = format!("{key}{COMPANION_SUFFIX}");
    if name.len() > LockKey::MAX_LEN {
        return Err(Error::InvalidKey {
            key: key.as_str().chars().take(64).collect(),
            reason: "too long for an upgradeable reader: its companion lock <key>/upgrader \
                     would pass 512 bytes",
        });
    }
    LockKey::new(name)
}

/// The companion a writer of `key` takes first: none where no upgradeable reader can exist
/// on the key (the backend has no shared locks, or the key is too long for a companion, which
/// refuses upgradeable readers too), so such writers cost what they did before.
fn writer_companion(key: &LockKey, backend: &dyn LockBackend) -> Option<LockKey> {
    if backend.capabilities().kinds.shared {
        companion_of(key).ok()
    } else {
        None
    }
}

/// The time left of a budget that started at `started`; `Duration::MAX` when the budget
/// has no bound.
fn left_of(started: Instant, wait: Duration) -> Duration {
    started.checked_add(wait).map_or(Duration::MAX, |deadline| {
        deadline.saturating_duration_since(Instant::now())
    })
}

/// A time-out on the companion is reported on the key the caller asked for.
fn on_key(error: Error, key: &LockKey, started: Instant) -> Error {
    match error {
        Error::Timeout { .. } => Error::Timeout {
            key: key.to_string(),
            waited: started.elapsed(),
        },
        other => other,
    }
}

/// Releases what a failed step still holds; a failed release lapses after its ttl.
async fn give_up(guard: LockGuard) {
    if let Err(e) = guard.release().await {
        tracing::debug!(error = %e, "releasing a companion or writer lock failed");
    }
}

/// The error when the companion lapsed while it was needed: no promise about other writers
/// can be kept, so the step is refused.
fn companion_lost(companion: &LockGuard) -> Error {
    Error::lease_lost(&companion.lease().key, LostReason::DeadlinePassed)
}

/// Whether the companion is still this holder's, asked of the server: an extend, which
/// renews only the live lease of this owner and token. The local deadline is only as good
/// as the renewals the server kept, and a promoted replica may have lost the last of them
/// (or the grant itself) while this process counts on it; another party holding the
/// companion since, or having held and released it, makes the extend fail. `Err` when the
/// companion is not (or not known to be) held: the step must be refused.
async fn held_on_server(companion: &LockGuard, ttl: Duration) -> Result<()> {
    if !companion.is_held() {
        return Err(companion_lost(companion));
    }
    companion.extend(ttl).await
}

/// The option setters of a request that keeps its own [`LockOptions`].
macro_rules! option_setters {
    ($request:ident) => {
        impl $request {
            /// The lease ttl (of every lock the request takes).
            pub fn ttl(mut self, ttl: Duration) -> Self {
                self.options.ttl = ttl;
                self
            }

            /// How long to wait, in all; zero tries once, [`Duration::MAX`] waits without a
            /// bound.
            pub fn wait(mut self, wait: Duration) -> Self {
                self.options.wait = wait;
                self
            }

            /// Waits without a bound.
            pub fn wait_forever(self) -> Self {
                self.wait(Duration::MAX)
            }

            /// Whether the guards renew their leases in the background.
            pub fn watchdog(mut self, on: bool) -> Self {
                self.options.watchdog = on;
                self
            }

            /// The pauses between tries.
            pub fn backoff(mut self, backoff: crate::Backoff) -> Self {
                self.options.backoff = backoff;
                self
            }
        }
    };
}

/// A writer's request, built by [`RwLocker::write`]; `.await` it for the key's exclusive
/// [`LockGuard`].
///
/// Where the backend offers shared locks, the request first takes the key's companion lock
/// (renewed while it waits), then the key, checks that the companion was held throughout,
/// and releases the companion: so no writer is granted while an upgradeable reader holds
/// the companion. The time-out names the key; the wait budget covers both.
///
/// # Cancel safety
///
/// As [`LockRequest`](crate::LockRequest): a dropped request releases, in tasks, what it
/// took so far.
#[must_use = "a lock request does nothing until awaited"]
#[derive(Debug)]
pub struct WriteRequest {
    locker: Locker,
    key: Result<LockKey>,
    options: LockOptions,
}

option_setters!(WriteRequest);

impl WriteRequest {
    pub(super) fn new(locker: &Locker, key: &str) -> Self {
        WriteRequest {
            // The same holder: the writer's re-entry check is the locker's own.
            locker: locker.clone_holder(),
            key: LockKey::new(key),
            options: locker.options(),
        }
    }

    async fn run(self) -> Result<LockGuard> {
        let key = self.key?;
        let o = self.options;
        let writer = |wait: Duration| {
            self.locker
                .lock(key.as_str())
                .ttl(o.ttl)
                .wait(wait)
                .watchdog(o.watchdog)
                .backoff(o.backoff)
        };
        let Some(companion) = writer_companion(&key, self.locker.backend().as_ref()) else {
            return writer(o.wait).await;
        };
        let started = Instant::now();
        let gate = self
            .locker
            .lock(companion.as_str())
            .ttl(o.ttl)
            .wait(o.wait)
            .watchdog(true)
            .backoff(o.backoff)
            .await
            .map_err(|e| on_key(e, &key, started))?;
        let granted = match writer(left_of(started, o.wait)).await {
            Ok(granted) => granted,
            Err(e) => {
                give_up(gate).await;
                return Err(on_key(e, &key, started));
            }
        };
        // Held now, on the server, means held since before the grant (a lease is never
        // renewed back to life, and no other holder restores this one's owner and token), so
        // no upgrader was between its read and its write when this writer got in.
        if let Err(error) = held_on_server(&gate, o.ttl).await {
            give_up(granted).await;
            give_up(gate).await;
            return Err(error);
        }
        give_up(gate).await;
        Ok(granted)
    }
}

impl IntoFuture for WriteRequest {
    type Output = Result<LockGuard>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<LockGuard>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// A request for the upgradeable reader of a key, built by
/// [`RwLocker::upgradeable_read`]; `.await` it for an [`UpgradeableReadGuard`].
///
/// Takes the key's companion lock, then joins the key's read phase. At most one upgradeable
/// reader holds a key at a time (the companion is exclusive); plain readers join beside it;
/// writers of the same key through [`RwLocker::write`] wait. A second upgradeable reader of
/// the key through the same [`Locker`] value is [`Error::AlreadyHeld`] at once (it would
/// wait for itself). A backend without shared locks refuses it with
/// [`Error::Unsupported`], before anything is taken.
///
/// # Cancel safety
///
/// As [`LockRequest`](crate::LockRequest): a dropped request releases, in tasks, what it
/// took so far.
#[must_use = "a lock request does nothing until awaited"]
#[derive(Debug)]
pub struct UpgradeableReadRequest {
    rw: RwLocker,
    key: Result<LockKey>,
    options: LockOptions,
}

option_setters!(UpgradeableReadRequest);

impl UpgradeableReadRequest {
    pub(super) fn new(rw: &RwLocker, key: &str) -> Self {
        UpgradeableReadRequest {
            // The same holder (a clone would be a holder of its own): a second upgradeable
            // reader, or a writer, of this locker is refused as re-entry, not waited for.
            rw: RwLocker::new(rw.locker().clone_holder()),
            key: LockKey::new(key),
            options: rw.locker().options(),
        }
    }

    async fn run(self) -> Result<UpgradeableReadGuard> {
        let key = self.key?;
        let locker = self.rw.locker();
        let backend = locker.backend();
        if !backend.capabilities().kinds.shared {
            return Err(Error::unsupported(
                backend.name(),
                "upgradeable readers (shared locks)",
            ));
        }
        let companion = companion_of(&key)?;
        let o = self.options;
        let started = Instant::now();
        let gate = locker
            .lock(companion.as_str())
            .ttl(o.ttl)
            .wait(o.wait)
            .watchdog(o.watchdog)
            .backoff(o.backoff)
            .await
            .map_err(|e| on_key(e, &key, started))?;
        let read = self
            .rw
            .read(key.as_str())
            .ttl(o.ttl)
            .wait(left_of(started, o.wait))
            .watchdog(o.watchdog)
            .backoff(o.backoff)
            .await;
        match read {
            Ok(read) => Ok(UpgradeableReadGuard {
                rw: self.rw,
                key,
                options: o,
                read,
                gate,
            }),
            Err(e) => {
                give_up(gate).await;
                Err(on_key(e, &key, started))
            }
        }
    }
}

impl IntoFuture for UpgradeableReadRequest {
    type Output = Result<UpgradeableReadGuard>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<UpgradeableReadGuard>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// The upgradeable reader of a key: a reader of the key's read phase (present
/// [`fence`](Self::fence), the phase's shared fence, with every read) that holds the key's
/// companion lock too, so that it can [`upgrade`](Self::upgrade) to the writer with no other
/// writer in between.
///
/// It is held while both its read and its companion are; [`lost`](Self::lost) fires when
/// either is lost. Dropped, both are released as dropped guards are.
pub struct UpgradeableReadGuard {
    rw: RwLocker,
    key: LockKey,
    options: LockOptions,
    read: ReadGuard,
    gate: LockGuard,
}

impl fmt::Debug for UpgradeableReadGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpgradeableReadGuard")
            .field("key", &self.key)
            .field("read", &self.read)
            .field("companion", &self.gate)
            .finish_non_exhaustive()
    }
}

impl UpgradeableReadGuard {
    /// The read phase's fence, shared with the plain readers of the phase.
    pub fn fence(&self) -> Fence {
        self.read.fence()
    }

    /// The read phase's token.
    pub fn token(&self) -> FencingToken {
        self.read.token()
    }

    /// The key.
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// The read underneath.
    pub fn read(&self) -> &ReadGuard {
        &self.read
    }

    /// The companion lock underneath (`<key>/upgrader`).
    pub fn companion(&self) -> &LockGuard {
        &self.gate
    }

    /// Whether the read and the companion are both still held as far as this process can
    /// tell.
    pub fn is_held(&self) -> bool {
        self.read.is_held() && self.gate.is_held()
    }

    /// Completes when the read or the companion is lost, with its reason.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        either_lost(self.read.lost(), self.gate.lost())
    }

    /// Upgrades to the writer: leaves the read phase, waits up to `wait` for the other
    /// readers to leave theirs, and takes the key's exclusive lock with a **new token**
    /// (greater than this reader's fence, so once the writer has touched a resource, every
    /// read fence of the phase, this one's included, is refused there). The companion is kept,
    /// so no other writer of the key is granted between the read and the write.
    ///
    /// Refused with [`Error::LeaseLost`] (on the companion's key) when the companion is not
    /// held before the read is left or after the write is granted (asked of the server then):
    /// another writer may have come in between. On any error the upgrade holds nothing (the
    /// read is given up first, so a failed upgrade cannot keep it); take a new reader to go on.
    ///
    /// # Cancel safety
    ///
    /// A dropped upgrade drops what it held, whose releases run as dropped guards' do.
    pub async fn upgrade(self, wait: Duration) -> Result<UpgradedGuard> {
        let UpgradeableReadGuard {
            rw,
            key,
            options: o,
            read,
            gate,
        } = self;
        if !gate.is_held() {
            let error = companion_lost(&gate);
            give_up(read.into_guard()).await;
            give_up(gate).await;
            return Err(error);
        }
        if let Err(e) = read.release().await {
            give_up(gate).await;
            return Err(e);
        }
        let writer = rw
            .locker()
            .lock(key.as_str())
            .ttl(o.ttl)
            .wait(wait)
            .watchdog(o.watchdog)
            .backoff(o.backoff)
            .await;
        let writer = match writer {
            Ok(writer) => writer,
            Err(e) => {
                give_up(gate).await;
                return Err(e);
            }
        };
        if let Err(error) = held_on_server(&gate, o.ttl).await {
            give_up(writer).await;
            give_up(gate).await;
            return Err(error);
        }
        Ok(UpgradedGuard {
            rw,
            key,
            options: o,
            writer,
            gate,
        })
    }

    /// Leaves the read phase and releases the companion. `Ok(false)` if either was already
    /// lost.
    pub async fn release(self) -> Result<bool> {
        let read = self.read.release().await;
        let gate = self.gate.release().await;
        Ok(read? & gate?)
    }
}

/// An upgraded reader: the key's writer (present [`fence`](Self::fence), its new token),
/// still holding the companion, so it can [`downgrade`](Self::downgrade) back to the
/// upgradeable reader with no writer in between.
pub struct UpgradedGuard {
    rw: RwLocker,
    key: LockKey,
    options: LockOptions,
    writer: LockGuard,
    gate: LockGuard,
}

impl fmt::Debug for UpgradedGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpgradedGuard")
            .field("key", &self.key)
            .field("writer", &self.writer)
            .field("companion", &self.gate)
            .finish_non_exhaustive()
    }
}

impl UpgradedGuard {
    /// The key.
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// The writer's fence: the token the upgrade took.
    pub fn fence(&self) -> Fence {
        self.writer.fence()
    }

    /// The writer's token.
    pub fn token(&self) -> FencingToken {
        self.writer.token()
    }

    /// The writer's guard underneath.
    pub fn guard(&self) -> &LockGuard {
        &self.writer
    }

    /// The companion lock underneath.
    pub fn companion(&self) -> &LockGuard {
        &self.gate
    }

    /// Whether the writer's lock and the companion are both still held as far as this
    /// process can tell.
    pub fn is_held(&self) -> bool {
        self.writer.is_held() && self.gate.is_held()
    }

    /// Completes when the writer's lock or the companion is lost, with its reason.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        either_lost(self.writer.lost(), self.gate.lost())
    }

    /// Back to the upgradeable reader: releases the writer's lock and joins the key's read
    /// phase, keeping the companion, so no writer comes between the write and the read. The
    /// phase the reader joins is the first after this writer's token: its fence is greater
    /// than the writer's, so what the writer wrote is admitted to it, and it is the phase
    /// the next writer's token will exceed.
    ///
    /// Refused with [`Error::LeaseLost`] when the companion was lost meanwhile; on any error
    /// it holds nothing.
    pub async fn downgrade(self) -> Result<UpgradeableReadGuard> {
        let UpgradedGuard {
            rw,
            key,
            options: o,
            writer,
            gate,
        } = self;
        if let Err(e) = writer.release().await {
            give_up(gate).await;
            return Err(e);
        }
        let read = rw
            .read(key.as_str())
            .ttl(o.ttl)
            .wait(o.wait)
            .watchdog(o.watchdog)
            .backoff(o.backoff)
            .await;
        let read = match read {
            Ok(read) => read,
            Err(e) => {
                give_up(gate).await;
                return Err(e);
            }
        };
        if let Err(error) = held_on_server(&gate, o.ttl).await {
            give_up(read.into_guard()).await;
            give_up(gate).await;
            return Err(error);
        }
        Ok(UpgradeableReadGuard {
            rw,
            key,
            options: o,
            read,
            gate,
        })
    }

    /// Releases the writer's lock and the companion. `Ok(false)` if either was already lost.
    pub async fn release(self) -> Result<bool> {
        let writer = self.writer.release().await;
        let gate = self.gate.release().await;
        Ok(writer? & gate?)
    }
}

/// The first of two losses.
async fn either_lost(
    a: impl Future<Output = LostReason> + Send + 'static,
    b: impl Future<Output = LostReason> + Send + 'static,
) -> LostReason {
    tokio::select! {
        reason = a => reason,
        reason = b => reason,
    }
}
