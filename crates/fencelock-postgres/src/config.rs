//! `PgConfig`: the `postgres://` grammar, validation, and the typed settings of a connection.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use fencelock_core::{Error, HostPort, Result};
use sqlx::postgres::PgConnectOptions;
use url::{Host, Url};

/// The schema used when none is configured.
pub const DEFAULT_SCHEMA: &str = "fencelock";

/// The longest schema name accepted, so that the notification channel
/// `fencelock_<schema>` stays within Postgres' 63-byte identifier limit.
pub const MAX_SCHEMA_LEN: usize = 48;

/// How long a transaction of [`PgStorage::transaction`](crate::PgStorage::transaction) may sit
/// idle before the server ends it, unless configured ([`PgConfig::idle_in_transaction_timeout`]).
pub const DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT: Duration = Duration::from_secs(30);

/// The port used when a URL names none.
pub const DEFAULT_PORT: u16 = 5432;

/// The query options of a URL that go to the driver (`sqlx`), as it spells them. Everything
/// else is refused, so a typo is an error instead of a silently ignored setting.
const DRIVER_OPTIONS: &[&str] = &[
    "sslmode",
    "ssl-mode",
    "sslrootcert",
    "ssl-root-cert",
    "ssl-ca",
    "sslcert",
    "ssl-cert",
    "sslkey",
    "ssl-key",
    "statement-cache-capacity",
    "application_name",
    "options",
];

/// The lock backend a [`PgConfig`] chooses with `?backend=`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PgBackendKind {
    /// `lease` (default): [`PgLeaseBackend`](crate::PgLeaseBackend), the lease table.
    #[default]
    Lease,
    /// `advisory`: [`PgAdvisoryBackend`](crate::PgAdvisoryBackend), session advisory locks.
    Advisory,
}

impl PgBackendKind {
    /// Every kind, in the order the docs list them.
    pub const ALL: &'static [PgBackendKind] = &[PgBackendKind::Lease, PgBackendKind::Advisory];

    /// The name used in `?backend=`.
    pub fn as_str(self) -> &'static str {
        match self {
            PgBackendKind::Lease => "lease",
            PgBackendKind::Advisory => "advisory",
        }
    }
}

/// Whether connections go through a transaction-mode pooler (`?pooler=`), which decides how
/// fencelock sends its statements and whether the advisory backend can work at all.
///
/// Behind PgBouncer in transaction mode (before 1.21, or without `max_prepared_statements`)
/// named prepared statements do not survive from one transaction to the next, and a session
/// is only one's own for the length of a transaction. With [`Transaction`](Self::Transaction)
/// every fencelock statement is sent as one simple-protocol message (its parameters written
/// into the text as inert hex and number literals), which runs whole on one server connection;
/// release wake-ups poll instead of `LISTEN`ing; and the advisory backend refuses to work,
/// since it holds each lock in a session. On a direct connection prepared statements are
/// kept: they are the fast path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum PgPooler {
    /// `detect` (default): find out on first use. Two fresh connections each ask the server
    /// for their session's process id; on a direct connection two open sessions never share
    /// one, so the same id twice proves a transaction pooler. Different ids do not prove its
    /// absence (a busy pooler may hand out two server connections): say what you have.
    #[default]
    Detect,
    /// `none`: a direct connection (or a session-mode pooler); named prepared statements.
    None,
    /// `transaction`: a transaction-mode pooler such as PgBouncer `pool_mode = transaction`.
    Transaction,
}

impl PgPooler {
    /// Every setting, in the order the docs list them.
    pub const ALL: &'static [PgPooler] = &[PgPooler::Detect, PgPooler::None, PgPooler::Transaction];

    /// The name used in `?pooler=`.
    pub fn as_str(self) -> &'static str {
        match self {
            PgPooler::Detect => "detect",
            PgPooler::None => "none",
            PgPooler::Transaction => "transaction",
        }
    }
}

impl fmt::Display for PgPooler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PgPooler {
    type Err = Error;

    /// `detect`, `none` or `transaction`; anything else is [`Error::InvalidConfig`].
    fn from_str(s: &str) -> Result<Self> {
        PgPooler::ALL
            .iter()
            .copied()
            .find(|mode| mode.as_str() == s)
            .ok_or_else(|| {
                Error::config(format!(
                    "unknown pooler mode {s:?}: use `detect`, `none` or `transaction`"
                ))
            })
    }
}

impl fmt::Display for PgBackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for PgBackendKind {
    type Err = Error;

    /// `lease` or `advisory`; anything else is [`Error::InvalidConfig`].
    fn from_str(s: &str) -> Result<Self> {
        PgBackendKind::ALL
            .iter()
            .copied()
            .find(|kind| kind.as_str() == s)
            .ok_or_else(|| {
                Error::config(format!(
                    "unknown Postgres backend {s:?}: use `lease` or `advisory`"
                ))
            })
    }
}

