#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(missing_docs)]

mod advisory;
mod backend_config;
pub mod baseline;
mod codec;
mod config;
mod database;
mod epoch;
mod error;
mod exec;
mod fence;
mod hash;
mod lease_table;
mod session_faults;
mod statements;
mod storage;
mod tls;
mod transaction;
mod wakeups;

pub use advisory::PgAdvisoryBackend;
pub use backend_config::SCHEMES;
pub use config::{
    DEFAULT_IDLE_IN_TRANSACTION_TIMEOUT, DEFAULT_PORT, DEFAULT_SCHEMA, MAX_SCHEMA_LEN,
    PgBackendKind, PgConfig, PgPooler,
};
pub use database::PgDatabase;
pub use error::{SqlxResultExt, map_sqlx_error};
pub use fence::{
    DEFAULT_FENCE_COLUMNS, FenceParams, NO_FENCE_SQLSTATE, PgFence, STALE_SQLSTATE,
    UNGRANTED_SQLSTATE,
};
pub use hash::{advisory_lock_id, advisory_lock_id_in, raw_lock_key};
pub use lease_table::PgLeaseBackend;
pub use session_faults::PgSessionFaults;
pub use storage::{DEFAULT_MAX_VALUE_LEN, PgStorage};
pub use transaction::{BoxFuture, FencedTransaction};

/// Re-exported so users share the driver version fencelock was built with.
pub use sqlx;
