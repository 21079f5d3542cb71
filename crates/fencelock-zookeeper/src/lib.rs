#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod backend;
mod backend_config;
pub mod baseline;
mod config;
mod error;
mod inspect;
mod layout;
mod queue;
mod read_phase;
mod recipe;
mod renew;
#[cfg(feature = "servers")]
#[cfg_attr(docsrs, doc(cfg(feature = "servers")))]
pub mod servers;
mod session;
#[cfg(feature = "servers")]
mod spawn;
mod storage;
#[cfg(feature = "tls")]
mod tls;

pub use backend::{MAX_TOKEN, ZkLockBackend};
pub use backend_config::SCHEMES;
pub use config::{
    DEFAULT_PORT, DEFAULT_PREFIX, DEFAULT_SESSION_TIMEOUT, MAX_PREFIX_LEN, ZkConfig,
    validate_prefix,
};
pub use error::map_zk_error;
pub use fencelock_core::{QueueEntry, QueueRole};
pub use storage::{MAX_VALUE_LEN, ZkStorage};

/// Re-exported so users get the `zookeeper-client` this crate was built with.
pub use zookeeper_client;
