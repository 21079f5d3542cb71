//! `RedisConfig`: how to reach one Redis server, and how to name keys there.

use std::collections::HashMap;
use std::fmt;
use std::time::Duration;

use fencelock_core::{Error, FenceRule, Result};
use redis::aio::ConnectionManager;
use redis::{Client, ConnectionInfo, IntoConnectionInfo};
use tracing::Instrument;
use url::Url;

use crate::backend::RedisLockBackend;
use crate::error::bounded;
use crate::keys::{DEFAULT_PREFIX, KeySpace};
use crate::storage::RedisStorage;

/// The default bound on one call to the server.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);
/// The default bound on establishing a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The default largest value [`RedisStorage`] accepts: 16 MiB.
pub const DEFAULT_MAX_VALUE_LEN: usize = 16 << 20;

/// How to reach one Redis server and how to name keys there. Build it, then
/// [`connect`](Self::connect) a [`RedisLockBackend`] or
/// [`connect_storage`](Self::connect_storage) a [`RedisStorage`].
///
/// The URL is `redis://[user][:password@]host[:port][/db]`, or `rediss://` for TLS (with
/// the `tls` feature). Nothing is checked until a `connect` call, which reports a bad URL or
/// option as [`Error::InvalidConfig`] before touching the network.
///
/// ```no_run
/// # async fn demo() -> fencelock_core::Result<()> {
/// use std::time::Duration;
/// use fencelock_redis::RedisConfig;
///
/// let backend = RedisConfig::new("redis://app:secret@127.0.0.1:6379/0")
///     .prefix("billing")
///     .call_timeout(Duration::from_secs(2))
///     .connect()
///     .await?;
/// let storage = backend.storage();
/// # let _ = storage; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisConfig {
    url: String,
    prefix: String,
    call_timeout: Duration,
    connect_timeout: Duration,
    max_value_len: usize,
    fence_rule: FenceRule,
}

impl fmt::Debug for RedisConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("url", &redact(&self.url))
            .field("prefix", &self.prefix)
            .field("call_timeout", &self.call_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("max_value_len", &self.max_value_len)
            .field("fence_rule", &self.fence_rule)
            .finish()
    }
}

impl RedisConfig {
    /// A configuration for `url` with the defaults: prefix `fencelock`, 5 s per call, 5 s to
    /// connect, values up to 16 MiB, [`FenceRule::Monotonic`].
    pub fn new(url: impl Into<String>) -> Self {
        RedisConfig {
            url: url.into(),
            prefix: DEFAULT_PREFIX.to_owned(),
            call_timeout: DEFAULT_CALL_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
            fence_rule: FenceRule::Monotonic,
        }
    }

    /// The first part of every key name (default `fencelock`). It may not be empty or
    /// contain braces, whitespace or control characters.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
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

    /// The largest value [`RedisStorage`] accepts, in bytes (default 16 MiB).
    pub fn max_value_len(mut self, max: usize) -> Self {
        self.max_value_len = max;
        self
    }

    /// The rule [`RedisStorage`] applies (default [`FenceRule::Monotonic`]).
    pub fn fence_rule(mut self, rule: FenceRule) -> Self {
        self.fence_rule = rule;
        self
    }

    /// The URL with its password replaced by `***`, for logs and messages.
    pub fn redacted_url(&self) -> String {
        redact(&self.url)
    }

    /// Connects a [`RedisLockBackend`]. Reads the server's persistence settings for
    /// [`Capabilities`](fencelock_core::Capabilities) on the way.
    pub async fn connect(&self) -> Result<RedisLockBackend> {
        let connection = self.open().await?;
        let server_persists = connection.server_persists().await;
        Ok(RedisLockBackend::new(connection, server_persists))
    }

