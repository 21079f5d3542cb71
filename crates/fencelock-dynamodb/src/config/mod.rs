//! `DynamoConfig`: the `dynamodb://` grammar, its validation, and the SDK client it builds.

use std::time::Duration;

use fencelock_core::url::{Known, Options, UrlParts, parse_host, redact, safe_to_echo};
use fencelock_core::{Error, HostPort, Result};
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use url::form_urlencoded;

use crate::table::DynamoTable;

/// The key prefix used when the URL names none: every item fencelock writes has a partition
/// key starting with `fencelock/`.
pub const DEFAULT_PREFIX: &str = "fencelock/";

/// The longest prefix accepted, in bytes (a partition key holds at most 2,048 bytes, and a
/// key or resource name up to 512).
pub const MAX_PREFIX_LEN: usize = 256;

/// The names fencelock gives the item families under a prefix (`<prefix>lock/<key>`,
/// `<prefix>data/<resource>`, `<prefix>chunk/<generation>/<n>`): no `/`-separated part of a
/// prefix may be one of them (DESIGN.md section 5.8, "Prefixes").
pub const FAMILIES: &[&str] = &["lock", "data", "chunk"];

const SCHEME: &str = "dynamodb://";

/// Characters escaped in the access key id and secret key of a rendered URL.
const USERINFO: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b':')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'@')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}')
    .add(b'+')
    .add(b'=')
    .add(b'&');

/// The options a `dynamodb://` URL takes.
const KNOWN: &[Known] = &[
    Known::new("region"),
    Known::new("endpoint"),
    Known::new("prefix"),
    Known::new("create"),
];

/// Where a `?endpoint=` sends requests: plain HTTP (a local emulator) or HTTPS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Endpoint {
    pub(crate) https: bool,
    pub(crate) host: HostPort,
}

impl Endpoint {
    fn url(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}", self.host)
    }
}

/// How to reach a DynamoDB table, and where in it fencelock keeps its items.
///
/// The URL grammar (`from_url` / `to_url`):
///
/// ```text
/// dynamodb://[access_key_id:secret_access_key@]table[?region=..][&endpoint=http://host:port]
///            [&prefix=..][&create=true]
/// ```
///
/// - `table`: the table's name, 3 to 255 characters of `A-Z a-z 0-9 _ . -` (DynamoDB's rule).
///   Its key schema must be one partition key `pk` of type string, and no sort key.
/// - `access_key_id:secret_access_key` (percent-encoded): the credentials. Without them,
///   [`connect`](Self::connect) reads `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY` and
///   `AWS_SESSION_TOKEN` from the environment. The secret key is `***` in `Display`, `Debug`
///   and every error.
/// - `region`: the AWS region; without it, `AWS_REGION` or `AWS_DEFAULT_REGION` at connect.
/// - `endpoint`: `http://host:port` or `https://host[:port]`, for a local emulator (moto,
///   DynamoDB Local) or a VPC endpoint; without it, the region's public endpoint.
/// - `prefix` (default `fencelock/`): starts every partition key fencelock writes
///   (`<prefix>lock/<key>`, `<prefix>data/<resource>`, `<prefix>chunk/..`). Empty, or up to
///   [`MAX_PREFIX_LEN`] bytes ending in `/`, without control characters, and without a
///   `/`-separated part named `lock`, `data` or `chunk` ([`validate_prefix`]).
/// - `create=true`: create the table (on-demand capacity, key `pk` of type string) when it
///   does not exist, and wait until it is active. Default `false`: a missing table is an
///   error saying how to create it.
///
/// Every other option is refused, so a typo is an error instead of a silently ignored
/// setting.
///
/// ```
/// use fencelock_dynamodb::DynamoConfig;
/// let config = DynamoConfig::from_url(
///     "dynamodb://AKIDEXAMPLE:s3cret@locks?region=eu-west-1&prefix=orders%2F",
/// )?;
/// assert_eq!(config.table(), "locks");
/// assert_eq!(config.prefix_name(), "orders/");
/// assert_eq!(
///     config.to_string(),
///     "dynamodb://AKIDEXAMPLE:***@locks?region=eu-west-1&prefix=orders%2F"
/// );
/// assert_eq!(DynamoConfig::from_url(&config.to_url())?, config);
/// # Ok::<(), fencelock_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct DynamoConfig {
    table: String,
    /// Decoded access key id and secret key.
    credentials: Option<(String, String)>,
    region: Option<String>,
    endpoint: Option<Endpoint>,
    prefix: String,
    create: bool,
    pub(crate) operation_timeout: Duration,
    pub(crate) connect_timeout: Duration,
}

