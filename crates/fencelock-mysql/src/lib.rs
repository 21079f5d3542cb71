#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod backend;
mod backend_config;
pub mod baseline;
mod codec;
mod config;
mod database;
mod epoch;
mod error;
mod fence;
mod greeting;
mod lock_name;
mod redact;
mod schema;
mod session;
mod storage;
mod tls;
mod wakeups;

pub use backend::MySqlLockBackend;
pub use backend_config::SCHEMES;
pub use config::{
    DEFAULT_MAX_VALUE_LEN, DEFAULT_PORT, DEFAULT_PREFIX, MAX_PREFIX_LEN, MySqlBackendKind,
    MySqlConfig, MySqlTlsMode, validate_prefix,
};
pub use database::MySqlDatabase;
pub use error::map_sqlx_error;
pub use fence::{MySqlFence, STALE_SQLSTATE};
pub use lock_name::{HASHED_NAME_PREFIX, MAX_LOCK_NAME_CHARS, lock_name};
pub use storage::MySqlStorage;

/// Re-exported so users get the `sqlx` this crate was built with (for
/// [`MySqlFence::admit`]'s transactions and [`MySqlDatabase::pool`]).
pub use sqlx;
