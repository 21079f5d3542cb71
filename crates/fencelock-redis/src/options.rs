//! `SharedOptions`: the settings the three Redis configs share ([`RedisConfig`],
//! [`RedlockConfig`], [`RedisClusterConfig`]): key prefix, time limits, the storage's value
//! limit and fence rule, and whether a server that may evict keys is served. Their defaults,
//! their URL options (`allow_eviction`, `prefix`), their checks and their rendering back into a
//! URL are written here once, so that the `redis://`, `redlock://` and `redis+cluster://`
//! schemes cannot drift apart.
//!
//! [`RedisConfig`]: crate::RedisConfig
//! [`RedlockConfig`]: crate::RedlockConfig
//! [`RedisClusterConfig`]: crate::RedisClusterConfig

use std::fmt;
use std::time::Duration;

use fencelock_core::url::{Known, Options};
use fencelock_core::{Error, FenceRule, Result};

use crate::keys::{DEFAULT_PREFIX, KeySpace};

/// The default bound on one call to the server.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The default bound on establishing a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default largest value [`RedisStorage`](crate::RedisStorage) accepts: 16 MiB.
pub const DEFAULT_MAX_VALUE_LEN: usize = 16 << 20;

/// The URL option `allow_eviction=true|false`, which every Redis scheme takes.
pub(crate) const ALLOW_EVICTION: Known = Known::new("allow_eviction");
/// The URL option `prefix=name`, which every Redis scheme takes.
pub(crate) const PREFIX: Known = Known::new("prefix");

/// The settings every Redis config holds. The builder methods of each config set these
/// fields; the URL carries `prefix` (when not the default) and `allow_eviction` (when set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SharedOptions {
    /// The first part of every key name, checked by [`validate`](Self::validate).
    pub(crate) prefix: String,
    /// The longest one call may take (a Redlock's node timeout).
    pub(crate) call_timeout: Duration,
    /// The longest establishing a connection may take.
    pub(crate) connect_timeout: Duration,
    /// The largest value the storage accepts, in bytes (unused by a Redlock, whose storage
    /// server has its own config).
    pub(crate) max_value_len: usize,
    /// The rule the storage applies (unused by a Redlock, as `max_value_len`).
    pub(crate) fence_rule: FenceRule,
    /// Whether a server that may evict keys is served.
    pub(crate) allow_eviction: bool,
}

impl Default for SharedOptions {
    /// Prefix `fencelock`, 5 s per call, 5 s to connect, values up to 16 MiB,
    /// [`FenceRule::Monotonic`], no server that may evict keys.
    fn default() -> Self {
        SharedOptions {
            prefix: DEFAULT_PREFIX.to_owned(),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
            fence_rule: FenceRule::Monotonic,
            allow_eviction: false,
        }
    }
}

impl SharedOptions {
    /// These options with those a URL gave in their place.
    pub(crate) fn with_url(mut self, given: UrlOptions) -> Self {
        if let Some(prefix) = given.prefix {
            self.prefix = prefix;
        }
        if let Some(allow) = given.allow_eviction {
            self.allow_eviction = allow;
        }
        self
    }

    /// The URL options that say how these differ from the defaults, in the order they are
    /// written: `allow_eviction=true` when set, `prefix` when not the default one (a URL
    /// without them means the defaults, so the two read back the same).
    pub(crate) fn url_pairs(&self) -> Vec<(&'static str, String)> {
        let mut pairs = Vec::new();
        if self.allow_eviction {
            pairs.push((ALLOW_EVICTION.name, "true".to_owned()));
        }
        if self.prefix != DEFAULT_PREFIX {
            pairs.push((PREFIX.name, self.prefix.clone()));
        }
        pairs
    }

