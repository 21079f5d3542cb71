#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod backend;
mod config;
mod connection;
mod error;
mod keys;
mod redact;
mod redlock;
mod redlock_config;
mod redlock_round;
mod scripts;
mod storage;
mod waiters;

pub use backend::{MAX_TTL, RedisLockBackend};
pub use config::{
    DEFAULT_CALL_TIMEOUT, DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_VALUE_LEN, RedisConfig,
};
pub use redlock::Redlock;
pub use redlock_config::{DEFAULT_NODE_TIMEOUT, RedlockConfig};
pub use storage::RedisStorage;

/// The backend's name in errors, logs and spans.
const BACKEND: &str = "redis";
