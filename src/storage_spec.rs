//! Storage specs: one URL names a fenced storage, a storage-only one (`s3://`) or a backend's
//! own (`redis://`, whose storage half it then is).

use std::fmt;
use std::sync::Arc;

use fencelock_core::{
    BackendConfig, BackendStorage, Error, FencedStorage, HostPort, Result, StorageConfig,
};

/// A parsed storage spec: the typed config of the storage the URL names, resolved through the
/// registry of [`spec`](crate::spec) (storage schemes first, then every backend's storage).
///
/// `Display` and `Debug` hide passwords and secret keys; [`to_url`](Self::to_url) gives the
/// URL back whole.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> fencelock::Result<()> {
/// use fencelock::FencedStorageExt;
/// use fencelock::spec::StorageSpec;
///
/// let spec = StorageSpec::parse("memory://")?;
/// let storage = spec.connect().await?;
/// assert!(storage.peek_key("resource").await?.is_none());
/// assert!(StorageSpec::parse("nosuch://x").is_err());
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct StorageSpec {
    config: Arc<dyn StorageConfig>,
}

impl StorageSpec {
    /// Parses `spec` with the registered scheme it names. An unknown scheme or a malformed URL
    /// is [`Error::InvalidConfig`]; no message repeats a password.
    pub fn parse(spec: &str) -> Result<Self> {
        crate::spec::refuse_missing_feature(spec)?;
        Ok(StorageSpec {
            config: Arc::from(crate::spec::schemes().parse_storage(spec)?),
        })
    }

    /// The storage half of a backend's config.
    pub fn from_backend(config: Box<dyn BackendConfig>) -> Self {
        StorageSpec {
            config: Arc::new(BackendStorage(config)),
        }
    }

    /// The typed config.
    pub fn config(&self) -> &dyn StorageConfig {
        self.config.as_ref()
    }

    /// The URL scheme.
    pub fn scheme(&self) -> &str {
        self.config.scheme()
    }

    /// Whether other processes reach the same data.
    pub fn is_shared(&self) -> bool {
        self.config.is_shared()
    }

    /// The whole URL, credentials included.
    pub fn to_url(&self) -> String {
        self.config.to_url()
    }

    /// The servers the storage reaches, in URL order.
    pub fn hosts(&self) -> Vec<HostPort> {
        self.config.hosts()
    }

    /// The same spec pointed at other servers, one per entry of [`hosts`](Self::hosts).
    pub fn with_hosts(self, hosts: &[HostPort]) -> Result<Self> {
        Ok(StorageSpec {
            config: Arc::from(self.config.with_hosts(hosts)?),
        })
    }

    /// Connects to the storage.
    pub async fn connect(&self) -> Result<Arc<dyn FencedStorage>> {
        self.config.connect().await
    }
}

impl From<Box<dyn StorageConfig>> for StorageSpec {
    fn from(config: Box<dyn StorageConfig>) -> Self {
        StorageSpec {
            config: Arc::from(config),
        }
    }
}

impl PartialEq for StorageSpec {
    fn eq(&self, other: &Self) -> bool {
        self.scheme() == other.scheme() && self.to_url() == other.to_url()
    }
}

impl fmt::Display for StorageSpec {
    /// The URL with its secrets hidden.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.config.redacted_url())
    }
}

impl fmt::Debug for StorageSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "StorageSpec({self})")
    }
}

impl std::str::FromStr for StorageSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::parse(s)
    }
}
