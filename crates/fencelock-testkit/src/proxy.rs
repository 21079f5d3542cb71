//! `FaultProxy`: a TCP proxy on 127.0.0.1 whose faults (delay, blackhole, reset) switch at run
//! time. It lives in `fencelock-servers` (the chaos partition fault uses it); tests reach it here.
//!
//! ```no_run
//! # async fn demo(target: std::net::SocketAddr) -> std::io::Result<()> {
//! use fencelock_testkit::proxy::FaultProxy;
//! let proxy = FaultProxy::start(target).await?;
//! proxy.set_blackhole(true);
//! proxy.heal();
//! # Ok(()) }
//! ```

pub use fencelock_servers::proxy::{FaultProxy, Faults};
