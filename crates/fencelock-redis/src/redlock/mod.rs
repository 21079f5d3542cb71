//! `Redlock`: one lock over N independent Redis servers, with fencing tokens.
//!
//! The parts, from the bottom: [`node`] (one server, connected lazily), [`round`] (one call
//! fanned out to every node), [`call`] (one script sent to every node), [`cluster`] (the
//! nodes, the quorum, reports, and the [`background`] calls left running), then one module per operation ([`acquire`], [`settle`],
//! [`renew`], [`release`], [`view`]), and [`config`]. This module ties them to
//! [`LockBackend`].

mod acquire;
mod background;
mod call;
mod cluster;
mod config;
mod gate;
mod node;
mod release;
mod renew;
mod round;
mod settle;
mod view;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{
    Capabilities, Error, FencingToken, Lease, LockBackend, LockInfo, LockKey, Result,
    TimeAuthority, TokenGuarantee, WakeUp, drift_margin, validate_floor, validate_ttl,
};
use tracing::Instrument;
use tracing::field::Empty;

use self::cluster::Cluster;
pub use self::config::{DEFAULT_NODE_TIMEOUT, RedlockConfig};
use self::round::Round;
use crate::codec::MAX_TTL;
use crate::error::REDLOCK as BACKEND;
use crate::outcome::{finish, finish_grant};

/// A [`LockBackend`] over N independent Redis servers (the Redlock algorithm), each grant
/// carrying a fencing token.
///
/// Every call goes to all nodes at once and is decided as soon as a quorum (`N/2 + 1`) agreed
/// or can no longer agree; each node gets at most the node timeout, so a call never hangs on
/// dead or frozen nodes. The nodes use the same keys and Lua scripts as
/// [`RedisLockBackend`](crate::RedisLockBackend).
///
/// - **Acquire** asks every node for the lock (`SET NX PX` and `INCR` of that node's
///   counter). With a quorum of grants, the token is the highest counter among the granting
///   nodes; when those differ, the token is first written back to a quorum (counter raised to
///   at least the token), so any later quorum, which shares a node with this one, hands out a
///   higher token. The lease's validity is `ttl - elapsed - drift`, measured on the monotonic
///   clock from before the first request; if nothing is left, or no quorum granted, the lock
///   is released on every node in the background, after the calls still in flight have
///   ended. `Ok(None)` means other owners hold the lock on so many nodes that no quorum was
///   possible; failures of nodes are [`Error::QuorumFailed`], naming what each node answered.
/// - **Extend** needs a quorum of nodes still holding this grant and validity left; a
///   quorum of nodes where the lock is gone or held by another owner is
///   [`Error::LeaseLost`].
/// - **Release** deletes the lock on every node where this grant holds it, and is `true`
///   when that was a quorum.
/// - **`advance_token`** raises every reachable node's counter (a quorum is needed).
/// - **`inspect`** is the majority view: the holder agreed by a quorum, the highest counter.
/// - **`wait_for_release`** listens on every node's release channel and returns once a
///   quorum of nodes say the lock is free, was released, or expired. One request of this
///   process at a time listens for a key; the others wait for that turn at most their
///   pause, so a release sets off one try per process, not one per waiting request.
///
/// Its safety model is in the crate docs: the lock alone relies on bounded clock drift, pauses
/// and restarts; the fence keeps data safe when those fail.
///
/// ```no_run
/// # async fn demo() -> fencelock_core::Result<()> {
/// use std::time::Duration;
/// use fencelock_core::{FencedStorage, LockBackend, LockKey};
/// use fencelock_redis::{RedisConfig, Redlock};
///
/// let redlock = Redlock::connect([
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])
/// .await?;
/// // The data lives where it lives: here on its own, persistent server.
/// let storage = RedisConfig::new("redis://10.0.0.9:6379").connect_storage().await?;
/// let key = LockKey::new("invoice/42")?;
/// if let Some(lease) = redlock.try_acquire(&key, Duration::from_secs(10)).await? {
///     storage.write(&key, lease.fence(), b"paid").await?;
///     redlock.release(&lease).await?;
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Redlock {
    cluster: Arc<Cluster>,
}

