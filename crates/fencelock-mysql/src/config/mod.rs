//! `MySqlConfig`: the `mysql://` grammar, its validation, and the typed settings of a connection.
//!
//! By concern: the settings a URL chooses by name and their checks ([`options`]: the lock
//! backend, the TLS mode); the grammar, the prefix and the builder here.

use std::time::Duration;

use fencelock_core::url::{Known, Options, decode_part, redact};
use fencelock_core::{Error, HostPort, Result};
use sqlx::ConnectOptions;
use sqlx::mysql::MySqlConnectOptions;
use url::{Host, Url};

use crate::database::MySqlDatabase;
use crate::redact::{parse_error, shown};

mod options;
#[cfg(test)]
mod tests;

use options::check_tls;
pub use options::{MySqlBackendKind, MySqlTlsMode};

/// The options a MySQL URL takes.
const KNOWN_OPTIONS: &[Known] = &[
    Known::new("backend"),
    Known::new("prefix"),
    Known::with_aliases("ssl-mode", &["sslmode", "ssl_mode"]),
    Known::with_aliases("ssl-ca", &["sslca", "ssl_ca"]),
];

/// The table prefix used when none is configured.
pub const DEFAULT_PREFIX: &str = "fencelock_";

/// The longest prefix accepted, so that every table and procedure name stays within MySQL's
/// 64-character identifier limit.
pub const MAX_PREFIX_LEN: usize = 32;

/// The port used when a URL names none.
pub const DEFAULT_PORT: u16 = 3306;

/// The largest value [`MySqlStorage`](crate::MySqlStorage) accepts unless configured otherwise
/// (lowered at connect time to what the server's `max_allowed_packet` carries).
pub const DEFAULT_MAX_VALUE_LEN: usize = 4 << 20;

/// How to reach MySQL or MariaDB, which lock backend to use, and the prefix of fencelock's
/// tables.
///
/// The URL grammar (`from_url` / `to_url`):
///
/// ```text
/// mysql://user[:password]@host[:port]/database[?backend=get_lock][&prefix=name]
/// ```
///
/// `mariadb://` is accepted as a synonym and kept as written. User, host and database are
/// required; the port defaults to 3306.
///
/// - `backend` chooses the lock backend ([`MySqlBackendKind`], default and only value
///   `get_lock`);
/// - `prefix` starts the name of every table and procedure fencelock installs (default
///   `fencelock_`; see [`prefix`](Self::prefix) for the allowed names), so several
///   installations can share one database.
///
/// - `ssl-mode` ([`MySqlTlsMode`]) and `ssl-ca` (a PEM file of the CA that signed the
///   server's certificate) choose TLS (feature `tls`); `ssl-ca` alone, or with `required`,
///   means `verify_ca`. A mode that needs TLS in a build without the feature is refused.
///
/// Every other option is refused, so a typo is an error instead of a silently ignored setting.
///
/// `Display` and `Debug` show the URL with the password replaced by `***`;
/// [`to_url`](Self::to_url) gives it back whole, and `from_url(&config.to_url())` equals
/// `config`.
///
/// ```
/// use fencelock_mysql::MySqlConfig;
/// let config = MySqlConfig::from_url("mysql://app:secret@db.internal:3307/orders?prefix=locks_")?;
/// assert_eq!(config.prefix_name(), "locks_");
/// assert_eq!(config.to_string(), "mysql://app:***@db.internal:3307/orders?prefix=locks_");
/// assert_eq!(MySqlConfig::from_url(&config.to_url())?, config);
/// # Ok::<(), fencelock_core::Error>(())
/// ```
#[derive(Clone)]
pub struct MySqlConfig {
    /// Scheme, credentials, host, port and database; no query.
    base: Url,
    pub(crate) backend: MySqlBackendKind,
    pub(crate) prefix: String,
    pub(crate) pool_size: u32,
    pub(crate) session_pool_size: u32,
    pub(crate) operation_timeout: Duration,
    pub(crate) max_value_len: Option<usize>,
    pub(crate) install: bool,
    /// `ssl-mode`, as written (`None`: the driver's default, `preferred`).
    tls_mode: Option<MySqlTlsMode>,
    /// `ssl-ca`.
    tls_ca: Option<String>,
}