/// How to reach Postgres, which lock backend to use, and where fencelock keeps its tables.
///
/// The URL grammar (`from_url` / `to_url`):
///
/// ```text
/// postgres[ql]://[user[:password]@]host[:port][/database][?backend=lease|advisory][&schema=name][&pooler=detect|none|transaction][&idle_in_transaction_timeout=30s][&<driver options>]
/// ```
///
/// - `backend` chooses the lock backend ([`PgBackendKind`], default `lease`);
/// - `pooler` says whether the connections go through a transaction-mode pooler such as
///   PgBouncer ([`PgPooler`], default `detect`);
/// - `idle_in_transaction_timeout` bounds how long a transaction may sit idle
///   ([`idle_in_transaction_timeout`](Self::idle_in_transaction_timeout), default 30 s);
/// - `schema` names the schema of fencelock's tables (default `fencelock`; see
///   [`schema`](Self::schema) for the allowed names);
/// - driver options are passed to `sqlx` and kept as written: `sslmode`, `sslrootcert`,
///   `sslcert`, `sslkey` (and their dashed spellings), `statement-cache-capacity`,
///   `application_name`, `options`. Any other option is refused, and so are `host`, `port`,
///   `user`, `password` and `dbname` as options: they go in the URL itself.
///
/// `Display` and `Debug` show the URL with the password replaced by `***`; [`to_url`](Self::to_url)
/// gives it back whole, and `from_url(&config.to_url())` equals `config`.
///
/// ```
/// use fencelock_postgres::{PgBackendKind, PgConfig};
/// let config = PgConfig::from_url(
///     "postgres://app:secret@db.internal:5433/orders?backend=advisory&schema=locks&sslmode=require",
/// )?;
/// assert_eq!(config.backend_kind(), PgBackendKind::Advisory);
/// assert_eq!(config.schema_name(), "locks");
/// assert_eq!(
///     config.to_string(),
///     "postgres://app:***@db.internal:5433/orders?sslmode=require&backend=advisory&schema=locks",
/// );
/// assert_eq!(PgConfig::from_url(&config.to_url())?, config);
/// # Ok::<(), fencelock_core::Error>(())
/// ```
#[derive(Clone)]
pub struct PgConfig {
    /// Scheme, credentials, host, port and database; no query.
    base: Url,
    /// The driver options, in URL order.
    driver: Vec<(String, String)>,
    /// Built from `base` and `driver` whenever either changes.
    pub(crate) options: PgConnectOptions,
    pub(crate) backend: PgBackendKind,
    pub(crate) schema: String,
    pub(crate) pooler: PgPooler,
    pub(crate) pool_size: u32,
    pub(crate) holder_pool_size: u32,
    pub(crate) operation_timeout: Duration,
    pub(crate) idle_in_transaction_timeout: Duration,
    pub(crate) migrate: bool,
}

impl PartialEq for PgConfig {
    /// Compares everything the config holds; the connect options are derived from the URL.
    fn eq(&self, other: &Self) -> bool {
        self.base == other.base
            && self.driver == other.driver
            && self.backend == other.backend
            && self.schema == other.schema
            && self.pooler == other.pooler
            && self.pool_size == other.pool_size
            && self.holder_pool_size == other.holder_pool_size
            && self.operation_timeout == other.operation_timeout
            && self.idle_in_transaction_timeout == other.idle_in_transaction_timeout
            && self.migrate == other.migrate
    }
}

impl Eq for PgConfig {}

impl fmt::Debug for PgConfig {
    // Hand-written so that a password never reaches a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PgConfig")
            .field("url", &self.redacted_url())
            .field("pooler", &self.pooler)
            .field("pool_size", &self.pool_size)
            .field("holder_pool_size", &self.holder_pool_size)
            .field("operation_timeout", &self.operation_timeout)
            .field(
                "idle_in_transaction_timeout",
                &self.idle_in_transaction_timeout,
            )
            .field("migrate", &self.migrate)
            .finish()
    }
}

impl fmt::Display for PgConfig {
    /// The URL with the password replaced by `***`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted_url())
    }
}

impl FromStr for PgConfig {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::from_url(s)
    }
}

