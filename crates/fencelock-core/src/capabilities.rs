//! What a backend guarantees, read by users and by the conformance suite.

use std::time::Duration;

use crate::backend::MIN_TTL;

/// How durable a backend's fencing-token counters are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TokenGuarantee {
    /// Counters survive restarts of the server (a transactional database).
    Durable,
    /// Counters survive a restart only if the server persists its data; `server_persists` says
    /// what the server reported when asked (`None` if it could not be asked).
    DurableIfServerPersists {
        /// The server's persistence as read at connect time.
        server_persists: Option<bool>,
    },
    /// Counters live as long as the backend value (in-process backends).
    None,
}

/// Whose clock decides when a lease expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TimeAuthority {
    /// The server's clock (Redis `PX`, Postgres `now()`, session time-outs).
    Server,
    /// This process's monotonic clock.
    Client,
    /// The wall clock of the one host every client of the backend runs on (a lock directory or
    /// an embedded database on that host): every client reads the same clock, so expiry is
    /// decided once, but only for clients of that host. A backend that says this must not be
    /// shared across hosts (a network file system gives each host its own clock).
    Host,
}

/// How [`LockBackend::wait_for_release`](crate::LockBackend::wait_for_release) learns that a lock
/// was released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum WakeUp {
    /// A release wakes waiters at once (pub/sub, LISTEN/NOTIFY, `Notify`).
    Notify,
    /// Waiters poll with backoff.
    Poll,
}

/// The kinds of lock a backend offers, read by [`RwLocker`](crate::RwLocker) users and by the
/// conformance suite (which checks each kind a backend claims, and that one it does not claim
/// is refused with [`Error::Unsupported`](crate::Error::Unsupported)).
///
/// [`Semaphore`](crate::Semaphore) and [`Election`](crate::Election) are built in
/// fencelock-core on exclusive locks, so every backend offers them; shared (reader) locks need
/// a primitive of the backend's own ([`LockBackend::try_acquire_shared`](crate::LockBackend::try_acquire_shared)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct LockKinds {
    /// Exclusive locks ([`Locker`](crate::Locker)); the writer side of a read/write lock.
    pub exclusive: bool,
    /// Shared (reader) locks whose overlapping readers share one read fence.
    pub shared: bool,
    /// Semaphores of N permits, a slot of exclusive locks each.
    pub semaphore: bool,
    /// Leader election, a campaign being an exclusive lock held with the watchdog.
    pub election: bool,
}

impl LockKinds {
    /// What every backend offers through fencelock-core: exclusive locks, semaphores and
    /// elections.
    pub const GENERIC: LockKinds = LockKinds {
        exclusive: true,
        shared: false,
        semaphore: true,
        election: true,
    };

    /// These kinds and shared (reader) locks.
    pub const fn with_shared(mut self) -> Self {
        self.shared = true;
        self
    }
}