impl RedlockConfig {
    /// Connects to every node in parallel, each attempt bounded by the connect timeout plus
    /// the node timeout, and succeeds when a quorum connected; the nodes that did not are
    /// tried again by later calls.
    ///
    /// Every URL and option is checked first ([`Error::InvalidConfig`], nothing touched).
    /// A node that refuses the credentials, is not a Redis server, or may evict keys (unless
    /// [`allow_eviction`](RedlockConfig::allow_eviction)) is [`Error::InvalidConfig`] naming
    /// the node, even when the others make a quorum; fewer than a quorum of reachable nodes
    /// is [`Error::QuorumFailed`] naming what each node answered. Nodes that are down (the
    /// first one included) do not stop the connect while a quorum is up.
    pub async fn connect(&self) -> Result<Redlock> {
        let cluster = Cluster::new(self.build_nodes()?, self.node_time(), self.key_prefix());
        // Every node's attempt is awaited (each bounded), so the capabilities read at connect
        // time cover every reachable node.
        let mut round = Round::start(
            &cluster.nodes,
            self.connect_time() + self.node_time(),
            |_| async { Ok(()) },
        );
        round.all().await;
        // A node that refuses the credentials or may evict keys is misconfigured: trying
        // again cannot help, and serving without it would hide the problem until a quorum
        // depends on it.
        if let Some(e) = round.config_error(&cluster.nodes) {
            return Err(e);
        }
        let connected = round.count_ok(|_| true);
        if connected < cluster.needed {
            return Err(cluster.quorum_failed(&mut round, connected, |()| "connected".to_owned()));
        }
        Ok(Redlock {
            cluster: Arc::new(cluster),
        })
    }
}

impl Redlock {
    /// Connects to the servers at `urls` with the default [`RedlockConfig`].
    pub async fn connect<I>(urls: I) -> Result<Self>
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        RedlockConfig::new(urls).connect().await
    }

    /// The nodes, as `host:port`, in the order they were configured.
    pub fn nodes(&self) -> Vec<String> {
        self.cluster.nodes.iter().map(|n| n.label.clone()).collect()
    }

    /// How many nodes make a quorum: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.cluster.needed
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.cluster.prefix
    }
}

/// Refuses a ttl that the drift margin would use up entirely: no grant could ever be valid.
fn check_ttl(ttl: Duration, capabilities: &Capabilities) -> Result<()> {
    validate_ttl(ttl, capabilities)?;
    let drift = drift_margin(ttl);
    if ttl <= drift {
        return Err(Error::InvalidTtl {
            ttl,
            reason: format!("ttl must be longer than the drift margin ({drift:?}) on redlock"),
        });
    }
    Ok(())
}

#[async_trait]
impl LockBackend for Redlock {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        let server_persists = self.cluster.server_persists();
        Capabilities::new(
            TokenGuarantee::DurableIfServerPersists { server_persists },
            TimeAuthority::Server,
            WakeUp::Notify,
            MAX_TTL,
        )
        .with_locks_survive_restart(server_persists == Some(true))
    }

    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        check_ttl(ttl, &self.capabilities())?;
        let span = tracing::debug_span!("try_acquire", backend = BACKEND, key = %key, ?ttl, token = Empty, outcome = Empty);
        let result = acquire::acquire(&self.cluster, key, ttl)
            .instrument(span.clone())
            .await;
        finish_grant(&span, result)
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        check_ttl(ttl, &self.capabilities())?;
        let span = tracing::debug_span!("extend", backend = BACKEND, key = %lease.key, token = lease.token.get(), ?ttl, outcome = Empty);
        let result = renew::extend(&self.cluster, lease, ttl)
            .instrument(span.clone())
            .await;
        finish(&span, result, "ok")
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let span = tracing::debug_span!("release", backend = BACKEND, key = %lease.key, token = lease.token.get(), outcome = Empty);
        let result = release::release(&self.cluster, &lease.key, lease.owner)
            .instrument(span.clone())
            .await;
        finish(&span, result, "ok")
    }

    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        let span = tracing::debug_span!("wait_for_release", backend = BACKEND, key = %key, ?max);
        release::wait_for_release(&self.cluster, key, max)
            .instrument(span)
            .await
    }

    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        let span = tracing::debug_span!("inspect", backend = BACKEND, key = %key, outcome = Empty);
        let result = view::majority_view(&self.cluster, key)
            .instrument(span.clone())
            .await;
        finish(&span, result, "ok")
    }

    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        validate_floor(floor, i64::MAX.unsigned_abs(), "a Redis counter")?;
        let span = tracing::debug_span!("advance_token", backend = BACKEND, key = %key, floor = floor.get(), outcome = Empty);
        let result = settle::advance_token(&self.cluster, key, floor)
            .instrument(span.clone())
            .await;
        finish(&span, result, "ok")
    }

    /// Waits for the node calls left running after their operation was decided (a release's
    /// past the quorum, a failed acquisition's undo, a renewal's slow nodes). Each call is
    /// bounded by the node timeout, and a failed acquisition's undo is one more round after
    /// its calls end, so this waits at most two node timeouts (plus a margin for the tasks to
    /// be scheduled).
    async fn finish_background(&self) {
        let within = self.cluster.node_timeout.saturating_mul(2) + BACKGROUND_MARGIN;
        let left = self.cluster.background.in_flight();
        if left > 0 && !self.cluster.background.finished(within).await {
            tracing::debug!(
                backend = BACKEND,
                left = self.cluster.background.in_flight(),
                "node calls still running after {within:?}; they are left to their ttl"
            );
        }
    }
}

/// What [`Redlock::finish_background`] allows beyond the node timeouts for its tasks to be
/// scheduled on a busy runtime.
const BACKGROUND_MARGIN: Duration = Duration::from_millis(500);
