//! `Connection`: one server's (or one Redis Cluster's) connection, shared by a backend or a
//! storage and its clones, and what connecting finds out about the server (persistence,
//! eviction) or says when it fails (which server, and why, in one line).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::time::Duration;

use fencelock_core::{Error, Result};
use redis::aio::ConnectionManager;
use redis::{Client, ErrorKind, RedisConnectionInfo, RedisError};
use tracing::Instrument;

use crate::config::RedisConfig;
use crate::error::{bounded, map_error};
use crate::keys::KeySpace;
use crate::link::Link;
use crate::protocol_probe::{PROBE_AFTER, speaks_plain_redis, speaks_tls};
use crate::redis_url::Endpoint;

/// One server's (or cluster's) connection, shared by a backend or a storage and its clones.
#[derive(Clone)]
pub(crate) struct Connection {
    /// The name of the backend using it, for errors and spans.
    pub(crate) backend: &'static str,
    /// The server's role and address (`server 127.0.0.1:6379`), for errors.
    pub(crate) server: String,
    /// The client of one server, for pub/sub connections; `None` on a cluster.
    pub(crate) client: Option<Client>,
    pub(crate) link: Link,
    pub(crate) keys: KeySpace,
    pub(crate) call_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    /// What the server said about itself at connect time.
    pub(crate) settings: ServerSettings,
}

impl fmt::Debug for Connection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Connection")
            .field("backend", &self.backend)
            .field("server", &self.server)
            .field("prefix", &self.keys.prefix())
            .field("call_timeout", &self.call_timeout)
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

/// The server's settings that bear on fencing, read with `CONFIG GET` at connect time;
/// `None` where the server refused to say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ServerSettings {
    /// `appendonly yes` with `appendfsync always`: every write persisted before the answer.
    appendfsync_always: Option<bool>,
    /// `maxmemory-policy`.
    eviction_policy: Option<String>,
}

impl ServerSettings {
    /// What several servers (a cluster's masters) make together: persisted only if every one
    /// persists, evicting if any one evicts.
    pub(crate) fn all(servers: &[ServerSettings]) -> ServerSettings {
        let appendfsync_always = if servers.iter().any(|s| s.appendfsync_always == Some(false)) {
            Some(false)
        } else if servers.iter().all(|s| s.appendfsync_always == Some(true)) {
            Some(true)
        } else {
            None
        };
        let evicting = servers
            .iter()
            .find(|s| s.evicts() == Some(true))
            .or_else(|| servers.iter().find(|s| s.eviction_policy.is_none()))
            .or_else(|| servers.first());
        ServerSettings {
            appendfsync_always,
            eviction_policy: evicting.and_then(|s| s.eviction_policy.clone()),
        }
    }

    /// The eviction policy, when the server said.
    pub(crate) fn eviction_policy(&self) -> Option<&str> {
        self.eviction_policy.as_deref()
    }

    /// Whether the server may delete keys under memory pressure.
    pub(crate) fn evicts(&self) -> Option<bool> {
        self.eviction_policy.as_deref().map(|p| p != "noeviction")
    }

    /// Whether the token counters survive: every write persisted, and no key ever evicted.
    /// `None` when the server refused to say.
    pub(crate) fn persists(&self) -> Option<bool> {
        match (self.appendfsync_always, self.evicts()) {
            (Some(false), _) | (_, Some(true)) => Some(false),
            (Some(true), Some(false)) => Some(true),
            _ => None,
        }
    }
}