impl PgConfig {
    /// The URL schemes this config owns.
    pub const SCHEMES: &'static [&'static str] = &["postgres", "postgresql"];

    /// A configuration from a `postgres://` or `postgresql://` URL (grammar above), checked
    /// eagerly and completely. Anything wrong is [`Error::InvalidConfig`] naming what is
    /// wrong; the message never contains the password.
    pub fn from_url(url: &str) -> Result<Self> {
        let scheme = url.split_once("://").map(|(scheme, _)| scheme);
        if !scheme.is_some_and(|s| Self::SCHEMES.iter().any(|k| s.eq_ignore_ascii_case(k))) {
            return Err(Error::config(format!(
                "{} is not a Postgres URL: expected postgres://user@host[:port]/database",
                redact_raw(url)
            )));
        }
        let parsed = Url::parse(url).map_err(|e| parse_error(url, e))?;
        let shown = shown(&parsed);
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err(Error::config(format!("Postgres URL {shown} names no host")));
        }
        if parsed.port() == Some(0) {
            return Err(Error::config(format!(
                "Postgres URL {shown}: port 0 is out of range (1 to 65535)"
            )));
        }
        if parsed.fragment().is_some() {
            return Err(Error::config(format!(
                "Postgres URL {shown} takes no fragment (`#...`)"
            )));
        }
        let database = parsed.path().trim_start_matches('/');
        if database.contains('/') {
            return Err(Error::config(format!(
                "Postgres URL {shown}: the path must be one database name"
            )));
        }
        // The protocol ends these strings with a NUL: one inside breaks the startup packet
        // (user, database) or cuts a password sent in clear short.
        for (what, raw) in [
            ("user name", parsed.username()),
            ("password", parsed.password().unwrap_or_default()),
            ("database name", database),
        ] {
            if raw.contains("%00") {
                return Err(Error::config(format!(
                    "Postgres URL {shown}: the {what} holds a NUL character (%00), which \
                     PostgreSQL cannot take"
                )));
            }
        }
        let mut backend = None;
        let mut schema = None;
        let mut pooler = None;
        let mut idle = None;
        let mut driver: Vec<(String, String)> = Vec::new();
        for (name, value) in parsed.query_pairs() {
            match &*name {
                "backend" if backend.is_none() => backend = Some(value.parse()?),
                "schema" if schema.is_none() => {
                    validate_schema(&value)?;
                    schema = Some(value.into_owned());
                }
                "pooler" if pooler.is_none() => pooler = Some(value.parse()?),
                IDLE_IN_TRANSACTION if idle.is_none() => {
                    idle = Some(parse_duration(IDLE_IN_TRANSACTION, &value)?);
                }
                "backend" | "schema" | "pooler" | IDLE_IN_TRANSACTION => {
                    return Err(Error::config(format!(
                        "Postgres URL {shown} repeats option `{name}`"
                    )));
                }
                "host" | "hostaddr" | "port" | "user" | "password" | "dbname" => {
                    return Err(Error::config(format!(
                        "Postgres URL {shown}: give `{name}` in the URL itself, not as an option"
                    )));
                }
                known if DRIVER_OPTIONS.contains(&known) || is_options_entry(known) => {
                    // The driver would keep the last of two (`sslmode=require&sslmode=disable`
                    // connecting without TLS): a setting is given once, under either spelling.
                    if let Some((first, _)) = driver
                        .iter()
                        .find(|(given, _)| driver_setting(given) == driver_setting(known))
                    {
                        return Err(Error::config(format!(
                            "Postgres URL {shown} repeats option `{known}` (also given as \
                             `{first}`)"
                        )));
                    }
                    driver.push((name.into_owned(), value.into_owned()));
                }
                other => {
                    return Err(Error::config(format!(
                        "Postgres URL {shown}: unknown option `{other}` (fencelock reads \
                         `backend`, `schema`, `pooler` and `{IDLE_IN_TRANSACTION}`; the driver \
                         reads {})",
                        DRIVER_OPTIONS.join(", ")
                    )));
                }
            }
        }
        let mut base = parsed;
        base.set_query(None);
        let options = connect_options(&base, &driver)?;
        Ok(PgConfig {
            base,
            driver,
            options,
            backend: backend.unwrap_or_default(),
            schema: schema.unwrap_or_else(|| DEFAULT_SCHEMA.to_owned()),
            pooler: pooler.unwrap_or_default(),
            idle_in_transaction_timeout: idle.unwrap_or(DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT),
            ..Self::defaults(PgConnectOptions::new_without_pgpass())
        })
    }

    /// A configuration from ready-made connect options. Its [`to_url`](Self::to_url) is what
    /// `sqlx` can write back (host, port, user, password, database, TLS settings).
    pub fn from_options(options: PgConnectOptions) -> Self {
        use sqlx::ConnectOptions;
        let mut base = options.to_url_lossy();
        let mut driver: Vec<(String, String)> = base.query_pairs().into_owned().collect();
        base.set_query(None);
        if let Some(name) = options.get_application_name() {
            driver.push(("application_name".to_owned(), name.to_owned()));
        }
        if let Some(startup) = options.get_options() {
            driver.push(("options".to_owned(), startup.to_owned()));
        }
        PgConfig {
            base,
            driver,
            ..Self::defaults(options)
        }
    }

    fn defaults(options: PgConnectOptions) -> Self {
        PgConfig {
            // Replaced by every constructor.
            base: Url::from_str("postgres://localhost")
                .unwrap_or_else(|_| unreachable!("a constant URL parses")),
            driver: Vec::new(),
            options,
            backend: PgBackendKind::default(),
            schema: DEFAULT_SCHEMA.to_owned(),
            pooler: PgPooler::default(),
            pool_size: 10,
            holder_pool_size: 64,
            operation_timeout: Duration::from_secs(5),
            idle_in_transaction_timeout: DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT,
            migrate: true,
        }
    }

    /// The full URL, **credentials included**, such that `from_url` gives this config back.
    /// Builder settings that have no URL form (pool sizes, time-outs) are not in it.
    pub fn to_url(&self) -> String {
        self.url(false)
    }

    /// [`to_url`](Self::to_url) with the password replaced by `***`: what `Display` and
    /// `Debug` show.
    pub fn redacted_url(&self) -> String {
        self.url(true)
    }

    /// The scheme the URL prints (`postgres` or `postgresql`, lower case).
    pub(crate) fn url_scheme(&self) -> &str {
        self.base.scheme()
    }

    fn url(&self, redacted: bool) -> String {
        let mut url = self.base.clone();
        if redacted && url.password().is_some() {
            // Setting a password only fails on URLs without a host, which `base` never is.
            let _ = url.set_password(Some("***"));
        }
        let mut pairs: Vec<(&str, &str)> = self
            .driver
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        if self.backend != PgBackendKind::default() {
            pairs.push(("backend", self.backend.as_str()));
        }
        if self.schema != DEFAULT_SCHEMA {
            pairs.push(("schema", &self.schema));
        }
        if self.pooler != PgPooler::default() {
            pairs.push(("pooler", self.pooler.as_str()));
        }
        let idle = format!("{}ms", self.idle_in_transaction_timeout.as_millis());
        if self.idle_in_transaction_timeout != DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT {
            pairs.push((IDLE_IN_TRANSACTION, &idle));
        }
        if !pairs.is_empty() {
            url.query_pairs_mut().extend_pairs(pairs);
        }
        url.into()
    }

    /// The servers this config reaches, in URL order (one for Postgres), default port filled
    /// in.
    pub fn hosts(&self) -> Vec<HostPort> {
        let host = match self.base.host() {
            Some(Host::Ipv6(addr)) => addr.to_string(),
            Some(Host::Ipv4(addr)) => addr.to_string(),
            Some(Host::Domain(name)) => name.to_owned(),
            None => String::new(),
        };
        vec![HostPort::new(
            host,
            self.base.port().unwrap_or(DEFAULT_PORT),
        )]
    }

    /// The same config pointed at other servers: `hosts` must hold exactly one (Postgres URLs
    /// name one server), else [`Error::InvalidConfig`].
    pub fn with_hosts(mut self, hosts: &[HostPort]) -> Result<Self> {
        let [target] = hosts else {
            return Err(Error::config(format!(
                "a Postgres config reaches one server; {} given",
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
        self.options = connect_options(&base, &self.driver)?;
        self.base = base;
        Ok(self)
    }

    /// Uses `kind` as the lock backend (the URL's `?backend=`).
    pub fn with_backend_kind(mut self, kind: PgBackendKind) -> Self {
        self.backend = kind;
        self
    }

    /// Says whether the connections go through a transaction-mode pooler (the URL's
    /// `?pooler=`; see [`PgPooler`]).
    pub fn with_pooler(mut self, pooler: PgPooler) -> Self {
        self.pooler = pooler;
        self
    }

    /// The pooler setting (`?pooler=`, default [`PgPooler::Detect`]).
    pub fn pooler(&self) -> PgPooler {
        self.pooler
    }

    /// The lock backend this config chooses (`?backend=`, default [`PgBackendKind::Lease`]).
    pub fn backend_kind(&self) -> PgBackendKind {
        self.backend
    }

    /// The schema that holds fencelock's tables (default `fencelock`): lowercase ASCII letters,
    /// digits and `_`, not starting with a digit, at most [`MAX_SCHEMA_LEN`] bytes (checked by
    /// [`connect`](Self::connect); `from_url` checks `?schema=` at once). It is created if
    /// missing.
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// The configured schema name.
    pub fn schema_name(&self) -> &str {
        &self.schema
    }

    /// Names fencelock's sessions `name` in `pg_stat_activity` (the driver option
    /// `application_name`, default `fencelock`), replacing any name the URL gave.
    pub fn application_name(mut self, name: &str) -> Self {
        self.driver.retain(|(k, _)| k != "application_name");
        self.driver
            .push(("application_name".to_owned(), name.to_owned()));
        self.options = self.options.application_name(name);
        self
    }

    /// Connections in the shared pool used by the lease table, the storage and transactions
    /// (default 10).
    pub fn pool_size(mut self, size: u32) -> Self {
        self.pool_size = size;
        self
    }

    /// Connections available to hold advisory locks (default 64): each lock held by
    /// [`PgAdvisoryBackend`](crate::PgAdvisoryBackend) occupies one for the life of its lease.
    pub fn holder_pool_size(mut self, size: u32) -> Self {
        self.holder_pool_size = size;
        self
    }

    /// The longest any single database call may take, connecting included (default 5 s).
    /// Past it the call fails with [`Error::Unavailable`].
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// How long a transaction of [`PgStorage::transaction`](crate::PgStorage::transaction) may
    /// sit idle (the client sending nothing: paused, stuck, waiting on something else) before
    /// the server ends its session, rolling it back and freeing its lock (default
    /// [`DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT`], 30 s; zero: never). In the URL:
    /// `?idle_in_transaction_timeout=30s` (a whole number of `ms`, `s` or `min`). Set as
    /// `idle_in_transaction_session_timeout` for that transaction only; TCP keepalives cannot
    /// do this, since a paused process's kernel still answers them. Whole milliseconds.
    pub fn idle_in_transaction_timeout(mut self, timeout: Duration) -> Self {
        self.idle_in_transaction_timeout = timeout;
        self
    }

    /// Whether [`connect`](Self::connect) creates the schema and applies the embedded
    /// migrations (default `true`). Turn it off when an operator applies them.
    pub fn run_migrations(mut self, migrate: bool) -> Self {
        self.migrate = migrate;
        self
    }

    /// The connect options the driver gets.
    pub fn connect_options(&self) -> &PgConnectOptions {
        &self.options
    }
}

/// The URL option of [`PgConfig::idle_in_transaction_timeout`].
const IDLE_IN_TRANSACTION: &str = "idle_in_transaction_timeout";

/// A duration option: a whole number followed by `ms`, `s` or `min`.
fn parse_duration(option: &str, text: &str) -> Result<Duration> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let count: u64 = digits.parse().map_err(|_| {
        Error::config(format!(
            "option `{option}`: {text:?} is not a duration (write 500ms, 30s or 2min)"
        ))
    })?;
    let duration = match unit {
        "ms" => Duration::from_millis(count),
        "s" => Duration::from_secs(count),
        "min" => Duration::from_secs(count.saturating_mul(60)),
        _ => {
            return Err(Error::config(format!(
                "option `{option}`: {text:?} has no unit ms, s or min (write 500ms, 30s or 2min)"
            )));
        }
    };
    // idle_in_transaction_session_timeout is a 32-bit count of milliseconds.
    if duration.as_millis() > i32::MAX as u128 {
        return Err(Error::config(format!(
            "option `{option}`: {text:?} is longer than PostgreSQL accepts (about 24 days)"
        )));
    }
    Ok(duration)
}

/// The driver setting an option name sets: `sslmode` and `ssl-mode` are one, and so are
/// `sslrootcert`, `ssl-root-cert` and `ssl-ca`.
fn driver_setting(name: &str) -> String {
    match name {
        "ssl-ca" => "sslrootcert".to_owned(),
        other => other.replace('-', ""),
    }
}

/// `-c name=value` style startup parameters: `options[statement_timeout]=5s`.
fn is_options_entry(name: &str) -> bool {
    name.strip_prefix("options[")
        .and_then(|rest| rest.strip_suffix(']'))
        .is_some_and(|key| !key.is_empty())
}

/// The driver's options for `base` plus the driver query options.
fn connect_options(base: &Url, driver: &[(String, String)]) -> Result<PgConnectOptions> {
    let mut url = base.clone();
    if !driver.is_empty() {
        url.query_pairs_mut().extend_pairs(driver);
    }
    PgConnectOptions::from_str(url.as_str()).map_err(|e| Error::InvalidConfig {
        // The driver's message names the option; the URL is shown redacted.
        message: format!("Postgres URL {}: {e}", shown(base)),
        source: None,
    })
}

/// A URL parse failure, explained. The `url` crate reports a port above 65535 as an invalid
/// port, which is worth saying plainly.
fn parse_error(raw: &str, error: url::ParseError) -> Error {
    let shown = redact_raw(raw);
    let message = match (error, raw_port(raw)) {
        (url::ParseError::InvalidPort, Some(port))
            if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            format!("Postgres URL {shown}: port {port} is out of range (1 to 65535)")
        }
        (url::ParseError::InvalidPort, Some(port)) => {
            format!("Postgres URL {shown}: port {port:?} is not a number")
        }
        (url::ParseError::EmptyHost, _) => format!("Postgres URL {shown} names no host"),
        (other, _) => format!("{shown} is not a valid Postgres URL: {other}"),
    };
    // The parse error itself never holds the input, but is dropped anyway: the message says it.
    Error::config(message)
}

/// The authority part of a raw URL: between `://` and the first `/`, `?` or `#`.
fn raw_authority(raw: &str) -> Option<(usize, &str)> {
    let start = raw.find("://")? + 3;
    let rest = &raw[start..];
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    Some((start, &rest[..end]))
}

/// The port text of a raw URL's authority, if it has one.
fn raw_port(raw: &str) -> Option<&str> {
    let (_, authority) = raw_authority(raw)?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    let after_bracket = host_port.rsplit_once(']').map_or(host_port, |(_, p)| p);
    after_bracket.rsplit_once(':').map(|(_, port)| port)
}

/// A raw (possibly unparsable) URL with the password of its authority replaced by `***` and
/// without its query.
fn redact_raw(raw: &str) -> String {
    let Some((start, authority)) = raw_authority(raw) else {
        // Not URL-shaped: show nothing of it, it may be all secret.
        return "the given text".to_owned();
    };
    // The path, without query or fragment: an option value may be a secret.
    let rest = &raw[start + authority.len()..];
    let path = &rest[..rest.find(['?', '#']).unwrap_or(rest.len())];
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            let password = if userinfo.contains(':') { ":***" } else { "" };
            format!("{}{user}{password}@{host}{path}", &raw[..start])
        }
        None => format!("{}{authority}{path}", &raw[..start]),
    }
}

