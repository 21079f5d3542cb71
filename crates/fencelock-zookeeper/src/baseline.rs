//! What `fencelock bench` measures fencelock's ZooKeeper backend against: the raw lock recipe
//! a user writes on the same ensemble ([`ZkBaseline`]), and the sweep of a run's znodes
//! ([`ZkCleanup`]).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::tools::{Baseline, Cleanup, Op, RawTryLock};
use fencelock_core::{LockKey, Result, async_trait};
use zookeeper_client as zk;

use crate::error::{mapped, within};
use crate::layout::{decode, encode};
use crate::session::Sessions;

/// Deletes a subtree (children first), ignoring nodes already gone.
async fn delete_tree(sessions: &Sessions, client: &zk::Client, path: String) -> Result<()> {
    let mut stack = vec![(path, false)];
    while let Some((path, listed)) = stack.pop() {
        if listed {
            match within(sessions.op_timeout, "delete", client.delete(&path, None)).await? {
                Ok(()) | Err(zk::Error::NoNode) => {}
                Err(e) => return Err(mapped(e, "delete the run's znodes")),
            }
            continue;
        }
        let children =
            match within(sessions.op_timeout, "list", client.list_children(&path)).await? {
                Ok(children) => children,
                Err(zk::Error::NoNode) => continue,
                Err(e) => return Err(mapped(e, "list the run's znodes")),
            };
        stack.push((path.clone(), true));
        for child in children {
            stack.push((format!("{path}/{child}"), false));
        }
    }
    Ok(())
}

/// Deletes everything fencelock's backend and storage wrote for a run's keys: the key nodes
/// (token counters and any grant left) and the resources' fence and value nodes.
#[derive(Debug, Clone)]
pub struct ZkCleanup {
    sessions: Arc<Sessions>,
}

impl ZkCleanup {
    pub(crate) fn new(sessions: Arc<Sessions>) -> Self {
        ZkCleanup { sessions }
    }
}

#[async_trait]
impl Cleanup for ZkCleanup {
    async fn clean(&self, key_prefix: &str) -> Result<()> {
        let session = self.sessions.get().await?;
        let layout = &self.sessions.layout;
        for dir in [layout.locks(), layout.data()] {
            let names = within(
                self.sessions.op_timeout,
                "list",
                session.client.list_children(&dir),
            )
            .await?
            .map_err(|e| mapped(e, "list fencelock's znodes"))?;
            for name in names {
                if decode(&name).is_some_and(|key| key.starts_with(key_prefix)) {
                    delete_tree(&self.sessions, &session.client, format!("{dir}/{name}")).await?;
                }
            }
        }
        Ok(())
    }
}

/// The raw baseline on ZooKeeper, the lock recipe of ZooKeeper's documentation as a user
/// writes it without fencelock: create an ephemeral sequential node under the lock's node,
/// list the children (granted when it is the lowest), delete it. Plain `setData` writes;
/// `exists` as the cheapest request.
#[derive(Clone)]
pub struct ZkBaseline {
    sessions: Arc<Sessions>,
    root: String,
}

impl fmt::Debug for ZkBaseline {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkBaseline")
            .field("root", &self.root)
            .finish_non_exhaustive()
    }
}

impl ZkBaseline {
    /// On the session of `sessions`, with every znode under `root` (created here, deleted in
    /// [`Baseline::close`]).
    pub(crate) async fn new(sessions: Arc<Sessions>, root: String) -> Result<Self> {
        let session = sessions.get().await?;
        let options = zk::CreateMode::Persistent.with_acls(sessions.acls());
        match within(
            sessions.op_timeout,
            "create",
            session.client.create(&root, b"", &options),
        )
        .await?
        {
            Ok(_) | Err(zk::Error::NodeExists) => {}
            Err(e) => return Err(mapped(e, "create the baseline's root")),
        }
        Ok(ZkBaseline { sessions, root })
    }

    async fn ensure(&self, client: &zk::Client, path: &str) -> Result<()> {
        let options = zk::CreateMode::Persistent.with_acls(self.sessions.acls());
        match within(
            self.sessions.op_timeout,
            "create",
            client.create(path, b"", &options),
        )
        .await?
        {
            Ok(_) | Err(zk::Error::NodeExists) => Ok(()),
            Err(e) => Err(mapped(e, "create the lock's node")),
        }
    }
}

#[async_trait]
impl RawTryLock for ZkBaseline {
    const LABEL: &'static str = "raw create ephemeral-sequential + getChildren + delete";

    async fn try_lock_unlock(&self, key: &LockKey) -> Result<bool> {
        let session = self.sessions.get().await?;
        let client = &session.client;
        let dir = format!("{}/{}", self.root, encode(key.as_str()));
        let options = zk::CreateMode::EphemeralSequential.with_acls(self.sessions.acls());
        let limit = self.sessions.op_timeout;
        let (_, sequence) = loop {
            match within(
                limit,
                "create",
                client.create(&format!("{dir}/lock-"), b"", &options),
            )
            .await?
            {
                Ok(created) => break created,
                Err(zk::Error::NoNode) => self.ensure(client, &dir).await?,
                Err(e) => return Err(mapped(e, "create ephemeral sequential")),
            }
        };
        let mine = format!("lock-{sequence}");
        let children = within(limit, "getChildren", client.list_children(&dir))
            .await?
            .map_err(|e| mapped(e, "getChildren"))?;
        let lowest = children.iter().min().is_some_and(|lowest| *lowest == mine);
        within(
            limit,
            "delete",
            client.delete(&format!("{dir}/{mine}"), None),
        )
        .await?
        .map_err(|e| mapped(e, "delete"))?;
        Ok(lowest)
    }
}

#[async_trait]
impl Baseline for ZkBaseline {
    fn round_trip_label(&self) -> String {
        "raw exists".into()
    }

    fn write_label(&self) -> String {
        "raw setData".into()
    }

    async fn round_trip(&self) -> Result<()> {
        let session = self.sessions.get().await?;
        within(
            self.sessions.op_timeout,
            "exists",
            session.client.check_stat(&self.root),
        )
        .await?
        .map_err(|e| mapped(e, "exists"))?;
        Ok(())
    }

    async fn writer(&self, resource: &LockKey) -> Result<Box<dyn Op>> {
        let session = self.sessions.get().await?;
        let path = format!("{}/data-{}", self.root, encode(resource.as_str()));
        self.ensure(&session.client, &path).await?;
        Ok(Box::new(PlainWriter {
            sessions: self.sessions.clone(),
            path,
            value: vec![7; 64],
        }))
    }

    async fn close(&self) -> Result<()> {
        let session = self.sessions.get().await?;
        delete_tree(&self.sessions, &session.client, self.root.clone()).await
    }
}

struct PlainWriter {
    sessions: Arc<Sessions>,
    path: String,
    value: Vec<u8>,
}

#[async_trait]
impl Op for PlainWriter {
    async fn once(&self) -> Result<Option<Duration>> {
        let session = self.sessions.get().await?;
        within(
            self.sessions.op_timeout,
            "setData",
            session.client.set_data(&self.path, &self.value, None),
        )
        .await?
        .map_err(|e| mapped(e, "setData"))?;
        Ok(None)
    }
}