/// The redis crate builds its TLS connections on rustls' process-wide crypto provider, which
/// rustls cannot pick by itself when one build enables two of them (ring through this crate,
/// aws-lc-rs through another dependency of the application): it would panic on the first TLS
/// connect. Installs ring, the provider this crate depends on, unless the process has one.
pub(crate) fn ensure_crypto_provider() {
    #[cfg(feature = "tls")]
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing a race with another installer leaves that one's provider: fine either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

impl Connection {
    /// Connects to the server `config` names, for `backend`, checks that it answers and that
    /// it is fit for fencing (no eviction, unless the config allows it). `role` says what the
    /// server is to the caller (`server`, `redlock node`, `redlock storage node`) in errors.
    pub(crate) async fn open(
        config: &RedisConfig,
        backend: &'static str,
        role: &str,
    ) -> Result<Connection> {
        Self::open_node(config, backend, role)
            .await
            .map(|(connection, _)| connection)
    }

    /// [`open`](Self::open), also giving the server's connection manager itself.
    pub(crate) async fn open_node(
        config: &RedisConfig,
        backend: &'static str,
        role: &str,
    ) -> Result<(Connection, ConnectionManager)> {
        let (client, keys) = config.validate()?;
        if config.endpoint().is_some_and(Endpoint::is_tls) {
            ensure_crypto_provider();
        }
        let server = format!("{role} {}", config.server_label());
        if config.endpoint().is_some_and(Endpoint::password_exposed) {
            tracing::warn!(
                "the password for {} crosses a plain connection to a server off this machine: \
                 use rediss:// (DESIGN.md 8.2)",
                config.redacted_url()
            );
        }
        let call_timeout = config.call_limit();
        let connect_timeout = config.connect_limit();
        let manager_config = redis::aio::ConnectionManagerConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(Some(call_timeout))
            .set_number_of_retries(2)
            .set_max_delay(Duration::from_millis(200));
        let span = tracing::debug_span!("connect", backend, server = %server);
        let host = config.endpoint().map(Endpoint::host_port);
        let tls = config.endpoint().is_some_and(Endpoint::is_tls);
        let (host_ref, server_ref, client_ref) = (&host, &server, &client);
        let failed = move |e| async move {
            let (server, client) = (server_ref, client_ref);
            match host_ref {
                Some(host) if !tls && tls_port(&e) && speaks_tls(host, call_timeout).await => {
                    Error::InvalidConfig {
                        message: format!(
                            "{server} speaks TLS (it answered a TLS handshake, and dropped the \
                             plain connection): use a rediss:// URL (with `?tls_ca=` for a \
                             private CA)"
                        ),
                        source: Some(Box::new(e)),
                    }
                }
                _ => connect_failure(backend, server, client, call_timeout, e).await,
            }
        };
        let connect = tokio::time::timeout(
            connect_timeout + call_timeout,
            ConnectionManager::new_with_config(client.clone(), manager_config),
        )
        .instrument(span);
        // A plain Redis waits for a newline that a TLS handshake never sends: asked plainly
        // after a moment, it answers, and the connect can say so instead of timing out.
        let plain_at_tls_url = async {
            if let (Some(host), true) = (&host, tls) {
                tokio::time::sleep(PROBE_AFTER).await;
                if speaks_plain_redis(host, call_timeout).await {
                    return;
                }
            }
            std::future::pending::<()>().await
        };
        let manager = tokio::select! {
            connected = connect => match connected {
                Ok(Ok(manager)) => manager,
                Ok(Err(e)) => return Err(failed(e).await),
                Err(_) => return Err(no_answer(backend, &server, connect_timeout + call_timeout)),
            },
            () = plain_at_tls_url => {
                return Err(Error::config(format!(
                    "{server} does not support TLS (it answered plain Redis on this port): use \
                     a redis:// URL, or the server's TLS port (`tls-port`)"
                )));
            }
        };
        // The manager may connect without sending a command; a PING surfaces refused or
        // missing credentials, and a service that does not speak Redis, now rather than at
        // the first lock.
        let mut conn = manager.clone();
        match tokio::time::timeout(
            call_timeout,
            redis::cmd("PING").query_async::<()>(&mut conn),
        )
        .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(failed(e).await),
            Err(_) => return Err(no_answer(backend, &server, call_timeout)),
        }
        let mut link = Link::Node(manager.clone());
        let settings = read_settings(&mut link, backend, call_timeout).await;
        refuse_eviction(&settings, &server, config.evictions_allowed())?;
        let connection = Connection {
            backend,
            server,
            client: Some(client),
            link,
            keys,
            call_timeout,
            connect_timeout,
            settings,
        };
        Ok((connection, manager))
    }

    /// One call to the server, bounded by the call timeout; errors name the server.
    pub(crate) async fn call<T>(
        &self,
        what: &str,
        call: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T> {
        bounded(self.backend, self.call_timeout, what, call)
            .await
            .map_err(|e| e.in_context(&self.server))
    }

    /// A fresh connection for pub/sub.
    pub(crate) async fn pubsub(&self) -> Result<redis::aio::PubSub> {
        let Some(client) = &self.client else {
            return Err(
                Error::config("a Redis Cluster connection has no pub/sub of this kind")
                    .in_context(&self.server),
            );
        };
        bounded(
            self.backend,
            self.connect_timeout + self.call_timeout,
            "pub/sub connect",
            client.get_async_pubsub(),
        )
        .await
        .map_err(|e| e.in_context(&self.server))
    }
}

/// Refuses a server (`server` names it) that may evict keys, unless that is allowed.
pub(crate) fn refuse_eviction(
    settings: &ServerSettings,
    server: &str,
    allowed: bool,
) -> Result<()> {
    match settings.eviction_policy() {
        Some(policy) if settings.evicts() == Some(true) && !allowed => Err(Error::config(format!(
            "{server} may evict keys (maxmemory-policy {policy}): under memory pressure it \
                 can delete token counters, fence records and held locks, which lets a stale \
                 holder in; set `maxmemory-policy noeviction` on the server, or accept the \
                 risk with allow_eviction(true) (`?allow_eviction=true` in the URL)"
        ))),
        Some(policy) if settings.evicts() == Some(true) => {
            tracing::warn!(
                "{server} may evict keys (maxmemory-policy {policy}) and allow_eviction=true \
                 accepts it: under memory pressure it can delete token counters, fence records \
                 and held locks, which lets a stale holder in"
            );
            Ok(())
        }
        Some(_) => Ok(()),
        None => {
            tracing::warn!(
                "{server} did not say its maxmemory-policy (CONFIG GET refused, as an ACL \
                 without +config|get does): the eviction check was skipped; a server that \
                 evicts keys can delete token counters, fence records and held locks, so run \
                 it with maxmemory-policy noeviction"
            );
            Ok(())
        }
    }
}

pub(crate) fn no_answer(backend: &'static str, server: &str, limit: Duration) -> Error {
    Error::Unavailable {
        backend,
        message: format!("{server}: no answer within {limit:?}"),
        source: None,
    }
}

/// Why connecting to `server` failed, in one line a user can act on. `client` (one server's)
/// is asked what the server says to refused credentials.
pub(crate) async fn connect_failure(
    backend: &'static str,
    server: &str,
    client: &Client,
    limit: Duration,
    e: RedisError,
) -> Error {
    match e.kind() {
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType => Error::InvalidConfig {
            message: format!(
                "{server}: not a Redis server (it answered something other than the Redis \
                 protocol)"
            ),
            source: Some(Box::new(e)),
        },
        ErrorKind::AuthenticationFailed => {
            let said = auth_reply(client, limit).await;
            Error::InvalidConfig {
                message: match said {
                    Some(said) => format!("{server} refused the credentials: {said}"),
                    None => format!("{server} refused the credentials"),
                },
                source: Some(Box::new(e)),
            }
        }
        // The driver's own words for a refused SELECT of the URL's database (the only detail
        // it keeps is the server's): a database number the server does not have.
        _ if e.to_string().contains("refused to switch database") => Error::InvalidConfig {
            message: format!(
                "{server} refused to switch to the URL's database: {} (a server has databases \
                 0 to its `databases` setting less one, 0 to 15 by default)",
                e.detail().unwrap_or("no reason given")
            ),
            source: Some(Box::new(e)),
        },
        _ => match untrusted_certificate(&e) {
            Some(Certificate::NotForName(why)) => Error::InvalidConfig {
                message: format!(
                    "{server}: its TLS certificate is not for the host name in the URL ({why}); \
                     connect by a name the certificate lists, or give the server a \
                     certificate for this name"
                ),
                source: Some(Box::new(e)),
            },
            Some(Certificate::Untrusted(why)) => Error::InvalidConfig {
                message: format!(
                    "{server}: its TLS certificate was not trusted ({why}); trust the CA that \
                     signed it with `?tls_ca=/path/ca.pem` (RedisConfig::tls_ca)"
                ),
                source: Some(Box::new(e)),
            },
            None => map_error(backend, e).in_context(server),
        },
    }
}

/// What was wrong with the server's certificate, in rustls' words.
#[cfg_attr(not(feature = "tls"), allow(dead_code))]
enum Certificate {
    /// Trusted, but for other host names than the URL's.
    NotForName(String),
    /// Not signed by a trusted CA, expired, revoked, ...
    Untrusted(String),
}

/// Whether a failed plain connect looks like a TLS-only port's answer: the connection
/// reset, dropped or closed, which a TLS server does to bytes that are not a handshake.
fn tls_port(e: &RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped()
}

/// What rustls found wrong with the server's certificate (not signed by a trusted CA, not
/// for this host name, expired, ...), when that is why connecting failed: trying again
/// cannot succeed.
#[cfg(feature = "tls")]
fn untrusted_certificate(e: &RedisError) -> Option<Certificate> {
    use std::error::Error as _;
    use std::sync::Arc;

    // The driver keeps the I/O error of the handshake behind an `Arc`, which wraps rustls'.
    let inner = e
        .source()?
        .downcast_ref::<Arc<dyn std::error::Error + Send + Sync>>()?;
    let io = inner.downcast_ref::<std::io::Error>()?;
    match io.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidCertificate(
            why @ (rustls::CertificateError::NotValidForName
            | rustls::CertificateError::NotValidForNameContext { .. }),
        ) => Some(Certificate::NotForName(format!("{why:?}"))),
        rustls::Error::InvalidCertificate(why) => Some(Certificate::Untrusted(format!("{why:?}"))),
        _ => None,
    }
}

