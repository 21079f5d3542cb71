//! `RedisConfig`: how to reach one Redis server, and how to name keys there. It owns the
//! `redis://` and `rediss://` URL schemes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fencelock_core::{Error, FenceRule, HostPort, Result};
use redis::Client;

use crate::keys::{DEFAULT_PREFIX, KeySpace};
use crate::redis_url::{Endpoint, UrlOptions, parse_endpoint};
use fencelock_core::url::redact;

/// The default bound on one call to the server.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The default bound on establishing a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default largest value [`RedisStorage`](crate::RedisStorage) accepts: 16 MiB.
pub const DEFAULT_MAX_VALUE_LEN: usize = 16 << 20;

/// How to reach one Redis server and how to name keys there. Build it, then
/// [`connect`](Self::connect) a [`RedisLockBackend`](crate::RedisLockBackend) or
/// [`connect_storage`](Self::connect_storage) a [`RedisStorage`](crate::RedisStorage).
///
/// The URL is `redis://[user][:password@]host[:port][/db]`, or `rediss://` for TLS (with the
/// `tls` feature: rustls, trusting the webpki roots, or with `?tls_ca=/path/ca.pem` the CA
/// certificates in that PEM file instead; see [`tls_ca`](Self::tls_ca)). [`from_url`](Self::from_url) checks it at once and completely;
/// [`new`](Self::new) accepts any text and reports a bad URL at `connect`, before touching
/// the network. Either way a bad URL is [`Error::InvalidConfig`] naming what is wrong (no
/// host, a port out of range, an unknown option, ...), never quoting the password.
///
/// The key prefix may be given in the URL too, `?prefix=billing` (percent-encoded), so that
/// a tool such as `fencelock inspect` reaches the locks of an application that set one.
///
/// [`to_url`](Self::to_url) gives the URL back, credentials included, so that
/// `RedisConfig::from_url(&c.to_url())` equals `c`; [`Display`](std::fmt::Display) and
/// [`Debug`](std::fmt::Debug) show it with the password as `***`. Both write the prefix when it
/// is not the default one, however it was set. The other options set with the builder
/// (timeouts, value limit, fence rule) are not part of the URL.
///
/// ```no_run
/// # async fn demo() -> fencelock_core::Result<()> {
/// use std::time::Duration;
/// use fencelock_redis::RedisConfig;
///
/// let backend = RedisConfig::from_url("redis://app:secret@127.0.0.1:6379/0")?
///     .prefix("billing")
///     .call_timeout(Duration::from_secs(2))
///     .connect()
///     .await?;
/// let storage = backend.storage();
/// # let _ = storage; Ok(()) }
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    target: Target,
    prefix: String,
    call_timeout: Duration,
    connect_timeout: Duration,
    max_value_len: usize,
    fence_rule: FenceRule,
    allow_eviction: bool,
    tls_ca: Option<PathBuf>,
}

/// Where the server is: a checked URL, or text given to [`RedisConfig::new`] that is not one
/// (its error is reported by `connect`).
#[derive(Clone, PartialEq, Eq)]
enum Target {
    Parsed(Endpoint),
    Unusable(String),
}

fencelock_core::redacted_config!(RedisConfig {
    prefix,
    call_timeout,
    connect_timeout,
    max_value_len,
    fence_rule,
    allow_eviction,
    tls_ca
});

