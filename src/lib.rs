#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

pub mod spec;
mod storage_spec;

pub use fencelock_core::*;

/// The in-process backend.
#[cfg(feature = "memory")]
#[doc(inline)]
pub use fencelock_memory as memory;

/// The Redis backends (one node, and Redlock over N nodes) and fenced storage.
#[cfg(feature = "redis")]
#[doc(inline)]
pub use fencelock_redis as redis;

/// The PostgreSQL backends (lease table, advisory locks, transactions, fenced storage).
#[cfg(feature = "postgres")]
#[doc(inline)]
pub use fencelock_postgres as postgres;

/// The MySQL / MariaDB backend (`GET_LOCK` sessions, fenced storage, the user's own tables).
#[cfg(feature = "mysql")]
#[doc(inline)]
pub use fencelock_mysql as mysql;

/// The etcd backend and fenced storage.
#[cfg(feature = "etcd")]
#[doc(inline)]
pub use fencelock_etcd as etcd;

/// The ZooKeeper backend and fenced storage.
#[cfg(feature = "zookeeper")]
#[doc(inline)]
pub use fencelock_zookeeper as zookeeper;

/// Fenced writes to object storage through conditional puts: a fenced storage over any store
/// with conditional updates (S3 and S3-compatible servers, the in-memory store), and the fence
/// of the user's own objects.
#[cfg(feature = "object-store")]
#[doc(inline)]
pub use fencelock_object_store as object_store;
