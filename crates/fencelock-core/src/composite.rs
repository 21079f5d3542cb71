//! Composite locks: every key of a set or none, taken in one canonical order, each member
//! keeping its own key's fence.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::backend::validate_ttl;
use crate::backoff::Backoff;
use crate::error::{Error, LostReason, Result};
use crate::fence::Fence;
use crate::guard::LockGuard;
use crate::key::LockKey;
use crate::locker::{LockOptions, Locker};
use crate::metrics;

/// A request for every lock of a set, built by [`Locker::lock_all`]; `.await` it for a
/// [`CompositeGuard`].
///
/// # How the set is taken
///
/// The generic form works over any [`LockBackend`](crate::LockBackend): the keys, sorted and
/// deduplicated, are requested one at a time in that order, each as a
/// [`Locker::lock`] request with what is left of the wait budget. When key `i` is not
/// obtained (the budget ran out, or an error), keys `0..i` are released and the request fails
/// with key `i`'s error; a [`Error::Timeout`] then names key `i` and the whole time waited.
/// Because every request takes the keys in the same order, a request waits only for keys
/// greater than every key it holds, so no cycle of waiters (a deadlock) can form.
///
/// Where the backend grants a set in one atomic step
/// ([`Capabilities::atomic_sets`](crate::Capabilities::atomic_sets): one Lua script on one
/// Redis server, one transaction on the PostgreSQL lease backend or on etcd, the shard locks
/// of the memory backend), the request tries that first: every key or none, in one round trip. When it
/// is refused (some key is held, or has waiters queued for it) the ordered form above takes
/// over, queueing for each key in turn as a single lock does.
///
/// # Cancel safety
///
/// Dropping the future releases, in tasks, the members granted so far (a dropped
/// [`LockGuard`]'s release), so a cancelled request holds nothing once those releases are
/// through; a grant in flight at that moment lapses after its ttl.
#[must_use = "a lock request does nothing until awaited"]
#[derive(Debug)]
pub struct LockAllRequest {
    locker: Locker,
    keys: Vec<Result<LockKey>>,
    options: LockOptions,
}

impl LockAllRequest {
    pub(crate) fn new(locker: Locker, keys: Vec<Result<LockKey>>) -> Self {
        let options = locker.options();
        LockAllRequest {
            locker,
            keys,
            options,
        }
    }

    /// Every member's lease ttl.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.options.ttl = ttl;
        self
    }

    /// How long to wait for the whole set; zero tries each key once. [`Duration::MAX`] waits
    /// without a bound, like [`wait_forever`](Self::wait_forever).
    pub fn wait(mut self, wait: Duration) -> Self {
        self.options.wait = wait;
        self
    }

    /// Waits for the set without a bound.
    pub fn wait_forever(self) -> Self {
        self.wait(Duration::MAX)
    }

    /// Whether every member's lease is renewed in the background.
    pub fn watchdog(mut self, on: bool) -> Self {
        self.options.watchdog = on;
        self
    }

    /// The pauses between tries, for every member.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.options.backoff = backoff;
        self
    }

    async fn run(self) -> Result<CompositeGuard> {
        let mut keys = self.keys.into_iter().collect::<Result<Vec<_>>>()?;
        if keys.is_empty() {
            return Err(Error::config("a composite lock needs at least one key"));
        }
        keys.sort();
        keys.dedup();
        let options = self.options;
        let capabilities = self.locker.backend().capabilities();
        validate_ttl(options.ttl, &capabilities)?;
        if let Some(max) = capabilities.max_held
            && keys.len() > max as usize
        {
            return Err(Error::config(format!(
                "a set of {} keys is more than {} can hold at once: each held lock keeps one of \
                 its {max} server sessions, so the set would wait for a session it holds itself \
                 (raise the backend's session pool, or lock fewer keys together)",
                keys.len(),
                self.locker.backend().name()
            )));
        }
        for key in &keys {
            self.locker.refuse_held(key)?;
        }
        let started = Instant::now();
        if let Some(set) = try_in_one_step(&self.locker, &keys, &options).await? {
            return Ok(set);
        }
        // `None`: a budget the clock cannot add, waited out without a bound.
        let deadline = started.checked_add(options.wait);
        let mut members = Vec::with_capacity(keys.len());
        for key in &keys {
            let left = deadline.map_or(Duration::MAX, |deadline| {
                deadline.saturating_duration_since(Instant::now())
            });
            let granted = self
                .locker
                .lock(key.as_str())
                .ttl(options.ttl)
                .wait(left)
                .watchdog(options.watchdog)
                .backoff(options.backoff)
                .await;
            match granted {
                Ok(guard) => members.push(guard),
                Err(e) => {
                    release_all(members).await;
                    return Err(match e {
                        Error::Timeout { key, .. } => Error::Timeout {
                            key,
                            waited: started.elapsed(),
                        },
                        other => other,
                    });
                }
            }
        }
        // Without the watchdog an early member may have lapsed while a later one was waited
        // for: then the set is not held, and none of it is kept.
        if let Some(lapsed) = members.iter().find(|member| !member.is_held()) {
            let error = Error::lease_lost(&lapsed.lease().key, LostReason::DeadlinePassed);
            release_all(members).await;
            return Err(error);
        }
        Ok(CompositeGuard::new(members))
    }
}

