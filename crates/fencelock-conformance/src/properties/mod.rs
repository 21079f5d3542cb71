//! The properties, one `pub async fn(&Setup)` each, in nine groups by what they check. Each
//! takes a fresh [`Setup`](crate::Setup) and panics, naming what broke, when the backend does
//! not meet the contract. Keys are random per call, so properties may share a server.
//!
//! Every property is reachable here by name (`properties::grant_contend_release`) and in its
//! group's module (`properties::lease::grant_contend_release`). [`GROUPS`] lists them all.
//!
//! Timing uses real time with generous margins (ttls of a few hundred milliseconds, waits of
//! several times that), so the suite runs against real servers on a loaded machine.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[macro_use]
mod declare;
mod support;

declare_groups! {
    /// Fencing tokens: strictly increasing, never reused, raised by `advance_token`.
    tokens => __fencelock_conformance_tokens,
    /// The lease life cycle on `LockBackend`: grant, contention, expiry, extend, release, inspect.
    lease => __fencelock_conformance_lease,
    /// `Locker` and `LockGuard`: waiting, dropped futures and guards, the watchdog, `lost()`,
    /// mutual exclusion under contention.
    locker => __fencelock_conformance_locker,
    /// The fence rule of `FencedStorage`, with any lock backend as the source of tokens.
    storage => __fencelock_conformance_storage,
    /// Bad input is a typed error that changes nothing; unusual but valid keys work.
    input => __fencelock_conformance_input,
    /// Read/write locks where the backend claims them, `Unsupported` where it does not.
    rwlock => __fencelock_conformance_rwlock,
    /// Semaphores of N permits, a slot of exclusive locks each.
    semaphore => __fencelock_conformance_semaphore,
    /// Leader election: one leader per term, increasing terms, observers, failover.
    election => __fencelock_conformance_election,
    /// Composite locks (`Locker::lock_all`): all or none, no deadlock, a fence per member;
    /// re-entry refused.
    composite => __fencelock_conformance_composite,
}

/// One group of properties, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PropertyGroup {
    /// The group's module under [`properties`](self), e.g. `"storage"`.
    pub name: &'static str,
    /// The names of its properties, each a `pub async fn` at `properties::<name>`.
    pub properties: &'static [&'static str],
}
