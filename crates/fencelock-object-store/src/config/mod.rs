//! `ObjectStoreConfig`: the `s3://` and `memory-objects://` URLs, parsed with the core URL
//! toolkit, and the storage they connect to.
//!
//! By concern: the `s3://` bucket, its options and its client ([`s3`]); the in-memory store
//! and the settings common to both here.

use std::sync::Arc;
use std::time::Duration;

use fencelock_core::url::redact;
use fencelock_core::{Error, FencedStorage, HostPort, Result, StorageConfig, StorageScheme};
use object_store::path::Path;

use crate::fence::{DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_VALUE_LEN, ObjectFence};
use crate::storage::ObjectStorage;

mod s3;
#[cfg(test)]
mod tests;

use s3::S3Target;

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

/// Where the objects live.
#[derive(Clone, PartialEq, Eq)]
enum Target {
    /// An S3 bucket (Amazon S3, or an S3-compatible server at `endpoint`).
    S3(S3Target),
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
            Some("s3") => {
                let (bucket, prefix) = S3Target::parse(url)?;
                (Target::S3(bucket), prefix)
            }
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
            Target::S3(_) => "s3",
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
            Target::S3(bucket) => bucket.url(&self.prefix, redacted),
        }
    }

    /// The prefix every object is under (empty for none).
    pub fn prefix(&self) -> &Path {
        &self.prefix
    }

    /// The bucket, for `s3://`.
    pub fn bucket(&self) -> Option<&str> {
        match &self.target {
            Target::S3(bucket) => Some(bucket.bucket()),
            Target::Memory => None,
        }
    }

    /// Whether other processes reach the same objects (false for `memory-objects://`).
    pub fn is_shared(&self) -> bool {
        matches!(self.target, Target::S3(_))
    }

    /// The server the storage talks to: the endpoint's host and port (80 or 443 by default);
    /// none for Amazon S3 without an endpoint, whose hosts S3 chooses, and for the
    /// in-memory store.
    pub fn hosts(&self) -> Vec<HostPort> {
        match &self.target {
            Target::S3(bucket) => bucket.hosts(),
            Target::Memory => Vec::new(),
        }
    }

    /// The same config pointed at `hosts`, one per entry of [`hosts`](Self::hosts) (a fault
    /// proxy in front of the endpoint); another count is [`Error::InvalidConfig`].
    pub fn with_hosts(mut self, hosts: &[HostPort]) -> Result<Self> {
        let endpoint = match &mut self.target {
            Target::S3(bucket) => bucket.endpoint_mut(),
            Target::Memory => None,
        };
        let (Some(endpoint), [target]) = (endpoint, hosts) else {
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
            Target::S3(bucket) => bucket.build(self.call_timeout, &self.prefix),
            #[cfg(not(feature = "s3"))]
            Target::S3(_) => Err(Error::config(
                "s3:// needs fencelock-object-store built with its `s3` feature",
            )),
        }
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