impl RedisConfig {
    /// The URL schemes this config reads: `redis` and `rediss` (TLS, with the `tls` feature).
    pub const SCHEMES: &'static [&'static str] = &["redis", "rediss"];

    /// A configuration for `url` with the defaults: prefix `fencelock`, 5 s per call, 5 s to
    /// connect, values up to 16 MiB, [`FenceRule::Monotonic`]. The URL is checked by
    /// `connect`; use [`from_url`](Self::from_url) to check it now.
    pub fn new(url: impl Into<String>) -> Self {
        let url = url.into();
        match parse_endpoint(&url) {
            Ok((endpoint, options)) => Self::from_endpoint(endpoint, options),
            Err(_) => Self::with_target(Target::Unusable(url)),
        }
    }

    /// Parses and checks `url` (`redis://[user][:password@]host[:port][/db][?options]`, or
    /// `rediss://` with the `tls` feature), with the defaults of [`new`](Self::new). The
    /// options are `prefix` (see [`prefix`](Self::prefix)), `allow_eviction` and `tls_ca`.
    ///
    /// A URL that is not usable is [`Error::InvalidConfig`], naming what is wrong: no host,
    /// a port out of range or not a number, a path that is not a database number, an unknown
    /// option or a bad value, a scheme other than these two, `rediss://` without the `tls`
    /// feature. The message shows the URL with its password as `***`.
    pub fn from_url(url: &str) -> Result<Self> {
        let (endpoint, options) = parse_endpoint(url).map_err(|p| p.into_error("redis", url))?;
        Ok(Self::from_endpoint(endpoint, options))
    }

    pub(crate) fn from_endpoint(endpoint: Endpoint, options: UrlOptions) -> Self {
        let mut config =
            Self::with_target(Target::Parsed(endpoint)).allow_eviction(options.allow_eviction);
        config.tls_ca = options.tls_ca;
        if let Some(prefix) = options.prefix {
            config.prefix = prefix;
        }
        config
    }

    fn with_target(target: Target) -> Self {
        RedisConfig {
            target,
            prefix: DEFAULT_PREFIX.to_owned(),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
            fence_rule: FenceRule::Monotonic,
            allow_eviction: false,
            tls_ca: None,
        }
    }

    /// The URL, credentials included: `from_url(&c.to_url())` equals `c` for every `c` that
    /// [`from_url`](Self::from_url) returns (the port is always written, the database number
    /// when one was given). For a config built with [`new`](Self::new) from text that is not
    /// a usable URL, that text.
    pub fn to_url(&self) -> String {
        match &self.target {
            Target::Parsed(endpoint) => endpoint.render(false) + &self.query(),
            Target::Unusable(text) => text.clone(),
        }
    }

    /// The URL with its password replaced by `***`, for logs and messages.
    pub fn redacted_url(&self) -> String {
        match &self.target {
            Target::Parsed(endpoint) => endpoint.render(true) + &self.query(),
            Target::Unusable(text) => redact(text),
        }
    }

    /// The URL's options: `?allow_eviction=true`, `prefix=<prefix>` (when not the default),
    /// `tls_ca=<path>`, or nothing.
    fn query(&self) -> String {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        if self.allow_eviction {
            query.append_pair("allow_eviction", "true");
        }
        if self.prefix != DEFAULT_PREFIX {
            query.append_pair("prefix", &self.prefix);
        }
        if let Some(path) = &self.tls_ca {
            query.append_pair("tls_ca", &path.to_string_lossy());
        }
        let query = query.finish();
        if query.is_empty() {
            query
        } else {
            format!("?{query}")
        }
    }

    /// The server this config reaches (one; none when the URL is not usable), port filled in.
    pub fn hosts(&self) -> Vec<HostPort> {
        match &self.target {
            Target::Parsed(endpoint) => vec![endpoint.host_port()],
            Target::Unusable(_) => Vec::new(),
        }
    }

    /// The same config pointed at another server: `hosts` must hold exactly one address.
    /// Credentials, database and options stay. How tests and fault proxies redirect a config
    /// without editing URL text.
    pub fn with_hosts(mut self, hosts: &[HostPort]) -> Result<Self> {
        let [address] = hosts else {
            return Err(Error::config(format!(
                "a redis config reaches one server; {} addresses given",
                hosts.len()
            )));
        };
        let endpoint = match &mut self.target {
            Target::Parsed(endpoint) => endpoint,
            Target::Unusable(text) => {
                let problem = parse_endpoint(text).err();
                return Err(problem.map_or_else(
                    || Error::config("redis URL is not usable"),
                    |p| p.into_error("redis", text),
                ));
            }
        };
        let shown = address.to_string();
        let (checked, _) = parse_endpoint(&format!("redis://{shown}")).map_err(|p| {
            Error::config(format!("redis address `{shown}` is not usable: {}", p.what))
        })?;
        endpoint.move_to(checked);
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

    /// The longest one call may take before it fails with [`Error::Unavailable`] (default
    /// 5 s). A call that timed out may still have been applied by the server: a lock granted
    /// that way lapses after its ttl.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The longest establishing a connection may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The largest value [`RedisStorage`](crate::RedisStorage) accepts, in bytes (default
    /// 16 MiB).
    pub fn max_value_len(mut self, max: usize) -> Self {
        self.max_value_len = max;
        self
    }

    /// The rule [`RedisStorage`](crate::RedisStorage) applies (default
    /// [`FenceRule::Monotonic`]).
    pub fn fence_rule(mut self, rule: FenceRule) -> Self {
        self.fence_rule = rule;
        self
    }

    /// Serves even when the server may evict keys (default `false`; in the URL,
    /// `?allow_eviction=true`).
    ///
    /// A server whose `maxmemory-policy` is anything but `noeviction` may delete keys under
    /// memory pressure: token counters (tokens then restart at 1), fence records (a stale
    /// holder's write is then admitted) and held locks. `connect` and `connect_storage`
    /// therefore refuse such a server with [`Error::InvalidConfig`] naming it and the setting
    /// to change (`maxmemory-policy noeviction`), unless this is set. With it set, the
    /// backend's [`Capabilities`](fencelock_core::Capabilities) report the tokens as not
    /// durable (`server_persists: Some(false)`). A server that refuses `CONFIG GET` cannot be
    /// checked and is served.
    pub fn allow_eviction(mut self, allow: bool) -> Self {
        self.allow_eviction = allow;
        self
    }

    /// Trusts the CA certificates of the PEM file at `path` for the server's certificate,
    /// instead of the webpki roots (in the URL, `?tls_ca=/path/ca.pem`); `rediss://` only
    /// (with the `tls` feature). The file is read by `connect`: a file that cannot be read
    /// or holds no certificate is [`Error::InvalidConfig`] naming it. A server whose
    /// certificate the trusted CAs did not sign is refused at connect with
    /// [`Error::InvalidConfig`] naming the server and saying that its certificate was not
    /// trusted. The path is part of [`to_url`](Self::to_url) (as text: a path that is not
    /// UTF-8 is written lossily).
    pub fn tls_ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.tls_ca = Some(path.into());
        self
    }

    pub(crate) fn evictions_allowed(&self) -> bool {
        self.allow_eviction
    }

    /// `host:port` of the server (no credentials), for messages.
    pub(crate) fn server_label(&self) -> String {
        match &self.target {
            Target::Parsed(endpoint) => endpoint.host_port().to_string(),
            Target::Unusable(text) => redact(text),
        }
    }

    pub(crate) fn endpoint(&self) -> Option<&Endpoint> {
        match &self.target {
            Target::Parsed(endpoint) => Some(endpoint),
            Target::Unusable(_) => None,
        }
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
    pub(crate) fn validate(&self) -> Result<(Client, KeySpace)> {
        let keys = KeySpace::new(&self.prefix)?;
        for (name, value) in [
            ("call_timeout", self.call_timeout),
            ("connect_timeout", self.connect_timeout),
        ] {
            if value.is_zero() {
                return Err(Error::config(format!(
                    "redis {name} must be greater than zero"
                )));
            }
        }
        let endpoint = match &self.target {
            Target::Parsed(endpoint) => endpoint,
            Target::Unusable(text) => {
                return Err(match parse_endpoint(text) {
                    Err(problem) => problem.into_error("redis", text),
                    Ok(_) => Error::config("redis URL is not usable"),
                });
            }
        };
        let client = match &self.tls_ca {
            None => Client::open(endpoint.render(false)),
            Some(path) => tls_client(endpoint, path)?,
        }
        .map_err(|e| Error::InvalidConfig {
            message: format!("redis URL {:?} is not usable: {e}", endpoint.render(true)),
            source: Some(Box::new(e)),
        })?;
        Ok((client, keys))
    }
}