/// A parsed URL as error messages show it: password replaced by `***`, no query (an option
/// value may be a secret; messages name the option at fault).
fn shown(url: &Url) -> String {
    let mut url = url.clone();
    url.set_query(None);
    url.set_fragment(None);
    redact(&url)
}

/// A parsed URL with its password replaced by `***`.
pub(crate) fn redact(url: &Url) -> String {
    let mut url = url.clone();
    if url.password().is_some() {
        let _ = url.set_password(Some("***"));
    }
    url.into()
}

/// Says what went wrong when connecting failed, naming the server (`host:port`, never the
/// password). On TLS, as [`Error::InvalidConfig`] (trying again with the same URL cannot
/// succeed): a server certificate that the trusted CAs did not sign (or that is for another
/// host name, or expired) is "not trusted"; a server that does not speak TLS while `sslmode`
/// asks for it is said so. A server that answered something other than PostgreSQL's protocol
/// (another kind of server at that port) is [`Error::InvalidConfig`] too. Every other error
/// keeps its variant, the server in front of its message.
pub(crate) fn connect_failure(server: &[HostPort], error: Error) -> Error {
    let server = server
        .first()
        .map_or_else(|| "the server".to_owned(), |s| format!("server {s}"));
    let source = match &error {
        Error::Unavailable {
            source: Some(source),
            ..
        }
        | Error::Backend {
            source: Some(source),
            ..
        } => source.downcast_ref::<sqlx::Error>(),
        _ => None,
    };
    let message = match source {
        Some(sqlx::Error::Tls(e)) => format!(
            "Postgres {server}: TLS could not be set up ({e}); the URL's sslmode asks for \
             TLS: turn `ssl = on` at the server, or use sslmode=prefer or disable"
        ),
        Some(sqlx::Error::Io(io)) => match untrusted(io) {
            Some(why) => format!(
                "Postgres {server}: its TLS certificate was not trusted ({why}); trust the CA \
                 that signed it with `sslrootcert=/path/ca.pem`"
            ),
            None => return error.in_context(&format!("Postgres {server}")),
        },
        Some(sqlx::Error::Protocol(_)) => format!(
            "Postgres {server}: not a PostgreSQL server (it answered something other than the \
             PostgreSQL protocol)"
        ),
        _ => return error.in_context(&format!("Postgres {server}")),
    };
    let (Error::Unavailable { source, .. } | Error::Backend { source, .. }) = error else {
        unreachable!("matched above")
    };
    Error::InvalidConfig { message, source }
}