    /// Checks what can be checked without the network: the prefix (see
    /// [`KeySpace::new`]) and both time limits above zero. `what` names the config in the
    /// messages (`redis`, `redis cluster`, `redlock`), `call` the call time limit as its
    /// builder names it (`call_timeout`, or a Redlock's `node_timeout`).
    pub(crate) fn validate(&self, what: &str, call: &str) -> Result<()> {
        KeySpace::new(&self.prefix)?;
        for (name, value) in [
            (call, self.call_timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if value.is_zero() {
                return Err(Error::config(format!(
                    "{what} {name} must be greater than zero"
                )));
            }
        }
        Ok(())
    }

    /// Adds the fields of a config's redacted `Debug`, in the order the configs show them.
    pub(crate) fn debug_fields(&self, out: &mut fmt::DebugStruct<'_, '_>) {
        out.field("prefix", &self.prefix)
            .field("call_timeout", &self.call_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_value_len", &self.max_value_len)
            .field("fence_rule", &self.fence_rule)
            .field("allow_eviction", &self.allow_eviction);
    }
}

/// The shared options a URL gives, each `None` when the URL does not name it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct UrlOptions {
    /// `prefix=app`: checked as [`RedisConfig::prefix`](crate::RedisConfig::prefix) requires.
    pub(crate) prefix: Option<String>,
    /// `allow_eviction=true|false`.
    pub(crate) allow_eviction: Option<bool>,
}

impl UrlOptions {
    /// Reads `allow_eviction` and `prefix` from a query already read against a list of
    /// options that holds [`ALLOW_EVICTION`] and [`PREFIX`]. A bad value is
    /// [`Error::InvalidConfig`] naming the option, for the caller to put the URL in front.
    pub(crate) fn read(given: &Options) -> Result<Self> {
        let allow_eviction = given
            .get(ALLOW_EVICTION.name)
            .map(|value| parse_flag(ALLOW_EVICTION.name, value))
            .transpose()?;
        let prefix = given.get(PREFIX.name).map(parse_prefix).transpose()?;
        Ok(UrlOptions {
            prefix,
            allow_eviction,
        })
    }
}

/// The `prefix` option: a key prefix [`KeySpace`] accepts (not empty, no braces, whitespace
/// or control characters), refused with its reason.
fn parse_prefix(value: &str) -> Result<String> {
    KeySpace::new(value)
        .map(|keys| keys.prefix().to_owned())
        .map_err(|e| e.in_context("option `prefix`"))
}

/// A boolean option: `true` or `false`.
fn parse_flag(name: &str, value: &str) -> Result<bool> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        other => Err(Error::config(format!(
            "option `{name}` is `{other}`, not `true` or `false`"
        ))),
    }
}

/// `?name=value&...`, form-encoded, or nothing for no pairs.
pub(crate) fn query<'a>(pairs: impl IntoIterator<Item = (&'a str, String)>) -> String {
    let mut query = url::form_urlencoded::Serializer::new(String::new());
    for (name, value) in pairs {
        query.append_pair(name, &value);
    }
    let query = query.finish();
    if query.is_empty() {
        query
    } else {
        format!("?{query}")
    }
}

#[cfg(test)]
mod tests {
    //! The three configs against the one type: a config that stopped reading, writing,
    //! passing on or checking one of the shared options fails here.

    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;
    use crate::{DEFAULT_NODE_TIMEOUT, RedisClusterConfig, RedisConfig, RedlockConfig};

    /// Every shared option the URL carries, set away from its default.
    const QUERY: &str = "?allow_eviction=true&prefix=app%3Ax";

    /// What [`QUERY`] means.
    fn from_query() -> SharedOptions {
        SharedOptions {
            prefix: "app:x".to_owned(),
            allow_eviction: true,
            ..SharedOptions::default()
        }
    }

    /// Every shared option, set away from its default with the builder.
    fn built() -> SharedOptions {
        SharedOptions {
            prefix: "built".to_owned(),
            call_timeout: Duration::from_millis(700),
            connect_timeout: Duration::from_millis(300),
            max_value_len: 1234,
            fence_rule: FenceRule::Strict,
            allow_eviction: true,
        }
    }

