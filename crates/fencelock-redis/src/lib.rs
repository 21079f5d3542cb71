#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

// The bottom floor: no module here imports from the ones above it.
mod codec;
mod error;
mod keys;
mod link;
mod options;
mod outcome;
mod protocol_probe;
mod redis_url;
mod scripts;
mod slot;

mod config;
mod connection;
mod fence;
mod grant_box;
mod poll;
mod waiters;

mod backend;
mod cluster;
mod delegate;
mod read_phase;
mod redlock;
mod storage;

// The top floor: the crate as one unit for the tools above it.
pub mod baseline;
mod schemes;
#[cfg(feature = "servers")]
#[cfg_attr(docsrs, doc(cfg(feature = "servers")))]
pub mod servers;
#[cfg(feature = "servers")]
mod spawn;

pub use backend::RedisLockBackend;
pub use baseline::{RedisBaseline, RedisClusterBaseline};
pub use cluster::{RedisClusterBackend, RedisClusterConfig};
pub use codec::MAX_TTL;
pub use config::RedisConfig;
pub use error::{RedisResultExt, map_redis_error};
pub use fence::{RedisFence, Reply, hash_tag};
pub use options::{DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_VALUE_LEN};
pub use redlock::{DEFAULT_NODE_TIMEOUT, Redlock, RedlockConfig};
pub use schemes::SCHEMES;
pub use storage::RedisStorage;

/// The `redis` crate this one is built on, so users name its connections and types (for
/// [`RedisFence`] on their own connection) with the matching version.
pub use redis;