    /// Connects a [`RedisStorage`].
    pub async fn connect_storage(&self) -> Result<RedisStorage> {
        let connection = self.open().await?;
        Ok(RedisStorage::new(
            connection,
            self.fence_rule,
            self.max_value_len,
        ))
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
        let shown = redact(&self.url);
        let url = Url::parse(&self.url).map_err(|e| Error::InvalidConfig {
            message: format!("redis URL {shown:?} is not a URL"),
            source: Some(Box::new(e)),
        })?;
        match url.scheme() {
            "redis" => {}
            "rediss" if cfg!(feature = "tls") => {}
            "rediss" => {
                return Err(Error::config(format!(
                    "redis URL {shown:?} asks for TLS, which needs the `tls` feature of fencelock-redis"
                )));
            }
            other => {
                return Err(Error::config(format!(
                    "redis URL {shown:?} has scheme {other:?}; expected redis:// or rediss://"
                )));
            }
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(Error::config(format!("redis URL {shown:?} names no host")));
        }
        let info: ConnectionInfo =
            url.into_connection_info()
                .map_err(|e| Error::InvalidConfig {
                    message: format!("redis URL {shown:?} is not usable: {e}"),
                    source: Some(Box::new(e)),
                })?;
        let client = Client::open(info).map_err(|e| Error::InvalidConfig {
            message: format!("redis URL {shown:?} is not usable: {e}"),
            source: Some(Box::new(e)),
        })?;
        Ok((client, keys))
    }

    pub(crate) async fn open(&self) -> Result<Connection> {
        let (client, keys) = self.validate()?;
        let url = redact(&self.url);
        let manager_config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(Some(self.call_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(200));
        let span = tracing::debug_span!("connect", backend = crate::BACKEND, url = %url);
        let manager = bounded(
            self.connect_timeout + self.call_timeout,
            "connect",
            ConnectionManager::new_with_config(client.clone(), manager_config),
        )
        .instrument(span)
        .await?;
        // The manager connects without sending a command; a PING surfaces refused or
        // missing credentials now rather than at the first lock.
        let mut conn = manager.clone();
        let () = bounded(
            self.call_timeout,
            "PING",
            redis::cmd("PING").query_async(&mut conn),
        )
        .await?;
        Ok(Connection {
            client,
            manager,
            keys,
            call_timeout: self.call_timeout,
            connect_timeout: self.connect_timeout,
            url,
        })
    }
}

/// One server's connection, shared by a backend or a storage and its clones.
#[derive(Clone)]
pub(crate) struct Connection {
    pub(crate) client: Client,
    pub(crate) manager: ConnectionManager,
    pub(crate) keys: KeySpace,
    pub(crate) call_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) url: String,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("url", &self.url)
            .field("prefix", &self.keys.prefix())
            .field("call_timeout", &self.call_timeout)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Whether the server persists every write before answering (`appendonly yes` with
    /// `appendfsync always`). `None` when the server refuses `CONFIG GET`.
    pub(crate) async fn server_persists(&self) -> Option<bool> {
        let mut conn = self.manager.clone();
        let settings: HashMap<String, String> = bounded(
            self.call_timeout,
            "CONFIG GET",
            redis::cmd("CONFIG")
                .arg("GET")
                .arg("append*")
                .query_async(&mut conn),
        )
        .await
        .ok()?;
        let appendonly = settings.get("appendonly")?;
        let appendfsync = settings.get("appendfsync")?;
        Some(appendonly == "yes" && appendfsync == "always")
    }

    /// A fresh connection for pub/sub.
    pub(crate) async fn pubsub(&self) -> Result<redis::aio::PubSub> {
        bounded(
            self.connect_timeout + self.call_timeout,
            "pub/sub connect",
            self.client.get_async_pubsub(),
        )
        .await
    }
}

/// `url` with any password replaced by `***`; unparsable URLs are hidden entirely.
fn redact(url: &str) -> String {
    match Url::parse(url) {
        Ok(mut parsed) => {
            if parsed.password().is_some() {
                let _ = parsed.set_password(Some("***"));
            }
            parsed.to_string()
        }
        Err(_) => "<unparsable URL>".to_owned(),
    }
}
