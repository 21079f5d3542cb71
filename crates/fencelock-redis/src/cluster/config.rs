//! `RedisClusterConfig`: how to reach a Redis Cluster (its seed nodes) and how to name keys
//! there. It owns the `redis+cluster://` URL scheme.

use std::time::Duration;

use fencelock_core::url::{Known, Options, distinct};
use fencelock_core::{Error, FenceRule, HostPort, Result};

use crate::config::{DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_VALUE_LEN};
use crate::keys::{DEFAULT_PREFIX, KeySpace};
use crate::redis_url::{Endpoint, parse_endpoint, parse_flag, parse_prefix, prefix_pair};
use fencelock_core::url::{redact, safe_to_echo};

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
    prefix: String,
    call_timeout: Duration,
    connect_timeout: Duration,
    max_value_len: usize,
    fence_rule: FenceRule,
    allow_eviction: bool,
}

fencelock_core::redacted_config!(RedisClusterConfig {
    prefix,
    call_timeout,
    connect_timeout,
    max_value_len,
    fence_rule,
    allow_eviction
});

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
        let known = [Known::new("allow_eviction"), Known::new("prefix")];
        let options = Options::parse(query, &known).map_err(|e| {
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
        let allow_eviction = options
            .get("allow_eviction")
            .map(|value| parse_flag("allow_eviction", value))
            .transpose()
            .map_err(|problem| fail(problem.what))?;
        let prefix = options
            .get("prefix")
            .map(parse_prefix)
            .transpose()
            .map_err(|problem| fail(problem.what))?;
        Ok(RedisClusterConfig {
            seeds,
            prefix: prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned()),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
            fence_rule: FenceRule::Monotonic,
            allow_eviction: allow_eviction.unwrap_or(false),
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
        let mut options = Vec::new();
        if self.allow_eviction {
            options.push("allow_eviction=true".to_owned());
        }
        options.extend(prefix_pair(&self.prefix));
        let query = if options.is_empty() {
            String::new()
        } else {
            format!("?{}", options.join("&"))
        };
        format!(
            "{scheme}://{}{}{query}",
            first.userinfo(redacted),
            hosts.join(",")
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
        self.prefix = prefix.into();
        self
    }

    /// The configured key prefix.
    pub fn prefix_name(&self) -> &str {
        &self.prefix
    }

    /// The longest one call may take, `MOVED`/`ASK` redirections and the driver's retries
    /// included, before it fails with [`Error::Unavailable`] (default 5 s). A call that timed
    /// out may still have been applied.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The longest establishing the connections may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The largest value the storage accepts, in bytes (default 16 MiB).
    pub fn max_value_len(mut self, max: usize) -> Self {
        self.max_value_len = max;
        self
    }

    /// The rule the storage applies (default [`FenceRule::Monotonic`]).
    pub fn fence_rule(mut self, rule: FenceRule) -> Self {
        self.fence_rule = rule;
        self
    }

    /// Serves even when masters may evict keys (default `false`; in the URL,
    /// `?allow_eviction=true`); see [`RedisConfig::allow_eviction`](crate::RedisConfig::allow_eviction).
    /// Without it, `connect` reads `maxmemory-policy` on **every master** and refuses the
    /// cluster, naming the master, if any one may evict.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    pub(crate) fn evictions_allowed(&self) -> bool {
        self.allow_eviction
    }

    /// Whether the seeds are reached over TLS (`rediss+cluster://`); they all are or none.
    pub(crate) fn is_tls(&self) -> bool {
        self.seeds.first().is_some_and(Endpoint::is_tls)
    }

    pub(crate) fn call_limit(&self) -> Duration {
        self.call_timeout
    }

    pub(crate) fn connect_limit(&self) -> Duration {
        self.connect_timeout
    }

    pub(crate) fn value_limit(&self) -> usize {
        self.max_value_len
    }

    pub(crate) fn rule(&self) -> FenceRule {
        self.fence_rule
    }

    /// Validates everything that can be validated without the network.
    pub(crate) fn validate(&self) -> Result<KeySpace> {
        let keys = KeySpace::clustered(&self.prefix)?;
        for (name, value) in [
            ("call_timeout", self.call_timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if value.is_zero() {
                return Err(Error::config(format!(
                    "redis cluster {name} must be greater than zero"
                )));
            }
        }
        Ok(keys)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    const PASSWORD: &str = "s3cr3t";

    #[test]
    fn round_trips() {
        for (input, url) in [
            (
                "redis+cluster://127.0.0.1",
                "redis+cluster://127.0.0.1:6379",
            ),
            (
                "redis+cluster://127.0.0.1:7000,127.0.0.1:7001/",
                "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
            ),
            (
                "REDIS+CLUSTER://app:s3cr3t@h1:7000,h2,[::1]:7002",
                "redis+cluster://app:s3cr3t@h1:7000,h2:6379,[::1]:7002",
            ),
            (
                "redis+cluster://:s3cr3t@h1:1,h2:2?allow_eviction=true",
                "redis+cluster://:s3cr3t@h1:1,h2:2?allow_eviction=true",
            ),
            (
                "redis+cluster://u:p%40ss@h",
                "redis+cluster://u:p%40ss@h:6379",
            ),
            (
                "redis+cluster://app@h?allow_eviction=false",
                "redis+cluster://app@h:6379",
            ),
        ] {
            let config = RedisClusterConfig::from_url(input).unwrap();
            assert_eq!(config.to_url(), url, "{input}");
            assert_eq!(
                RedisClusterConfig::from_url(&config.to_url()).unwrap(),
                config
            );
            let shown = config.redacted_url();
            assert!(
                !shown.contains(PASSWORD) && !shown.contains("p%40ss"),
                "{shown}"
            );
            assert_eq!(config.to_string(), shown);
            assert!(!format!("{config:?}").contains(PASSWORD));
        }
        let config = RedisClusterConfig::from_url("redis+cluster://app:s3cr3t@h:1,g:2").unwrap();
        assert_eq!(config.redacted_url(), "redis+cluster://app:***@h:1,g:2");
        let allowed = config.clone().allow_eviction(true);
        assert_ne!(allowed, config);
        assert_eq!(
            RedisClusterConfig::from_url(&allowed.to_url()).unwrap(),
            allowed
        );
        let prefixed = RedisClusterConfig::from_url(
            "redis+cluster://:s3cr3t@h:1?prefix=app:&allow_eviction=true",
        )
        .unwrap();
        assert_eq!(prefixed.prefix_name(), "app:");
        assert_eq!(
            prefixed.redacted_url(),
            "redis+cluster://:***@h:1?allow_eviction=true&prefix=app%3A"
        );
        assert_eq!(
            RedisClusterConfig::from_url(&prefixed.to_url()).unwrap(),
            prefixed
        );
        let built = RedisClusterConfig::from_url("redis+cluster://:s3cr3t@h:1?allow_eviction=true")
            .unwrap()
            .prefix("app:");
        assert_eq!(built, prefixed);
    }

    #[test]
    fn hosts_and_with_hosts() {
        let config = RedisClusterConfig::from_url("redis+cluster://u:s3cr3t@h1,h2:7001").unwrap();
        assert_eq!(
            config.hosts(),
            vec![HostPort::new("h1", 6379), HostPort::new("h2", 7001)]
        );
        let moved = config
            .clone()
            .with_hosts(&[HostPort::new("::1", 7000), HostPort::new("p", 1)])
            .unwrap();
        assert_eq!(moved.to_url(), "redis+cluster://u:s3cr3t@[::1]:7000,p:1");
        for bad in [
            vec![],
            vec![HostPort::new("a", 1)],
            vec![HostPort::new("a", 1), HostPort::new("a", 1)],
            vec![HostPort::new("a", 0), HostPort::new("b", 1)],
            vec![HostPort::new("a b", 1), HostPort::new("b", 1)],
        ] {
            match config.clone().with_hosts(&bad) {
                Err(Error::InvalidConfig { message, .. }) => {
                    assert!(!message.contains(PASSWORD), "{message}");
                }
                other => panic!("{bad:?}: expected InvalidConfig, got {other:?}"),
            }
        }
    }

    #[test]
    fn seed_urls_carry_scheme_credentials_and_ports() {
        let config = RedisClusterConfig::from_url(
            "redis+cluster://app:s%40cret@10.0.0.1:7000,[::1]:7001,h?allow_eviction=true",
        )
        .unwrap();
        assert_eq!(
            config.seed_urls(),
            [
                "redis://app:s%40cret@10.0.0.1:7000",
                "redis://app:s%40cret@[::1]:7001",
                "redis://app:s%40cret@h:6379",
            ]
        );
        for (input, urls) in [
            (
                "redis+cluster://127.0.0.1:7000",
                vec!["redis://127.0.0.1:7000"],
            ),
            (
                "redis+cluster://app@h1:1,h2:2",
                vec!["redis://app@h1:1", "redis://app@h2:2"],
            ),
            ("redis+cluster://:s3cr3t@h1:1", vec!["redis://:s3cr3t@h1:1"]),
        ] {
            let config = RedisClusterConfig::from_url(input).unwrap();
            assert_eq!(config.seed_urls(), urls, "{input}");
        }
        let moved = RedisClusterConfig::from_url("redis+cluster://u:s3cr3t@h1:1,h2:2")
            .unwrap()
            .with_hosts(&[HostPort::new("::1", 7000), HostPort::new("p", 7001)])
            .unwrap();
        assert_eq!(
            moved.seed_urls(),
            ["redis://u:s3cr3t@[::1]:7000", "redis://u:s3cr3t@p:7001"]
        );
        if cfg!(feature = "tls") {
            let tls = RedisClusterConfig::from_url("rediss+cluster://:s3cr3t@h1:7000,h2").unwrap();
            assert_eq!(
                tls.seed_urls(),
                ["rediss://:s3cr3t@h1:7000", "rediss://:s3cr3t@h2:6379"]
            );
        }
    }

    /// Every bad URL is refused with a message naming the problem, never the password.
    #[test]
    fn bad_urls_name_the_problem() {
        for (input, expected) in [
            ("redis+cluster://", "names no node"),
            ("redis+cluster://:s3cr3t@", "names no node"),
            ("redis+cluster://h1,,h2", "node 2 of 3 is empty"),
            ("redis+cluster://h1,", "node 2 of 2 is empty"),
            (
                "redis+cluster://:s3cr3t@h1:99999",
                "port 99999 is out of range",
            ),
            (
                "redis+cluster://h1:1,h2:abc",
                "node 2 of 2 (`h2:abc`) port `abc`",
            ),
            ("redis+cluster://h1:1,h1:1", "node h1:1 is listed twice"),
            ("redis+cluster://h1:1,H1:1", "node h1:1 is listed twice"),
            ("redis+cluster://h1:6379,h1", "listed twice"),
            ("redis+cluster://h1/0", "takes no database"),
            (
                "redis+cluster://h1?prefix=a+b",
                "option `prefix`: redis key prefix",
            ),
            ("redis+cluster://h1?prefx=x", "unknown option `prefx`"),
            (
                "redis+cluster://h1?allow_eviction=yes",
                "`allow_eviction` is `yes`",
            ),
            (
                "redis+cluster://h1?allow_eviction=true&allow_eviction=true",
                "repeats the option `allow_eviction`",
            ),
            ("redis+cluster://h1#frag", "takes no fragment"),
            (
                "redis+cluster://u:a@b:s3cr3t@h1,u:s3cr3t@h2",
                "one set of credentials",
            ),
            ("redis+cluster://u:pa/s3cr3t@h", "takes no database"),
            ("redis+clusterx://h", "is not redis+cluster://"),
            ("redis://h", "is not redis+cluster://"),
            ("h1:7000,h2:7000", "is not a URL"),
        ] {
            match RedisClusterConfig::from_url(input) {
                Err(Error::InvalidConfig { message, .. }) => {
                    assert!(message.contains(expected), "{input:?}: {message}");
                    assert!(!message.contains(PASSWORD), "{input:?}: {message}");
                    assert!(message.starts_with("redis cluster URL"), "{message}");
                }
                other => panic!("{input:?}: expected InvalidConfig, got {other:?}"),
            }
        }
    }

    #[test]
    fn tls_needs_its_feature() {
        let result = RedisClusterConfig::from_url("rediss+cluster://:s3cr3t@h1:7000,h2:7000");
        if cfg!(feature = "tls") {
            let config = result.unwrap();
            assert_eq!(config.to_url(), "rediss+cluster://:s3cr3t@h1:7000,h2:7000");
        } else {
            match result {
                Err(Error::InvalidConfig { message, .. }) => {
                    assert!(message.contains("`tls` feature"), "{message}");
                    assert!(!message.contains(PASSWORD), "{message}");
                }
                other => panic!("expected InvalidConfig, got {other:?}"),
            }
        }
    }

    #[test]
    fn bad_options_are_refused_at_connect() {
        let config = RedisClusterConfig::from_url("redis+cluster://h1").unwrap();
        assert!(config.clone().prefix("a{b").validate().is_err());
        assert!(
            config
                .clone()
                .call_timeout(Duration::ZERO)
                .validate()
                .is_err()
        );
        assert!(config.validate().is_ok());
    }
}
