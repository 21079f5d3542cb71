//! `RedisConfig`: how to reach one Redis server, and how to name keys there. It owns the
//! `redis://` and `rediss://` URL schemes.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use fencelock_core::{Error, FenceRule, HostPort, Result};
use redis::Client;

use crate::keys::KeySpace;
use crate::options::{SharedOptions, query};
use crate::redis_url::{Endpoint, EndpointOptions, parse_endpoint};
use fencelock_core::url::redact;

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
    options: SharedOptions,
    tls_ca: Option<PathBuf>,
}

/// Where the server is: a checked URL, or text given to [`RedisConfig::new`] that is not one
/// (its error is reported by `connect`).
#[derive(Clone, PartialEq, Eq)]
enum Target {
    Parsed(Endpoint),
    Unusable(String),
}

fencelock_core::redacted_config!(RedisConfig);

impl fmt::Debug for RedisConfig {
    // The URL only as redacted, so that a password never reaches a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut out = f.debug_struct("RedisConfig");
        out.field("url", &self.redacted_url());
        self.options.debug_fields(&mut out);
        out.field("tls_ca", &self.tls_ca).finish()
    }
}

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

    pub(crate) fn from_endpoint(endpoint: Endpoint, options: EndpointOptions) -> Self {
        RedisConfig {
            target: Target::Parsed(endpoint),
            options: SharedOptions::default().with_url(options.shared),
            tls_ca: options.tls_ca,
        }
    }

    fn with_target(target: Target) -> Self {
        RedisConfig {
            target,
            options: SharedOptions::default(),
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

    /// The URL's options: the shared ones, then `tls_ca=<path>`; or nothing.
    fn query(&self) -> String {
        let tls_ca = self.tls_ca.as_ref();
        let tls_ca = tls_ca.map(|path| ("tls_ca", path.to_string_lossy().into_owned()));
        query(self.options.url_pairs().into_iter().chain(tls_ca))
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
        self.options.prefix = prefix.into();
        self
    }

    /// The configured key prefix.
    pub fn prefix_name(&self) -> &str {
        &self.options.prefix
    }

    /// The longest one call may take before it fails with [`Error::Unavailable`] (default
    /// 5 s). A call that timed out may still have been applied by the server: a lock granted
    /// that way lapses after its ttl.
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.options.call_timeout = timeout;
        self
    }

    /// The longest establishing a connection may take (default 5 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.options.connect_timeout = timeout;
        self
    }

    /// The largest value [`RedisStorage`](crate::RedisStorage) accepts, in bytes (default
    /// 16 MiB).
    pub fn max_value_len(mut self, max: usize) -> Self {
        self.options.max_value_len = max;
        self
    }

    /// The rule [`RedisStorage`](crate::RedisStorage) applies (default
    /// [`FenceRule::Monotonic`]).
    pub fn fence_rule(mut self, rule: FenceRule) -> Self {
        self.options.fence_rule = rule;
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
        self.options.allow_eviction = allow;
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
        self.options.allow_eviction
    }

    /// The shared settings, as the builder and the URL left them (compared across the
    /// schemes by the tests of [`SharedOptions`]).
    #[cfg(test)]
    pub(crate) fn options(&self) -> &SharedOptions {
        &self.options
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
    pub(crate) fn validate(&self) -> Result<(Client, KeySpace)> {
        self.options.validate("redis", "call_timeout")?;
        let keys = KeySpace::new(&self.options.prefix)?;
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
mod tests;
