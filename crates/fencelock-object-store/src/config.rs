//! `ObjectStoreConfig`: the `s3://` and `memory-objects://` URLs, parsed with the core URL
//! toolkit, and the storage they connect to.

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::url::{Known, Options, decode_part, port_problem, redact};
use fencelock_core::{Error, FencedStorage, HostPort, Result, StorageConfig, StorageScheme};
use object_store::path::Path;
use url::Url;

use crate::fence::{DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_VALUE_LEN, ObjectFence};
use crate::storage::ObjectStorage;

/// The URL schemes [`ObjectStoreConfig`] owns, to register in a
/// [`Schemes`](fencelock_core::Schemes) registry as storage schemes.
pub const STORAGE_SCHEMES: &[StorageScheme] = &[
    StorageScheme::new(
        "s3",
        "an S3 bucket (or an S3-compatible server that honours If-Match)",
        parse,
    ),
    StorageScheme::new(
        "memory-objects",
        "an in-memory object store (one process)",
        parse,
    ),
];

fn parse(url: &str) -> Result<Box<dyn StorageConfig>> {
    Ok(Box::new(ObjectStoreConfig::from_url(url)?))
}

#[async_trait::async_trait]
impl StorageConfig for ObjectStoreConfig {
    fn scheme(&self) -> &str {
        ObjectStoreConfig::scheme(self)
    }

    fn to_url(&self) -> String {
        ObjectStoreConfig::to_url(self)
    }

    fn redacted_url(&self) -> String {
        ObjectStoreConfig::redacted_url(self)
    }

    fn hosts(&self) -> Vec<HostPort> {
        ObjectStoreConfig::hosts(self)
    }

    fn with_hosts(&self, hosts: &[HostPort]) -> Result<Box<dyn StorageConfig>> {
        Ok(Box::new(ObjectStoreConfig::with_hosts(
            self.clone(),
            hosts,
        )?))
    }

    fn clone_storage(&self) -> Box<dyn StorageConfig> {
        Box::new(self.clone())
    }

    fn is_shared(&self) -> bool {
        ObjectStoreConfig::is_shared(self)
    }

    async fn connect(&self) -> Result<Arc<dyn FencedStorage>> {
        self.connect_storage().await
    }
}

/// The options an `s3://` URL takes.
const S3_OPTIONS: &[Known] = &[
    Known::new("endpoint"),
    Known::new("region"),
    Known::new("access_key_id"),
    Known::with_aliases("secret_access_key", &["secret_key"]),
];

/// The longest prefix accepted, so that every object name fits S3's 1,024 bytes.
const MAX_PREFIX_LEN: usize = 256;

/// The region used when a URL names none.
#[cfg(feature = "s3")]
const DEFAULT_REGION: &str = "us-east-1";

/// Where the objects live.
#[derive(Clone, PartialEq, Eq)]
enum Target {
    /// An S3 bucket (Amazon S3, or an S3-compatible server at `endpoint`).
    S3 {
        bucket: String,
        endpoint: Option<Url>,
        region: Option<String>,
        access_key_id: Option<String>,
        secret_access_key: Option<String>,
    },
    /// A new in-memory store for each connect: one process only.
    Memory,
}

/// How to reach an object store for a fenced [`ObjectStorage`]: a parsed URL.
///
/// ```text
/// s3://bucket[/prefix][?endpoint=http://127.0.0.1:9000][&region=eu-west-1]
///                     [&access_key_id=..][&secret_access_key=..]
/// memory-objects://
/// ```
///
/// - `s3://`: the bucket, then an optional prefix every object goes under (percent-encoded
///   path segments). `endpoint` points at an S3-compatible server (`http://` or `https://`,
///   host and port, nothing else; path-style requests); without it, Amazon S3 of `region`
///   (default `us-east-1`). `access_key_id` and `secret_access_key` (alias `secret_key`)
///   come together or not at all; without them, the machine's instance-metadata
///   credentials. The server must honour
///   `If-None-Match` and `If-Match` on PutObject: connecting checks it.
/// - `memory-objects://`: an in-memory store, new for each connect, for tests and demos.
///
/// Every other option, a repeated one, NUL, text that is not UTF-8 once decoded, a bad
/// bucket name or endpoint is [`Error::InvalidConfig`] naming it, never showing the secret
/// key. `Display` and `Debug` show the URL with the secret key as `***`;
/// [`to_url`](Self::to_url) gives it back whole, and parsing that gives an equal config.
///
/// ```
/// use fencelock_object_store::ObjectStoreConfig;
/// let config: ObjectStoreConfig =
///     "s3://reports/fenced?endpoint=http://127.0.0.1:9000&access_key_id=app&secret_access_key=s3cret"
///         .parse()?;
/// assert_eq!(
///     config.to_string(),
///     "s3://reports/fenced?endpoint=http%3A%2F%2F127.0.0.1%3A9000%2F&access_key_id=app&secret_access_key=***"
/// );
/// assert_eq!(config.to_url().parse::<ObjectStoreConfig>()?, config);
/// # Ok::<(), fencelock_core::Error>(())
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct ObjectStoreConfig {
    target: Target,
    prefix: Path,
    max_value_len: usize,
    call_timeout: Duration,
}

