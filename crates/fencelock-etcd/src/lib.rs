#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod backend;
mod backend_config;
pub mod baseline;
mod cluster;
mod config;
mod error;
mod grant;
mod handoff;
mod keys;
mod leases;
mod queue;
mod read_phase;
mod reply;
mod seen;
#[cfg(feature = "servers")]
#[cfg_attr(docsrs, doc(cfg(feature = "servers")))]
pub mod servers;
mod set;
#[cfg(feature = "servers")]
mod spawn;
mod storage;
mod tls;
mod waiters;

pub use backend::{EtcdLockBackend, MAX_TTL};
pub use backend_config::SCHEMES;
pub use cluster::EtcdCluster;
pub use config::{
    DEFAULT_MAX_VALUE_LEN, DEFAULT_PORT, DEFAULT_PREFIX, EtcdConfig, MAX_PREFIX_LEN,
    validate_prefix,
};
pub use error::map_etcd_error;
pub use set::MAX_SET_KEYS;
pub use storage::EtcdStorage;

/// Re-exported so users get the `etcd-client` this crate was built with (for
/// [`EtcdCluster::client`]).
pub use etcd_client;
