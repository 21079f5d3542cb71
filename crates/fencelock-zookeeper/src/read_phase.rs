//! Shared (reader) locks: Curator's read/write lock recipe, with the read phase's fence.
//!
//! Readers and writers are sequential ephemeral children of the key node: `write-` nodes
//! (exclusive grants, contenders and queued waiters' places) and `read-` nodes (readers). A
//! reader's node is created **already granted**, in one multi that also moves the key's
//! counter at the version read before the listing that decided the grant:
//! - **Starting a phase**: no live reader and no live writer node in the listing; the multi
//!   writes counter + 1 and creates the reader with that token and a freshly drawn phase
//!   owner.
//! - **Joining**: no live writer node, and a live reader (the member) whose data carries the
//!   phase's fence; the multi also checks the member's version, so the member was neither
//!   released nor renewed in between, and the new reader carries the member's fence.
//!
//! Every node creation (a writer's, a place's, a reader's) moves the counter, so a multi that
//! passes saw every node the key has at its commit: no writer node precedes the reader, and
//! no other phase lives beside the one it joined. Writers judge `read-` nodes as they judge
//! grants (a node within its ttl on the leader's clock keeps them out), so a writer is granted
//! only when every reader before it is gone.

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{
    Error, Fence, FencingToken, Lease, LockKey, LostReason, OwnerId, ReadPhase, Result,
    valid_until, validate_ttl,
};
use tokio::time::Instant;
use zookeeper_client as zk;

use crate::backend::{CAS_TRIES, Grant, MAX_TOKEN, Withdraw, ZkLockBackend, expired, ms};
use crate::error::{BACKEND, mapped, protocol, within};
use crate::layout::{NodeData, NodeKind, parse_node_data, read_node_prefix, reader_data};
use crate::recipe::lifespan;
use crate::session::Session;

/// A reader this process holds: its node and the phase's fence.
#[derive(Debug, Clone)]
pub(crate) struct ReaderGrant {
    pub(crate) grant: Grant,
    pub(crate) fence: Fence,
}

/// A live reader of the phase a new reader joins.
struct Member {
    path: String,
    version: i32,
    mtime: i64,
    ttl_ms: u64,
    fence: Fence,
}

/// What a reader's look at the key's queue found.
enum Look {
    /// No live node: start a phase.
    Free,
    /// A live reader and no live writer node: join its phase.
    Phase(Member),
    /// A live writer node (a holder, a contender or a queued waiter): refused.
    Writer,
    /// A node moved while being judged: look again.
    Moved,
}