#[cfg(not(feature = "tls"))]
fn untrusted_certificate(_: &RedisError) -> Option<Certificate> {
    None
}

/// What the server answers to the URL's `AUTH`, sent on a connection of its own: the driver
/// only says that authentication failed, while the server says why (a wrong password, or a
/// password sent to a server that has none). The password is blanked out of the answer.
async fn auth_reply(client: &Client, limit: Duration) -> Option<String> {
    let info = client.get_connection_info();
    let settings = info.redis_settings();
    let password = settings.password()?.to_owned();
    let username = settings.username().map(str::to_owned);
    let plain = info
        .clone()
        .set_redis_settings(RedisConnectionInfo::default());
    let ask = async {
        let mut conn = Client::open(plain)
            .ok()?
            .get_multiplexed_async_connection()
            .await
            .ok()?;
        let mut auth = redis::cmd("AUTH");
        if let Some(username) = &username {
            auth.arg(username);
        }
        auth.arg(&password);
        auth.query_async::<()>(&mut conn).await.err()
    };
    let e = tokio::time::timeout(limit, ask).await.ok()??;
    let said = match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
    };
    let said = said.lines().collect::<Vec<_>>().join(" ");
    Some(if password.is_empty() {
        said
    } else {
        said.replace(&password, "***")
    })
}