    /// A Redlock's shared options: the storage's value limit and fence rule stay at their
    /// defaults, and its call timeout is the node timeout.
    fn redlock(options: SharedOptions, node_timeout: Duration) -> SharedOptions {
        SharedOptions {
            call_timeout: node_timeout,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
            fence_rule: FenceRule::Monotonic,
            ..options
        }
    }

    #[test]
    fn every_scheme_reads_and_writes_the_shared_url_options() {
        let one = RedisConfig::from_url(&format!("redis://h:1{QUERY}")).unwrap();
        let lock = RedlockConfig::from_url(&format!("redlock://h:1,g:2{QUERY}")).unwrap();
        let cluster =
            RedisClusterConfig::from_url(&format!("redis+cluster://h:1,g:2{QUERY}")).unwrap();
        assert_eq!(one.options(), &from_query());
        assert_eq!(cluster.options(), &from_query());
        assert_eq!(lock.options(), &redlock(from_query(), DEFAULT_NODE_TIMEOUT));
        for url in [one.to_url(), lock.to_url(), cluster.to_url()] {
            assert!(url.ends_with(QUERY), "{url}");
        }
        // The builder and the URL set the same thing.
        assert_eq!(
            RedisConfig::from_url("redis://h:1")
                .unwrap()
                .prefix("app:x")
                .allow_eviction(true),
            one
        );
        assert_eq!(
            RedlockConfig::from_url("redlock://h:1,g:2")
                .unwrap()
                .prefix("app:x")
                .allow_eviction(true),
            lock
        );
        assert_eq!(
            RedisClusterConfig::from_url("redis+cluster://h:1,g:2")
                .unwrap()
                .prefix("app:x")
                .allow_eviction(true),
            cluster
        );
        // The defaults, given or not, are not written.
        let defaults = "?allow_eviction=false&prefix=fencelock";
        let one = RedisConfig::from_url(&format!("redis://h:1{defaults}")).unwrap();
        let lock = RedlockConfig::from_url(&format!("redlock://h:1{defaults}")).unwrap();
        let cluster =
            RedisClusterConfig::from_url(&format!("redis+cluster://h:1{defaults}")).unwrap();
        assert_eq!(one.options(), &SharedOptions::default());
        assert_eq!(cluster.options(), &SharedOptions::default());
        let default_lock = redlock(SharedOptions::default(), DEFAULT_NODE_TIMEOUT);
        assert_eq!(lock.options(), &default_lock);
        for url in [one.to_url(), lock.to_url(), cluster.to_url()] {
            assert!(!url.contains('?'), "{url}");
        }
    }

    #[test]
    fn every_builder_sets_the_shared_options_and_they_reach_their_users() {
        let set = built();
        let one = RedisConfig::from_url("redis://h:1")
            .unwrap()
            .prefix(set.prefix.as_str())
            .call_timeout(set.call_timeout)
            .connect_timeout(set.connect_timeout)
            .max_value_len(set.max_value_len)
            .fence_rule(set.fence_rule)
            .allow_eviction(set.allow_eviction);
        assert_eq!(one.options(), &set);
        let cluster = RedisClusterConfig::from_url("redis+cluster://h:1")
            .unwrap()
            .prefix(set.prefix.as_str())
            .call_timeout(set.call_timeout)
            .connect_timeout(set.connect_timeout)
            .max_value_len(set.max_value_len)
            .fence_rule(set.fence_rule)
            .allow_eviction(set.allow_eviction);
        assert_eq!(cluster.options(), &set);
        let used = |limits: (Duration, Duration, usize, FenceRule, bool)| {
            assert_eq!(
                limits,
                (
                    set.call_timeout,
                    set.connect_timeout,
                    set.max_value_len,
                    set.fence_rule,
                    set.allow_eviction
                )
            );
        };
        used((
            one.call_limit(),
            one.connect_limit(),
            one.value_limit(),
            one.rule(),
            one.evictions_allowed(),
        ));
        used((
            cluster.call_limit(),
            cluster.connect_limit(),
            cluster.value_limit(),
            cluster.rule(),
            cluster.evictions_allowed(),
        ));
        let lock = RedlockConfig::from_url("redlock://h:1,g:2?storage=redis://d:3")
            .unwrap()
            .prefix(set.prefix.as_str())
            .node_timeout(set.call_timeout)
            .connect_timeout(set.connect_timeout)
            .allow_eviction(set.allow_eviction);
        let expected = redlock(set.clone(), set.call_timeout);
        assert_eq!(lock.options(), &expected);
        assert_eq!(lock.node_time(), set.call_timeout);
        assert_eq!(lock.connect_time(), set.connect_timeout);
        assert_eq!(lock.key_prefix(), set.prefix);
        // A Redlock hands its settings to every node and its prefix and eviction to the
        // storage server, which keeps its own time limits, value limit and fence rule.
        for node in lock.node_configs() {
            assert_eq!(lock.node_config(node).options(), &expected);
        }
        let storage = lock.storage_config().unwrap();
        let storage_expected = SharedOptions {
            prefix: set.prefix.clone(),
            allow_eviction: true,
            ..SharedOptions::default()
        };
        assert_eq!(storage.options(), &storage_expected);
    }