fencelock_core::redacted_config!(DynamoConfig {
    operation_timeout,
    connect_timeout
});

impl DynamoConfig {
    /// The URL schemes this config owns.
    pub const SCHEMES: &'static [&'static str] = &["dynamodb"];

    /// A configuration from a `dynamodb://` URL (grammar above), checked eagerly and
    /// completely. Anything wrong is [`Error::InvalidConfig`] naming what is wrong; the
    /// message never contains the secret key.
    pub fn from_url(url: &str) -> Result<Self> {
        let shown = redact(url);
        let fail = |what: String| Error::config(format!("DynamoDB URL {shown:?}: {what}"));
        let context = format!("DynamoDB URL {shown:?}");
        if !safe_to_echo(url) {
            return Err(fail(
                "an access key or secret key holding `/`, `?` or `#` must be percent-encoded"
                    .to_owned(),
            ));
        }
        let parts = UrlParts::split(url, "dynamodb").map_err(|e| e.in_context(&context))?;
        let (table, query) = (parts.hosts, parts.query);
        if !parts.path.is_empty() && parts.path != "/" {
            return Err(fail(
                "takes no path (only `/`): the table is the part after `dynamodb://`".to_owned(),
            ));
        }
        let credentials = parts
            .credentials_named("access key id", "secret key")
            .map_err(|e| e.in_context(&context))?
            .map(credentials)
            .transpose()
            .map_err(&fail)?;
        validate_table(table).map_err(&fail)?;
        let options = Options::parse(query, KNOWN).map_err(|e| e.in_context(&context))?;
        let region = options
            .get("region")
            .map(|region| validate_region(region).map(|()| region.to_owned()))
            .transpose()
            .map_err(&fail)?;
        let endpoint = options
            .get("endpoint")
            .map(parse_endpoint)
            .transpose()
            .map_err(&fail)?;
        let prefix = match options.get("prefix") {
            Some(prefix) => {
                validate_prefix(prefix).map_err(|e| e.in_context(&context))?;
                prefix.to_owned()
            }
            None => DEFAULT_PREFIX.to_owned(),
        };
        let create = match options.get("create") {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                let shown: String = other.chars().take(16).collect();
                return Err(fail(format!(
                    "option `create` is `true` or `false`, not {shown:?}"
                )));
            }
        };
        Ok(DynamoConfig {
            table: table.to_owned(),
            credentials,
            region,
            endpoint,
            prefix,
            create,
            operation_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
        })
    }

    /// The full URL, **credentials included**, such that `from_url` gives this config back.
    /// Builder settings that have no URL form (time-outs) are not in it.
    pub fn to_url(&self) -> String {
        self.render(false)
    }

    /// [`to_url`](Self::to_url) with the secret key replaced by `***`: what `Display` and
    /// `Debug` show.
    pub fn redacted_url(&self) -> String {
        self.render(true)
    }

    fn render(&self, redacted: bool) -> String {
        let mut url = String::from(SCHEME);
        if let Some((key, secret)) = &self.credentials {
            url.push_str(&utf8_percent_encode(key, USERINFO).to_string());
            url.push(':');
            if redacted {
                url.push_str("***");
            } else {
                url.push_str(&utf8_percent_encode(secret, USERINFO).to_string());
            }
            url.push('@');
        }
        url.push_str(&self.table);
        let mut query = form_urlencoded::Serializer::new(String::new());
        if let Some(region) = &self.region {
            query.append_pair("region", region);
        }
        if let Some(endpoint) = &self.endpoint {
            query.append_pair("endpoint", &endpoint.url());
        }
        if self.prefix != DEFAULT_PREFIX {
            query.append_pair("prefix", &self.prefix);
        }
        if self.create {
            query.append_pair("create", "true");
        }
        let query = query.finish();
        if !query.is_empty() {
            url.push('?');
            url.push_str(&query);
        }
        url
    }

    /// The server this config reaches: the endpoint's host and port, or the region's public
    /// endpoint (`dynamodb.<region>.amazonaws.com:443`); none when neither is known before
    /// connecting (the region comes from the environment).
    pub fn hosts(&self) -> Vec<HostPort> {
        match (&self.endpoint, &self.region) {
            (Some(endpoint), _) => vec![endpoint.host.clone()],
            (None, Some(region)) => vec![HostPort::new(
                format!("dynamodb.{region}.amazonaws.com"),
                443,
            )],
            (None, None) => Vec::new(),
        }
    }

    /// The same config sending its requests to `hosts` (exactly one: a fault proxy), as
    /// `?endpoint=`, over HTTPS when the config used HTTPS (or no endpoint), else HTTP.
    pub fn with_hosts(mut self, hosts: &[HostPort]) -> Result<Self> {
        let [target] = hosts else {
            return Err(Error::config(format!(
                "a DynamoDB config reaches one endpoint; {} given",
                hosts.len()
            )));
        };
        let host = parse_host(&target.to_string(), 443)
            .map_err(|e| e.in_context(&format!("DynamoDB endpoint {target}")))?;
        let https = self.endpoint.as_ref().is_none_or(|e| e.https);
        self.endpoint = Some(Endpoint { https, host });
        Ok(self)
    }

    /// The table's name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The prefix of every partition key fencelock writes (default `fencelock/`).
    pub fn prefix_name(&self) -> &str {
        &self.prefix
    }

    /// The same config with another prefix ([`validate_prefix`], checked by
    /// [`connect`](Self::connect)).
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The region the URL names, if any.
    pub fn region(&self) -> Option<&str> {
        self.region.as_deref()
    }

    /// The access key id, if the URL carries credentials (never the secret key).
    pub fn access_key_id(&self) -> Option<&str> {
        self.credentials.as_ref().map(|(key, _)| key.as_str())
    }

    /// Whether [`connect`](Self::connect) creates a missing table (`create=true`).
    pub fn creates_table(&self) -> bool {
        self.create
    }

    /// How long one request may take, retries included, before it fails with
    /// [`Error::Unavailable`] (default 5 s).
    pub fn operation_timeout(mut self, timeout: Duration) -> Self {
        self.operation_timeout = timeout;
        self
    }

    /// How long a new connection to the endpoint may take (default 3 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// How errors name the table and where it lives: `table "t" at http://127.0.0.1:5000`.
    pub(crate) fn label(&self, region: &str) -> String {
        match &self.endpoint {
            Some(endpoint) => format!("table {:?} at {}", self.table, endpoint.url()),
            None => format!("table {:?} in {region}", self.table),
        }
    }

    pub(crate) fn endpoint_url(&self) -> Option<String> {
        self.endpoint.as_ref().map(Endpoint::url)
    }

    pub(crate) fn credentials(&self) -> Option<&(String, String)> {
        self.credentials.as_ref()
    }

    pub(crate) fn region_setting(&self) -> Option<&str> {
        self.region.as_deref()
    }

    /// Checks the builder settings, builds the client, and checks (or creates) the table;
    /// see [`DynamoTable`] for what it then provides.
    pub async fn connect(&self) -> Result<DynamoTable> {
        validate_prefix(&self.prefix)?;
        if self.operation_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(Error::config("DynamoDB time-outs must be above zero"));
        }
        DynamoTable::connect(self).await
    }
}

