//! `ZkLockBackend`: the lock recipe on sequential ephemeral znodes, with per-key token
//! counters and ttls judged on the leader's clock.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fencelock_core::{
    Capabilities, Error, FencingToken, Lease, LockBackend, LockInfo, LockKey, LockKinds,
    LostReason, OwnerId, QueueEntry, ReadPhase, Result, TimeAuthority, TokenGuarantee, WakeUp,
    async_trait, valid_until, validate_ttl,
};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::error::{BACKEND, mapped, protocol, within};
use crate::layout::{
    NodeData, NodeKind, grant_data, lock_node_prefix, parse_counter, parse_node_data,
    parse_queue_node,
};
use crate::queue::Place;
use crate::read_phase::ReaderGrant;
use crate::recipe::Judged;
use crate::session::{Session, Sessions};

/// The largest token: counters are stored as decimal `i64` so other ZooKeeper clients read
/// them as Java `long`s.
pub const MAX_TOKEN: u64 = i64::MAX as u64;

/// How many times a grant retries the counter's compare-and-set when another grant moved it.
pub(crate) const CAS_TRIES: usize = 64;

/// What this process knows of one of its grants.
#[derive(Debug, Clone)]
pub(crate) struct Grant {
    pub(crate) path: String,
    pub(crate) version: i32,
    /// The leader's clock (ms) at the grant node's last write.
    pub(crate) mtime: i64,
    pub(crate) ttl_ms: u64,
    pub(crate) session: Arc<Session>,
}

/// fencelock's lock on a ZooKeeper ensemble. Cheap to clone (one shared session).
#[derive(Debug, Clone)]
pub struct ZkLockBackend {
    pub(crate) sessions: Arc<Sessions>,
    grants: Arc<Mutex<HashMap<(LockKey, OwnerId), Grant>>>,
    /// The queued waiters' places, by key and waiter.
    places: Arc<Mutex<HashMap<(LockKey, OwnerId), Place>>>,
    /// The readers this process holds, by key and reader.
    readers: Arc<Mutex<HashMap<(LockKey, OwnerId), ReaderGrant>>>,
}

impl ZkLockBackend {
    pub(crate) fn new(sessions: Arc<Sessions>) -> Self {
        ZkLockBackend {
            sessions,
            grants: Arc::default(),
            places: Arc::default(),
            readers: Arc::default(),
        }
    }

    /// The session timeout the ensemble negotiated: the longest ttl.
    pub fn session_timeout(&self) -> Duration {
        self.sessions.negotiated
    }

