//! `RedlockConfig`: which independent Redis servers make a Redlock, how long each may take,
//! and where the fenced data lives. It owns the `redlock://` URL scheme.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use fencelock_core::url::{Known, Options};
use fencelock_core::{Error, HostPort, Result};

use super::node::Node;
use crate::config::RedisConfig;
use crate::options::{ALLOW_EVICTION, PREFIX, SharedOptions, UrlOptions, query};
use crate::redis_url::parse_endpoint;
use fencelock_core::url::{redact, safe_to_echo};

/// The default bound on one node's answer to one call.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(500);

/// The nodes of a [`Redlock`](crate::Redlock) and its options. Build it, then [`connect`](Self::connect); the
/// server that keeps the fenced data is [`connect_storage`](Self::connect_storage).
///
/// Each node is an **independent** server: not replicas of one another, not one Redis
/// Cluster. The same server listed twice is refused, since it would count twice towards a
/// quorum.
///
/// It owns the `redlock://` URL scheme:
/// `redlock://[user][:password@]host1:port1,host2:port2,...[/db][?storage=<redis URL>][&prefix=name][&allow_eviction=true]`,
/// one set of credentials and one database number for every node (each node is reached as
/// `redis://[user][:password@]hostN:portN[/db]`). `storage` is the `redis://` URL of the
/// server that keeps the fenced data, percent-encoded; by default the first node. `prefix`
/// is the key prefix on every node and on the storage (see [`prefix`](Self::prefix)). Nodes with
/// different credentials, TLS nodes and a storage with its own options: build the config
/// with [`new`](Self::new) and [`with_storage`](Self::with_storage) instead.
///
/// ```no_run
/// # async fn demo() -> fencelock_core::Result<()> {
/// use std::time::Duration;
/// use fencelock_redis::RedlockConfig;
///
/// let config = RedlockConfig::from_url(
///     "redlock://10.0.0.1:6379,10.0.0.2:6379,10.0.0.3:6379?storage=redis%3A%2F%2F10.0.0.9%3A6379",
/// )?
/// .prefix("billing")
/// .node_timeout(Duration::from_millis(200));
/// let redlock = config.connect().await?;
/// let storage = config.connect_storage().await?;
/// # let _ = (redlock, storage); Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RedlockConfig {
    nodes: Vec<RedisConfig>,
    /// `None`: the first node.
    storage: Option<RedisConfig>,
    /// The call timeout is the node timeout; value limit and fence rule are the storage's own
    /// and stay at their defaults here.
    options: SharedOptions,
}

impl fmt::Debug for RedlockConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<String> = self.nodes.iter().map(RedisConfig::redacted_url).collect();
        f.debug_struct("RedlockConfig")
            .field("nodes", &nodes)
            .field(
                "storage",
                &self.storage.as_ref().map(RedisConfig::redacted_url),
            )
            .field("prefix", &self.options.prefix)
            .field("node_timeout", &self.options.call_timeout)
            .field("connect_timeout", &self.options.connect_timeout)
            .field("allow_eviction", &self.options.allow_eviction)
            .finish()
    }
}

fencelock_core::redacted_config!(RedlockConfig);

const SCHEME: &str = "redlock://";

/// The options a `redlock://` URL takes: `storage`, and the shared ones.
const KNOWN_OPTIONS: &[Known] = &[Known::new("storage"), ALLOW_EVICTION, PREFIX];

