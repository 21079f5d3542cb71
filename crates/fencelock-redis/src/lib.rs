#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

// The bottom floor: no module here imports from the ones above it.
mod codec;
mod error;
mod keys;
mod outcome;
mod redact;
mod scripts;

mod config;
mod connection;
mod waiters;

mod backend;
mod redlock;
mod storage;

pub use backend::RedisLockBackend;
pub use codec::MAX_TTL;
pub use config::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_VALUE_LEN, RedisConfig,
};
pub use redlock::{DEFAULT_NODE_TIMEOUT, Redlock, RedlockConfig};
pub use storage::RedisStorage;
