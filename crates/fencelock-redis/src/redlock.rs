//! `Redlock`: one lock over N independent Redis servers, with fencing tokens.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{
    Capabilities, Error, Fence, FencingToken, Lease, LockBackend, LockInfo, LockKey, LostReason,
    OwnerId, Result, TimeAuthority, TokenGuarantee, WakeUp, drift_margin, valid_until,
    validate_ttl,
};
use tokio::time::Instant;
use tracing::Instrument;
use tracing::field::Empty;

use crate::backend::{MAX_TTL, finish, finish_grant, parse_lock_value, parse_token, ttl_millis};
use crate::error::{map_error, protocol};
use crate::redlock_config::RedlockConfig;
use crate::redlock_round::{Answer, Node, Round, quorum, spawn};
use crate::scripts::{ACQUIRE, SCRIPTS};

/// The backend's name in errors, logs and spans.
const BACKEND: &str = "redlock";

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
///   quorum of nodes say the lock is free, was released, or expired.
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
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    nodes: Vec<Arc<Node>>,
    needed: usize,
    node_timeout: Duration,
    prefix: String,
}

impl Redlock {
    pub(crate) fn new(nodes: Vec<Arc<Node>>, node_timeout: Duration, prefix: String) -> Self {
        Redlock {
            inner: Arc::new(Inner {
                needed: quorum(nodes.len()),
                nodes,
                node_timeout,
                prefix,
            }),
        }
    }

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
        self.inner.nodes.iter().map(|n| n.label.clone()).collect()
    }

    /// How many nodes make a quorum: `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.inner.needed
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.inner.prefix
    }

    /// `Some(true)` when every node persists every write, `Some(false)` when one does not.
    ///
    /// Every node, not only a quorum: two quorums may share a single node, and if that node
    /// restarted empty, a token written back to the first quorum is not seen by the second.
    fn server_persists(&self) -> Option<bool> {
        let views: Vec<Option<bool>> = self.inner.nodes.iter().map(|n| n.persists()).collect();
        if views.contains(&Some(false)) {
            Some(false)
        } else if views.iter().all(|p| *p == Some(true)) {
            Some(true)
        } else {
            None
        }
    }

    fn quorum_failed<T>(
        &self,
        round: &mut Round<T>,
        granted: usize,
        describe: impl Fn(&T) -> String,
    ) -> Error
    where
        T: Send + 'static,
    {
        if let Some(e) = round.config_error() {
            return e;
        }
        Error::QuorumFailed {
            granted,
            needed: self.inner.needed,
            nodes: round.reports(&self.inner.nodes, describe),
        }
    }

    /// The lock on `key` held by `owner`, released on every node; the calls' outcomes are
    /// only logged.
    fn release_everywhere(
        &self,
        key: &LockKey,
        owner: OwnerId,
    ) -> impl Future<Output = ()> + Send + 'static {
        let mut round = release_round(&self.inner.nodes, self.inner.node_timeout, key, owner);
        let key = key.clone();
        async move {
            round.all().await;
            tracing::debug!(backend = BACKEND, key = %key, released = round.count_ok(|r| *r == 1), "released a grant that is not handed out");
        }
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

/// `"<owner>:"`: what the Redlock scripts recognise a grant by on each node.
fn owner_prefix(owner: OwnerId) -> String {
    format!("{owner}:")
}

fn release_round(
    nodes: &[Arc<Node>],
    limit: Duration,
    key: &LockKey,
    owner: OwnerId,
) -> Round<i64> {
    let key = key.clone();
    let owner = owner_prefix(owner);
    Round::start(nodes, limit, move |link| {
        let mut invocation = SCRIPTS.redlock_release.prepare_invoke();
        invocation
            .key(link.conn.keys.lock(&key))
            .arg(owner.as_str())
            .arg(link.conn.keys.channel(&key));
        async move {
            let mut conn = link.conn.manager.clone();
            let reply: i64 = invocation
                .invoke_async(&mut conn)
                .await
                .map_err(map_error)?;
            match reply {
                0 | 1 => Ok(reply),
                other => Err(protocol(format!("release script answered {other}"))),
            }
        }
    })
}

/// An acquisition in flight. Dropped while armed (a failed acquisition, or a caller that gave
/// up on the future), it releases the grant on every node at once, in the background, and
/// once more on the nodes whose calls were still in flight after those calls end, so a grant
/// that lands late is released too. Disarmed (a lease handed out), it only lets the calls end.
struct Acquisition {
    round: Round<Option<FencingToken>>,
    armed: Option<(Redlock, LockKey, OwnerId)>,
}