impl RedlockConfig {
    /// The URL scheme this config reads: `redlock`.
    pub const SCHEMES: &'static [&'static str] = &["redlock"];

    /// A configuration over the servers at `urls` (each a `redis://` URL, with its own
    /// credentials and database), with the defaults: prefix `fencelock`, 500 ms per node and
    /// call, 5 s to connect, the fenced data on the first node. The URLs are checked by
    /// `connect`.
    pub fn new<I>(urls: I) -> Self
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        Self::with_nodes(urls.into_iter().map(RedisConfig::new).collect(), None)
    }

    fn with_nodes(nodes: Vec<RedisConfig>, storage: Option<RedisConfig>) -> Self {
        RedlockConfig {
            nodes,
            storage,
            options: SharedOptions {
                call_timeout: DEFAULT_NODE_TIMEOUT,
                ..SharedOptions::default()
            },
        }
    }

    /// Parses and checks a `redlock://` URL (see the type's docs), with the defaults of
    /// [`new`](Self::new).
    ///
    /// Every node is checked as a `redis://` URL would be, so the errors are the same ("names
    /// no host", "port 99999 is out of range", ...) and name the node; an empty node, the same
    /// server twice, credentials given per node, a `storage` that is not a `redis://` URL and
    /// any other option are refused. Errors are [`Error::InvalidConfig`] and never show a
    /// password.
    pub fn from_url(input: &str) -> Result<Self> {
        let shown = redact(input);
        let echo = safe_to_echo(input);
        let fail = |what: String| Error::config(format!("redlock URL {shown:?}: {what}"));
        let rest = match input.get(..SCHEME.len()) {
            Some(scheme) if scheme.eq_ignore_ascii_case(SCHEME) => &input[SCHEME.len()..],
            _ => return Err(fail("the scheme is not redlock://".to_owned())),
        };
        let (rest, fragment) = match rest.split_once('#') {
            Some((rest, fragment)) => (rest, Some(fragment)),
            None => (rest, None),
        };
        if fragment.is_some() {
            return Err(fail("takes no fragment".to_owned()));
        }
        let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        if userinfo.is_some_and(|u| u.contains(',')) {
            return Err(fail(
                "one set of credentials goes before the first node (percent-encoded); for \
                 credentials per node build a RedlockConfig with `new`"
                    .to_owned(),
            ));
        }
        if hosts.is_empty() {
            return Err(fail("names no node".to_owned()));
        }
        let count = hosts.split(',').count();
        let mut nodes = Vec::with_capacity(count);
        for (index, host) in hosts.split(',').enumerate() {
            let which = if echo && !host.is_empty() {
                format!("node {} of {count} (`{host}`)", index + 1)
            } else {
                format!("node {} of {count}", index + 1)
            };
            if host.is_empty() {
                return Err(fail(format!("{which} is empty")));
            }
            let url = match userinfo {
                Some(userinfo) => format!("redis://{userinfo}@{host}{path}"),
                None => format!("redis://{host}{path}"),
            };
            let (endpoint, options) = parse_endpoint(&url).map_err(|problem| {
                let what = if echo {
                    problem.what
                } else {
                    "is not host[:port]; a password holding `/`, `?` or `#` must be \
                     percent-encoded"
                        .to_owned()
                };
                Error::InvalidConfig {
                    message: format!("redlock URL {shown:?}: {which} {what}"),
                    source: problem.source.map(|e| Box::new(e) as _),
                }
            })?;
            nodes.push(RedisConfig::from_endpoint(endpoint, options));
        }
        distinct(&nodes).map_err(|e| e.in_context(&format!("redlock URL {shown:?}")))?;
        // A password with an unescaped `/`, `?` or `#` may make part of itself look like an
        // option: then the refusal names none.
        let options = Options::parse(query, KNOWN_OPTIONS).map_err(|e| {
            if echo {
                e.in_context(&format!("redlock URL {shown:?}"))
            } else {
                fail("takes only the options `storage`, `allow_eviction` and `prefix`".to_owned())
            }
        })?;
        let storage = match options.get("storage") {
            Some(value) => {
                let (endpoint, options) =
                    parse_endpoint(value).map_err(|problem| Error::InvalidConfig {
                        message: format!(
                            "redlock URL {shown:?}: storage {:?} {}",
                            redact(value),
                            problem.what
                        ),
                        source: problem.source.map(|e| Box::new(e) as _),
                    })?;
                if options.shared.prefix.is_some() {
                    return Err(fail(format!(
                        "storage {:?} takes no `prefix`: the key prefix is the redlock's \
                         (`prefix` on the redlock:// URL)",
                        redact(value)
                    )));
                }
                Some(RedisConfig::from_endpoint(endpoint, options))
            }
            None => None,
        };
        let given = UrlOptions::read(&options)
            .map_err(|e| e.in_context(&format!("redlock URL {shown:?}")))?;
        // The first node is the default: say nothing about it, so the URL round-trips.
        let storage = storage.filter(|s| Some(s) != nodes.first());
        let mut config = Self::with_nodes(nodes, storage);
        config.options = config.options.with_url(given);
        Ok(config)
    }

    /// The `redlock://` URL, credentials included: `from_url(&c.to_url())` equals `c` for
    /// every `c` that [`from_url`](Self::from_url) returns. `?storage=` is written only when
    /// the storage is not the first node, `prefix` only when it is not the default. The credentials and database are the first
    /// node's: a config built with [`new`](Self::new) whose nodes differ in those has no
    /// `redlock://` URL that says so.
    pub fn to_url(&self) -> String {
        self.render(false)
    }

    /// [`to_url`](Self::to_url) with every password (the storage's included) as `***`.
    pub fn redacted_url(&self) -> String {
        self.render(true)
    }

    fn render(&self, redacted: bool) -> String {
        let first = self.nodes.first().and_then(RedisConfig::endpoint);
        let mut url = SCHEME.to_owned();
        if let Some(first) = first {
            url.push_str(&first.userinfo(redacted));
        }
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|node| match node.endpoint() {
                Some(endpoint) => endpoint.authority(),
                None if redacted => node.redacted_url(),
                None => node.to_url(),
            })
            .collect();
        url.push_str(&hosts.join(","));
        if let Some(first) = first {
            url.push_str(&first.path());
        }
        let storage = self.storage.as_ref().map(|storage| {
            let text = if redacted {
                storage.redacted_url()
            } else {
                storage.to_url()
            };
            ("storage", text)
        });
        url + &query(storage.into_iter().chain(self.options.url_pairs()))
    }

    /// The lock nodes, in URL order, ports filled in. The storage server is not among them
    /// unless it is a lock node too; see [`storage`](Self::storage).
    pub fn hosts(&self) -> Vec<HostPort> {
        self.nodes.iter().flat_map(RedisConfig::hosts).collect()
    }

    /// The same config with its lock nodes at `hosts` (one address per node, in order).
    /// A storage set apart with `?storage=` or [`with_storage`](Self::with_storage) stays
    /// where it is (point it elsewhere with `with_storage(storage.with_hosts(..))`); the
    /// default storage is the first node, wherever that now is.
    pub fn with_hosts(mut self, hosts: &[HostPort]) -> Result<Self> {
        if hosts.len() != self.nodes.len() {
            return Err(Error::config(format!(
                "redlock has {} nodes; {} addresses given",
                self.nodes.len(),
                hosts.len()
            )));
        }
        self.nodes = self
            .nodes
            .into_iter()
            .zip(hosts)
            .map(|(node, host)| node.with_hosts(std::slice::from_ref(host)))
            .collect::<Result<_>>()?;
        Ok(self)
    }

    /// The lock nodes' configs, in order.
    pub fn node_configs(&self) -> &[RedisConfig] {
        &self.nodes
    }

    /// The config of the server that keeps the fenced data: the one set with `?storage=` or
    /// [`with_storage`](Self::with_storage), else the first node. `None` only for a config
    /// without nodes, which `connect` refuses.
    pub fn storage(&self) -> Option<&RedisConfig> {
        self.storage.as_ref().or(self.nodes.first())
    }

    /// Keeps the fenced data on the server `storage` names (its own timeouts, value limit
    /// and fence rule apply; the key prefix is this config's).
    pub fn with_storage(mut self, storage: RedisConfig) -> Self {
        self.storage = Some(storage);
        self
    }

    /// A [`RedisStorage`](crate::RedisStorage) on the [`storage`](Self::storage) server,
    /// with this config's key prefix.
    ///
    /// It returns at once (after checking the config): the storage server is connected at
    /// the first storage operation, so the lock keeps working while that server is down, and
    /// a connection that fails is tried again by the next operation. Its errors name it
    /// (`redlock storage node host:port`). A storage server that may evict keys fails every
    /// storage operation with [`Error::InvalidConfig`] unless eviction is allowed (here, or in
    /// the storage's own config).
    pub async fn connect_storage(&self) -> Result<crate::RedisStorage> {
        crate::RedisStorage::lazy(self.storage_config()?, "redlock storage node")
    }

    /// The config the storage connects with: the [`storage`](Self::storage) server's, with
    /// this config's key prefix, and eviction allowed if either allows it.
    pub(crate) fn storage_config(&self) -> Result<RedisConfig> {
        let Some(storage) = self.storage() else {
            return Err(Error::config("redlock needs at least one node"));
        };
        let allow_eviction = storage.evictions_allowed() || self.options.allow_eviction;
        Ok(storage
            .clone()
            .prefix(self.options.prefix.as_str())
            .allow_eviction(allow_eviction))
    }

    /// The first part of every key name on every node and on the storage (default
    /// `fencelock`; in the URL, `?prefix=name`); the same rules as [`RedisConfig::prefix`].
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.prefix = prefix.into();
        self
    }

    /// The configured key prefix.
    pub fn prefix_name(&self) -> &str {
        &self.options.prefix
    }

    /// The longest one node may take to answer one call, connecting included (default
    /// 500 ms). A node that does not answer in time counts as failed for that call, so a
    /// call never takes much longer than this, however many nodes are down. For acquire and
    /// extend the limit is also capped at the ttl, since a later answer leaves no validity.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.options.call_timeout = timeout;
        self
    }

    /// The longest establishing a connection to one node may take at
    /// [`connect`](Self::connect) (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// Serves even when nodes (and the storage server) may evict keys (default `false`; in
    /// the URL, `?allow_eviction=true`); see [`RedisConfig::allow_eviction`]. Without it, a
    /// node whose `maxmemory-policy` is not `noeviction` makes `connect` fail with
    /// [`Error::InvalidConfig`] naming the node, even when the other nodes make a quorum, and
    /// such a storage server fails every storage operation the same way.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.options.allow_eviction = allow;
        self
    }

    pub(crate) fn node_time(&self) -> Duration {
        self.options.call_timeout
    }

    pub(crate) fn connect_time(&self) -> Duration {
        self.options.connect_timeout
    }

    pub(crate) fn key_prefix(&self) -> String {
        self.options.prefix.clone()
    }

    /// The shared settings, as the builder and the URL left them (compared across the
    /// schemes by the tests of [`SharedOptions`]).
    #[cfg(test)]
    pub(crate) fn options(&self) -> &SharedOptions {
        &self.options
    }

    /// Checks every option and URL without touching the network, and builds the nodes.
    pub(crate) fn build_nodes(&self) -> Result<Vec<Arc<Node>>> {
        if self.nodes.is_empty() {
            return Err(Error::config("redlock needs at least one node"));
        }
        self.options.validate("redlock", "node_timeout")?;
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for node in &self.nodes {
            let config = self.node_config(node);
            config.validate()?;
            nodes.push(config);
        }
        distinct(&nodes).map_err(|e| e.in_context("redlock"))?;
        Ok(nodes
            .into_iter()
            .map(|config| Arc::new(Node::new(label(&config), config)))
            .collect())
    }

    /// The config a lock node connects with: `node`'s server, with this config's prefix and
    /// time limits, and eviction allowed if either allows it.
    pub(crate) fn node_config(&self, node: &RedisConfig) -> RedisConfig {
        let allow_eviction = node.evictions_allowed() || self.options.allow_eviction;
        node.clone()
            .allow_eviction(allow_eviction)
            .prefix(self.options.prefix.as_str())
            .call_timeout(self.options.call_timeout)
            .connect_timeout(self.options.connect_timeout)
    }
}

/// A node's name in reports: `host:port`, the host in lower case.
fn label(config: &RedisConfig) -> String {
    match config.endpoint() {
        Some(endpoint) => {
            let address = endpoint.host_port();
            HostPort::new(address.host.to_ascii_lowercase(), address.port).to_string()
        }
        None => config.redacted_url(),
    }
}

/// Checks that no server is listed twice (two databases of one server fail together: still
/// one node).
fn distinct(nodes: &[RedisConfig]) -> Result<()> {
    let hosts: Vec<HostPort> = nodes.iter().flat_map(RedisConfig::hosts).collect();
    fencelock_core::url::distinct(&hosts, "node")
}

#[cfg(test)]
mod tests;
