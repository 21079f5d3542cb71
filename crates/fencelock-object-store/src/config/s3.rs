//! The `s3://` part of [`ObjectStoreConfig`](super::ObjectStoreConfig): the bucket and its
//! options read from the URL and checked, written back (the secret key redacted or not), and
//! the Amazon S3 client built from them.

#[cfg(feature = "s3")]
use std::sync::Arc;
#[cfg(feature = "s3")]
use std::time::Duration;

use fencelock_core::url::{Known, Options, decode_part, port_problem, redact};
use fencelock_core::{Error, HostPort, Result};
use object_store::path::Path;
use url::Url;

/// The options an `s3://` URL takes.
const S3_OPTIONS: &[Known] = &[
    Known::new("endpoint"),
    Known::new("region"),
    Known::new("access_key_id"),
    Known::with_aliases("secret_access_key", &["secret_key"]),
];

/// The longest prefix accepted, so that every object name fits S3's 1,024 bytes.
pub(super) const MAX_PREFIX_LEN: usize = 256;

/// The region used when a URL names none.
#[cfg(feature = "s3")]
const DEFAULT_REGION: &str = "us-east-1";

/// An S3 bucket (Amazon S3, or an S3-compatible server at `endpoint`), as its URL gives it.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct S3Target {
    bucket: String,
    endpoint: Option<Url>,
    region: Option<String>,
    access_key_id: Option<String>,
    secret_access_key: Option<String>,
}

impl S3Target {
    /// Reads an `s3://` URL (grammar in [`ObjectStoreConfig`](super::ObjectStoreConfig)):
    /// the bucket and its options, and the prefix.
    pub(super) fn parse(url: &str) -> Result<(S3Target, Path)> {
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
            S3Target {
                bucket,
                endpoint,
                region,
                access_key_id,
                secret_access_key,
            },
            prefix,
        ))
    }

    /// The bucket's name.
    pub(super) fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The URL of the bucket with `prefix`, the secret key as `***` when `redacted`.
    pub(super) fn url(&self, prefix: &Path, redacted: bool) -> String {
        let mut text = format!("s3://{}", self.bucket);
        if !prefix.as_ref().is_empty() {
            text.push('/');
            text.push_str(&encode_prefix(prefix.as_ref()));
        }
        let mut pairs: Vec<(&str, String)> = Vec::new();
        if let Some(endpoint) = &self.endpoint {
            pairs.push(("endpoint", endpoint.to_string()));
        }
        if let Some(region) = &self.region {
            pairs.push(("region", region.clone()));
        }
        if let Some(id) = &self.access_key_id {
            pairs.push(("access_key_id", id.clone()));
        }
        if let Some(secret) = &self.secret_access_key {
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

    /// The endpoint's host and port (80 or 443 by default); none for Amazon S3 without an
    /// endpoint, whose hosts S3 chooses.
    pub(super) fn hosts(&self) -> Vec<HostPort> {
        let Some(endpoint) = &self.endpoint else {
            return Vec::new();
        };
        let host = match endpoint.host() {
            Some(url::Host::Ipv6(addr)) => addr.to_string(),
            Some(host) => host.to_string(),
            None => String::new(),
        };
        let port = endpoint.port_or_known_default().unwrap_or(80);
        vec![HostPort::new(host, port)]
    }

    /// The endpoint, to point elsewhere; `None` for Amazon S3 without one.
    pub(super) fn endpoint_mut(&mut self) -> Option<&mut Url> {
        self.endpoint.as_mut()
    }

    /// The Amazon S3 client of this bucket, each request bounded by `call_timeout`; a
    /// refusal names the bucket's URL with `prefix`, redacted.
    #[cfg(feature = "s3")]
    pub(super) fn build(
        &self,
        call_timeout: Duration,
        prefix: &Path,
    ) -> Result<Arc<dyn object_store::ObjectStore>> {
        use object_store::aws::{AmazonS3Builder, S3ConditionalPut};
        use object_store::{ClientOptions, RetryConfig};

        let S3Target {
            bucket,
            endpoint,
            region,
            access_key_id,
            secret_access_key,
        } = self;
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
            .with_client_options(ClientOptions::new().with_timeout(call_timeout));
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
            message: format!("{}: {e}", self.url(prefix, true)),
            source: None,
        })?;
        Ok(Arc::new(store))
    }
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
