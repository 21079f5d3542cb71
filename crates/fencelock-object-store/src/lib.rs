#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod config;
mod error;
mod fence;
mod frame;
mod probe;
mod storage;

pub use config::{ObjectStoreConfig, STORAGE_SCHEMES};
pub use fence::{DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_VALUE_LEN, FencedObject, ObjectFence, decode};
pub use object_store;
pub use storage::ObjectStorage;
