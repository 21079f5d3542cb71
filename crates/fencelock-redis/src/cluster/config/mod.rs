//! `RedisClusterConfig`: how to reach a Redis Cluster (its seed nodes) and how to name keys
//! there. It owns the `redis+cluster://` URL scheme.

use std::fmt;
use std::time::Duration;

use fencelock_core::url::{Known, Options, distinct};
use fencelock_core::{Error, FenceRule, HostPort, Result};

use crate::keys::KeySpace;
use crate::options::{ALLOW_EVICTION, PREFIX, SharedOptions, UrlOptions, query};
use crate::redis_url::{Endpoint, parse_endpoint};
use fencelock_core::url::{redact, safe_to_echo};

/// The options a `redis+cluster://` URL takes: the shared ones only.
const KNOWN_OPTIONS: &[Known] = &[ALLOW_EVICTION, PREFIX];

/// How to reach a Redis Cluster and how to name keys there. Build it, then
/// [`connect`](Self::connect) a [`RedisClusterBackend`](crate::RedisClusterBackend) (its
/// [`storage`](crate::RedisClusterBackend::storage) is the fenced storage on the same
/// cluster) or [`connect_storage`](Self::connect_storage) a storage alone.
///
/// The URL is `redis+cluster://[user][:password@]host1:port1,host2:port2,...`, or
/// `rediss+cluster://` for TLS (with the `tls` feature): one or more **seed nodes** (any
/// nodes of the cluster; the client learns the rest from them), one set of credentials for
/// every node, no database (a cluster has only database 0), and the options
/// `?allow_eviction=true` and `prefix=name` (the key prefix, see [`prefix`](Self::prefix)).
/// [`from_url`](Self::from_url) checks it completely: each seed as a
/// `redis://` URL would be, so the errors are the same and name the seed; an empty seed, the
/// same seed twice and credentials given per seed are refused. Errors are
/// [`Error::InvalidConfig`] and never show a password.
///
/// [`to_url`](Self::to_url) gives the URL back, credentials included, so that
/// `RedisClusterConfig::from_url(&c.to_url())` equals `c`; [`Display`](std::fmt::Display) and
/// [`Debug`](std::fmt::Debug) show it with the password as `***`, and the prefix when it is not
/// the default, however it was set. The other options set with the builder (timeouts, value
/// limit, fence rule) are not part of the URL.
///
/// ```no_run
/// # async fn demo() -> fencelock_core::Result<()> {
/// use fencelock_redis::RedisClusterConfig;
///
/// let backend = RedisClusterConfig::from_url("redis+cluster://:secret@10.0.0.1:7000,10.0.0.2:7000")?
///     .prefix("billing")
///     .connect()
///     .await?;
/// let storage = backend.storage();
/// # let _ = storage; Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RedisClusterConfig {
    seeds: Vec<Endpoint>,
    options: SharedOptions,
}

fencelock_core::redacted_config!(RedisClusterConfig);

impl fmt::Debug for RedisClusterConfig {
    // The URL only as redacted, so that a password never reaches a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("RedisClusterConfig");
        out.field("url", &self.redacted_url());
        self.options.debug_fields(&mut out);
        out.finish()
    }
}