/// What rustls found wrong with the server's certificate, when that is the I/O error.
#[cfg(feature = "tls")]
fn untrusted(io: &std::io::Error) -> Option<String> {
    match io.get_ref()?.downcast_ref::<rustls::Error>()? {
        rustls::Error::InvalidCertificate(why) => Some(format!("{why:?}")),
        _ => None,
    }
}

#[cfg(not(feature = "tls"))]
fn untrusted(_: &std::io::Error) -> Option<String> {
    None
}

/// Checks a schema name: `[a-z_][a-z0-9_]*`, at most [`MAX_SCHEMA_LEN`] bytes.
pub(crate) fn validate_schema(schema: &str) -> Result<()> {
    let mut chars = schema.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !first_ok || !rest_ok || schema.len() > MAX_SCHEMA_LEN {
        return Err(Error::config(format!(
            "invalid schema name {schema:?}: use lowercase ASCII letters, digits and `_`, \
             not starting with a digit, at most {MAX_SCHEMA_LEN} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;

    fn invalid(url: &str) -> String {
        match PgConfig::from_url(url) {
            Err(Error::InvalidConfig { message, .. }) => message,
            other => panic!("{url:?}: expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn parses_the_grammar() {
        let config = PgConfig::from_url(
            "postgresql://app:s3cret@db:5433/test?backend=advisory&sslmode=disable&schema=locks",
        )
        .unwrap();
        assert_eq!(config.backend_kind(), PgBackendKind::Advisory);
        assert_eq!(config.schema_name(), "locks");
        assert_eq!(config.hosts(), vec![HostPort::new("db", 5433)]);
        assert_eq!(config.options.get_database(), Some("test"));
        assert_eq!(config.options.get_username(), "app");
        assert_eq!(
            config.to_url(),
            "postgresql://app:s3cret@db:5433/test?sslmode=disable&backend=advisory&schema=locks"
        );
        let plain = PgConfig::from_url("postgres://postgres@127.0.0.1/test").unwrap();
        assert_eq!(plain.backend_kind(), PgBackendKind::Lease);
        assert_eq!(plain.schema_name(), DEFAULT_SCHEMA);
        assert_eq!(plain.hosts(), vec![HostPort::new("127.0.0.1", 5432)]);
        assert_eq!(plain.to_url(), "postgres://postgres@127.0.0.1/test");
        assert_eq!(
            PgConfig::from_url("POSTGRES://h/db").unwrap().hosts(),
            vec![HostPort::new("h", 5432)]
        );
    }

    #[test]
    fn round_trips_through_to_url() {
        for url in [
            "postgres://h",
            "postgres://h/db",
            "postgres://u@h:1/db",
            "postgres://u:p%40ss@h:6432/db?backend=lease",
            "postgresql://u:pw@[::1]:5432/db?application_name=my%20app&sslmode=require",
            "postgres://h/db?schema=fencelock&backend=advisory",
            "postgres://h/db?options=-c%20statement_timeout%3D5s&options%5Bwork_mem%5D=4MB",
            "postgres://h/db?ssl-mode=prefer&statement-cache-capacity=10&schema=x_1",
            "postgres://h:6432/db?pooler=transaction",
            "postgres://h/db?backend=advisory&pooler=none&schema=s",
            "postgres://h/db?pooler=detect",
            "postgres://h/db?idle_in_transaction_timeout=1500ms",
            "postgres://h/db?idle_in_transaction_timeout=0ms",
        ] {
            let config = PgConfig::from_url(url).unwrap();
            let again = PgConfig::from_url(&config.to_url()).unwrap();
            assert_eq!(again, config, "{url}");
            assert_eq!(again.to_url(), config.to_url(), "{url}");
        }
        let config = PgConfig::from_url("postgres://h/db?backend=lease&schema=fencelock").unwrap();
        assert_eq!(config, PgConfig::from_url("postgres://h/db").unwrap());
        let config =
            PgConfig::from_url("postgres://h/db?idle_in_transaction_timeout=2min").unwrap();
        assert_eq!(config.idle_in_transaction_timeout, Duration::from_secs(120));
        assert_eq!(
            config.to_url(),
            "postgres://h/db?idle_in_transaction_timeout=120000ms"
        );
        assert_eq!(
            PgConfig::from_url("postgres://h/db?idle_in_transaction_timeout=30s").unwrap(),
            PgConfig::from_url("postgres://h/db").unwrap()
        );
    }

    #[test]
    fn never_shows_the_password() {
        let config = PgConfig::from_url("postgres://app:hunter2@db/test?backend=advisory").unwrap();
        for shown in [
            config.to_string(),
            format!("{config:?}"),
            config.redacted_url(),
        ] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("app:***@db"), "{shown}");
        }
        assert!(config.to_url().contains("hunter2"));
        for url in [
            "postgres://app:hunter2@db:99999/test",
            "postgres://app:hunter2@db:http/test",
            "postgres://app:hunter2@/test",
            "postgres://app:hunter2@db/test?backend=redlock",
            "postgres://app:hunter2@db/test?nosuch=1",
            "postgres://app:hunter2@db/test?sslmode=bogus",
            "postgres://app:hunter2@db/test?schema=Bad",
            "postgres://app:hunter2@db/test?password=hunter2",
            "postgres://app:hunter2@db/test#frag",
            "postgres://app:hunter2@db/a/b",
            "postgres://app:hunter2@[::1/test",
            "mysql://app:hunter2@db/test",
        ] {
            let message = invalid(url);
            assert!(!message.contains("hunter2"), "{url}: {message}");
        }
    }

    #[test]
    fn errors_name_what_is_wrong() {
        let cases = [
            ("postgres://db:99999/test", "port 99999 is out of range"),
            ("postgres://u:p@db:70000", "port 70000 is out of range"),
            ("postgres://db:0/test", "port 0 is out of range"),
            ("postgres://db:http/test", "\"http\" is not a number"),
            ("postgres:///test", "names no host"),
            ("postgres://", "names no host"),
            ("postgres://u:p@/test", "names no host"),
            (
                "postgres://db/test?backend=redlock",
                "unknown Postgres backend \"redlock\"",
            ),
            (
                "postgres://db/test?backend=",
                "unknown Postgres backend \"\"",
            ),
            (
                "postgres://db/test?backend=Advisory",
                "unknown Postgres backend \"Advisory\"",
            ),
            (
                "postgres://db/test?backend=leases",
                "unknown Postgres backend \"leases\"",
            ),
            (
                "postgres://db/test?backend=advisory%20",
                "unknown Postgres backend \"advisory \"",
            ),
            (
                "postgres://db/test?idle_in_transaction_timeout=30",
                "has no unit ms, s or min",
            ),
            (
                "postgres://db/test?idle_in_transaction_timeout=1h",
                "has no unit ms, s or min",
            ),
            (
                "postgres://db/test?idle_in_transaction_timeout=-1s",
                "is not a duration",
            ),
            (
                "postgres://db/test?idle_in_transaction_timeout=100000000s",
                "longer than PostgreSQL accepts",
            ),
            (
                "postgres://db/test?backend=lease&backend=advisory",
                "repeats option `backend`",
            ),
            (
                "postgres://db/test?schema=a&schema=b",
                "repeats option `schema`",
            ),
            (
                "postgres://db/test?schema=Upper",
                "invalid schema name \"Upper\"",
            ),
            ("postgres://db/test?schema=1st", "invalid schema name"),
            ("postgres://db/test?schema=a-b", "invalid schema name"),
            ("postgres://db/test?foo=1", "unknown option `foo`"),
            (
                "postgres://db/test?pooler=pgbouncer",
                "unknown pooler mode \"pgbouncer\"",
            ),
            (
                "postgres://db/test?pooler=none&pooler=transaction",
                "repeats option `pooler`",
            ),
            (
                "postgres://db/test?sslmode=require&sslmode=disable",
                "repeats option `sslmode`",
            ),
            (
                "postgres://db/test?sslmode=require&ssl-mode=disable",
                "repeats option `ssl-mode` (also given as `sslmode`)",
            ),
            (
                "postgres://db/test?sslrootcert=/a.pem&ssl-ca=/b.pem",
                "repeats option `ssl-ca`",
            ),
            (
                "postgres://db/test?options[statement_timeout]=1s&options[statement_timeout]=2s",
                "repeats option `options[statement_timeout]`",
            ),
            ("postgres://u%00@db/test", "the user name holds a NUL"),
            ("postgres://u:p%00w@db/test", "the password holds a NUL"),
            ("postgres://db/te%00st", "the database name holds a NUL"),
            (
                "postgres://db/test?host=other",
                "give `host` in the URL itself",
            ),
            ("postgres://db/test?sslmode=sometimes", "sometimes"),
            ("postgres://db/test#x", "takes no fragment"),
            ("redis://db/0", "is not a Postgres URL"),
            ("db/test", "is not a Postgres URL"),
        ];
        for (url, expected) in cases {
            let message = invalid(url);
            assert!(message.contains(expected), "{url}: {message}");
        }
        let long = format!(
            "postgres://db/test?schema={}",
            "a".repeat(MAX_SCHEMA_LEN + 1)
        );
        assert!(invalid(&long).contains("at most 48 bytes"));
    }

    #[test]
    fn hosts_can_be_replaced() {
        let config = PgConfig::from_url("postgres://u:pw@db:5433/test?backend=advisory").unwrap();
        let moved = config
            .clone()
            .with_hosts(&[HostPort::new("::1", 6432)])
            .unwrap();
        assert_eq!(moved.hosts(), vec![HostPort::new("::1", 6432)]);
        assert_eq!(
            moved.to_url(),
            "postgres://u:pw@[::1]:6432/test?backend=advisory"
        );
        assert_eq!(moved.options.get_port(), 6432);
        assert_eq!(PgConfig::from_url(&moved.to_url()).unwrap(), moved);
        let proxy = config
            .clone()
            .with_hosts(&[HostPort::new("127.0.0.1", 40000)])
            .unwrap();
        assert_eq!(proxy.options.get_host(), "127.0.0.1");
        assert!(config.clone().with_hosts(&[]).is_err());
        assert!(
            config
                .clone()
                .with_hosts(&[HostPort::new("a", 1), HostPort::new("b", 2)])
                .is_err()
        );
        assert!(config.with_hosts(&[HostPort::new("a", 0)]).is_err());
    }

    #[test]
    fn application_name_replaces_the_urls() {
        let config = PgConfig::from_url("postgres://db/test?application_name=old&sslmode=disable")
            .unwrap()
            .application_name("chaos-worker-3");
        assert_eq!(
            config.options.get_application_name(),
            Some("chaos-worker-3")
        );
        assert_eq!(
            config.to_url(),
            "postgres://db/test?sslmode=disable&application_name=chaos-worker-3"
        );
        assert_eq!(PgConfig::from_url(&config.to_url()).unwrap(), config);
    }

    #[test]
    fn backend_kinds_parse_and_print() {
        for kind in PgBackendKind::ALL {
            assert_eq!(kind.as_str().parse::<PgBackendKind>().unwrap(), *kind);
        }
        assert!("Lease".parse::<PgBackendKind>().is_err());
        let config = PgConfig::from_url("postgres://db/test")
            .unwrap()
            .with_backend_kind(PgBackendKind::Advisory);
        assert_eq!(config.to_url(), "postgres://db/test?backend=advisory");
    }

    #[test]
    fn pooler_modes_parse_print_and_round_trip() {
        for mode in PgPooler::ALL {
            assert_eq!(mode.as_str().parse::<PgPooler>().unwrap(), *mode);
            let config = PgConfig::from_url("postgres://db/test")
                .unwrap()
                .with_pooler(*mode);
            assert_eq!(config.pooler(), *mode);
            assert_eq!(PgConfig::from_url(&config.to_url()).unwrap(), config);
        }
        let config = PgConfig::from_url("postgres://db:6432/test?pooler=transaction").unwrap();
        assert_eq!(config.pooler(), PgPooler::Transaction);
        assert_eq!(
            config.to_url(),
            "postgres://db:6432/test?pooler=transaction"
        );
        let default = PgConfig::from_url("postgres://db/test?pooler=detect").unwrap();
        assert_eq!(default.pooler(), PgPooler::Detect);
        assert_eq!(default.to_url(), "postgres://db/test");
        assert!(format!("{config:?}").contains("Transaction"));
        assert_ne!(
            config,
            PgConfig::from_url("postgres://db:6432/test?pooler=none").unwrap()
        );
    }

    #[test]
    fn from_options_writes_a_url() {
        let options = PgConnectOptions::new_without_pgpass()
            .host("db")
            .port(5433)
            .username("u")
            .password("pw")
            .database("test")
            .application_name("app");
        let config = PgConfig::from_options(options);
        assert_eq!(config.hosts(), vec![HostPort::new("db", 5433)]);
        assert!(!config.to_string().contains("pw"));
        let url = config.to_url();
        assert!(url.starts_with("postgres://u:pw@db:5433/test?"), "{url}");
        assert_eq!(PgConfig::from_url(&url).unwrap().to_url(), url);
    }
}