fencelock_core::redacted_config!(ObjectStoreConfig {
    max_value_len,
    call_timeout
});

impl ObjectStoreConfig {
    /// A configuration from an `s3://` or `memory-objects://` URL (grammar above), checked
    /// completely without a server.
    pub fn from_url(url: &str) -> Result<Self> {
        let scheme = url
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase());
        let target = match scheme.as_deref() {
            Some("s3") => parse_s3(url)?,
            Some("memory-objects") => parse_memory(url)?,
            _ => {
                return Err(Error::config(format!(
                    "{} is not an object store URL: expected s3://bucket[/prefix] or memory-objects://",
                    redact(url)
                )));
            }
        };
        let (target, prefix) = target;
        Ok(ObjectStoreConfig {
            target,
            prefix,
            max_value_len: DEFAULT_MAX_VALUE_LEN,
            call_timeout: DEFAULT_CALL_TIMEOUT,
        })
    }

    /// The scheme [`to_url`](Self::to_url) prints: `s3` or `memory-objects`.
    pub fn scheme(&self) -> &'static str {
        match self.target {
            Target::S3 { .. } => "s3",
            Target::Memory => "memory-objects",
        }
    }

    /// The whole URL, **secret key included**, that [`from_url`](Self::from_url) reads back
    /// as this config. The builder settings (size limit, time-out) are not in it.
    pub fn to_url(&self) -> String {
        self.url(false)
    }

    /// [`to_url`](Self::to_url) with the secret key replaced by `***`.
    pub fn redacted_url(&self) -> String {
        self.url(true)
    }

    fn url(&self, redacted: bool) -> String {
        match &self.target {
            Target::Memory => "memory-objects://".to_owned(),
            Target::S3 {
                bucket,
                endpoint,
                region,
                access_key_id,
                secret_access_key,
            } => {
                let mut text = format!("s3://{bucket}");
                if !self.prefix.as_ref().is_empty() {
                    text.push('/');
                    text.push_str(&encode_prefix(self.prefix.as_ref()));
                }
                let mut pairs: Vec<(&str, String)> = Vec::new();
                if let Some(endpoint) = endpoint {
                    pairs.push(("endpoint", endpoint.to_string()));
                }
                if let Some(region) = region {
                    pairs.push(("region", region.clone()));
                }
                if let Some(id) = access_key_id {
                    pairs.push(("access_key_id", id.clone()));
                }
                if let Some(secret) = secret_access_key {
                    let shown = if redacted {
                        "***".to_owned()
                    } else {
                        secret.clone()
                    };
                    pairs.push(("secret_access_key", shown));
                }
                if !pairs.is_empty() {
                    let query: Vec<String> = pairs
                        .iter()
                        .map(|(name, value)| {
                            let value = if redacted && *name == "secret_access_key" {
                                value.clone()
                            } else {
                                url::form_urlencoded::byte_serialize(value.as_bytes()).collect()
                            };
                            format!("{name}={value}")
                        })
                        .collect();
                    text.push('?');
                    text.push_str(&query.join("&"));
                }
                text
            }
        }
    }

    /// The prefix every object is under (empty for none).
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The bucket, for `s3://`.
    pub fn bucket(&self) -> Option<&str> {
        match &self.target {
            Target::S3 { bucket, .. } => Some(bucket),
            Target::Memory => None,
        }
    }

    /// Whether other processes reach the same objects (false for `memory-objects://`).
    pub fn is_shared(&self) -> bool {
        matches!(self.target, Target::S3 { .. })
    }

    /// The server the storage talks to: the endpoint's host and port (80 or 443 by default);
    /// none for Amazon S3 without an endpoint, whose hosts S3 chooses, and for the
    /// in-memory store.
    pub fn hosts(&self) -> Vec<HostPort> {
        match &self.target {
            Target::S3 {
                endpoint: Some(endpoint),
                ..
            } => {
                let host = match endpoint.host() {
                    Some(url::Host::Ipv6(addr)) => addr.to_string(),
                    Some(host) => host.to_string(),
                    None => String::new(),
                };
                let port = endpoint.port_or_known_default().unwrap_or(80);
                vec![HostPort::new(host, port)]
            }
            _ => Vec::new(),
        }
    }

    /// The same config pointed at `hosts`, one per entry of [`hosts`](Self::hosts) (a fault
    /// proxy in front of the endpoint); another count is [`Error::InvalidConfig`].
    pub fn with_hosts(mut self, hosts: &[HostPort]) -> Result<Self> {
        let (
            Target::S3 {
                endpoint: Some(endpoint),
                ..
            },
            [target],
        ) = (&mut self.target, hosts)
        else {
            return Err(Error::config(format!(
                "{} reaches {} configurable server(s); {} given",
                self.redacted_url(),
                self.hosts().len(),
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
        endpoint
            .set_host(Some(&host))
            .map_err(|e| Error::InvalidConfig {
                message: format!("{:?} is not a host name or address", target.host),
                source: Some(Box::new(e)),
            })?;
        endpoint
            .set_port(Some(target.port))
            .map_err(|()| Error::config(format!("cannot set port {}", target.port)))?;
        Ok(self)
    }

    /// The largest value the storage accepts, in bytes (default 16 MiB; at least 1 MiB,
    /// checked by [`connect_storage`](Self::connect_storage)).
    pub fn max_value_len(mut self, len: usize) -> Self {
        self.max_value_len = len;
        self
    }

    /// How long one request may take before the operation fails with a retryable
    /// [`Error::Unavailable`] (default 10 s; above zero).
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The store this config names, not yet checked for conditional puts.
    pub fn object_store(&self) -> Result<Arc<dyn object_store::ObjectStore>> {
        match &self.target {
            Target::Memory => Ok(Arc::new(object_store::memory::InMemory::new())),
            #[cfg(feature = "s3")]
            Target::S3 { .. } => self.amazon_s3(),
            #[cfg(not(feature = "s3"))]
            Target::S3 { .. } => Err(Error::config(
                "s3:// needs fencelock-object-store built with its `s3` feature",
            )),
        }
    }

    #[cfg(feature = "s3")]
    fn amazon_s3(&self) -> Result<Arc<dyn object_store::ObjectStore>> {
        use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
        use object_store::{ClientOptions, RetryConfig};

        let Target::S3 {
            bucket,
            endpoint,
            region,
            access_key_id,
            secret_access_key,
        } = &self.target
        else {
            return Err(Error::config("not an s3:// config"));
        };
        // No retries inside the client: a conditional put it sent again after a lost answer
        // would report its own landed put as a failed condition. fencelock decides instead.
        let retry = RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        };
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(bucket)
            .with_region(region.as_deref().unwrap_or(DEFAULT_REGION))
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .with_retry(retry)
            .with_client_options(ClientOptions::new().with_timeout(self.call_timeout));
        if let Some(endpoint) = endpoint {
            let text = endpoint.as_str().trim_end_matches('/');
            builder = builder
                .with_endpoint(text)
                .with_allow_http(endpoint.scheme() == "http")
                .with_virtual_hosted_style_request(false);
        }
        if let (Some(id), Some(secret)) = (access_key_id, secret_access_key) {
            builder = builder
                .with_access_key_id(id)
                .with_secret_access_key(secret);
        }
        let store = builder.build().map_err(|e| Error::InvalidConfig {
            // object_store's builder errors name the setting, never a credential's value.
            message: format!("{}: {e}", self.redacted_url()),
            source: None,
        })?;
        Ok(Arc::new(store))
    }

    /// Connects: builds the store, checks it refuses stale conditional puts (a probe object
    /// under the prefix), and returns the fenced storage. A server that is down is
    /// [`Error::Unavailable`]; a store without conditional puts, refused credentials or a
    /// missing bucket are [`Error::InvalidConfig`].
    pub async fn connect_storage(&self) -> Result<Arc<dyn FencedStorage>> {
        Ok(Arc::new(self.connect_object_storage().await?))
    }

    /// [`connect_storage`](Self::connect_storage), as the concrete type.
    pub async fn connect_object_storage(&self) -> Result<ObjectStorage> {
        let fence = self.fence_on(self.object_store()?, &self.prefix).await?;
        Ok(ObjectStorage::from_fence(fence, self.prefix.clone()))
    }

    /// The fencing of the application's own objects on this config's store, with every path
    /// under the URL's prefix: with `s3://bucket/team-a`, `put("reports/q3.json", ..)`
    /// writes the object `team-a/reports/q3.json` (its probe goes under the prefix too).
    pub async fn connect_fence(&self) -> Result<ObjectFence> {
        let store = self.object_store()?;
        if self.prefix.as_ref().is_empty() {
            return self.fence_on(store, &self.prefix).await;
        }
        let prefixed = object_store::prefix::PrefixStore::new(store, self.prefix.clone());
        self.fence_on(Arc::new(prefixed), &Path::default()).await
    }

    /// The fence on `store` (this config's, prefixed or not), its probe under `probe_dir`.
    async fn fence_on(
        &self,
        store: Arc<dyn object_store::ObjectStore>,
        probe_dir: &Path,
    ) -> Result<ObjectFence> {
        if self.max_value_len < 1 << 20 {
            return Err(Error::config(
                "the object store's max_value_len must be at least 1 MiB",
            ));
        }
        if self.call_timeout.is_zero() {
            return Err(Error::config(
                "the object store's call timeout must be above zero",
            ));
        }
        let context = self.redacted_url();
        let fence = ObjectFence::connect(store, probe_dir)
            .await
            .map_err(|e| e.in_context(&context))?;
        Ok(fence
            .with_max_value_len(self.max_value_len)
            .with_call_timeout(self.call_timeout))
    }
}

fn parse_memory(url: &str) -> Result<(Target, Path)> {
    let rest = url
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    if !rest.is_empty() {
        return Err(Error::config(format!(
            "{} takes nothing after memory-objects:// (no host, prefix or options)",
            redact(url)
        )));
    }
    Ok((Target::Memory, Path::default()))
}

fn parse_s3(url: &str) -> Result<(Target, Path)> {
    let shown = redact(url);
    let parsed = Url::parse(url).map_err(|error| {
        let message = match error {
            url::ParseError::InvalidPort => format!("S3 URL {shown}: {}", port_problem(url)),
            other => format!("{shown} is not a valid S3 URL: {other}"),
        };
        Error::InvalidConfig {
            message,
            source: Some(Box::new(error)),
        }
    })?;
    let context = format!("S3 URL {shown}");
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Error::config(format!(
            "{context}: credentials go in access_key_id and secret_access_key, not before the bucket"
        )));
    }
    if parsed.port().is_some() {
        return Err(Error::config(format!(
            "{context}: a bucket has no port; a server's address goes in ?endpoint="
        )));
    }
    if parsed.fragment().is_some() {
        return Err(Error::config(format!(
            "{context} takes no fragment (`#...`)"
        )));
    }
    let bucket = parsed.host_str().unwrap_or_default().to_owned();
    validate_bucket(&bucket)
        .map_err(|why| Error::config(format!("{context}: the bucket name {why}")))?;
    // The URL parser drops `.` and `..` segments, which would name another prefix.
    let written = url
        .split_once("://")
        .map(|(_, rest)| rest)
        .unwrap_or_default();
    let written = written.split(['?', '#']).next().unwrap_or_default();
    let dot_segment = written.split('/').skip(1).any(|segment| {
        let segment = segment.to_ascii_lowercase().replace("%2e", ".");
        segment == "." || segment == ".."
    });
    if dot_segment {
        return Err(Error::config(format!(
            "{context}: the prefix is not an object path (no empty, `.` or `..` segments)"
        )));
    }
    let raw_prefix = parsed.path().trim_start_matches('/');
    let prefix_text = decode_part("prefix", raw_prefix).map_err(|e| e.in_context(&context))?;
    if prefix_text.len() > MAX_PREFIX_LEN {
        return Err(Error::config(format!(
            "{context}: the prefix is longer than {MAX_PREFIX_LEN} bytes"
        )));
    }
    let prefix = Path::parse(&prefix_text).map_err(|e| Error::InvalidConfig {
        message: format!("{context}: the prefix is not an object path (no empty, `.` or `..` segments, no control characters)"),
        source: Some(Box::new(e)),
    })?;
    let options = Options::parse(parsed.query().unwrap_or_default(), S3_OPTIONS)
        .map_err(|e| e.in_context(&context))?;
    let endpoint = options
        .get("endpoint")
        .map(|text| parse_endpoint(text).map_err(|e| e.in_context(&context)))
        .transpose()?;
    let region = options.get("region").map(str::to_owned);
    if let Some(region) = &region {
        let fine = !region.is_empty()
            && region.len() <= 64
            && region
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if !fine {
            return Err(Error::config(format!(
                "{context}: region {region:?} is not a region name (lower-case letters, digits and `-`)"
            )));
        }
    }
    let access_key_id = options.get("access_key_id").map(str::to_owned);
    let secret_access_key = options.get("secret_access_key").map(str::to_owned);
    if access_key_id.is_some() != secret_access_key.is_some() {
        return Err(Error::config(format!(
            "{context}: access_key_id and secret_access_key go together: give both or neither"
        )));
    }
    if access_key_id.as_deref() == Some("") || secret_access_key.as_deref() == Some("") {
        return Err(Error::config(format!(
            "{context}: access_key_id and secret_access_key must not be empty"
        )));
    }
    Ok((
        Target::S3 {
            bucket,
            endpoint,
            region,
            access_key_id,
            secret_access_key,
        },
        prefix,
    ))
}

