#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod backends;
mod cases;
mod error;
mod fenced_subject;
mod histogram;
mod kinds;
mod report;
mod run;
mod scenario;
mod subject;
mod suite;
mod table;

#[cfg(feature = "criterion")]
pub mod criterion;

#[cfg(feature = "etcd")]
pub use backends::etcd::{EtcdBaseline, EtcdLockServicePeer};
pub use backends::memory::MemoryBaseline;
#[cfg(feature = "mysql")]
pub use backends::mysql::MySqlBaseline;
#[cfg(feature = "postgres")]
pub use backends::postgres::{PgBaseline, SqlxAdvisoryLockPeer};
#[cfg(feature = "redis")]
pub use backends::redis::RedisBaseline;
#[cfg(feature = "redis")]
pub use backends::redis_cluster::RedisClusterBaseline;
pub use error::{BenchError, Result};
pub use fenced_subject::FencedSubject;
pub use histogram::Histogram;
pub use report::{Measurement, Report, Row};
pub use run::run_all;
pub use scenario::{FAILOVER_TTL, PERMITS, Scenario, Settings};
pub use subject::{Baseline, Cleanup, Op, RawTryLock, Subject, TTL};
pub use suite::Suite;
pub use table::format_latency;
