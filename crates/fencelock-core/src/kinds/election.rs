//! Leader election: a campaign is the election key's exclusive lock, the term its token.

use std::fmt;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::time::Duration;

use crate::error::{LostReason, Result};
use crate::fence::{Fence, FencingToken};
use crate::guard::LockGuard;
use crate::key::LockKey;
use crate::lease::LockInfo;
use crate::locker::{LockRequest, Locker};

/// How often an [`Observer`] looks at an election that has no leader (a grant has no
/// wake-up, a release does).
const DEFAULT_POLL: Duration = Duration::from_millis(100);

/// A leader election on one key, over any backend. Cheap to clone.
///
/// A **campaign** waits for the election key's exclusive lock and holds it with the
/// watchdog; the grant's token is the **term**, and the fence of the leadership is the fence
/// for everything the leader writes: a leader that lost its lease (paused past it, cut off)
/// and still writes is refused by the storage once its successor, whose term is greater, has
/// written. **Resigning** releases the lock. Terms strictly increase because tokens do;
/// one leader per term because a token is granted once.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fencelock_core::Result<()> {
/// use fencelock_core::{Election, Locker};
/// let locker = Locker::new(fencelock_memory::MemoryLockBackend::new());
/// let election = Election::new(&locker, "scheduler")?;
/// let mut observer = election.observe();
/// let leader = election.campaign().await?;
/// let change = observer.changed().await?;
/// assert_eq!(change.leader, Some(leader.fence()));
/// leader.resign().await?;
/// assert_eq!(observer.changed().await?.leader, None);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Election {
    locker: Locker,
    key: LockKey,
}

impl Election {
    /// An election on `key`, campaigned for through `locker`. [`Error::InvalidKey`](crate::Error::InvalidKey)
    /// for a bad key, [`Error::Unsupported`](crate::Error::Unsupported) when the backend's
    /// [`Capabilities::kinds`](crate::Capabilities::kinds) does not claim elections, before
    /// any backend is touched.
    pub fn new(locker: &Locker, key: impl AsRef<str>) -> Result<Self> {
        let backend = locker.backend();
        if !backend.capabilities().kinds.election {
            return Err(crate::Error::unsupported(backend.name(), "leader election"));
        }
        Ok(Election {
            locker: locker.clone(),
            key: LockKey::new(key)?,
        })
    }

    /// The election's key.
    pub fn key(&self) -> &LockKey {
        &self.key
    }

    /// A campaign: waits without a bound (unless `.wait(..)` sets one) for leadership, with
    /// the watchdog on. Await it for a [`Leadership`].
    pub fn campaign(&self) -> CampaignRequest {
        CampaignRequest {
            request: self.locker.lock(&self.key).wait_forever().watchdog(true),
        }
    }

    /// The current leader's fence (its term is the token) and the last term ever granted.
    pub async fn leader(&self) -> Result<LockInfo> {
        self.locker.backend().inspect(&self.key).await
    }

    /// An observer that reports each change of leader it sees.
    pub fn observe(&self) -> Observer {
        Observer {
            election: self.clone(),
            seen: None,
            poll: DEFAULT_POLL,
        }
    }
}

/// A campaign built by [`Election::campaign`]; `.await` it for a [`Leadership`].
#[must_use = "a campaign does nothing until awaited"]
#[derive(Debug)]
pub struct CampaignRequest {
    request: LockRequest,
}

forward_request_options!(CampaignRequest);

impl IntoFuture for CampaignRequest {
    type Output = Result<Leadership>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<Leadership>> + Send>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(async move {
            Ok(Leadership {
                guard: self.request.await?,
            })
        })
    }
}

/// Leadership of one term. Stop acting as leader when [`lost`](Self::lost) fires, and
/// present [`fence`](Self::fence) with every write so a deposed leader is refused.
pub struct Leadership {
    guard: LockGuard,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("guard", &self.guard)
            .finish()
    }
}

impl Leadership {
    /// The term: the grant's token.
    pub fn term(&self) -> FencingToken {
        self.guard.token()
    }

    /// The leadership's fence (term and owner).
    pub fn fence(&self) -> Fence {
        self.guard.fence()
    }

    /// Whether this process still leads as far as it can tell.
    pub fn is_leader(&self) -> bool {
        self.guard.is_held()
    }

    /// Completes when leadership is lost.
    pub fn lost(&self) -> impl Future<Output = LostReason> + Send + 'static {
        self.guard.lost()
    }

    /// The guard underneath, kept as it is (renewal and all), for code that handles any
    /// [`LockGuard`].
    pub fn into_guard(self) -> LockGuard {
        self.guard
    }

    /// The guard underneath.
    pub fn guard(&self) -> &LockGuard {
        &self.guard
    }

    /// Steps down: releases the election's lock. `Ok(false)` if leadership was already lost.
    pub async fn resign(self) -> Result<bool> {
        self.guard.release().await
    }
}

/// A change of leader seen by an [`Observer`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaderChange {
    /// The leader now (its term is `leader.token`), `None` while there is none.
    pub leader: Option<Fence>,
    /// The last term granted so far.
    pub last_term: Option<FencingToken>,
    /// Terms granted since the previous change this observer reported that it never saw a
    /// leader of (they began and ended between two looks). Counted from the election's token
    /// counter, so it is exact where a key's tokens go up by one per grant, and an upper
    /// bound where they may skip: an `advance_token` on the key counts as terms, and so do
    /// the tokens a backend skips (PostgreSQL starts a new epoch, `2^32` tokens on, after it
    /// lost its volatile counters; a lost race between two lease grants leaves a gap). Zero
    /// always means no term went unseen.
    pub missed: u64,
}

/// Reports changes of an election's leader: a new term, or no leader. Made by
/// [`Election::observe`].
///
/// It looks with [`LockBackend::inspect`](crate::LockBackend::inspect); while there is a
/// leader it waits for a release with the backend's wake-up (a pub/sub message, a `Notify`),
/// and every `poll` (100 ms by default) otherwise, since a grant wakes nobody. Every change of
/// term is accounted for: a term it did not see is counted in [`LeaderChange::missed`].
#[derive(Debug, Clone)]
pub struct Observer {
    election: Election,
    seen: Option<(Option<Fence>, Option<FencingToken>)>,
    poll: Duration,
}

impl Observer {
    /// How long to wait between looks when waking up is not possible.
    pub fn poll(mut self, poll: Duration) -> Self {
        self.poll = poll;
        self
    }

    /// Waits for the next change and returns it. The first call returns the state at once.
    pub async fn changed(&mut self) -> Result<LeaderChange> {
        let backend = self.election.locker.backend().clone();
        let key = &self.election.key;
        loop {
            let info = backend.inspect(key).await?;
            let now = (info.holder, info.last_token);
            if self.seen.map(|(leader, _)| leader) != Some(now.0) || self.seen.is_none() {
                let before = self
                    .seen
                    .and_then(|(_, last)| last)
                    .map_or(0, FencingToken::get);
                let after = now.1.map_or(0, FencingToken::get);
                let leader_is_new = now.0.is_some_and(|f| f.token.get() > before);
                let missed = after
                    .saturating_sub(before)
                    .saturating_sub(u64::from(leader_is_new));
                let first = self.seen.is_none();
                self.seen = Some(now);
                return Ok(LeaderChange {
                    leader: now.0,
                    last_term: now.1,
                    missed: if first { 0 } else { missed },
                });
            }
            self.seen = Some(now);
            match now.0 {
                Some(_) => backend.wait_for_release(key, self.poll).await?,
                None => tokio::time::sleep(self.poll).await,
            }
        }
    }
}
