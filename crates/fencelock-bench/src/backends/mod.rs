//! This repository's backends, each with the raw baseline on its server and its
//! [`Suite`](crate::Suite) constructor.

#[cfg(feature = "etcd")]
pub(crate) mod etcd;
pub(crate) mod memory;
#[cfg(feature = "mysql")]
pub(crate) mod mysql;
#[cfg(feature = "postgres")]
pub(crate) mod postgres;
#[cfg(feature = "redis")]
pub(crate) mod redis;
#[cfg(feature = "redis")]
pub(crate) mod redis_cluster;