/// Checks a table name against DynamoDB's rule: 3 to 255 characters, each a letter, a digit,
/// `_`, `.` or `-`. The message says what is wrong.
fn validate_table(table: &str) -> std::result::Result<(), String> {
    if table.is_empty() {
        return Err("names no table (write dynamodb://table?region=..)".to_owned());
    }
    let shown: String = table.chars().take(64).collect();
    if !(3..=255).contains(&table.len()) {
        return Err(format!(
            "table name {shown:?} has {} characters: DynamoDB table names have 3 to 255",
            table.chars().count()
        ));
    }
    if let Some(bad) = table
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-')))
    {
        return Err(format!(
            "table name {shown:?} holds {bad:?}: DynamoDB table names are letters, digits, \
             `_`, `.` and `-` only"
        ));
    }
    Ok(())
}

/// A region is a lower-case name such as `eu-west-1`.
fn validate_region(region: &str) -> std::result::Result<(), String> {
    let valid = !region.is_empty()
        && region.len() <= 64
        && region
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if valid {
        Ok(())
    } else {
        let shown: String = region.chars().take(32).collect();
        Err(format!(
            "option `region` {shown:?} is not a region name (such as eu-west-1)"
        ))
    }
}

/// `http://host:port` or `https://host[:port]`, nothing else.
fn parse_endpoint(text: &str) -> std::result::Result<Endpoint, String> {
    let problem = |what: &str| format!("option `endpoint` {what}");
    let (https, rest) = if let Some(rest) = text.strip_prefix("http://") {
        (false, rest)
    } else if let Some(rest) = text.strip_prefix("https://") {
        (true, rest)
    } else {
        return Err(problem(
            "must start with http:// or https:// (such as http://127.0.0.1:5000)",
        ));
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.contains(['/', '?', '#', '@']) {
        return Err(problem(
            "takes a scheme, a host and a port only (no path, query or credentials)",
        ));
    }
    let host = parse_host(rest, if https { 443 } else { 80 }).map_err(|e| match e {
        Error::InvalidConfig { message, .. } => problem(&message),
        other => problem(&other.to_string()),
    })?;
    Ok(Endpoint { https, host })
}

/// Checks a key prefix: empty, or 1 to [`MAX_PREFIX_LEN`] bytes ending in `/`, without
/// control characters, and without a `/`-separated part named like an item family
/// ([`FAMILIES`]). With such a part, one installation's items could be another's: prefix
/// `app/lock/` would put its lock of key `x` at `app/lock/lock/x`, which is prefix `app/`'s
/// lock of key `lock/x`.
pub fn validate_prefix(prefix: &str) -> Result<()> {
    let reason = if prefix.len() > MAX_PREFIX_LEN {
        Some(format!("is longer than {MAX_PREFIX_LEN} bytes"))
    } else if prefix.chars().any(char::is_control) {
        Some("contains a control character".to_owned())
    } else if !prefix.is_empty() && !prefix.ends_with('/') {
        Some("does not end with `/` (write it as `name/`, or leave it empty)".to_owned())
    } else {
        prefix
            .split('/')
            .find(|part| FAMILIES.contains(part))
            .map(|family| {
                format!(
                    "has the part {family:?}, a name fencelock gives its own items ({}): \
                     another installation's items could then be this one's",
                    FAMILIES.join(", ")
                )
            })
    };
    match reason {
        Some(reason) => {
            let shown: String = prefix.chars().take(64).collect();
            Err(Error::config(format!(
                "DynamoDB key prefix {shown:?} {reason}"
            )))
        }
        None => Ok(()),
    }
}

/// `access_key_id:secret_access_key`, percent-decoded.
fn credentials(
    (key, secret): (String, Option<String>),
) -> std::result::Result<(String, String), String> {
    let Some(secret) = secret else {
        return Err(
            "names an access key without a secret key (write dynamodb://key:secret@table)".into(),
        );
    };
    if key.is_empty() {
        return Err("names a secret key without an access key id".into());
    }
    if secret.is_empty() {
        return Err("names an access key id with an empty secret key".into());
    }
    Ok((key, secret))
}

#[cfg(test)]
mod tests;
