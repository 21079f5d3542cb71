//! `RedlockConfig`: which independent Redis servers make a Redlock, and how long each may take.

use std::collections::HashSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::{Error, Result};
use url::Url;

use crate::config::{DEFAULT_CONNECT_TIMEOUT, RedisConfig};
use crate::keys::DEFAULT_PREFIX;
use crate::redlock::Redlock;
use crate::redlock_round::{Node, Round, quorum};

/// The default bound on one node's answer to one call.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(500);

/// The nodes of a [`Redlock`] and its options. Build it, then [`connect`](Self::connect).
///
/// Each node is a `redis://` (or, with the `tls` feature, `rediss://`) URL of an
/// **independent** server: not replicas of one another, not one Redis Cluster. Credentials
/// and database number go in each URL, so they may differ between nodes. The same server
/// listed twice is refused, since it would count twice towards a quorum.
///
/// ```no_run
/// # async fn demo() -> fencelock_core::Result<()> {
/// use std::time::Duration;
/// use fencelock_redis::RedlockConfig;
///
/// let redlock = RedlockConfig::new([
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])
/// .prefix("billing")
/// .node_timeout(Duration::from_millis(200))
/// .connect()
/// .await?;
/// # let _ = redlock; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedlockConfig {
    nodes: Vec<String>,
    prefix: String,
    node_timeout: Duration,
    connect_timeout: Duration,
}

impl fmt::Debug for RedlockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|url| RedisConfig::new(url.as_str()).redacted_url())
            .collect();
        f.debug_struct("RedlockConfig")
            .field("nodes", &nodes)
            .field("prefix", &self.prefix)
            .field("node_timeout", &self.node_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl RedlockConfig {
    /// A configuration over the servers at `urls`, with the defaults: prefix `fencelock`,
    /// 500 ms per node and call, 5 s to connect.
    pub fn new<I>(urls: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        RedlockConfig {
            nodes: urls.into_iter().map(Into::into).collect(),
            prefix: DEFAULT_PREFIX.to_owned(),
            node_timeout: DEFAULT_NODE_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// The first part of every key name on every node (default `fencelock`); the same rules
    /// as [`RedisConfig::prefix`].
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The longest one node may take to answer one call, connecting included (default
    /// 500 ms). A node that does not answer in time counts as failed for that call, so a
    /// call never takes much longer than this, however many nodes are down. For acquire and
    /// extend the limit is also capped at the ttl, since a later answer leaves no validity.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The longest establishing a connection to one node may take at
    /// [`connect`](Self::connect) (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Connects to every node in parallel, each attempt bounded by the connect timeout plus
    /// the node timeout, and succeeds when a quorum connected; the nodes that did not are
    /// tried again by later calls.
    ///
    /// Every URL and option is checked first ([`Error::InvalidConfig`], nothing touched).
    /// Refused credentials on a node are [`Error::InvalidConfig`] too; fewer than a quorum
    /// of reachable nodes is [`Error::QuorumFailed`] naming what each node answered.
    pub async fn connect(&self) -> Result<Redlock> {
        let nodes = self.nodes()?;
        let needed = quorum(nodes.len());
        // Every node's attempt is awaited (each bounded), so the capabilities read at connect
        // time cover every reachable node.
        let mut round = Round::start(
            &nodes,
            self.connect_timeout + self.node_timeout,
            |_| async { Ok(()) },
        );
        round.all().await;
        let connected = round.count_ok(|_| true);
        if connected < needed {
            if let Some(e) = round.config_error() {
                return Err(e);
            }
            return Err(Error::QuorumFailed {
                granted: connected,
                needed,
                nodes: round.reports(&nodes, |()| "connected".to_owned()),
            });
        }
        Ok(Redlock::new(nodes, self.node_timeout, self.prefix.clone()))
    }

    /// Checks every option and URL without touching the network, and builds the nodes.
    fn nodes(&self) -> Result<Vec<Arc<Node>>> {
        if self.nodes.is_empty() {
            return Err(Error::config("redlock needs at least one node"));
        }
        if self.node_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(Error::config(
                "redlock node_timeout and connect_timeout must be greater than zero",
            ));
        }
        let mut seen = HashSet::new();
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for url in &self.nodes {
            let config = RedisConfig::new(url.as_str())
                .prefix(self.prefix.as_str())
                .call_timeout(self.node_timeout)
                .connect_timeout(self.connect_timeout);
            config.validate()?;
            // validate() accepted it, so it parses and names a host.
            let parsed = Url::parse(url).map_err(|e| Error::InvalidConfig {
                message: format!("redis URL {:?} is not a URL", config.redacted_url()),
                source: Some(Box::new(e)),
            })?;
            let host = parsed.host_str().unwrap_or_default().to_ascii_lowercase();
            let port = parsed.port().unwrap_or(6379);
            let label = if host.contains(':') {
                format!("[{}]:{port}", host.trim_matches(|c| c == '[' || c == ']'))
            } else {
                format!("{host}:{port}")
            };
            // Two databases of one server fail together: still one node.
            if !seen.insert(label.clone()) {
                return Err(Error::config(format!(
                    "redlock node {label} is listed twice; each node must be a different server"
                )));
            }
            nodes.push(Arc::new(Node::new(label, config)));
        }
        Ok(nodes)
    }
}
