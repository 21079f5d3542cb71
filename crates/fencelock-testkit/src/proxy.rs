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
//!
//! [`uncontended_round_trips`] counts what an uncontended grant and a release cost in round
//! trips, through a proxy in front of the backend's server.

use std::time::Duration;

use fencelock_core::{LockBackend, LockKey};
pub use fencelock_servers::proxy::{FaultProxy, Faults};

/// The round trips of uncontended grants and of their releases, one entry per call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundTrips {
    /// Of each `try_acquire` of a free key.
    pub grants: Vec<u64>,
    /// Of each `release` of the lease just granted.
    pub releases: Vec<u64>,
}

impl RoundTrips {
    /// Asserts that the grants and their releases took `grant` and `release` round trips
    /// each, counted over all of them together (an exchange that a busy machine delays past
    /// the quiet that ends one call's count lands in the next call's, and moves no total),
    /// naming `backend` and every count when not.
    ///
    /// # Panics
    /// When the total differs.
    pub fn assert_each(&self, backend: &str, grant: u64, release: u64) {
        let calls = self.grants.len() as u64;
        let total: u64 = self.grants.iter().chain(&self.releases).sum();
        assert_eq!(
            total,
            calls * (grant + release),
            "{backend}: round trips of {calls} uncontended grants {:?} (expected {grant} each) \
             and of their releases {:?} (expected {release} each)",
            self.grants,
            self.releases,
        );
    }
}

/// Counts, through `proxy` (which stands between `backend` and its only server), the round
/// trips of `times` uncontended `try_acquire`s of `key` and of their `release`s, after three
/// of each to warm the backend (connections open, statements prepared, scripts loaded). Each
/// count is taken from quiet to quiet (no traffic for 100 ms), so it holds what the call
/// caused after it returned too, such as a pool testing the connection it got back.
///
/// # Panics
/// When a call fails, or a grant of the free key is refused.
pub async fn uncontended_round_trips(
    proxy: &FaultProxy,
    backend: &dyn LockBackend,
    key: &LockKey,
    times: usize,
) -> RoundTrips {
    const TTL: Duration = Duration::from_secs(30);
    let mut counted = RoundTrips {
        grants: Vec::new(),
        releases: Vec::new(),
    };
    for round in 0..3 + times {
        let before = quiet(proxy).await;
        let lease = match backend.try_acquire(key, TTL).await {
            Ok(Some(lease)) => lease,
            other => panic!(
                "{}: a grant of the free key {key}: {other:?}",
                backend.name()
            ),
        };
        let granted = quiet(proxy).await;
        if let Err(e) = backend.release(&lease).await {
            panic!("{}: the release of {key}: {e}", backend.name());
        }
        let released = quiet(proxy).await;
        if round >= 3 {
            counted.grants.push(granted - before);
            counted.releases.push(released - granted);
        }
    }
    counted
}

/// The proxy's count of exchanges once it has not moved for 100 ms.
async fn quiet(proxy: &FaultProxy) -> u64 {
    let mut last = proxy.exchanges();
    loop {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = proxy.exchanges();
        if now == last {
            return now;
        }
        last = now;
    }
}