impl PartialEq for MySqlConfig {
    fn eq(&self, other: &Self) -> bool {
        self.base == other.base
            && self.backend == other.backend
            && self.prefix == other.prefix
            && self.pool_size == other.pool_size
            && self.session_pool_size == other.session_pool_size
            && self.operation_timeout == other.operation_timeout
            && self.max_value_len == other.max_value_len
            && self.install == other.install
            && self.tls_mode == other.tls_mode
            && self.tls_ca == other.tls_ca
    }
}

impl Eq for MySqlConfig {}

fencelock_core::redacted_config!(MySqlConfig {
    pool_size,
    session_pool_size,
    operation_timeout,
    max_value_len,
    install
});

impl MySqlConfig {
    /// The URL schemes this config owns.
    pub const SCHEMES: &'static [&'static str] = &["mysql", "mariadb"];

    /// A configuration from a `mysql://` or `mariadb://` URL (grammar above), checked eagerly
    /// and completely. Anything wrong is [`Error::InvalidConfig`] naming what is wrong; the
    /// message never contains the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let scheme = url.split_once("://").map(|(scheme, _)| scheme);
        if !scheme.is_some_and(|s| Self::SCHEMES.iter().any(|k| s.eq_ignore_ascii_case(k))) {
            return Err(Error::config(format!(
                "{} is not a MySQL URL: expected mysql://user@host[:port]/database",
                redact(url)
            )));
        }
        let parsed = Url::parse(url).map_err(|e| parse_error(url, e))?;
        let shown = shown(&parsed);
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(Error::config(format!("MySQL URL {shown} names no host")));
        }
        if parsed.port() == Some(0) {
            return Err(Error::config(format!(
                "MySQL URL {shown}: port 0 is out of range (1 to 65535)"
            )));
        }
        if parsed.username().is_empty() {
            return Err(Error::config(format!(
                "MySQL URL {shown} names no user: write mysql://user@host/database"
            )));
        }
        if parsed.fragment().is_some() {
            return Err(Error::config(format!(
                "MySQL URL {shown} takes no fragment (`#...`)"
            )));
        }
        let database = parsed.path().trim_start_matches('/');
        if database.is_empty() {
            return Err(Error::config(format!(
                "MySQL URL {shown} names no database: write mysql://user@host/database"
            )));
        }
        if database.contains('/') {
            return Err(Error::config(format!(
                "MySQL URL {shown}: the path must be one database name"
            )));
        }
        // The handshake ends these strings with a NUL: one inside cuts them short, and the
        // server reads the rest as the next field. Text that is not UTF-8 is refused too.
        let context = format!("MySQL URL {shown}");
        for (what, raw) in [
            ("user name", parsed.username()),
            ("password", parsed.password().unwrap_or_default()),
            ("database name", database),
        ] {
            decode_part(what, raw).map_err(|e| e.in_context(&context))?;
        }
        let options = Options::parse(parsed.query().unwrap_or_default(), KNOWN_OPTIONS)
            .map_err(|e| e.in_context(&context))?;
        let backend = options.get("backend").map(str::parse).transpose()?;
        let prefix = options.get("prefix").map(str::to_owned);
        if let Some(prefix) = &prefix {
            validate_prefix(prefix)?;
        }
        let tls_mode = options
            .get("ssl-mode")
            .map(str::parse::<MySqlTlsMode>)
            .transpose()
            .map_err(|e| e.in_context(&context))?;
        let tls_ca = options.get("ssl-ca").map(str::to_owned);
        check_tls(tls_mode, tls_ca.as_deref()).map_err(|e| e.in_context(&context))?;
        let mut base = parsed;
        base.set_query(None);
        // Checks what the driver checks (credentials and database decode as UTF-8) now.
        connect_options(&base)?;
        Ok(MySqlConfig {
            base,
            backend: backend.unwrap_or_default(),
            prefix: prefix.unwrap_or_else(|| DEFAULT_PREFIX.to_owned()),
            pool_size: 10,
            session_pool_size: 100,
            operation_timeout: Duration::from_secs(5),
            max_value_len: None,
            install: true,
            tls_mode,
            tls_ca,
        })
    }

    /// The full URL, **credentials included**, such that `from_url` gives this config back.
    /// Builder settings that have no URL form (pool sizes, time-outs, `max_value_len`) are not
    /// in it.
    pub fn to_url(&self) -> String {
        self.url(false)
    }

    /// [`to_url`](Self::to_url) with the password replaced by `***`: what `Display` and
    /// `Debug` show.
    pub fn redacted_url(&self) -> String {
        self.url(true)
    }

    fn url(&self, redacted: bool) -> String {
        let mut url = self.base.clone();
        if redacted && url.password().is_some() {
            // Setting a password only fails on URLs without a host, which `base` never is.
            let _ = url.set_password(Some("***"));
        }
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        if self.backend != MySqlBackendKind::default() {
            pairs.push(("backend", self.backend.as_str()));
        }
        if self.prefix != DEFAULT_PREFIX {
            pairs.push(("prefix", &self.prefix));
        }
        if let Some(mode) = self.tls_mode {
            pairs.push(("ssl-mode", mode.as_str()));
        }
        if let Some(ca) = &self.tls_ca {
            pairs.push(("ssl-ca", ca));
        }
        if !pairs.is_empty() {
            url.query_pairs_mut().extend_pairs(pairs);
        }
        url.into()
    }

    /// The servers this config reaches, in URL order (one for MySQL), default port filled in.
    pub fn hosts(&self) -> Vec<HostPort> {
        vec![HostPort::new(host_of(&self.base), self.port())]
    }

    /// The scheme [`to_url`](Self::to_url) prints, lower case: `mysql` or `mariadb`, as the
    /// URL was written.
    pub(crate) fn scheme_name(&self) -> &str {
        self.base.scheme()
    }

    fn port(&self) -> u16 {
        self.base.port().unwrap_or(DEFAULT_PORT)
    }

    /// The same config pointed at other servers: `hosts` must hold exactly one (MySQL URLs
    /// name one server), else [`Error::InvalidConfig`].
    pub fn with_hosts(mut self, hosts: &[HostPort]) -> Result<Self> {
        let [target] = hosts else {
            return Err(Error::config(format!(
                "a MySQL config reaches one server; {} given",
                hosts.len()
            )));
        };
        if target.port == 0 {
            return Err(Error::config("port 0 is out of range (1 to 65535)"));
        }
        let host = if target.host.contains(':') {
            format!("[{}]", target.host)
        } else {
            target.host.clone()
        };
        let mut base = self.base.clone();
        base.set_host(Some(&host))
            .map_err(|e| Error::InvalidConfig {
                message: format!("{:?} is not a host name or address", target.host),
                source: Some(Box::new(e)),
            })?;
        base.set_port(Some(target.port))
            .map_err(|()| Error::config(format!("cannot set port {}", target.port)))?;
        connect_options(&base)?;
        self.base = base;
        Ok(self)
    }

    /// Uses `kind` as the lock backend (the URL's `?backend=`).
    pub fn with_backend_kind(mut self, kind: MySqlBackendKind) -> Self {
        self.backend = kind;
        self
    }

    /// The lock backend this config chooses (`?backend=`, default
    /// [`MySqlBackendKind::GetLock`]).
    pub fn backend_kind(&self) -> MySqlBackendKind {
        self.backend
    }

    /// The prefix of every table and procedure fencelock installs (default `fencelock_`):
    /// lowercase ASCII letters, digits and `_`, not starting with a digit, 1 to
    /// [`MAX_PREFIX_LEN`] bytes (checked by [`connect`](Self::connect); `from_url` checks
    /// `?prefix=` at once).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The configured prefix.
    pub fn prefix_name(&self) -> &str {
        &self.prefix
    }

    /// The database the URL names.
    pub fn database_name(&self) -> String {
        let raw = self.base.path().trim_start_matches('/');
        connect_options(&self.base)
            .ok()
            .and_then(|o| o.get_database().map(str::to_owned))
            .unwrap_or_else(|| raw.to_owned())
    }

    /// Connections in the shared pool used by `inspect`, the storage and `advance_token`
    /// (default 10).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// Connections available to sessions that hold a lock or wait for one (default 100): each
    /// lock held by [`MySqlLockBackend`](crate::MySqlLockBackend) occupies one for the life of
    /// its lease, and each key waited for in this process one more while a waiter blocks.
    pub fn session_pool_size(mut self, size: u32) -> Self {
        self.session_pool_size = size;
        self
    }

    /// How long one operation may take before it fails with
    /// [`Error::Unavailable`] (default 5 s).
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// The largest value [`MySqlStorage`](crate::MySqlStorage) accepts, in bytes (default
    /// [`DEFAULT_MAX_VALUE_LEN`], lowered to fit the server's `max_allowed_packet`). At least
    /// 1 MiB; [`connect`](Self::connect) refuses a value the server's `max_allowed_packet`
    /// cannot carry.
    pub fn max_value_len(mut self, len: usize) -> Self {
        self.max_value_len = Some(len);
        self
    }

    /// Whether [`connect`](Self::connect) creates the tables and procedures it needs when they
    /// are missing (default `true`). Turn it off when an operator installs them.
    pub fn install(mut self, install: bool) -> Self {
        self.install = install;
        self
    }

    /// The driver's connect options for this config.
    pub fn connect_options(&self) -> Result<MySqlConnectOptions> {
        let options = connect_options(&self.base)?;
        crate::tls::ensure_crypto_provider();
        let options = match self.tls_ca.as_deref() {
            Some(ca) => options.ssl_ca(ca),
            None => options,
        };
        Ok(match self.tls_mode() {
            Some(mode) => options.ssl_mode(mode.sqlx()),
            None => options,
        })
    }

    /// How connections use TLS: the URL's `ssl-mode`, `verify_ca` for an `ssl-ca` alone or
    /// with `required`; `None` for the driver's default (`preferred`).
    pub fn tls_mode(&self) -> Option<MySqlTlsMode> {
        match (self.tls_mode, &self.tls_ca) {
            (None | Some(MySqlTlsMode::Required), Some(_)) => Some(MySqlTlsMode::VerifyCa),
            (mode, _) => mode,
        }
    }

    /// Whether a password would cross to a server that is not on this machine over a
    /// connection whose server is not verified (plain, or TLS without a CA check): the
    /// warning [`connect`](Self::connect) gives.
    pub(crate) fn password_unprotected(&self) -> bool {
        fencelock_core::password_exposed(
            self.base.password().is_some(),
            &host_of(&self.base),
            self.tls_mode().is_some_and(MySqlTlsMode::verifies),
        )
    }

    /// Connects, installs the tables and procedures (unless turned off), and returns the
    /// database handle the backend, the storage and the fence come from.
    pub async fn connect(&self) -> Result<MySqlDatabase> {
        validate_prefix(&self.prefix)?;
        check_tls(self.tls_mode, self.tls_ca.as_deref())?;
        if self.password_unprotected() {
            tracing::warn!(
                "the password for {} crosses a connection whose server is not verified: use \
                 ssl-mode=verify_identity&ssl-ca=/path/ca.pem (DESIGN.md 8.3)",
                self.redacted_url()
            );
        }
        if self.pool_size == 0 || self.session_pool_size == 0 {
            return Err(Error::config("MySQL pool sizes must be at least 1"));
        }
        if self.operation_timeout.is_zero() {
            return Err(Error::config("MySQL operation timeout must be above zero"));
        }
        MySqlDatabase::connect(self).await
    }
}