impl ZkLockBackend {
    /// [`LockBackend::try_acquire_shared`](fencelock_core::LockBackend::try_acquire_shared).
    pub(crate) async fn join_read_phase(
        &self,
        key: &LockKey,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Option<Lease>> {
        validate_ttl(ttl, &fencelock_core::LockBackend::capabilities(self))?;
        let known = self.readers().get(&(key.clone(), reader)).map(|h| h.fence);
        if let Some(fence) = known {
            // A reader already in the live phase is renewed; one whose phase is over joins
            // afresh.
            let held = Lease {
                key: key.clone(),
                owner: fence.owner,
                token: fence.token,
                ttl,
                valid_until: Instant::now(),
            };
            match self.renew_reader(&held, reader, ttl).await {
                Ok(renewed) => return Ok(Some(renewed)),
                Err(Error::LeaseLost { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        let session = self.sessions.get().await?;
        let dir = self.sessions.layout.key_dir(key.as_str());
        let ttl_ms = ms(ttl);
        let node = format!("{dir}/{}", read_node_prefix(reader));
        let options = zk::CreateMode::EphemeralSequential.with_acls(self.sessions.acls());
        // A caller that drops this future, or a multi whose answer was lost, must not leave a
        // reader behind that nobody knows of (it would keep writers out until its ttl).
        let mut withdraw = Withdraw {
            session: session.clone(),
            dir: dir.clone(),
            prefix: read_node_prefix(reader),
            armed: true,
        };
        for _ in 0..CAS_TRIES {
            // The counter is read before the listing: a multi at this version proves that no
            // node entered the queue after the listing.
            let (counter, version) = self.counter(&session, &dir).await?;
            let member = match self.look_for_phase(&session, &dir).await? {
                Look::Free => None,
                Look::Phase(member) => Some(member),
                Look::Writer => {
                    withdraw.armed = false;
                    return Ok(None);
                }
                Look::Moved => continue,
            };
            let token = counter
                .checked_add(1)
                .filter(|t| *t <= MAX_TOKEN)
                .and_then(FencingToken::new)
                .ok_or_else(|| {
                    Error::config(format!("the token counter of {key:?} is exhausted"))
                })?;
            let fence = member
                .as_ref()
                .map_or_else(|| Fence::new(token, OwnerId::random()), |m| m.fence);
            let sent = Instant::now();
            let mut multi = session.client.new_multi_writer();
            multi
                .add_set_data(&dir, token.to_string().as_bytes(), Some(version))
                .map_err(|e| mapped(e, "grant a reader"))?;
            if let Some(member) = &member {
                multi
                    .add_check_version(&member.path, member.version)
                    .map_err(|e| mapped(e, "grant a reader"))?;
            }
            multi
                .add_create(&node, &reader_data(fence, ttl_ms), &options)
                .map_err(|e| mapped(e, "grant a reader"))?;
            let (path, now) =
                match within(self.sessions.op_timeout, "grant a reader", multi.commit()).await? {
                    Ok(results) => created(results)?,
                    // The counter moved (a node entered) or the member was released or
                    // renewed: nothing was written, look again.
                    Err(zk::MultiWriteError::OperationFailed {
                        source: zk::Error::BadVersion | zk::Error::NoNode,
                        ..
                    }) => continue,
                    Err(e) => return Err(mapped(e.into(), "grant a reader")),
                };
            if let Some(member) = &member
                && expired(member.mtime, member.ttl_ms, now)
            {
                // The member's lease ended before this join committed: its phase is over, so
                // this reader must not carry its fence. Withdraw and start afresh.
                match self
                    .call("withdraw a reader", session.client.delete(&path, None))
                    .await?
                {
                    Ok(()) | Err(zk::Error::NoNode) => continue,
                    Err(e) => return Err(mapped(e, "withdraw a reader")),
                }
            }
            withdraw.armed = false;
            self.readers().insert(
                (key.clone(), reader),
                ReaderGrant {
                    grant: Grant {
                        path,
                        version: 0,
                        mtime: now,
                        ttl_ms,
                        session: session.clone(),
                    },
                    fence,
                },
            );
            return Ok(Some(Lease {
                key: key.clone(),
                owner: fence.owner,
                token: fence.token,
                ttl,
                valid_until: valid_until(sent, ttl),
            }));
        }
        withdraw.armed = false;
        Err(Error::Conflict {
            backend: BACKEND,
            message: format!("the queue of {key:?} kept moving"),
            source: None,
        })
    }

    /// Judges the queue of `dir` for a new reader: every writer node (a live one refuses the
    /// reader), and readers up to the first live one (the phase's member). Nodes past their
    /// time on the leader's clock are removed at the version read, so an owner's concurrent
    /// renewal wins.
    async fn look_for_phase(&self, session: &Session, dir: &str) -> Result<Look> {
        let nodes = self.queue_nodes(session, dir).await?;
        if nodes.is_empty() {
            return Ok(Look::Free);
        }
        let now = self.server_now(session).await?;
        let mut member = None;
        for (path, _, kind) in nodes {
            if kind == NodeKind::Read && member.is_some() {
                continue;
            }
            let (data, stat) = match self
                .call("read a queue node", session.client.get_data(&path))
                .await?
            {
                Ok(found) => found,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(mapped(e, "read a queue node")),
            };
            if expired(stat.mtime, lifespan(&data), now) {
                match self
                    .call(
                        "remove an expired node",
                        session.client.delete(&path, Some(stat.version)),
                    )
                    .await?
                {
                    Ok(()) | Err(zk::Error::NoNode) => continue,
                    Err(zk::Error::BadVersion) => return Ok(Look::Moved),
                    Err(e) => return Err(mapped(e, "remove an expired node")),
                }
            }
            match (kind, parse_node_data(&data)) {
                (NodeKind::Write, _) => return Ok(Look::Writer),
                (NodeKind::Read, Some(NodeData::Reader { fence, ttl_ms })) => {
                    member = Some(Member {
                        path,
                        version: stat.version,
                        mtime: stat.mtime,
                        ttl_ms,
                        fence,
                    });
                }
                (NodeKind::Read, _) => return Err(protocol(&format!("reader node {path}"))),
            }
        }
        Ok(member.map_or(Look::Free, Look::Phase))
    }

    /// The reader of `lease` this process knows of, or the one found on the ensemble by
    /// reader id, phase fence and session.
    async fn find_reader(&self, lease: &Lease, reader: OwnerId) -> Result<Option<ReaderGrant>> {
        if let Some(held) = self
            .readers()
            .get(&(lease.key.clone(), reader))
            .filter(|held| held.fence == lease.fence())
            .cloned()
        {
            return Ok(Some(held));
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
        let prefix = read_node_prefix(reader);
        for name in children.iter().filter(|c| c.starts_with(&prefix)) {
            let path = format!("{dir}/{name}");
            let (data, stat) = match self
                .call("read a reader", session.client.get_data(&path))
                .await?
            {
                Ok(found) => found,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(mapped(e, "read a reader")),
            };
            let Some(NodeData::Reader { fence, ttl_ms }) = parse_node_data(&data) else {
                return Err(protocol(&format!("reader node {path}")));
            };
            if fence == lease.fence() && stat.ephemeral_owner == session.id() {
                return Ok(Some(ReaderGrant {
                    grant: Grant {
                        path,
                        version: stat.version,
                        mtime: stat.mtime,
                        ttl_ms,
                        session: Arc::clone(&session),
                    },
                    fence,
                }));
            }
        }
        Ok(None)
    }

    /// [`LockBackend::extend_shared`](fencelock_core::LockBackend::extend_shared): rewrites
    /// the reader's node at the version last written, never re-creating it.
    pub(crate) async fn renew_reader(
        &self,
        lease: &Lease,
        reader: OwnerId,
        ttl: Duration,
    ) -> Result<Lease> {
        validate_ttl(ttl, &fencelock_core::LockBackend::capabilities(self))?;
        let lost = |reason| Error::lease_lost(&lease.key, reason);
        let map_key = (lease.key.clone(), reader);
        let Some(held) = self.find_reader(lease, reader).await? else {
            return Err(lost(LostReason::NotHeld));
        };
        let sent = Instant::now();
        let data = reader_data(held.fence, ms(ttl));
        match self
            .renew_node(&held.grant, &data, ms(ttl), "renew a reader")
            .await?
        {
            Ok(grant) => {
                self.readers().insert(
                    map_key,
                    ReaderGrant {
                        grant,
                        fence: held.fence,
                    },
                );
                Ok(Lease {
                    ttl,
                    valid_until: valid_until(sent, ttl),
                    ..lease.clone()
                })
            }
            Err(reason) => {
                self.readers().remove(&map_key);
                Err(lost(reason))
            }
        }
    }

    /// [`LockBackend::release_shared`](fencelock_core::LockBackend::release_shared): deletes
    /// the reader's own node (its path holds the reader id and a sequence, so it is never
    /// another reader's or a writer's).
    pub(crate) async fn release_reader(&self, lease: &Lease, reader: OwnerId) -> Result<bool> {
        let Some(held) = self.find_reader(lease, reader).await? else {
            return Ok(false);
        };
        let grant = &held.grant;
        let deleted = self
            .call(
                "release a reader",
                grant.session.client.delete(&grant.path, None),
            )
            .await?;
        let map_key = (lease.key.clone(), reader);
        match deleted {
            Ok(()) => {
                self.readers().remove(&map_key);
                Ok(true)
            }
            Err(zk::Error::NoNode | zk::Error::SessionExpired) => {
                self.readers().remove(&map_key);
                Ok(false)
            }
            Err(e) => Err(mapped(e, "release a reader")),
        }
    }

    /// [`LockBackend::inspect_shared`](fencelock_core::LockBackend::inspect_shared): the
    /// readers within their ttl on the leader's clock, their fence and the longest time left.
    pub(crate) async fn read_phase(&self, key: &LockKey) -> Result<Option<ReadPhase>> {
        let session = self.sessions.get().await?;
        let dir = self.sessions.layout.key_dir(key.as_str());
        let readers: Vec<String> = self
            .queue_nodes(&session, &dir)
            .await?
            .into_iter()
            .filter(|(_, _, kind)| *kind == NodeKind::Read)
            .map(|(path, _, _)| path)
            .collect();
        if readers.is_empty() {
            return Ok(None);
        }
        let now = self.server_now(&session).await?;
        let mut phase: Option<ReadPhase> = None;
        for path in readers {
            let (data, stat) = match self
                .call("inspect a reader", session.client.get_data(&path))
                .await?
            {
                Ok(found) => found,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(mapped(e, "inspect a reader")),
            };
            let Some(NodeData::Reader { fence, ttl_ms }) = parse_node_data(&data) else {
                return Err(protocol(&format!("reader node {path}")));
            };
            if expired(stat.mtime, ttl_ms, now) {
                continue;
            }
            let left = stat
                .mtime
                .saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX))
                .saturating_sub(now);
            let left = Duration::from_millis(u64::try_from(left).unwrap_or(0).max(1));
            let phase = phase.get_or_insert(ReadPhase {
                fence,
                readers: 0,
                remaining: Duration::ZERO,
            });
            phase.readers += 1;
            phase.remaining = phase.remaining.max(left);
        }
        Ok(phase)
    }
}

/// The created reader's path and the leader's clock at the multi (the counter's new mtime).
fn created(results: Vec<zk::MultiWriteResult>) -> Result<(String, i64)> {
    let mut path = None;
    let mut now = None;
    for result in results {
        match result {
            zk::MultiWriteResult::SetData { stat } => now = Some(stat.mtime),
            zk::MultiWriteResult::Create { path: p, .. } => path = Some(p),
            _ => {}
        }
    }
    match (path, now) {
        (Some(path), Some(now)) => Ok((path, now)),
        _ => Err(protocol("reply to the reader's grant multi")),
    }
}
