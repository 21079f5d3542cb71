//! The URL grammar: `from_url`, `to_url`, hosts, and the driver's connect options.

use std::str::FromStr;
use std::time::Duration;

use fencelock_core::url::{Known, Options, decode_part, port_problem, redact, safe_to_echo};
use fencelock_core::{Error, HostPort, Result};
use sqlx::postgres::{PgConnectOptions, PgSslMode};
use url::{Host, Url, form_urlencoded};

use super::{
    DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT, DEFAULT_PORT, DEFAULT_SCHEMA, PgBackendKind, PgConfig,
    PgPooler, validate_schema,
};

/// The query options fencelock reads itself.
const FENCELOCK_OPTIONS: &[&str] = &["backend", "schema", "pooler", IDLE_IN_TRANSACTION];

/// Every option a Postgres URL takes: fencelock's own, then those that go to the driver
/// (`sqlx`), as it spells them, with the spellings of one driver setting as aliases (given
/// twice, the driver would keep the last: `sslmode=require&sslmode=disable` connecting
/// without TLS). Everything else is refused, so a typo is an error instead of a silently
/// ignored setting.
const KNOWN_OPTIONS: &[Known] = &[
    Known::new("backend"),
    Known::new("schema"),
    Known::new("pooler"),
    Known::new(IDLE_IN_TRANSACTION),
    Known::with_aliases("sslmode", &["ssl-mode"]),
    Known::with_aliases("sslrootcert", &["ssl-root-cert", "ssl-ca"]),
    Known::with_aliases("sslcert", &["ssl-cert"]),
    Known::with_aliases("sslkey", &["ssl-key"]),
    Known::new("statement-cache-capacity"),
    Known::new("application_name"),
    Known::new("options"),
    // `-c name=value` startup parameters: `options[statement_timeout]=5s`.
    Known::indexed("options"),
];

/// Connection parameters of libpq's query form that a fencelock URL writes in the URL itself.
const IN_THE_URL: &[&str] = &["host", "hostaddr", "port", "user", "password", "dbname"];

impl PgConfig {
    /// The URL schemes this config owns.
    pub const SCHEMES: &'static [&'static str] = &["postgres", "postgresql"];

    /// A configuration from a `postgres://` or `postgresql://` URL (grammar above), checked
    /// eagerly and completely. Anything wrong is [`Error::InvalidConfig`] naming what is
    /// wrong; the message never contains the password.
    pub fn from_url(url: &str) -> Result<Self> {
        Self::parse_url(url).map_err(|e| {
            if safe_to_echo(url) {
                return e;
            }
            // An `@` after the first `/`, `?` or `#`: what the parser read as a port, a path
            // or an option may be a piece of the password, so no part of it is quoted.
            Error::config(format!(
                "Postgres URL {} cannot be read: a user name or password holding `/`, `?` or \
                 `#` must be percent-encoded (and an `@` in an option value written `%40`)",
                redact(url)
            ))
        })
    }

    fn parse_url(url: &str) -> Result<Self> {
        let scheme = url.split_once("://").map(|(scheme, _)| scheme);
        if !scheme.is_some_and(|s| Self::SCHEMES.iter().any(|k| s.eq_ignore_ascii_case(k))) {
            return Err(Error::config(format!(
                "{} is not a Postgres URL: expected postgres://user@host[:port]/database",
                redact(url)
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
        // (user, database) or cuts a password sent in clear short. Text that is not UTF-8
        // is refused too, as the driver would.
        let context = format!("Postgres URL {shown}");
        for (what, raw) in [
            ("user name", parsed.username()),
            ("password", parsed.password().unwrap_or_default()),
            ("database name", database),
        ] {
            decode_part(what, raw).map_err(|e| e.in_context(&context))?;
        }
        let query = parsed.query().unwrap_or_default();
        if let Some((name, _)) =
            form_urlencoded::parse(query.as_bytes()).find(|(name, _)| IN_THE_URL.contains(&&**name))
        {
            return Err(Error::config(format!(
                "{context}: give `{name}` in the URL itself, not as an option"
            )));
        }
        let options = Options::parse(query, KNOWN_OPTIONS).map_err(|e| e.in_context(&context))?;
        let backend = options.get("backend").map(str::parse).transpose()?;
        let schema = options.get("schema").map(str::to_owned);
        if let Some(schema) = &schema {
            validate_schema(schema)?;
        }
        let pooler = options.get("pooler").map(str::parse).transpose()?;
        let idle = options
            .get(IDLE_IN_TRANSACTION)
            .map(|text| parse_duration(IDLE_IN_TRANSACTION, text))
            .transpose()?;
        let driver: Vec<(String, String)> = options
            .entries()
            .iter()
            .filter(|entry| !FENCELOCK_OPTIONS.contains(&entry.name))
            .map(|entry| (entry.written.clone(), entry.value.clone()))
            .collect();
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

/// The driver's options for `base` plus the driver query options.
fn connect_options(base: &Url, driver: &[(String, String)]) -> Result<PgConnectOptions> {
    let mut url = base.clone();
    if !driver.is_empty() {
        url.query_pairs_mut().extend_pairs(driver);
    }
    let options = PgConnectOptions::from_str(url.as_str()).map_err(|e| Error::InvalidConfig {
        // The driver's message names the option; the URL is shown redacted.
        message: format!("Postgres URL {}: {e}", shown(base)),
        source: None,
    })?;
    // As libpq: with a root certificate given, `require` verifies the server's certificate
    // against it (`verify-ca`), where the driver alone would check nothing.
    let root_cert = KNOWN_OPTIONS
        .iter()
        .filter(|known| known.name == "sslrootcert")
        .any(|known| {
            driver
                .iter()
                .any(|(name, _)| known.name == name || known.aliases.contains(&name.as_str()))
        });
    Ok(
        if root_cert && matches!(options.get_ssl_mode(), PgSslMode::Require) {
            options.ssl_mode(PgSslMode::VerifyCa)
        } else {
            options
        },
    )
}

/// `url` for messages: the password replaced by `***`, by the one rule of
/// [`fencelock_core::url`].
fn shown(url: &Url) -> String {
    redact(url.as_str())
}

/// A URL the `url` crate refused, as an error that names the problem without the password.
fn parse_error(url: &str, error: url::ParseError) -> Error {
    let shown = redact(url);
    let message = match error {
        url::ParseError::InvalidPort => format!("Postgres URL {shown}: {}", port_problem(url)),
        url::ParseError::EmptyHost => format!("Postgres URL {shown} names no host"),
        other => format!("{shown} is not a valid Postgres URL: {other}"),
    };
    Error::InvalidConfig {
        message,
        source: Some(Box::new(error)),
    }
}