/// The set in one atomic step, where the backend offers it
/// ([`Capabilities::atomic_sets`](crate::Capabilities::atomic_sets)): `Ok(None)` when it
/// does not, or when some key is taken or queued for, and the ordered form is to wait for
/// it. Nothing is held when this returns `Ok(None)` or an error: the step grants every
/// key or none, and a reply that does not match the request is given back.
async fn try_in_one_step(
    locker: &Locker,
    keys: &[LockKey],
    options: &LockOptions,
) -> Result<Option<CompositeGuard>> {
    let backend = locker.backend();
    if keys.len() < 2 || !backend.capabilities().atomic_sets {
        return Ok(None);
    }
    let started = Instant::now();
    let leases = match backend.try_acquire_all(keys, options.ttl).await {
        Ok(Some(leases)) => leases,
        Ok(None) => return Ok(None),
        // The ordered form retries as any request does; and a wrapper that passes the inner
        // backend's capabilities on without the step is served by it too.
        Err(e) if e.is_retryable() || matches!(e, Error::Unsupported { .. }) => {
            metrics::backend_error(backend.name(), "acquire_all", &e);
            tracing::debug!(error = %e, "a set in one step failed; taking it key by key");
            return Ok(None);
        }
        Err(e) => {
            metrics::backend_error(backend.name(), "acquire_all", &e);
            return Err(e);
        }
    };
    let matches = leases.len() == keys.len()
        && leases
            .iter()
            .zip(keys)
            .all(|(lease, key)| lease.key == *key);
    if !matches {
        for lease in &leases {
            let _ = backend.release(lease).await;
        }
        return Err(Error::Backend {
            backend: backend.name(),
            message: format!(
                "a set of {} keys in one step was answered with {} leases for other keys",
                keys.len(),
                leases.len()
            ),
            source: None,
        });
    }
    // Each member is a grant, as in the ordered form, where each is a request of its own.
    let waited = started.elapsed();
    let members = leases
        .into_iter()
        .map(|lease| {
            tracing::debug!(
                key = %lease.key,
                token = lease.token.get(),
                "acquired in one step with its set"
            );
            metrics::waited(backend.name(), waited, Ok(()));
            locker.adopt(lease, options.watchdog)
        })
        .collect();
    Ok(Some(CompositeGuard::new(members)))
}

impl IntoFuture for LockAllRequest {
    type Output = Result<CompositeGuard>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<CompositeGuard>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.run())
    }
}

/// Releases the members of a set that is given up, all at once; a failed release lapses after
/// its ttl.
async fn release_all(members: Vec<LockGuard>) {
    for outcome in join_all(members.into_iter().map(LockGuard::release)).await {
        if let Err(e) = outcome {
            tracing::debug!(error = %e, "releasing a member of a composite lock failed");
        }
    }
}

/// Which member of a [`CompositeGuard`] was lost, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberLost {
    /// The member's key.
    pub key: LockKey,
    /// Why its lease is no longer held.
    pub reason: LostReason,
}

impl fmt::Display for MemberLost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lock {:?}: {}", self.key.as_str(), self.reason)
    }
}

/// Every lock of a set, held together: one [`LockGuard`] per key, sorted by key.
///
/// Each member is an ordinary guard with its own lease, watchdog and **fence**: a write to a
/// member's resource presents that member's fence ([`fence`](Self::fence)), never another
/// member's, so the storage judges it against that key's own token sequence. The set is held
/// while every member is; [`lost`](Self::lost) fires when the first member is lost, and the
/// holder then stops working on the whole set.
///
/// Ending it ends every member: [`release`](Self::release), or a drop (each member's release
/// is spawned as a dropped [`LockGuard`]'s is); [`Locker::shutdown`] releases the members
/// too, since each is on its locker's list.
#[must_use = "dropping the guard releases every lock of the set"]
pub struct CompositeGuard {
    members: Vec<LockGuard>,
    any_lost: CancellationToken,
    forward: Option<JoinHandle<()>>,
}

