#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod spec;

pub use fencelock_core::*;

/// The in-process backend.
#[cfg(feature = "memory")]
pub use fencelock_memory as memory;

/// The Redis backends (one node, and Redlock over N nodes) and fenced storage.
#[cfg(feature = "redis")]
pub use fencelock_redis as redis;

/// The PostgreSQL backends (lease table, advisory locks, transactions, fenced storage).
#[cfg(feature = "postgres")]
pub use fencelock_postgres as postgres;
