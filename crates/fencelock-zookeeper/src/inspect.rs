//! What a key's znodes say without taking anything (`inspect`, and its whole queue), and
//! raising its token counter past a floor (`advance_token`).

use std::time::Duration;

use fencelock_core::{
    Error, FencingToken, LockInfo, LockKey, QueueEntry, QueueRole, Result, validate_floor,
};
use zookeeper_client as zk;

use crate::backend::{CAS_TRIES, MAX_TOKEN, ZkLockBackend, expired};
use crate::error::{BACKEND, mapped, protocol};
use crate::layout::{NodeData, NodeKind, parse_counter, parse_node_data};
use crate::recipe::lifespan;

impl ZkLockBackend {
    /// [`LockBackend::inspect`](fencelock_core::LockBackend::inspect): the counter, and the
    /// holder at the head of the queue when its ttl has not run out on the leader's clock.
    pub(crate) async fn inspect_key(&self, key: &LockKey) -> Result<LockInfo> {
        let session = self.sessions.get().await?;
        let dir = self.sessions.layout.key_dir(key.as_str());
        let last_token = match self.call("inspect", session.client.get_data(&dir)).await? {
            Ok((data, _)) => parse_counter(&data).and_then(FencingToken::new),
            Err(zk::Error::NoNode) => None,
            Err(e) => return Err(mapped(e, "inspect")),
        };
        let mut info = LockInfo::new(key.clone());
        info.last_token = last_token;
        let queue = self.queue_nodes(&session, &dir).await?;
        let Some((holder, owner, kind)) = queue.first() else {
            return Ok(info);
        };
        if *kind == NodeKind::Read {
            // The head reader may have lapsed while later readers of its phase hold on.
            if let Some(phase) = self.read_phase(key).await? {
                info.holder = Some(phase.fence);
                info.remaining = Some(phase.remaining);
            }
            return Ok(info);
        }
        let (data, stat) = match self
            .call("inspect", session.client.get_data(holder))
            .await?
        {
            Ok(found) => found,
            Err(zk::Error::NoNode) => return Ok(info),
            Err(e) => return Err(mapped(e, "inspect")),
        };
        let (fence, ttl_ms) = match parse_node_data(&data) {
            Some(NodeData::Grant { token, ttl_ms }) => {
                (fencelock_core::Fence::new(token, *owner), ttl_ms)
            }
            // During a read phase the holder is the phase's fence.
            Some(NodeData::Reader { fence, ttl_ms }) => (fence, ttl_ms),
            // A waiter at the head of the queue holds nothing yet.
            Some(NodeData::Waiting { .. }) => return Ok(info),
            None => return Err(protocol("grant node")),
        };
        let now = self.server_now(&session).await?;
        if !expired(stat.mtime, ttl_ms, now) {
            let left = stat
                .mtime
                .saturating_add(i64::try_from(ttl_ms).unwrap_or(i64::MAX))
                .saturating_sub(now);
            info.holder = Some(fence);
            info.remaining = Some(Duration::from_millis(
                u64::try_from(left).unwrap_or(0).max(1),
            ));
        }
        Ok(info)
    }

    /// The nodes of `key`'s queue, lowest first: the holder or the readers of the read phase
    /// at the head, then contenders and waiting places in the order they will be granted.
    /// Reads every node and writes the clock node once (the leader's clock says what is
    /// past its time); takes nothing. Nodes that vanish while being read are left out.
    pub(crate) async fn queue_entries(&self, key: &LockKey) -> Result<Vec<QueueEntry>> {
        let session = self.sessions.get().await?;
        let dir = self.sessions.layout.key_dir(key.as_str());
        let queue = self.queue_nodes(&session, &dir).await?;
        if queue.is_empty() {
            return Ok(Vec::new());
        }
        let mut read = Vec::with_capacity(queue.len());
        for (index, (path, owner, kind)) in queue.into_iter().enumerate() {
            match self
                .call("inspect the queue", session.client.get_data(&path))
                .await?
            {
                Ok((data, stat)) => read.push((index, owner, kind, data, stat.mtime)),
                Err(zk::Error::NoNode) => {}
                Err(e) => return Err(mapped(e, "inspect the queue")),
            }
        }
        let now = self.server_now(&session).await?;
        let mut entries = Vec::with_capacity(read.len());
        for (index, owner, kind, data, mtime) in read {
            let (role, token) = match (kind, parse_node_data(&data)) {
                (NodeKind::Write, Some(NodeData::Grant { token, .. })) if index == 0 => {
                    (QueueRole::Holder, token)
                }
                (NodeKind::Write, Some(NodeData::Grant { token, .. })) => {
                    (QueueRole::Contender, token)
                }
                (NodeKind::Write, Some(NodeData::Waiting { token })) => (QueueRole::Waiting, token),
                (NodeKind::Read, Some(NodeData::Reader { fence, .. })) => {
                    (QueueRole::Reader, fence.token)
                }
                _ => return Err(protocol("queue node data")),
            };
            let end = mtime.saturating_add(i64::try_from(lifespan(&data)).unwrap_or(i64::MAX));
            let left = if expired(mtime, lifespan(&data), now) {
                0
            } else {
                u64::try_from(end.saturating_sub(now)).unwrap_or(0)
            };
            entries.push(QueueEntry {
                owner,
                role,
                token: Some(token),
                remaining: Duration::from_millis(left),
            });
        }
        Ok(entries)
    }

    /// [`LockBackend::advance_token`](fencelock_core::LockBackend::advance_token): a
    /// compare-and-set of the counter, retried while other grants move it.
    pub(crate) async fn advance_key(
        &self,
        key: &LockKey,
        floor: FencingToken,
    ) -> Result<FencingToken> {
        validate_floor(floor, MAX_TOKEN, "a ZooKeeper counter")?;
        let session = self.sessions.get().await?;
        let dir = self.sessions.layout.key_dir(key.as_str());
        for _ in 0..CAS_TRIES {
            let (counter, version) = self.counter(&session, &dir).await?;
            if counter >= floor.get() {
                // Places keep the tokens they drew on entering: those at or below the floor
                // queue again, so the next grant is above it.
                self.drop_places_at_or_below(&session, &dir, floor).await?;
                return FencingToken::new(counter).ok_or_else(|| protocol("counter"));
            }
            match self
                .call(
                    "advance the token",
                    session
                        .client
                        .set_data(&dir, floor.to_string().as_bytes(), Some(version)),
                )
                .await?
            {
                Ok(_) => {
                    self.drop_places_at_or_below(&session, &dir, floor).await?;
                    return Ok(floor);
                }
                Err(zk::Error::BadVersion) => continue,
                Err(e) => return Err(mapped(e, "advance the token")),
            }
        }
        Err(Error::Conflict {
            backend: BACKEND,
            message: format!("the token counter of {key:?} kept moving"),
            source: None,
        })
    }
}