impl fmt::Debug for CompositeGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CompositeGuard")
            .field("members", &self.members)
            .finish()
    }
}

impl CompositeGuard {
    /// `members` sorted by key, each key once.
    fn new(members: Vec<LockGuard>) -> Self {
        let any_lost = CancellationToken::new();
        let tokens: Vec<_> = members.iter().map(LockGuard::lost_token).collect();
        let cancel = any_lost.clone();
        let forward = tokio::spawn(async move {
            first_of(
                tokens
                    .into_iter()
                    .map(|token| Box::pin(async move { token.cancelled_owned().await }) as _)
                    .collect(),
            )
            .await;
            cancel.cancel();
        });
        CompositeGuard {
            members,
            any_lost,
            forward: Some(forward),
        }
    }

    /// The members, sorted by key.
    pub fn members(&self) -> &[LockGuard] {
        &self.members
    }

    /// The keys, sorted.
    pub fn keys(&self) -> impl Iterator<Item = LockKey> + '_ {
        self.members.iter().map(|member| member.lease().key)
    }

    /// The member holding `key`, if `key` is in the set.
    pub fn member(&self, key: impl AsRef<str>) -> Option<&LockGuard> {
        let key = key.as_ref();
        self.members
            .binary_search_by(|member| member.lease().key.as_str().cmp(key))
            .ok()
            .map(|at| &self.members[at])
    }

    /// Every member's key and the fence of its own grant, in key order: what to present
    /// with every operation on each key's data, without a lookup that may miss.
    pub fn fences(&self) -> impl Iterator<Item = (LockKey, Fence)> + '_ {
        self.members
            .iter()
            .map(|member| (member.lease().key, member.fence()))
    }

    /// The fence of `key`'s own grant, to present with every operation on `key`'s data;
    /// `None` if `key` is not in the set.
    pub fn fence(&self, key: impl AsRef<str>) -> Option<Fence> {
        self.member(key).map(LockGuard::fence)
    }

    /// Whether every member is still held as far as this process can tell.
    pub fn is_held(&self) -> bool {
        self.members.iter().all(LockGuard::is_held)
    }

    /// Completes when any member is lost, with that member's key and reason (the first one
    /// lost, or, when several are, one of them).
    pub fn lost(&self) -> impl Future<Output = MemberLost> + Send + 'static {
        first_of(
            self.members
                .iter()
                .map(|member| {
                    let (key, lost) = (member.lease().key, member.lost());
                    Box::pin(async move {
                        MemberLost {
                            key,
                            reason: lost.await,
                        }
                    }) as _
                })
                .collect(),
        )
    }

    /// A token cancelled when any member is lost.
    pub fn lost_token(&self) -> CancellationToken {
        self.any_lost.child_token()
    }

    /// Renews every member for `ttl` from now, one after another; the first error (a lost
    /// member is [`Error::LeaseLost`] naming its key) after every member was tried.
    pub async fn extend(&self, ttl: Duration) -> Result<()> {
        let mut first_error = None;
        for member in &self.members {
            if let Err(e) = member.extend(ttl).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Releases every member, the releases sent together, so a set costs about one release's
    /// time rather than one per member. `Ok(true)` when every member was still held; every
    /// release is attempted, and the first error in key order is returned after all.
    pub async fn release(mut self) -> Result<bool> {
        let members = std::mem::take(&mut self.members);
        let outcomes = join_all(members.into_iter().map(LockGuard::release)).await;
        let mut all_held = true;
        let mut first_error = None;
        for outcome in outcomes {
            match outcome {
                Ok(held) => all_held &= held,
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(all_held), Err)
    }

    /// The members as separate guards, sorted by key: each is then released on its own.
    pub fn into_members(mut self) -> Vec<LockGuard> {
        std::mem::take(&mut self.members)
    }
}

impl Drop for CompositeGuard {
    fn drop(&mut self) {
        if let Some(forward) = self.forward.take() {
            forward.abort();
        }
    }
}

type Waiting<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// The output of whichever of `futures` completes first; never completes for none.
fn first_of<T: Send + 'static>(
    mut futures: Vec<Waiting<T>>,
) -> impl Future<Output = T> + Send + 'static {
    std::future::poll_fn(move |cx| {
        for future in &mut futures {
            if let Poll::Ready(output) = future.as_mut().poll(cx) {
                return Poll::Ready(output);
            }
        }
        Poll::Pending
    })
}