    pub(crate) fn grants(&self) -> std::sync::MutexGuard<'_, HashMap<(LockKey, OwnerId), Grant>> {
        self.grants.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn places(&self) -> std::sync::MutexGuard<'_, HashMap<(LockKey, OwnerId), Place>> {
        self.places.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) fn readers(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<(LockKey, OwnerId), ReaderGrant>> {
        self.readers.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub(crate) async fn call<T>(
        &self,
        what: &str,
        request: impl std::future::Future<Output = std::result::Result<T, zk::Error>>,
    ) -> Result<std::result::Result<T, zk::Error>> {
        within(self.sessions.op_timeout, what, request).await
    }

    /// The key node's counter and version, the node created when missing.
    pub(crate) async fn counter(&self, session: &Session, dir: &str) -> Result<(u64, i32)> {
        for _ in 0..CAS_TRIES {
            match self
                .call("read the token counter", session.client.get_data(dir))
                .await?
            {
                Ok((data, stat)) => {
                    let counter = parse_counter(&data)
                        .ok_or_else(|| protocol(&format!("token counter of {dir}")))?;
                    return Ok((counter, stat.version));
                }
                Err(zk::Error::NoNode) => {
                    let options = zk::CreateMode::Persistent.with_acls(self.sessions.acls());
                    match self
                        .call(
                            "create the key node",
                            session.client.create(dir, b"0", &options),
                        )
                        .await?
                    {
                        Ok(_) | Err(zk::Error::NodeExists) => {}
                        Err(e) => return Err(mapped(e, "create the key node")),
                    }
                }
                Err(e) => return Err(mapped(e, "read the token counter")),
            }
        }
        Err(protocol("the key node keeps disappearing"))
    }

    /// The grant of `lease` this process made, or the one found on the ensemble by owner.
    async fn find(&self, lease: &Lease) -> Result<Option<Grant>> {
        if let Some(grant) = self
            .grants()
            .get(&(lease.key.clone(), lease.owner))
            .cloned()
        {
            return Ok(Some(grant));
        }
        let session = self.sessions.get().await?;
        let dir = self.sessions.layout.key_dir(lease.key.as_str());
        let children = match self
            .call("list the key", session.client.list_children(&dir))
            .await?
        {
            Ok(children) => children,
            Err(zk::Error::NoNode) => return Ok(None),
            Err(e) => return Err(mapped(e, "list the key")),
        };
        let prefix = lock_node_prefix(lease.owner);
        let Some(name) = children.iter().find(|c| c.starts_with(&prefix)) else {
            return Ok(None);
        };
        let path = format!("{dir}/{name}");
        match self
            .call("read the grant", session.client.get_data(&path))
            .await?
        {
            Ok((data, stat)) => {
                let (token, ttl_ms) = match parse_node_data(&data) {
                    Some(NodeData::Grant { token, ttl_ms }) => (token, ttl_ms),
                    // A place in the queue is no lease (nor is a reader, named `read-`).
                    Some(NodeData::Waiting { .. } | NodeData::Reader { .. }) => return Ok(None),
                    None => return Err(protocol("grant node data")),
                };
                if token != lease.token || stat.ephemeral_owner != session.id() {
                    return Ok(None);
                }
                Ok(Some(Grant {
                    path,
                    version: stat.version,
                    mtime: stat.mtime,
                    ttl_ms,
                    session,
                }))
            }
            Err(zk::Error::NoNode) => Ok(None),
            Err(e) => Err(mapped(e, "read the grant")),
        }
    }

    /// The lock nodes of `dir` (grants, contenders, waiting places, readers), lowest sequence
    /// first.
    pub(crate) async fn queue(
        &self,
        session: &Session,
        dir: &str,
    ) -> Result<Vec<(String, OwnerId)>> {
        Ok(self
            .queue_nodes(session, dir)
            .await?
            .into_iter()
            .map(|(path, owner, _)| (path, owner))
            .collect())
    }

    /// [`queue`](Self::queue) with each node's kind.
    pub(crate) async fn queue_nodes(
        &self,
        session: &Session,
        dir: &str,
    ) -> Result<Vec<(String, OwnerId, NodeKind)>> {
        let children = match self
            .call("list the key", session.client.list_children(dir))
            .await?
        {
            Ok(children) => children,
            Err(zk::Error::NoNode) => Vec::new(),
            Err(e) => return Err(mapped(e, "list the key")),
        };
        // One parent hands out one sequence to all its children, whatever their prefix.
        let mut nodes: Vec<(i64, String, OwnerId, NodeKind)> = children
            .into_iter()
            .filter_map(|name| {
                parse_queue_node(&name).map(|(kind, owner, seq)| (seq, name, owner, kind))
            })
            .collect();
        nodes.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        Ok(nodes
            .into_iter()
            .map(|(_, name, owner, kind)| (format!("{dir}/{name}"), owner, kind))
            .collect())
    }

    /// The leader's clock now (ms): the mtime of a write to the clock node.
    pub(crate) async fn server_now(&self, session: &Session) -> Result<i64> {
        let clock = self.sessions.layout.clock();
        let stat = self
            .call(
                "read the leader's clock",
                session.client.set_data(&clock, b"", None),
            )
            .await?
            .map_err(|e| mapped(e, "read the leader's clock"))?;
        Ok(stat.mtime)
    }
}

/// Removes a grant attempt's node when the attempt is dropped half way.
pub(crate) struct Withdraw {
    pub(crate) session: Arc<Session>,
    pub(crate) dir: String,
    pub(crate) prefix: String,
    pub(crate) armed: bool,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let session = self.session.clone();
        let dir = std::mem::take(&mut self.dir);
        let prefix = std::mem::take(&mut self.prefix);
        runtime.spawn(async move {
            // The node's name carries this attempt's owner, so only its own node matches.
            let Ok(Ok(children)) =
                tokio::time::timeout(Duration::from_secs(10), session.client.list_children(&dir))
                    .await
            else {
                return;
            };
            for child in children.iter().filter(|c| c.starts_with(&prefix)) {
                let path = format!("{dir}/{child}");
                let _ = tokio::time::timeout(
                    Duration::from_secs(10),
                    session.client.delete(&path, None),
                )
                .await;
            }
        });
    }
}

