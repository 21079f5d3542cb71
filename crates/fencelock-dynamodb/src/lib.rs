#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod backend;
mod backend_config;
pub mod baseline;
mod config;
mod error;
mod fence;
mod item;
mod seen;
#[cfg(feature = "servers")]
#[cfg_attr(docsrs, doc(cfg(feature = "servers")))]
pub mod servers;
#[cfg(feature = "servers")]
mod spawn;
mod storage;
mod table;

pub use backend::{DynamoLockBackend, LAST_TOKEN, MAX_TTL, MIN_TTL};
pub use backend_config::SCHEMES;
pub use config::{DEFAULT_PREFIX, DynamoConfig, FAMILIES, MAX_PREFIX_LEN, validate_prefix};
pub use error::map_dynamodb_error;
pub use fence::{
    DEFAULT_FENCE_ATTRIBUTES, DynamoFence, FenceOutcome, FencedWrite, MAX_TRANSACT_WRITES,
};
pub use seen::{DRIFT, TAKEOVER_MARGIN};
pub use storage::{DEFAULT_MAX_VALUE_LEN, DynamoStorage, MAX_INLINE_LEN};
pub use table::{DynamoTable, PARTITION_KEY};

/// Re-exported so users get the SDK this crate was built with (for [`DynamoTable::client`]).
pub use aws_sdk_dynamodb;
