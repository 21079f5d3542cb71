#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

mod backend;
mod shards;
mod storage;

pub use backend::MemoryLockBackend;
pub use storage::MemoryStorage;

const BACKEND: &str = "memory";