impl Drop for Acquisition {
    fn drop(&mut self) {
        let round = self.round.take();
        match self.armed.take() {
            Some((redlock, key, owner)) => {
                spawn(redlock.release_everywhere(&key, owner));
                if round.pending() > 0 {
                    round.finish_in_background(redlock.release_everywhere(&key, owner));
                }
            }
            None => round.finish_in_background(async {}),
        }
    }
}

/// What one node reported to `inspect`.
struct NodeView {
    holder: Option<Fence>,
    remaining: Option<Duration>,
    last: Option<FencingToken>,
}

#[async_trait]
impl LockBackend for Redlock {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        let server_persists = self.server_persists();
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
        let result = self.acquire(key, ttl).instrument(span.clone()).await;
        finish_grant(&span, result)
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        check_ttl(ttl, &self.capabilities())?;
        let span = tracing::debug_span!("extend", backend = BACKEND, key = %lease.key, token = lease.token.get(), ?ttl, outcome = Empty);
        let result = self.renew(lease, ttl).instrument(span.clone()).await;
        finish(&span, result, "ok")
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let span = tracing::debug_span!("release", backend = BACKEND, key = %lease.key, token = lease.token.get(), outcome = Empty);
        let result = async {
            let n = self.inner.nodes.len();
            let needed = self.inner.needed;
            let mut round = release_round(
                &self.inner.nodes,
                self.inner.node_timeout,
                &lease.key,
                lease.owner,
            );
            let outcome = loop {
                let released = round.count_ok(|r| *r == 1);
                let not_ours = round.count_ok(|r| *r == 0);
                if released >= needed {
                    break Ok(true);
                }
                if not_ours > n - needed {
                    break Ok(false);
                }
                if round.next().await.is_none() {
                    break Err(self.quorum_failed(&mut round, released, describe_release));
                }
            };
            round.finish_in_background(async {});
            outcome
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }

    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        let span = tracing::debug_span!("wait_for_release", backend = BACKEND, key = %key, ?max);
        async {
            let n = self.inner.nodes.len();
            let needed = self.inner.needed;
            let watched = key.clone();
            let mut round = Round::start(
                &self.inner.nodes,
                max.saturating_add(self.inner.node_timeout),
                move |link| {
                    let key = watched.clone();
                    async move { link.waiters.wait(&key, max).await }
                },
            );
            // The calls still waiting are dropped, which unsubscribes them.
            loop {
                let woken = round.count_ok(|()| true);
                if woken >= needed {
                    return Ok(());
                }
                if round.count_failed() > n - needed || round.next().await.is_none() {
                    return Err(self.quorum_failed(&mut round, woken, |()| "woken".to_owned()));
                }
            }
        }
        .instrument(span)
        .await
    }

    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        let span = tracing::debug_span!("inspect", backend = BACKEND, key = %key, outcome = Empty);
        let result = self.majority_view(key).instrument(span.clone()).await;
        finish(&span, result, "ok")
    }

    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        if i64::try_from(floor.get()).is_err() {
            return Err(Error::config(format!(
                "token floor {floor} is above the range of a Redis counter ({})",
                i64::MAX
            )));
        }
        let span = tracing::debug_span!("advance_token", backend = BACKEND, key = %key, floor = floor.get(), outcome = Empty);
        let result = async {
            let watched = key.clone();
            let mut round = Round::start(&self.inner.nodes, self.inner.node_timeout, move |link| {
                let mut invocation = SCRIPTS.advance_token.prepare_invoke();
                invocation
                    .key(link.conn.keys.token(&watched))
                    .arg(floor.get().to_string());
                async move {
                    let mut conn = link.conn.manager.clone();
                    let reply: String = invocation
                        .invoke_async(&mut conn)
                        .await
                        .map_err(map_error)?;
                    parse_token(&reply)
                }
            });
            round.all().await;
            let raised = round.count_ok(|_| true);
            if raised < self.inner.needed {
                return Err(self.quorum_failed(&mut round, raised, |t| format!("raised to {t}")));
            }
            round
                .answers()
                .filter_map(|a| match a {
                    Answer::Ok(t) => Some(*t),
                    _ => None,
                })
                .max()
                .ok_or_else(|| protocol("advance_token: no node answered"))
        }
        .instrument(span.clone())
        .await;
        finish(&span, result, "ok")
    }
}

fn describe_grant(answer: &Option<FencingToken>) -> String {
    match answer {
        Some(token) => format!("granted token {token}"),
        None => "held by another owner".to_owned(),
    }
}

