//! Real Redis servers for tests and fault runs (feature `servers`), each on free ports of
//! 127.0.0.1 in a temporary directory, killed and removed on drop:
//!
//! - [`RedisServer`]: one `redis-server`, with or without AOF persistence and a password
//!   ([`RedisServerOptions`]); killed with SIGKILL, paused with SIGSTOP, and restarted on the
//!   same port and data directory, so persistence across a crash is observable. The chaos
//!   runs of `redis://` and `redlock://` (`Scheme::spawn`) start theirs with it.
//! - [`RedisCluster`]: a Redis Cluster made with `redis-cli --cluster create`, whose nodes are
//!   killed and paused, and whose failovers a test waits for.
//! - [`TlsRedis`]: a `redis-server` that speaks TLS only, with the PEM files of
//!   [`RedisTlsFiles`].
//!
//! Each has a fallible `try_` constructor and a panicking shorthand for tests that says what to
//! install. Ports come from `fencelock_servers::port::free_port`, so servers of one process
//! never share one.

mod cluster;
mod server;
mod tls;

pub use cluster::{NodeView, RedisCluster};
pub use server::{RedisServer, RedisServerOptions};
pub use tls::{RedisTlsFiles, TlsRedis};