/// `CONFIG GET` of the settings that bear on fencing, in one round trip; whatever the server
/// refuses (managed services often rename or forbid `CONFIG`) stays unknown.
async fn read_settings(link: &mut Link, backend: &'static str, limit: Duration) -> ServerSettings {
    let mut pipe = redis::pipe();
    pipe.cmd("CONFIG")
        .arg("GET")
        .arg("append*")
        .cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy");
    let read: Result<(HashMap<String, String>, HashMap<String, String>)> =
        bounded(backend, limit, "CONFIG GET", pipe.query_async(link)).await;
    match read {
        Ok((append, memory)) => ServerSettings::from_replies(&append, &memory),
        Err(_) => ServerSettings::default(),
    }
}

impl ServerSettings {
    /// The settings in the replies to `CONFIG GET append*` and `CONFIG GET maxmemory-policy`.
    pub(crate) fn from_replies(
        append: &HashMap<String, String>,
        memory: &HashMap<String, String>,
    ) -> ServerSettings {
        ServerSettings {
            appendfsync_always: match (append.get("appendonly"), append.get("appendfsync")) {
                (Some(only), Some(fsync)) => Some(only == "yes" && fsync == "always"),
                _ => None,
            },
            eviction_policy: memory.get("maxmemory-policy").cloned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_persists_only_if_every_master_does_and_evicts_if_any_does() {
        let settings = |fsync: Option<bool>, policy: Option<&str>| ServerSettings {
            appendfsync_always: fsync,
            eviction_policy: policy.map(str::to_owned),
        };
        let safe = settings(Some(true), Some("noeviction"));
        assert_eq!(
            ServerSettings::all(&[safe.clone(), safe.clone()]).persists(),
            Some(true)
        );
        let all = ServerSettings::all(&[safe.clone(), settings(Some(true), Some("allkeys-lru"))]);
        assert_eq!(all.evicts(), Some(true));
        assert_eq!(all.eviction_policy(), Some("allkeys-lru"));
        let all = ServerSettings::all(&[safe.clone(), settings(Some(false), Some("noeviction"))]);
        assert_eq!(all.persists(), Some(false));
        let all = ServerSettings::all(&[safe.clone(), settings(None, None)]);
        assert_eq!(all.persists(), None);
        assert_eq!(all.evicts(), None);
    }

    #[test]
    fn tokens_persist_only_when_written_through_and_never_evicted() {
        let settings = |fsync: Option<bool>, policy: Option<&str>| ServerSettings {
            appendfsync_always: fsync,
            eviction_policy: policy.map(str::to_owned),
        };
        assert_eq!(
            settings(Some(true), Some("noeviction")).persists(),
            Some(true)
        );
        assert_eq!(
            settings(Some(true), Some("allkeys-lru")).persists(),
            Some(false)
        );
        assert_eq!(
            settings(Some(true), Some("volatile-ttl")).persists(),
            Some(false)
        );
        assert_eq!(
            settings(Some(false), Some("noeviction")).persists(),
            Some(false)
        );
        assert_eq!(settings(Some(false), None).persists(), Some(false));
        assert_eq!(settings(None, Some("allkeys-lru")).persists(), Some(false));
        assert_eq!(settings(Some(true), None).persists(), None);
        assert_eq!(settings(None, None).persists(), None);
        assert_eq!(settings(None, Some("noeviction")).evicts(), Some(false));
    }
}
