//! Test tools for fencelock: real services for real tests. `publish = false`.
//!
//! Throwaway Postgres schemas and clusters (which tests may crash and restart), a PgBouncer in
//! transaction mode, Redis clusters and TLS servers (with certificates made at test time) live
//! here. The redis-server spawner, the server groups and the TCP fault proxy live in
//! `fencelock-servers` (the `fencelock chaos` command uses them at run time too) and are
//! wrapped under the same paths, panicking with what to install instead of returning errors
//! (one wrapper for every group: [`members::Spawned`], also of a `Service` a backend's crate
//! gives behind its `servers` feature).

pub mod members;
pub mod pg_cluster;
pub mod pgbouncer;
pub use pgbouncer::PgBouncer;
pub mod postgres;
pub mod proxy;
pub mod redis;
pub mod redis_cluster;
pub mod tls;