    #[test]
    fn every_scheme_refuses_bad_shared_options_naming_itself() {
        for (query, expected) in [
            ("?prefix=a%7Bb", "option `prefix`: redis key prefix"),
            (
                "?prefix=",
                "option `prefix`: redis key prefix must not be empty",
            ),
            ("?allow_eviction=yes", "option `allow_eviction` is `yes`"),
            ("?prefix=a&prefix=b", "repeats the option `prefix`"),
            (
                "?allow_eviction=%ff",
                "option `allow_eviction` is not UTF-8",
            ),
        ] {
            for (scheme, result) in [
                (
                    "redis URL",
                    RedisConfig::from_url(&format!("redis://h:1{query}")).map(drop),
                ),
                (
                    "redlock URL",
                    RedlockConfig::from_url(&format!("redlock://h:1{query}")).map(drop),
                ),
                (
                    "redis cluster URL",
                    RedisClusterConfig::from_url(&format!("redis+cluster://h:1{query}")).map(drop),
                ),
            ] {
                match result {
                    Err(Error::InvalidConfig { message, .. }) => {
                        assert!(message.starts_with(scheme), "{query}: {message}");
                        assert!(message.contains(expected), "{query}: {message}");
                    }
                    other => panic!("{scheme} {query}: expected InvalidConfig, got {other:?}"),
                }
            }
        }
        let one = RedisConfig::from_url("redis://h:1").unwrap();
        let lock = RedlockConfig::from_url("redlock://h:1").unwrap();
        let cluster = RedisClusterConfig::from_url("redis+cluster://h:1").unwrap();
        let zero = Duration::ZERO;
        for (expected, results) in [
            (
                "redis key prefix",
                [
                    one.clone().prefix("a b").validate().map(drop),
                    lock.clone().prefix("a b").build_nodes().map(drop),
                    cluster.clone().prefix("a b").validate().map(drop),
                ],
            ),
            (
                "timeout must be greater than zero",
                [
                    one.clone().call_timeout(zero).validate().map(drop),
                    lock.clone().node_timeout(zero).build_nodes().map(drop),
                    cluster.clone().call_timeout(zero).validate().map(drop),
                ],
            ),
            (
                "connect_timeout must be greater than zero",
                [
                    one.clone().connect_timeout(zero).validate().map(drop),
                    lock.clone().connect_timeout(zero).build_nodes().map(drop),
                    cluster.clone().connect_timeout(zero).validate().map(drop),
                ],
            ),
        ] {
            for result in results {
                match result {
                    Err(Error::InvalidConfig { message, .. }) => {
                        assert!(message.contains(expected), "{message}");
                    }
                    other => panic!("{expected}: expected InvalidConfig, got {other:?}"),
                }
            }
        }
    }
}