pub(crate) fn ms(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Whether a node last written at `mtime` with `ttl_ms` has expired at `now` (all the
/// leader's clock, ms).
pub(crate) fn expired(mtime: i64, ttl_ms: u64, now: i64) -> bool {
    let ttl = i64::try_from(ttl_ms).unwrap_or(i64::MAX);
    mtime.saturating_add(ttl) < now
}

#[async_trait]
impl LockBackend for ZkLockBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        // A lease never outlives the session that carries its znode: max_ttl is the
        // negotiated session timeout.
        Capabilities::new(
            TokenGuarantee::Durable,
            TimeAuthority::Server,
            WakeUp::Notify,
            self.sessions.negotiated,
        )
        .with_min_ttl(Duration::from_millis(100))
        .with_max_ttl_setting(
            "the URL's session_timeout, which the ensemble clamps to its maxSessionTimeout",
        )
        .with_fair(true)
        .with_kinds(LockKinds::GENERIC.with_shared())
    }

    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        validate_ttl(ttl, &self.capabilities())?;
        let session = self.sessions.get().await?;
        let dir = self.sessions.layout.key_dir(key.as_str());
        let owner = OwnerId::random();
        let ttl_ms = ms(ttl);
        let sent = Instant::now();
        // A caller that drops this future after the node may exist must not leave it in the
        // queue (it would block everyone until its ttl passed): the guard removes it.
        let mut withdraw = Withdraw {
            session: session.clone(),
            dir: dir.clone(),
            prefix: lock_node_prefix(owner),
            armed: true,
        };
        let (path, token, now) = self
            .enter(&session, key, &dir, owner, |token| {
                grant_data(token, ttl_ms)
            })
            .await?;
        match self.judge(&session, &dir, &path, now).await? {
            Judged::Lowest => {}
            // A lower live node: a holder, or a queued waiter this try must not overtake.
            Judged::Behind => {
                let _ = self
                    .call("withdraw", session.client.delete(&path, None))
                    .await;
                withdraw.armed = false;
                return Ok(None);
            }
            Judged::Gone => {
                // Our node is gone: the session ended under us.
                return Err(Error::Unavailable {
                    backend: BACKEND,
                    message: "the session ended during the grant".into(),
                    source: None,
                });
            }
        }
        withdraw.armed = false;
        self.grants().insert(
            (key.clone(), owner),
            Grant {
                path,
                version: 0,
                mtime: now,
                ttl_ms,
                session,
            },
        );
        Ok(Some(Lease {
            key: key.clone(),
            owner,
            token,
            ttl,
            valid_until: valid_until(sent, ttl),
        }))
    }

    async fn try_acquire_queued(
        &self,
        key: &LockKey,
        ttl: Duration,
        waiter: OwnerId,
    ) -> Result<Option<Lease>> {
        self.try_queued(key, ttl, waiter).await
    }

    async fn wait_for_turn(&self, key: &LockKey, waiter: OwnerId, max: Duration) -> Result<()> {
        self.wait_turn(key, waiter, max).await
    }

    async fn leave_queue(&self, key: &LockKey, waiter: OwnerId) -> Result<()> {
        self.leave(key, waiter).await
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        validate_ttl(ttl, &self.capabilities())?;
        let lost = |reason| Error::lease_lost(&lease.key, reason);
        let Some(grant) = self.find(lease).await? else {
            return Err(lost(LostReason::NotHeld));
        };
        let map_key = (lease.key.clone(), lease.owner);
        let sent = Instant::now();
        let data = grant_data(lease.token, ms(ttl));
        match self.renew_node(&grant, &data, ms(ttl), "extend").await? {
            Ok(renewed) => {
                self.grants().insert(map_key, renewed);
                Ok(Lease {
                    ttl,
                    valid_until: valid_until(sent, ttl),
                    ..lease.clone()
                })
            }
            Err(reason) => {
                self.grants().remove(&map_key);
                Err(lost(reason))
            }
        }
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let Some(grant) = self.find(lease).await? else {
            return Ok(false);
        };
        // The path is this grant's alone (owner and sequence in its name), so deleting it
        // can never free another holder's lock, whatever happened to the connection.
        let deleted = self
            .call("release", grant.session.client.delete(&grant.path, None))
            .await?;
        let map_key = (lease.key.clone(), lease.owner);
        match deleted {
            Ok(()) => {
                self.grants().remove(&map_key);
                Ok(true)
            }
            Err(zk::Error::NoNode | zk::Error::SessionExpired) => {
                self.grants().remove(&map_key);
                Ok(false)
            }
            Err(e) => Err(mapped(e, "release")),
        }
    }

    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        let session = self.sessions.get().await?;
        let dir = self.sessions.layout.key_dir(key.as_str());
        let queue = self.queue_nodes(&session, &dir).await?;
        let Some((head, _, kind)) = queue.first() else {
            return Ok(());
        };
        // Watch one node: the holder's, whose deletion is the release (or its session's end);
        // behind readers, the last writer node, which keeps a reader out the longest (a
        // writer waiter's turn comes after it too).
        let holder = match kind {
            NodeKind::Write => head,
            NodeKind::Read => queue
                .iter()
                .rev()
                .find(|(_, _, kind)| *kind == NodeKind::Write)
                .map_or(head, |(path, _, _)| path),
        };
        let watched = self
            .call(
                "watch the holder",
                session.client.check_and_watch_stat(holder),
            )
            .await?;
        match watched {
            Ok((Some(_), watcher)) => {
                let _ = tokio::time::timeout(max, watcher.changed()).await;
                Ok(())
            }
            Ok((None, _)) => Ok(()),
            Err(e) => Err(mapped(e, "watch the holder")),
        }
    }

    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        self.inspect_key(key).await
    }

    /// The holder (or the readers of the read phase), then contenders and waiting places in
    /// the order they will be granted, each waiter with the token it drew on entering. Reads
    /// every node and writes the clock node once (the leader's clock says what is past its
    /// time); takes nothing. Nodes that vanish while being read are left out.
    async fn inspect_queue(&self, key: &LockKey) -> Result<Option<Vec<QueueEntry>>> {
        self.queue_entries(key).await.map(Some)
    }

    async fn watch_lost(&self, lease: &Lease) -> LostReason {
        let grant = self
            .grants()
            .get(&(lease.key.clone(), lease.owner))
            .cloned();
        watch_node(grant).await
    }

    async fn watch_lost_shared(&self, lease: &Lease, reader: OwnerId) -> LostReason {
        let grant = self
            .readers()
            .get(&(lease.key.clone(), reader))
            .filter(|held| held.fence == lease.fence())
            .map(|held| held.grant.clone());
        watch_node(grant).await
    }

    async fn try_acquire_shared(
        &self,
        key: &LockKey,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        self.join_read_phase(key, reader, ttl).await
    }

    async fn extend_shared(&self, lease: &Lease, reader: OwnerId, ttl: Duration) -> Result<Lease> {
        self.renew_reader(lease, reader, ttl).await
    }

    async fn release_shared(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
        self.release_reader(lease, reader).await
    }

    async fn inspect_shared(&self, key: &LockKey) -> Result<Option<ReadPhase>> {
        self.read_phase(key).await
    }

    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        self.advance_key(key, floor).await
    }
}

/// Completes when the node of `grant` is deleted or its session ends; never without a grant.
async fn watch_node(grant: Option<Grant>) -> LostReason {
    let Some(grant) = grant else {
        return std::future::pending().await;
    };
    loop {
        let watched = grant.session.client.check_and_watch_stat(&grant.path);
        tokio::select! {
            () = grant.session.lost.cancelled() => return LostReason::SessionEnded,
            watched = watched => match watched {
                Ok((None, _)) => return LostReason::NotHeld,
                Ok((Some(_), watcher)) => {
                    tokio::select! {
                        () = grant.session.lost.cancelled() => return LostReason::SessionEnded,
                        event = watcher.changed() => {
                            if event.event_type == zk::EventType::NodeDeleted {
                                return LostReason::NotHeld;
                            }
                        }
                    }
                }
                // A connection loss is not a loss of the lock: look again shortly.
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            },
        }
    }
}