/// A backend's guarantees. Built with [`Capabilities::new`] and the `with_*` setters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub struct Capabilities {
    /// Durability of the token counters.
    pub tokens: TokenGuarantee,
    /// Whose clock expires leases.
    pub time_authority: TimeAuthority,
    /// How waiters are woken.
    pub wake_up: WakeUp,
    /// The shortest ttl accepted; never less than [`MIN_TTL`](crate::MIN_TTL).
    pub min_ttl: Duration,
    /// The longest ttl accepted.
    pub max_ttl: Duration,
    /// Whether held locks survive a restart of the server.
    pub locks_survive_restart: bool,
    /// The kinds of lock offered; [`LockKinds::GENERIC`] unless the backend says more.
    pub kinds: LockKinds,
    /// Whether a released exclusive lock goes to its waiters in arrival order (the waiters of
    /// [`Locker`](crate::Locker) requests, through
    /// [`try_acquire_queued`](crate::LockBackend::try_acquire_queued)), each release waking
    /// only the next; false when waiters race for it.
    pub fair: bool,
    /// Whether a set of keys can be granted in one atomic step
    /// ([`try_acquire_all`](crate::LockBackend::try_acquire_all)): every key or none, each with
    /// its own token, in one round trip. [`Locker::lock_all`](crate::Locker::lock_all) tries
    /// that first and takes the keys one at a time in order when it is refused or not offered.
    pub atomic_sets: bool,
    /// Whether a release can pass the lock to a waiter of the same process in one step
    /// ([`pass`](crate::LockBackend::pass)): the old lease ends and the new one begins, with
    /// the next token, in one write on the server. A [`Locker`](crate::Locker) then hands a
    /// released lock to its own barging waiters of that key without freeing it in between.
    pub passes: bool,
    /// The most locks one backend value can hold at once, where each held lock keeps a
    /// server session of a bounded pool (`GET_LOCK`, PostgreSQL advisory locks); `None` when
    /// held locks take no session. [`Locker::lock_all`](crate::Locker::lock_all) refuses a set
    /// of more keys at once: taken one at a time, it would hold every session and wait for one
    /// more that never comes.
    pub max_held: Option<u32>,
    /// The setting that raises [`max_ttl`](Self::max_ttl), for the refusal of a longer ttl
    /// to name (`"the URL's session_timeout"`); `None` when no setting does.
    pub max_ttl_setting: Option<&'static str>,
}

impl Capabilities {
    /// The ttl a request gets when it names none: [`DEFAULT_TTL`](crate::DEFAULT_TTL), 30 s,
    /// within this backend's bounds (a ZooKeeper session of 2 s makes it 2 s).
    pub fn default_ttl(&self) -> Duration {
        crate::DEFAULT_TTL.clamp(self.min_ttl, self.max_ttl.max(self.min_ttl))
    }

    /// Capabilities with the given guarantees, `min_ttl` = [`MIN_TTL`](crate::MIN_TTL) and
    /// `locks_survive_restart = false`.
    pub const fn new(
        tokens: TokenGuarantee,
        time_authority: TimeAuthority,
        wake_up: WakeUp,
        max_ttl: Duration,
    ) -> Self {
        Capabilities {
            tokens,
            time_authority,
            wake_up,
            min_ttl: MIN_TTL,
            max_ttl,
            locks_survive_restart: false,
            kinds: LockKinds::GENERIC,
            fair: false,
            atomic_sets: false,
            passes: false,
            max_held: None,
            max_ttl_setting: None,
        }
    }

    /// Raises [`min_ttl`](Self::min_ttl) for a backend that needs longer leases (say, one
    /// whose round trips are slow); a value below [`MIN_TTL`](crate::MIN_TTL) keeps that.
    pub const fn with_min_ttl(mut self, min_ttl: Duration) -> Self {
        self.min_ttl = if min_ttl.as_nanos() > MIN_TTL.as_nanos() {
            min_ttl
        } else {
            MIN_TTL
        };
        self
    }

    /// Sets [`fair`](Self::fair).
    pub const fn with_fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// Sets [`atomic_sets`](Self::atomic_sets).
    pub const fn with_atomic_sets(mut self, atomic: bool) -> Self {
        self.atomic_sets = atomic;
        self
    }

    /// Sets [`passes`](Self::passes).
    pub const fn with_passes(mut self, passes: bool) -> Self {
        self.passes = passes;
        self
    }

    /// Sets [`max_ttl_setting`](Self::max_ttl_setting).
    pub const fn with_max_ttl_setting(mut self, setting: &'static str) -> Self {
        self.max_ttl_setting = Some(setting);
        self
    }

    /// Sets [`max_held`](Self::max_held).
    pub const fn with_max_held(mut self, max: u32) -> Self {
        self.max_held = Some(max);
        self
    }

    /// Sets [`kinds`](Self::kinds).
    pub const fn with_kinds(mut self, kinds: LockKinds) -> Self {
        self.kinds = kinds;
        self
    }

    /// Sets [`locks_survive_restart`](Self::locks_survive_restart).
    pub const fn with_locks_survive_restart(mut self, survive: bool) -> Self {
        self.locks_survive_restart = survive;
        self
    }
}
