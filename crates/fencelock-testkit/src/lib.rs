//! Test tools for fencelock: real services for real tests. `publish = false`.
//!
//! Throwaway Postgres schemas and clusters (which tests may crash and restart), a PgBouncer in
//! transaction mode, a PostgreSQL server with TLS and the certificates for any TLS server (made
//! at test time) live here. The server groups and the TCP fault proxy live in
//! `fencelock-servers` (the `fencelock chaos` command uses them at run time too) and are
//! wrapped under the same paths, panicking with what to install instead of returning errors
//! (one wrapper for every group: [`members::Spawned`], also of a `Service` a backend's crate
//! gives behind its `servers` feature). A backend's own servers come from its crate, behind
//! that feature (`fencelock_redis::servers`).

pub mod members;
pub mod pg_cluster;
pub mod pgbouncer;
pub use pgbouncer::PgBouncer;
pub mod postgres;
pub mod proxy;
pub mod tls;
