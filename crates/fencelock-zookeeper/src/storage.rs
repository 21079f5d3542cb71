//! `ZkStorage`: the fence rule of DESIGN section 2 on znodes, one `multi` per operation.

use std::sync::Arc;

use fencelock_core::{
    Error, Fence, FenceRule, FencedStorage, FencingToken, LockKey, OwnerId, Result, Snapshot,
    async_trait, validate_value,
};
use zookeeper_client as zk;

use crate::error::{BACKEND, mapped, protocol, within};
use crate::session::Sessions;

/// The largest value [`ZkStorage`] stores: 1 MiB. ZooKeeper refuses requests larger than its
/// `jute.maxbuffer` (1 MiB less one byte by default), so servers that store values this large
/// need `-Djute.maxbuffer` of at least 1 MiB + 16 KiB (the test servers run with 4 MiB); a
/// server with the default refuses values near the limit with a connection loss.
pub const MAX_VALUE_LEN: usize = 1024 * 1024;

const TRIES: usize = 64;

/// Fenced storage in znodes on the same ensemble as the lock: per resource a fence node
/// (`<token>:<owner>`) and its child `v` holding the value.
///
/// Every admitted operation is one `multi` whose first step writes the fence node *at the
/// version read*, so it commits only if no other operation was admitted in between; the
/// value is written in the same `multi`. A fenced read with the fence already stored writes
/// nothing: the values read beside the fence in one multi-read were current while that fence
/// was the last admitted.
#[derive(Debug, Clone)]
pub struct ZkStorage {
    sessions: Arc<Sessions>,
    rule: FenceRule,
}

fn render(fence: Fence) -> Vec<u8> {
    format!("{}:{}", fence.token, fence.owner).into_bytes()
}

fn parse(data: &[u8]) -> Result<Fence> {
    let text = std::str::from_utf8(data).map_err(|_| protocol("fence node"))?;
    let (token, owner) = text.split_once(':').ok_or_else(|| protocol("fence node"))?;
    let token = token
        .parse()
        .ok()
        .and_then(FencingToken::new)
        .ok_or_else(|| protocol("fence token"))?;
    let owner: OwnerId = owner.parse().map_err(|_| protocol("fence owner"))?;
    Ok(Fence::new(token, owner))
}

/// The fence node's fence and version, and the value (with whether it exists).
struct Stored {
    fence: Fence,
    version: i32,
    value: Option<Vec<u8>>,
}

impl ZkStorage {
    pub(crate) fn new(sessions: Arc<Sessions>) -> Self {
        ZkStorage {
            sessions,
            rule: FenceRule::Monotonic,
        }
    }

    /// With `rule` instead of [`FenceRule::Monotonic`].
    pub fn with_rule(mut self, rule: FenceRule) -> Self {
        self.rule = rule;
        self
    }

    async fn load(&self, client: &zk::Client, resource: &LockKey) -> Result<Option<Stored>> {
        let layout = &self.sessions.layout;
        let mut reader = client.new_multi_reader();
        reader
            .add_get_data(&layout.fence(resource.as_str()))
            .map_err(|e| mapped(e, "read the fence"))?;
        reader
            .add_get_data(&layout.value(resource.as_str()))
            .map_err(|e| mapped(e, "read the value"))?;
        let results = within(self.sessions.op_timeout, "read the fence", reader.commit())
            .await?
            .map_err(|e| mapped(e, "read the fence"))?;
        let mut results = results.into_iter();
        let (fence, version) = match results.next() {
            Some(zk::MultiReadResult::Data { data, stat }) => (parse(&data)?, stat.version),
            Some(zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            }) => return Ok(None),
            Some(zk::MultiReadResult::Error { err }) => return Err(mapped(err, "read the fence")),
            _ => return Err(protocol("reply to the fence read")),
        };
        let value = match results.next() {
            Some(zk::MultiReadResult::Data { data, .. }) => Some(data),
            Some(zk::MultiReadResult::Error {
                err: zk::Error::NoNode,
            }) => None,
            Some(zk::MultiReadResult::Error { err }) => return Err(mapped(err, "read the value")),
            _ => return Err(protocol("reply to the value read")),
        };
        Ok(Some(Stored {
            fence,
            version,
            value,
        }))
    }

    /// Admits `fence` and, with `write`, stores the value; returns the value read (reads).
    async fn admit(
        &self,
        resource: &LockKey,
        fence: Fence,
        write: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>> {
        let session = self.sessions.get().await?;
        let client = &session.client;
        let layout = &self.sessions.layout;
        let fence_path = layout.fence(resource.as_str());
        let value_path = layout.value(resource.as_str());
        let options = zk::CreateMode::Persistent.with_acls(self.sessions.acls());
        for _ in 0..TRIES {
            let stored = self.load(client, resource).await?;
            let mut multi = client.new_multi_writer();
            let add = |e: zk::Error| mapped(e, "fenced operation");
            match &stored {
                None => {
                    multi
                        .add_create(&fence_path, &render(fence), &options)
                        .map_err(add)?;
                    if let Some(value) = write {
                        multi
                            .add_create(&value_path, value, &options)
                            .map_err(add)?;
                    }
                }
                Some(stored) => {
                    self.rule
                        .check(resource.as_str(), Some(stored.fence), fence)?;
                    if write.is_none() && stored.fence == fence {
                        return Ok(stored.value.clone());
                    }
                    multi
                        .add_set_data(&fence_path, &render(fence), Some(stored.version))
                        .map_err(add)?;
                    if let Some(value) = write {
                        if stored.value.is_some() {
                            multi.add_set_data(&value_path, value, None).map_err(add)?;
                        } else {
                            multi
                                .add_create(&value_path, value, &options)
                                .map_err(add)?;
                        }
                    }
                }
            }
            let committed =
                within(self.sessions.op_timeout, "fenced operation", multi.commit()).await?;
            match committed {
                Ok(_) => return Ok(stored.and_then(|s| s.value).filter(|_| write.is_none())),
                Err(zk::MultiWriteError::OperationFailed {
                    source: zk::Error::BadVersion | zk::Error::NodeExists | zk::Error::NoNode,
                    ..
                }) => {
                    // Another operation was admitted in between: judge again on what it left.
                    continue;
                }
                Err(e) => return Err(mapped(e.into(), "fenced operation")),
            }
        }
        Err(Error::Conflict {
            backend: BACKEND,
            message: format!("the fence of {resource:?} kept moving"),
            source: None,
        })
    }
}

#[async_trait]
impl FencedStorage for ZkStorage {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn max_value_len(&self) -> usize {
        MAX_VALUE_LEN
    }

    async fn read(&self, resource: &LockKey, fence: Fence) -> Result<Option<Vec<u8>>> {
        self.admit(resource, fence, None).await
    }

    async fn write(&self, resource: &LockKey, fence: Fence, value: &[u8]) -> Result<()> {
        validate_value(value, MAX_VALUE_LEN)?;
        self.admit(resource, fence, Some(value)).await.map(|_| ())
    }

    async fn peek(&self, resource: &LockKey) -> Result<Option<Snapshot>> {
        let session = self.sessions.get().await?;
        Ok(self
            .load(&session.client, resource)
            .await?
            .map(|stored| Snapshot {
                value: stored.value,
                fence: stored.fence,
            }))
    }
}
