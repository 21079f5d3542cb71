//! One independent Redis server of a Redlock, connected lazily.

use std::sync::Arc;

use fencelock_core::{Error, Result};
use tokio::sync::OnceCell;

use crate::config::RedisConfig;
use crate::connection::Connection;
use crate::error::REDLOCK;
use crate::waiters::Waiters;

/// One independent Redis server of a Redlock. Connected at most once, lazily: a node that was
/// down when the Redlock connected is tried again by each call, within that call's time limit.
pub(crate) struct Node {
    /// `host:port`, for reports and spans (never credentials).
    pub(crate) label: String,
    config: RedisConfig,
    link: OnceCell<Link>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("node", &self.label)
            .field("connected", &self.link.initialized())
            .finish_non_exhaustive()
    }
}

/// A connected node: its connection and its release subscriber.
#[derive(Clone)]
pub(crate) struct Link {
    pub(crate) conn: Connection,
    pub(crate) waiters: Arc<Waiters>,
}

impl Node {
    pub(crate) fn new(label: String, config: RedisConfig) -> Self {
        Node {
            label,
            config,
            link: OnceCell::new(),
        }
    }

    /// The node's connection, connecting first if it never was.
    pub(crate) async fn link(&self) -> Result<Link> {
        let link = self
            .link
            .get_or_try_init(|| async {
                let conn = Connection::open(&self.config, REDLOCK, "redlock node").await?;
                Ok::<_, Error>(Link {
                    waiters: Arc::new(Waiters::new(conn.clone())),
                    conn,
                })
            })
            .await?;
        Ok(link.clone())
    }

    /// Whether the node's counters survive (persisted, never evicted), if it is connected
    /// and said.
    pub(crate) fn persists(&self) -> Option<bool> {
        self.link
            .get()
            .and_then(|link| link.conn.settings.persists())
    }
}
