//! A fenced storage as a unit of its own: [`StorageConfig`] (a parsed URL of a store that is
//! no lock service, such as an object store) and [`StorageScheme`] (how its URL scheme finds
//! it), registered in the same [`Schemes`](crate::Schemes) registry as the backends.
//!
//! Every backend's storage is a storage spec too: [`Schemes::parse_storage`](crate::Schemes::parse_storage)
//! reads a backend URL as the storage half of that backend ([`BackendStorage`]), so a tool that
//! takes a storage spec (`fencelock chaos --storage`) takes either.

use std::any::Any;
use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use crate::config::BackendConfig;
use crate::error::Result;
use crate::host::HostPort;
use crate::storage::FencedStorage;

/// The parsed configuration of one fenced storage: what a URL of one of its
/// [`StorageScheme`]s says. The contract of [`BackendConfig`] holds for each method of the same
/// name (round trip, redaction, hosts, input errors); [`connect`](Self::connect) opens the
/// storage alone.
#[async_trait]
pub trait StorageConfig: Send + Sync + fmt::Debug + Any {
    /// The URL scheme this config prints (`s3`, `redis`, ...).
    fn scheme(&self) -> &str;

    /// The whole URL, credentials included, that the scheme's parser reads back as `self`.
    fn to_url(&self) -> String;

    /// The URL with every password and secret key hidden.
    fn redacted_url(&self) -> String;

    /// The servers the storage reaches, in URL order (none for an in-process store).
    fn hosts(&self) -> Vec<HostPort>;

    /// The same config pointed at `hosts`, one per entry of [`hosts`](Self::hosts).
    fn with_hosts(&self, hosts: &[HostPort]) -> Result<Box<dyn StorageConfig>>;

    /// A copy of this config.
    fn clone_storage(&self) -> Box<dyn StorageConfig>;

    /// Whether other processes reach the same data (false only for an in-process store).
    fn is_shared(&self) -> bool {
        true
    }

    /// Connects to the storage.
    async fn connect(&self) -> Result<Arc<dyn FencedStorage>>;
}

impl dyn StorageConfig {
    /// The concrete config, when it is a `T`.
    pub fn downcast_ref<T: StorageConfig>(&self) -> Option<&T> {
        (self as &dyn Any).downcast_ref()
    }
}

impl Clone for Box<dyn StorageConfig> {
    fn clone(&self) -> Self {
        self.clone_storage()
    }
}

/// One URL scheme of a storage that is no lock service, and the parser of the crate that owns
/// it (the object-store crate's `s3://`).
#[derive(Clone, Copy)]
#[non_exhaustive]
pub struct StorageScheme {
    /// The scheme, lower case, without `://`.
    pub name: &'static str,
    /// What it reaches, in a few words, for help texts.
    pub summary: &'static str,
    /// Parses a whole URL of this scheme.
    pub parse: fn(&str) -> Result<Box<dyn StorageConfig>>,
}

impl StorageScheme {
    /// A storage scheme named `name`, described by `summary`, whose URLs `parse` reads.
    pub const fn new(
        name: &'static str,
        summary: &'static str,
        parse: fn(&str) -> Result<Box<dyn StorageConfig>>,
    ) -> Self {
        StorageScheme {
            name,
            summary,
            parse,
        }
    }
}

impl fmt::Debug for StorageScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StorageScheme")
            .field("name", &self.name)
            .field("summary", &self.summary)
            .finish_non_exhaustive()
    }
}

/// A backend's config read as its storage alone: connecting opens the backend and keeps its
/// storage half.
#[derive(Debug, Clone)]
pub struct BackendStorage(pub Box<dyn BackendConfig>);

#[async_trait]
impl StorageConfig for BackendStorage {
    fn scheme(&self) -> &str {
        self.0.scheme()
    }

    fn to_url(&self) -> String {
        self.0.to_url()
    }

    fn redacted_url(&self) -> String {
        self.0.redacted_url()
    }

    fn hosts(&self) -> Vec<HostPort> {
        self.0.hosts()
    }

    fn with_hosts(&self, hosts: &[HostPort]) -> Result<Box<dyn StorageConfig>> {
        Ok(Box::new(BackendStorage(self.0.with_hosts(hosts)?)))
    }

    fn clone_storage(&self) -> Box<dyn StorageConfig> {
        Box::new(self.clone())
    }

    fn is_shared(&self) -> bool {
        self.0.is_shared()
    }

    async fn connect(&self) -> Result<Arc<dyn FencedStorage>> {
        Ok(self.0.connect().await?.storage)
    }
}