/// A client of `endpoint` trusting the CA certificates in the PEM file at `path`.
#[cfg(feature = "tls")]
fn tls_client(endpoint: &Endpoint, path: &Path) -> Result<redis::RedisResult<Client>> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;

    if !endpoint.is_tls() {
        return Err(Error::config(format!(
            "redis URL {:?}: `tls_ca` needs a rediss:// (TLS) URL",
            endpoint.render(true)
        )));
    }
    let shown = path.display();
    let pem = std::fs::read(path).map_err(|e| Error::InvalidConfig {
        message: format!("redis tls_ca {shown}: cannot read it: {e}"),
        source: Some(Box::new(e)),
    })?;
    let certificates =
        CertificateDer::pem_slice_iter(&pem).collect::<std::result::Result<Vec<_>, _>>();
    match certificates {
        Ok(found) if !found.is_empty() => {}
        Ok(_) => {
            return Err(Error::config(format!(
                "redis tls_ca {shown} holds no PEM certificate (-----BEGIN CERTIFICATE-----)"
            )));
        }
        Err(e) => {
            return Err(Error::config(format!(
                "redis tls_ca {shown} is not a PEM file of certificates: {e}"
            )));
        }
    }
    Ok(Client::build_with_tls(
        endpoint.render(false),
        redis::TlsCertificates {
            client_tls: None,
            root_cert: Some(pem),
        },
    ))
}

