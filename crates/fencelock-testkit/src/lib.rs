//! Test tools for fencelock: real services for real tests. `publish = false`.
//!
//! Throwaway Postgres schemas live here; the redis-server spawner and the TCP fault proxy live
//! in `fencelock-chaos` (the `fencelock chaos` command uses them at run time) and are
//! re-exported under the same paths.

pub mod etcd;
pub mod pgbouncer;
pub use pgbouncer::PgBouncer;
pub mod postgres;
pub mod proxy;
pub mod redis;
pub mod redis_cluster;
pub mod tls;