fn describe_release(answer: &i64) -> String {
    match answer {
        1 => "released".to_owned(),
        _ => "not held by this grant".to_owned(),
    }
}

fn describe_extend(answer: &i64) -> String {
    match answer {
        1 => "extended".to_owned(),
        0 => "lock gone".to_owned(),
        _ => "held by another owner".to_owned(),
    }
}

impl Redlock {
    async fn acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        let n = self.inner.nodes.len();
        let needed = self.inner.needed;
        let owner = OwnerId::random();
        let limit = self.inner.node_timeout.min(ttl);
        let sent_at = Instant::now();
        let wanted = key.clone();
        let owner_arg = owner.to_string();
        let millis = ttl_millis(ttl);
        // EVAL, not EVALSHA: after a restart EVALSHA answers NOSCRIPT and is sent again
        // after loading the script, which would let a release sent meanwhile run before this
        // grant and leave the grant behind. One EVAL keeps the connection's order.
        let round = Round::start(&self.inner.nodes, limit, move |link| {
            let mut command = redis::cmd("EVAL");
            command
                .arg(ACQUIRE)
                .arg(2)
                .arg(link.conn.keys.lock(&wanted))
                .arg(link.conn.keys.token(&wanted))
                .arg(owner_arg.as_str())
                .arg(millis);
            async move {
                let mut conn = link.conn.manager.clone();
                let reply: Option<String> =
                    command.query_async(&mut conn).await.map_err(map_error)?;
                reply.as_deref().map(parse_token).transpose()
            }
        });
        let mut acquisition = Acquisition {
            round,
            armed: Some((self.clone(), key.clone(), owner)),
        };
        let round = &mut acquisition.round;
        loop {
            let granted = round.count_ok(Option::is_some);
            if granted >= needed {
                break;
            }
            if granted + round.pending() < needed {
                if round.count_ok(Option::is_none) > n - needed {
                    return Ok(None);
                }
                return Err(self.quorum_failed(round, granted, describe_grant));
            }
            round.next().await;
        }
        let tokens: Vec<FencingToken> = round
            .answers()
            .filter_map(|a| match a {
                Answer::Ok(Some(t)) => Some(*t),
                _ => None,
            })
            .collect();
        let (Some(&token), Some(&lowest)) = (tokens.iter().max(), tokens.iter().min()) else {
            return Err(protocol("acquire: a quorum granted without tokens"));
        };
        if lowest != token {
            self.settle(key, owner, token).await?;
        }
        let valid_until = valid_until(sent_at, ttl);
        if Instant::now() >= valid_until {
            return Err(Error::Unavailable {
                backend: BACKEND,
                message: format!(
                    "a quorum granted {key:?} only after {:?}, which leaves nothing of the {ttl:?} ttl less the drift margin; released",
                    sent_at.elapsed()
                ),
                source: None,
            });
        }
        acquisition.armed = None;
        Ok(Some(Lease {
            key: key.clone(),
            owner,
            token,
            ttl,
            valid_until,
        }))
    }

    /// Writes `token` back to a quorum: each node's counter raised to at least `token`, and
    /// the lock value made to carry it where this grant holds the lock.
    async fn settle(&self, key: &LockKey, owner: OwnerId, token: FencingToken) -> Result<()> {
        let needed = self.inner.needed;
        let wanted = key.clone();
        let mut round = Round::start(&self.inner.nodes, self.inner.node_timeout, move |link| {
            let mut invocation = SCRIPTS.redlock_settle.prepare_invoke();
            invocation
                .key(link.conn.keys.token(&wanted))
                .key(link.conn.keys.lock(&wanted))
                .arg(token.get().to_string())
                .arg(owner.to_string());
            async move {
                let mut conn = link.conn.manager.clone();
                let reply: String = invocation
                    .invoke_async(&mut conn)
                    .await
                    .map_err(map_error)?;
                parse_token(&reply)
            }
        });
        let outcome = loop {
            let settled = round.count_ok(|t| *t >= token);
            if settled >= needed {
                break Ok(());
            }
            if settled + round.pending() < needed {
                break Err(self.quorum_failed(&mut round, settled, |t| format!("counter at {t}")));
            }
            round.next().await;
        };
        round.finish_in_background(async {});
        outcome
    }

    async fn renew(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let n = self.inner.nodes.len();
        let needed = self.inner.needed;
        let limit = self.inner.node_timeout.min(ttl);
        let sent_at = Instant::now();
        let key = lease.key.clone();
        let owner = owner_prefix(lease.owner);
        let millis = ttl_millis(ttl);
        let mut round = Round::start(&self.inner.nodes, limit, move |link| {
            let mut invocation = SCRIPTS.redlock_extend.prepare_invoke();
            invocation
                .key(link.conn.keys.lock(&key))
                .arg(owner.as_str())
                .arg(millis);
            async move {
                let mut conn = link.conn.manager.clone();
                let reply: i64 = invocation
                    .invoke_async(&mut conn)
                    .await
                    .map_err(map_error)?;
                match reply {
                    -1..=1 => Ok(reply),
                    other => Err(protocol(format!("extend script answered {other}"))),
                }
            }
        });
        let outcome = loop {
            let extended = round.count_ok(|r| *r == 1);
            if extended >= needed {
                break Ok(());
            }
            let lost = round.count_ok(|r| *r != 1);
            if lost > n - needed {
                let reason = if round.count_ok(|r| *r == -1) > 0 {
                    LostReason::Superseded
                } else {
                    LostReason::NotHeld
                };
                break Err(Error::lease_lost(&lease.key, reason));
            }
            if extended + round.pending() < needed {
                break Err(self.quorum_failed(&mut round, extended, describe_extend));
            }
            round.next().await;
        };
        round.finish_in_background(async {});
        outcome?;
        let valid_until = valid_until(sent_at, ttl);
        if Instant::now() >= valid_until {
            return Err(Error::Unavailable {
                backend: BACKEND,
                message: format!(
                    "a quorum extended {:?} only after {:?}, which leaves nothing of the {ttl:?} ttl less the drift margin",
                    lease.key,
                    sent_at.elapsed()
                ),
                source: None,
            });
        }
        Ok(Lease {
            ttl,
            valid_until,
            ..lease.clone()
        })
    }

    async fn majority_view(&self, key: &LockKey) -> Result<LockInfo> {
        let needed = self.inner.needed;
        let wanted = key.clone();
        let mut round = Round::start(&self.inner.nodes, self.inner.node_timeout, move |link| {
            let mut invocation = SCRIPTS.inspect.prepare_invoke();
            invocation
                .key(link.conn.keys.lock(&wanted))
                .key(link.conn.keys.token(&wanted));
            async move {
                let mut conn = link.conn.manager.clone();
                let (value, pttl, last): (Option<String>, i64, Option<String>) = invocation
                    .invoke_async(&mut conn)
                    .await
                    .map_err(map_error)?;
                let holder = value.as_deref().map(parse_lock_value).transpose()?;
                Ok(NodeView {
                    holder,
                    remaining: (holder.is_some() && pttl >= 0)
                        .then(|| Duration::from_millis(pttl.unsigned_abs())),
                    last: last.as_deref().map(parse_token).transpose()?,
                })
            }
        });
        round.all().await;
        let answered = round.count_ok(|_| true);
        if answered < needed {
            return Err(self.quorum_failed(&mut round, answered, |_| "answered".to_owned()));
        }
        let views: Vec<&NodeView> = round
            .answers()
            .filter_map(|a| match a {
                Answer::Ok(view) => Some(view),
                _ => None,
            })
            .collect();
        let mut by_owner: HashMap<OwnerId, Vec<&NodeView>> = HashMap::new();
        for view in &views {
            if let Some(holder) = view.holder {
                by_owner.entry(holder.owner).or_default().push(view);
            }
        }
        let (holder, remaining) = match by_owner.into_iter().find(|(_, held)| held.len() >= needed)
        {
            Some((owner, held)) => {
                // Late or unsettled nodes may carry their own counter in the value; the token
                // most nodes agree on is the grant's.
                let mut counts: HashMap<FencingToken, usize> = HashMap::new();
                for view in &held {
                    if let Some(h) = view.holder {
                        *counts.entry(h.token).or_default() += 1;
                    }
                }
                let token = counts
                    .into_iter()
                    .max_by_key(|(token, count)| (*count, *token))
                    .map(|(token, _)| token);
                // Held for as long as a quorum still holds it.
                let mut left: Vec<Duration> = held.iter().filter_map(|v| v.remaining).collect();
                left.sort_unstable_by(|a, b| b.cmp(a));
                (
                    token.map(|t| Fence::new(t, owner)),
                    left.get(needed - 1).copied(),
                )
            }
            None => (None, None),
        };
        Ok(LockInfo {
            key: key.clone(),
            holder,
            remaining,
            last_token: views.iter().filter_map(|v| v.last).max(),
        })
    }
}
