#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod config;
mod error;
mod fence;
mod frame;
mod layout;
mod probe;
mod storage;

pub use config::{ObjectStoreConfig, STORAGE_SCHEMES};
pub use fence::{DEFAULT_CALL_TIMEOUT, DEFAULT_MAX_VALUE_LEN, ObjectFence};
pub use frame::{FencedObject, decode};
pub use layout::ObjectLayout;
pub use object_store;
pub use storage::ObjectStorage;