impl RedisClusterConfig {
    /// The URL schemes this config reads: `redis+cluster` and `rediss+cluster` (TLS, with the
    /// `tls` feature).
    pub const SCHEMES: &'static [&'static str] = &["redis+cluster", "rediss+cluster"];

    /// Parses and checks a `redis+cluster://` URL (see the type's docs), with the defaults:
    /// prefix `fencelock`, 5 s per call (redirections and retries included), 5 s to connect,
    /// values up to 16 MiB, [`FenceRule::Monotonic`].
    pub fn from_url(input: &str) -> Result<Self> {
        let shown = redact(input);
        let echo = safe_to_echo(input);
        let fail = |what: String| Error::config(format!("redis cluster URL {shown:?}: {what}"));
        let Some((scheme, rest)) = input.split_once("://") else {
            return Err(fail(
                "is not a URL (expected redis+cluster://host1:port1,host2:port2,...)".to_owned(),
            ));
        };
        let node_scheme = match scheme.to_ascii_lowercase().as_str() {
            "redis+cluster" => "redis",
            "rediss+cluster" => "rediss",
            _ if echo => {
                return Err(fail(format!(
                    "scheme `{scheme}` is not redis+cluster:// or rediss+cluster://"
                )));
            }
            _ => return Err(fail("the scheme is not redis+cluster://".to_owned())),
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
        if !matches!(path, "" | "/") {
            return Err(fail(
                "takes no database: a Redis Cluster has only database 0".to_owned(),
            ));
        }
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        if userinfo.is_some_and(|u| u.contains(',')) {
            return Err(fail(
                "one set of credentials goes before the first node (percent-encoded)".to_owned(),
            ));
        }
        if hosts.is_empty() {
            return Err(fail("names no node".to_owned()));
        }
        let count = hosts.split(',').count();
        let mut seeds = Vec::with_capacity(count);
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
                Some(userinfo) => format!("{node_scheme}://{userinfo}@{host}"),
                None => format!("{node_scheme}://{host}"),
            };
            let (endpoint, _) = parse_endpoint(&url).map_err(|problem| {
                let what = if echo {
                    problem.what
                } else {
                    "is not host[:port]; a password holding `/`, `?` or `#` must be \
                     percent-encoded"
                        .to_owned()
                };
                Error::InvalidConfig {
                    message: format!("redis cluster URL {shown:?}: {which} {what}"),
                    source: problem.source.map(|e| Box::new(e) as _),
                }
            })?;
            seeds.push(endpoint);
        }
        let hosts: Vec<HostPort> = seeds.iter().map(Endpoint::host_port).collect();
        distinct(&hosts, "node")
            .map_err(|e| e.in_context(&format!("redis cluster URL {shown:?}")))?;
        // A password with an unescaped `/`, `?` or `#` may make part of itself look like an
        // option: then the refusal names none.
        let options = Options::parse(query, KNOWN_OPTIONS).map_err(|e| {
            if echo {
                e.in_context(&format!("redis cluster URL {shown:?}"))
            } else {
                fail(
                    "takes only the options `allow_eviction` and `prefix`; a password holding \
                     `/`, `?` or `#` must be percent-encoded"
                        .to_owned(),
                )
            }
        })?;
        let given = UrlOptions::read(&options)
            .map_err(|e| e.in_context(&format!("redis cluster URL {shown:?}")))?;
        Ok(RedisClusterConfig {
            seeds,
            options: SharedOptions::default().with_url(given),
        })
    }

    /// The URL, credentials included: `from_url(&c.to_url())` equals `c` (ports are always
    /// written).
    pub fn to_url(&self) -> String {
        self.render(false)
    }

    /// The URL with its password replaced by `***`, for logs and messages.
    pub fn redacted_url(&self) -> String {
        self.render(true)
    }

    fn render(&self, redacted: bool) -> String {
        let Some(first) = self.seeds.first() else {
            return "redis+cluster://".to_owned();
        };
        let scheme = if first.is_tls() {
            "rediss+cluster"
        } else {
            "redis+cluster"
        };
        let hosts: Vec<String> = self.seeds.iter().map(Endpoint::authority).collect();
        format!(
            "{scheme}://{}{}{}",
            first.userinfo(redacted),
            hosts.join(","),
            query(self.options.url_pairs())
        )
    }

    /// The seed nodes, in URL order, ports filled in. The cluster may have more nodes; the
    /// client learns them from the seeds.
    pub fn hosts(&self) -> Vec<HostPort> {
        self.seeds.iter().map(Endpoint::host_port).collect()
    }

    /// The `redis://` URL (`rediss://` for TLS) of every seed node, in URL order, ports filled
    /// in, each with this config's credentials: what the `redis` crate's
    /// [`ClusterClientBuilder::new`](redis::cluster::ClusterClientBuilder::new) takes, and
    /// what [`connect`](Self::connect) gives it, for a cluster connection of one's own to the
    /// same cluster. Like [`to_url`](Self::to_url), they hold the password: to show a config,
    /// show the config itself or [`hosts`](Self::hosts).
    pub fn seed_urls(&self) -> Vec<String> {
        self.seeds.iter().map(|seed| seed.render(false)).collect()
    }

    /// The same config with its seed nodes at `hosts` (one address per seed, in order).
    /// Credentials and options stay. Note that a cluster's nodes announce their own
    /// addresses, which the client then uses: a proxy in front of a seed only carries the
    /// first contact.
    pub fn with_hosts(mut self, hosts: &[HostPort]) -> Result<Self> {
        if hosts.len() != self.seeds.len() {
            return Err(Error::config(format!(
                "the redis cluster config has {} seed nodes; {} addresses given",
                self.seeds.len(),
                hosts.len()
            )));
        }
        for (seed, address) in self.seeds.iter_mut().zip(hosts) {
            let shown = address.to_string();
            let (checked, _) = parse_endpoint(&format!("redis://{shown}")).map_err(|p| {
                Error::config(format!(
                    "redis cluster address `{shown}` is not usable: {}",
                    p.what
                ))
            })?;
            seed.move_to(checked);
        }
        distinct(&self.hosts(), "node").map_err(|e| e.in_context("redis cluster"))?;
        Ok(self)
    }

    /// The first part of every key name (default `fencelock`; in the URL, `?prefix=name`).
    /// It may not be empty or contain braces, whitespace or control characters.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.options.prefix = prefix.into();
        self
    }

    /// The configured key prefix.
    pub fn prefix_name(&self) -> &str {
        &self.options.prefix
    }

    /// The longest one call may take, `MOVED`/`ASK` redirections and the driver's retries
    /// included, before it fails with [`Error::Unavailable`] (default 5 s). A call that timed
    /// out may still have been applied.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.options.call_timeout = timeout;
        self
    }

    /// The longest establishing the connections may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// The largest value the storage accepts, in bytes (default 16 MiB).
    pub fn max_value_len(mut self, max: usize) -> Self {
        self.options.max_value_len = max;
        self
    }

    /// The rule the storage applies (default [`FenceRule::Monotonic`]).
    pub fn fence_rule(mut self, rule: FenceRule) -> Self {
        self.options.fence_rule = rule;
        self
    }

    /// Serves even when masters may evict keys (default `false`; in the URL,
    /// `?allow_eviction=true`); see [`RedisConfig::allow_eviction`](crate::RedisConfig::allow_eviction).
    /// Without it, `connect` reads `maxmemory-policy` on **every master** and refuses the
    /// cluster, naming the master, if any one may evict.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.options.allow_eviction = allow;
        self
    }

    pub(crate) fn evictions_allowed(&self) -> bool {
        self.options.allow_eviction
    }

    /// The shared settings, as the builder and the URL left them (compared across the
    /// schemes by the tests of [`SharedOptions`]).
    #[cfg(test)]
    pub(crate) fn options(&self) -> &SharedOptions {
        &self.options
    }

    /// Whether the seeds are reached over TLS (`rediss+cluster://`); they all are or none.
    pub(crate) fn is_tls(&self) -> bool {
        self.seeds.first().is_some_and(Endpoint::is_tls)
    }

    pub(crate) fn call_limit(&self) -> Duration {
        self.options.call_timeout
    }

    pub(crate) fn connect_limit(&self) -> Duration {
        self.options.connect_timeout
    }

    pub(crate) fn value_limit(&self) -> usize {
        self.options.max_value_len
    }

    pub(crate) fn rule(&self) -> FenceRule {
        self.options.fence_rule
    }

    /// Validates everything that can be validated without the network.
    pub(crate) fn validate(&self) -> Result<KeySpace> {
        self.options.validate("redis cluster", "call_timeout")?;
        KeySpace::clustered(&self.options.prefix)
    }
}

#[cfg(test)]
mod tests;