/// The driver's options for `base` (host, port, user, password, database; no query).
fn connect_options(base: &Url) -> Result<MySqlConnectOptions> {
    let options = MySqlConnectOptions::from_url(base).map_err(|e| Error::InvalidConfig {
        message: format!("MySQL URL {}: {e}", shown(base)),
        source: None,
    })?;
    // The driver keeps an IPv6 address's brackets; the socket address needs it bare.
    Ok(options
        .host(&host_of(base))
        .port(base.port().unwrap_or(DEFAULT_PORT)))
}

fn host_of(url: &Url) -> String {
    match url.host() {
        Some(Host::Ipv6(addr)) => addr.to_string(),
        Some(Host::Ipv4(addr)) => addr.to_string(),
        Some(Host::Domain(name)) => name.to_owned(),
        None => String::new(),
    }
}

/// Checks a table prefix: lowercase ASCII letters, digits and `_`, not starting with a digit,
/// 1 to [`MAX_PREFIX_LEN`] bytes. It is pasted into SQL as part of identifiers, so nothing else
/// may pass.
pub fn validate_prefix(prefix: &str) -> Result<()> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    let reason = if prefix.is_empty() {
        Some("is empty")
    } else if prefix.len() > MAX_PREFIX_LEN {
        Some("is longer than 32 bytes")
    } else if prefix.starts_with(|c: char| c.is_ascii_digit()) {
        Some("starts with a digit")
    } else if !prefix.chars().all(allowed) {
        Some("may hold only lowercase ASCII letters, digits and `_`")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(Error::config(format!(
            "MySQL table prefix {prefix:?} {reason}"
        ))),
        None => Ok(()),
    }
}
