//! The recipe both kinds of try share: entering a node into a key's queue with the next
//! token, and judging where it stands.

use fencelock_core::{Error, FencingToken, LockKey, OwnerId, Result};
use zookeeper_client as zk;

use crate::backend::{CAS_TRIES, MAX_TOKEN, ZkLockBackend, expired, ms};
use crate::error::{BACKEND, mapped, protocol, within};
use crate::layout::{NodeData, lock_node_prefix, parse_node_data};
use crate::queue::PLACE_TTL;
use crate::session::Session;

/// Where a contender's node stands in its key's queue.
pub(crate) enum Judged {
    /// The lowest node: granted.
    Lowest,
    /// Behind a live node (a holder within its ttl, a waiter within its place ttl).
    Behind,
    /// The node is no longer in the queue.
    Gone,
}

/// How long a node lives past its mtime: a grant's or a reader's ttl, a waiting place's
/// place ttl.
pub(crate) fn lifespan(data: &[u8]) -> u64 {
    match parse_node_data(data) {
        Some(NodeData::Grant { ttl_ms, .. } | NodeData::Reader { ttl_ms, .. }) => ttl_ms,
        Some(NodeData::Waiting { .. }) => ms(PLACE_TTL),
        // Not ours to judge: never removed as expired.
        None => u64::MAX,
    }
}

impl ZkLockBackend {
    /// Enters `owner`'s node into the queue of `dir`: the counter's compare-and-set and the
    /// node's creation (with `data` of the new token) in one multi, so sequence order is
    /// token order. The node's path, its token and the leader's clock at the multi (ms).
    pub(crate) async fn enter(
        &self,
        session: &Session,
        key: &LockKey,
        dir: &str,
        owner: OwnerId,
        data: impl Fn(FencingToken) -> Vec<u8>,
    ) -> Result<(String, FencingToken, i64)> {
        let node = format!("{dir}/{}", lock_node_prefix(owner));
        let options = zk::CreateMode::EphemeralSequential.with_acls(self.sessions.acls());
        for _ in 0..CAS_TRIES {
            let (counter, version) = self.counter(session, dir).await?;
            let token = counter
                .checked_add(1)
                .filter(|t| *t <= MAX_TOKEN)
                .and_then(FencingToken::new)
                .ok_or_else(|| {
                    Error::config(format!("the token counter of {key:?} is exhausted"))
                })?;
            let mut multi = session.client.new_multi_writer();
            multi
                .add_set_data(dir, token.to_string().as_bytes(), Some(version))
                .map_err(|e| mapped(e, "grant"))?;
            multi
                .add_create(&node, &data(token), &options)
                .map_err(|e| mapped(e, "grant"))?;
            match within(self.sessions.op_timeout, "grant", multi.commit()).await? {
                Ok(results) => {
                    let mut path = None;
                    let mut now = None;
                    for result in results {
                        match result {
                            zk::MultiWriteResult::SetData { stat } => now = Some(stat.mtime),
                            zk::MultiWriteResult::Create { path: p, .. } => path = Some(p),
                            _ => {}
                        }
                    }
                    let (Some(path), Some(now)) = (path, now) else {
                        return Err(protocol("reply to the grant multi"));
                    };
                    return Ok((path, token, now));
                }
                Err(zk::MultiWriteError::OperationFailed {
                    source: zk::Error::BadVersion,
                    ..
                }) => continue,
                Err(e) => return Err(mapped(e.into(), "grant")),
            }
        }
        Err(Error::Conflict {
            backend: BACKEND,
            message: format!("the token counter of {key:?} kept moving"),
            source: None,
        })
    }

    /// Where `path` stands in the queue of `dir`. A lower node past its time at `now` (the
    /// leader's clock at this contender's last write, ms) is removed **at the version read**,
    /// so its owner's concurrent write (an extend, a waiter's refresh or grant) wins.
    pub(crate) async fn judge(
        &self,
        session: &Session,
        dir: &str,
        path: &str,
        now: i64,
    ) -> Result<Judged> {
        loop {
            let queue = self.queue(session, dir).await?;
            let Some((lowest, _)) = queue.first() else {
                return Ok(Judged::Gone);
            };
            if lowest == path {
                return Ok(Judged::Lowest);
            }
            if !queue.iter().any(|(p, _)| p == path) {
                return Ok(Judged::Gone);
            }
            let (data, stat) = match self
                .call("read the holder", session.client.get_data(lowest))
                .await?
            {
                Ok(found) => found,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(mapped(e, "read the holder")),
            };
            if !expired(stat.mtime, lifespan(&data), now) {
                return Ok(Judged::Behind);
            }
            match self
                .call(
                    "remove an expired node",
                    session.client.delete(lowest, Some(stat.version)),
                )
                .await?
            {
                Ok(()) | Err(zk::Error::NoNode) | Err(zk::Error::BadVersion) => {}
                Err(e) => return Err(mapped(e, "remove an expired node")),
            }
        }
    }
}