/// Without the `tls` feature no config reaches TLS: `tls_ca` set with the builder is refused.
#[cfg(not(feature = "tls"))]
fn tls_client(endpoint: &Endpoint, _path: &Path) -> Result<redis::RedisResult<Client>> {
    Err(Error::config(format!(
        "redis URL {:?}: `tls_ca` needs rediss:// and the `tls` feature of fencelock-redis",
        endpoint.render(true)
    )))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    const PASSWORD: &str = "s3cr3t";

    #[test]
    fn round_trips() {
        for (input, url) in [
            ("redis://127.0.0.1", "redis://127.0.0.1:6379"),
            ("redis://127.0.0.1:6380/", "redis://127.0.0.1:6380"),
            ("redis://127.0.0.1:6379/3", "redis://127.0.0.1:6379/3"),
            (
                "redis://app:s3cr3t@localhost:6380/0",
                "redis://app:s3cr3t@localhost:6380/0",
            ),
            ("redis://:s3cr3t@[::1]:6379", "redis://:s3cr3t@[::1]:6379"),
            ("redis://app@h", "redis://app@h:6379"),
            ("REDIS://Host.Example", "redis://Host.Example:6379"),
            ("redis://u:p%40ss%2Fw@h", "redis://u:p%40ss%2Fw@h:6379"),
            ("redis://u:p@ss@h", "redis://u:p%40ss@h:6379"),
            (
                "redis://:s3cr3t@h/2?allow_eviction=true",
                "redis://:s3cr3t@h:6379/2?allow_eviction=true",
            ),
            ("redis://h?allow_eviction=false", "redis://h:6379"),
        ] {
            let config = RedisConfig::from_url(input).unwrap();
            assert_eq!(config.to_url(), url, "{input}");
            assert_eq!(RedisConfig::from_url(&config.to_url()).unwrap(), config);
            assert_eq!(RedisConfig::new(input), config, "{input}");
            let shown = config.redacted_url();
            assert!(
                !shown.contains("s3cr3t") && !shown.contains("p%40ss"),
                "{shown}"
            );
            assert_eq!(config.to_string(), shown);
            assert!(!format!("{config:?}").contains("s3cr3t"));
        }
        let config = RedisConfig::from_url("redis://app:s3cr3t@h:1/2").unwrap();
        assert_eq!(config.redacted_url(), "redis://app:***@h:1/2");
        let allowed = config.clone().allow_eviction(true);
        assert_ne!(allowed, config);
        assert_eq!(
            allowed.redacted_url(),
            "redis://app:***@h:1/2?allow_eviction=true"
        );
        assert_eq!(RedisConfig::from_url(&allowed.to_url()).unwrap(), allowed);
    }

    /// The key prefix is part of the URL: read from `?prefix=`, written back when it is not
    /// the default, however it was set.
    #[test]
    fn the_prefix_round_trips_through_the_url() {
        let config = RedisConfig::from_url("redis://:s3cr3t@h:1/2?prefix=app:").unwrap();
        assert_eq!(config.prefix_name(), "app:");
        assert_eq!(config.to_url(), "redis://:s3cr3t@h:1/2?prefix=app%3A");
        assert_eq!(config.redacted_url(), "redis://:***@h:1/2?prefix=app%3A");
        assert_eq!(config.to_string(), config.redacted_url());
        assert_eq!(RedisConfig::from_url(&config.to_url()).unwrap(), config);
        let built = RedisConfig::from_url("redis://:s3cr3t@h:1/2")
            .unwrap()
            .prefix("app:");
        assert_eq!(built, config);
        let default = RedisConfig::from_url("redis://h:1?prefix=fencelock").unwrap();
        assert_eq!(default.to_url(), "redis://h:1");
        assert_eq!(default, RedisConfig::from_url("redis://h:1").unwrap());
        let all = RedisConfig::from_url("redis://h:1?prefix=a%2Fb&allow_eviction=true").unwrap();
        assert_eq!(all.to_url(), "redis://h:1?allow_eviction=true&prefix=a%2Fb");
        assert_eq!(RedisConfig::from_url(&all.to_url()).unwrap(), all);
    }

    #[test]
    fn hosts_and_with_hosts() {
        let config = RedisConfig::from_url("redis://u:s3cr3t@h1/4").unwrap();
        assert_eq!(config.hosts(), vec![HostPort::new("h1", 6379)]);
        let moved = config
            .clone()
            .with_hosts(&[HostPort::new("::1", 7000)])
            .unwrap();
        assert_eq!(moved.to_url(), "redis://u:s3cr3t@[::1]:7000/4");
        assert_eq!(moved.hosts(), vec![HostPort::new("::1", 7000)]);
        for bad in [
            vec![],
            vec![HostPort::new("a", 1), HostPort::new("b", 2)],
            vec![HostPort::new("a", 0)],
            vec![HostPort::new("a b", 1)],
            vec![HostPort::new("", 1)],
        ] {
            match config.clone().with_hosts(&bad) {
                Err(Error::InvalidConfig { message, .. }) => {
                    assert!(!message.contains(PASSWORD), "{message}");
                }
                other => panic!("{bad:?}: expected InvalidConfig, got {other:?}"),
            }
        }
        assert!(RedisConfig::new("nope").hosts().is_empty());
    }

    /// Every bad URL is refused with a message naming the problem, never the password.
    #[test]
    fn bad_urls_name_the_problem() {
        for (input, expected) in [
            ("redis://:6379", "names no host"),
            ("redis://:s3cr3t@:6379", "names no host"),
            ("redis://", "names no host"),
            ("redis:///0", "names no host"),
            ("redis:host", "names no host"),
            ("redis://127.0.0.1:99999", "port 99999 is out of range"),
            (
                "redis://:s3cr3t@127.0.0.1:99999",
                "port 99999 is out of range",
            ),
            ("redis://[::1]:70000", "port 70000 is out of range"),
            ("redis://h:0", "port 0 is out of range"),
            ("redis://h:abc", "port `abc` is not a number"),
            ("redis://u:pa/s3cr3t@h", "must be percent-encoded"),
            ("redis://u:pa?s3cr3t@h:1", "must be percent-encoded"),
            ("redis://u:pa#s3cr3t@h:1", "must be percent-encoded"),
            (
                "redis://host/notadb",
                "path `/notadb` is not a database number",
            ),
            ("redis://host/0/1", "is not a database number"),
            ("redis://host/-1", "is not a database number"),
            ("redis://host/+1", "is not a database number"),
            ("redis://host/99999999999", "is not a database number"),
            (
                "redis://host?prefix=",
                "option `prefix`: redis key prefix must not be empty",
            ),
            (
                "redis://host?prefix=a%7Bb",
                "option `prefix`: redis key prefix",
            ),
            (
                "redis://host?prefix=a+b",
                "must not contain braces, whitespace",
            ),
            (
                "redis://host?prefix=a&prefix=b",
                "repeats the option `prefix`",
            ),
            ("redis://host?prefx=x", "unknown option `prefx`"),
            (
                "redis://u:s3cr3t@host?protocol=resp3",
                "unknown option `protocol`",
            ),
            ("redis://host#frag", "takes no fragment"),
            ("redis://u%00@h", "the user name holds a NUL"),
            ("redis://u:s3cr3t%00@h", "the password holds a NUL"),
            ("redis://u:s3cr3t%ff@h", "the password is not UTF-8"),
            (
                "redis://h?allow_eviction=%ff",
                "option `allow_eviction` is not UTF-8",
            ),
            ("redis://h?allow_eviction=%00", "holds a NUL"),
            ("redis://host?tls_ca=/ca.pem", "needs a rediss://"),
            (
                "redis://host?allow_eviction=yes",
                "`allow_eviction` is `yes`",
            ),
            (
                "redis://host?allow_eviction=true&allow_eviction=true",
                "repeats the option `allow_eviction`",
            ),
            ("http://host", "scheme `http` is not redis"),
            ("", "is not a URL"),
            ("127.0.0.1:6379", "is not a URL"),
            ("localhost:6379", "scheme `localhost`"),
            ("redis://[::1", "is not a URL"),
        ] {
            for result in [
                RedisConfig::from_url(input).map(drop),
                RedisConfig::new(input).validate().map(drop),
            ] {
                match result {
                    Err(Error::InvalidConfig { message, .. }) => {
                        assert!(message.contains(expected), "{input:?}: {message}");
                        assert!(!message.contains(PASSWORD), "{input:?}: {message}");
                        assert!(message.starts_with("redis URL"), "{message}");
                    }
                    other => panic!("{input:?}: expected InvalidConfig, got {other:?}"),
                }
            }
        }
    }

    #[test]
    fn tls_needs_its_feature() {
        let result = RedisConfig::from_url("rediss://:s3cr3t@host:6380");
        if cfg!(feature = "tls") {
            let config = result.unwrap();
            assert_eq!(config.to_url(), "rediss://:s3cr3t@host:6380");
            assert_eq!(RedisConfig::from_url(&config.to_url()).unwrap(), config);
            let with_ca =
                RedisConfig::from_url("rediss://h:1?tls_ca=/etc/my%20ca.pem&allow_eviction=true")
                    .unwrap();
            assert_eq!(
                with_ca.to_url(),
                "rediss://h:1?allow_eviction=true&tls_ca=%2Fetc%2Fmy+ca.pem"
            );
            assert_eq!(RedisConfig::from_url(&with_ca.to_url()).unwrap(), with_ca);
            assert_eq!(
                RedisConfig::from_url("rediss://h:1")
                    .unwrap()
                    .tls_ca("/etc/my ca.pem"),
                RedisConfig::from_url("rediss://h:1?tls_ca=/etc/my%20ca.pem").unwrap()
            );
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
    fn unusable_urls_given_to_new_are_reported_by_validate() {
        let config = RedisConfig::new("redis://:s3cr3t@127.0.0.1:99999");
        assert!(!format!("{config:?}").contains(PASSWORD));
        assert!(!config.to_string().contains(PASSWORD));
        assert!(config.validate().is_err());
    }
}
