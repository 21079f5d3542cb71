#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod backend;
mod baseline;
mod config;
mod queue;
mod shards;
mod storage;

pub use backend::MemoryLockBackend;
pub use baseline::MemoryBaseline;
pub use config::{MemoryConfig, SCHEMES};
pub use storage::MemoryStorage;

const BACKEND: &str = "memory";