/// `prefix` as a URL path: every byte but ASCII letters, digits, `-`, `_`, `.`, `~` and `/`
/// percent-encoded, so that parsing it gives the same prefix back.
fn encode_prefix(prefix: &str) -> String {
    prefix
        .bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
                char::from(b).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

/// S3's rules for a bucket name: 3 to 63 characters, lower-case letters, digits, `.` and
/// `-`, starting and ending with a letter or digit.
fn validate_bucket(bucket: &str) -> std::result::Result<(), &'static str> {
    if bucket.is_empty() {
        return Err("is missing: write s3://bucket[/prefix]");
    }
    if !(3..=63).contains(&bucket.len()) {
        return Err("must be 3 to 63 characters long");
    }
    if !bucket
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
    {
        return Err("may hold only lower-case letters, digits, `.` and `-`");
    }
    let edge = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit());
    if !edge(bucket.bytes().next()) || !edge(bucket.bytes().last()) {
        return Err("must start and end with a letter or digit");
    }
    Ok(())
}

/// `?endpoint=`: `http://` or `https://`, a host, an optional port; no credentials, path,
/// query or fragment.
fn parse_endpoint(text: &str) -> Result<Url> {
    let refuse = |why: &str| Error::config(format!("the endpoint {} {why}", redact(text)));
    let endpoint = Url::parse(text).map_err(|e| match e {
        url::ParseError::InvalidPort => refuse(&format!("has a bad port: {}", port_problem(text))),
        other => refuse(&format!("is not a URL: {other}")),
    })?;
    if !matches!(endpoint.scheme(), "http" | "https") {
        return Err(refuse("must start with http:// or https://"));
    }
    if !endpoint.username().is_empty() || endpoint.password().is_some() {
        return Err(refuse(
            "must not hold credentials: use access_key_id and secret_access_key",
        ));
    }
    if endpoint.host_str().is_none_or(str::is_empty) {
        return Err(refuse("names no host"));
    }
    if endpoint.port() == Some(0) {
        return Err(refuse("has port 0, out of range (1 to 65535)"));
    }
    if endpoint.path() != "/" || endpoint.query().is_some() || endpoint.fragment().is_some() {
        return Err(refuse(
            "must be a scheme, a host and a port only (no path or query)",
        ));
    }
    Ok(endpoint)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::panic)]
    use super::*;

    fn refusal(url: &str) -> String {
        match ObjectStoreConfig::from_url(url) {
            Err(Error::InvalidConfig { message, .. }) => message,
            other => panic!("{url}: expected InvalidConfig, got {other:?}"),
        }
    }

    #[test]
    fn urls_round_trip() {
        for url in [
            "memory-objects://",
            "s3://bucket",
            "s3://my.bucket-1/a/b",
            "s3://bkt/pre%20fix?region=eu-west-1",
            "s3://bkt/a%3Fb%23c%25d/%7B%C3%BC%7D",
            "s3://bkt/p?endpoint=http://127.0.0.1:9000&region=us-east-1&access_key_id=AK&secret_access_key=s%2Fk%26y",
            "s3://bkt?endpoint=https://[::1]:9443&secret_key=x&access_key_id=y",
        ] {
            let config = ObjectStoreConfig::from_url(url).unwrap();
            let again = ObjectStoreConfig::from_url(&config.to_url()).unwrap();
            assert_eq!(again, config, "{url} -> {}", config.to_url());
            assert_eq!(again.to_url(), config.to_url());
        }
        let config = ObjectStoreConfig::from_url("s3://bkt/a/b/").unwrap();
        assert_eq!(config.prefix().as_ref(), "a/b");
        assert_eq!(config.bucket(), Some("bkt"));
        assert!(config.is_shared());
        assert!(
            !ObjectStoreConfig::from_url("memory-objects://")
                .unwrap()
                .is_shared()
        );
    }

    #[test]
    fn the_secret_key_never_shows() {
        let url =
            "s3://bkt?endpoint=http://127.0.0.1:9000&access_key_id=AK&secret_access_key=hunter2";
        let config = ObjectStoreConfig::from_url(url).unwrap();
        for shown in [
            config.to_string(),
            format!("{config:?}"),
            config.redacted_url(),
        ] {
            assert!(!shown.contains("hunter2"), "{shown}");
            assert!(shown.contains("secret_access_key=***"), "{shown}");
        }
        assert!(config.to_url().contains("hunter2"));
        for bad in [
            "s3://bkt?secret_access_key=hunter2&nosuch=1",
            "s3://bkt?secret_access_key=hunter2",
            "s3://BKT?secret_access_key=hunter2&access_key_id=a",
            "s3://bkt?secret_access_key=hunter2&secret_key=hunter2",
            "s3://bkt?endpoint=http://u:hunter2@h:1&secret_access_key=hunter2&access_key_id=a",
            "s3://u:hunter2@bkt",
        ] {
            let message = refusal(bad);
            assert!(!message.contains("hunter2"), "{bad}: {message}");
        }
    }

    #[test]
    fn bad_input_is_named() {
        for (url, expected) in [
            ("s3://", "the bucket name is missing"),
            ("s3://ab", "3 to 63"),
            ("s3://Bucket", "lower-case letters"),
            ("s3://-bkt", "start and end"),
            ("s3://bkt:9000", "a bucket has no port"),
            ("s3://bkt/a//b", "not an object path"),
            ("s3://bkt/a/../b", "not an object path"),
            ("s3://bkt/a%00", "NUL"),
            ("s3://bkt?region=EU", "not a region name"),
            ("s3://bkt?endpoint=ftp://h", "http:// or https://"),
            ("s3://bkt?endpoint=http://h:1/path", "no path or query"),
            ("s3://bkt?endpoint=http://h:0", "port"),
            ("s3://bkt?endpoint=nonsense", "is not a URL"),
            ("s3://bkt?access_key_id=a", "go together"),
            (
                "s3://bkt?access_key_id=&secret_access_key=",
                "must not be empty",
            ),
            (
                "s3://bkt?endpoint=http://h:1&endpoint=http://h:2",
                "repeats the option",
            ),
            ("s3://bkt?prefix=x", "unknown option `prefix`"),
            ("s3://bkt#frag", "no fragment"),
            ("memory-objects://host", "takes nothing after"),
            ("gs://bkt", "not an object store URL"),
        ] {
            let message = refusal(url);
            assert!(message.contains(expected), "{url}: {message}");
        }
        let long = format!("s3://bkt/{}", "p".repeat(MAX_PREFIX_LEN + 1));
        assert!(refusal(&long).contains("longer than"));
    }

    #[test]
    fn hosts_are_the_endpoint() {
        let config =
            ObjectStoreConfig::from_url("s3://bkt?endpoint=http://127.0.0.1:9000").unwrap();
        assert_eq!(config.hosts(), vec![HostPort::new("127.0.0.1", 9000)]);
        let moved = config
            .clone()
            .with_hosts(&[HostPort::new("::1", 9100)])
            .unwrap();
        assert_eq!(moved.hosts(), vec![HostPort::new("::1", 9100)]);
        assert!(config.clone().with_hosts(&[]).is_err());
        let https = ObjectStoreConfig::from_url("s3://bkt?endpoint=https://s3.example").unwrap();
        assert_eq!(https.hosts(), vec![HostPort::new("s3.example", 443)]);
        assert!(
            ObjectStoreConfig::from_url("s3://bkt")
                .unwrap()
                .hosts()
                .is_empty()
        );
        assert!(
            ObjectStoreConfig::from_url("memory-objects://")
                .unwrap()
                .with_hosts(&[HostPort::new("h", 1)])
                .is_err()
        );
    }
}
