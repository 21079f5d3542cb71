//! What a chaos run is asked to do: the servers, the faults, the workload.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use fencelock::spec::BackendSpec;

use crate::error::{ChaosError, Result};

/// The servers a run talks to.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Target {
    /// Start `nodes` servers of a registered scheme whose backend can spawn them
    /// ([`Scheme::spawn`](fencelock::Scheme::spawn): `redis` one server, `redlock` N
    /// independent ones, `etcd` and `zookeeper` N members), so that the kill fault can kill -9
    /// and restart them on their data. The backend decides where the storage lives: on the
    /// same servers when they keep what they acknowledged, else on a server of its own that is
    /// never killed.
    Spawn {
        /// The scheme, without `://` (`redis`, `redlock`, `etcd`, `zookeeper`).
        scheme: String,
        /// Servers (nodes, members).
        nodes: usize,
        /// Whether the servers keep what they acknowledged through a kill, where the
        /// backend's spawner has a choice (it becomes the spawn request's `durable`).
        persistence: Persistence,
    },
    /// Servers the caller runs, named by a backend spec (`redis://`, `redlock://`,
    /// `postgres://`). They are never killed.
    Backend(Box<BackendSpec>),
}

impl Target {
    /// `nodes` spawned servers of `scheme`, durable.
    pub fn spawn(scheme: impl Into<String>, nodes: usize) -> Self {
        Target::Spawn {
            scheme: scheme.into(),
            nodes,
            persistence: Persistence::Always,
        }
    }
}

/// Persistence of spawned lock nodes: the spawn request's `durable`
/// ([`SpawnRequest::durable`](fencelock::tools::SpawnRequest::durable)), which each backend's
/// spawner meets its own way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Persistence {
    /// Every acknowledged write is on disk first: token counters survive kill -9.
    Always,
    /// Nothing kept: a killed node comes back with its token counters gone (where the
    /// backend can run so), which the fence must survive.
    None,
}

/// The kinds of fault a run can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FaultKind {
    /// SIGSTOP the worker that has just read under its lease, for 1 to 5 x ttl.
    Pause,
    /// kill -9 spawned lock nodes (servers, members) and restart them.
    Kill,
    /// Delay, blackhole or reset traffic through fault proxies in front of every server.
    Partition,
    /// End the workers' server sessions by the backend's session fault (its
    /// `SessionFaults`, named in the report as the backend names it).
    Terminate,
}

impl FaultKind {
    /// Every kind, in the order the help lists them.
    pub const ALL: [FaultKind; 4] = [
        FaultKind::Pause,
        FaultKind::Kill,
        FaultKind::Partition,
        FaultKind::Terminate,
    ];

    /// The name `--faults` uses.
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Pause => "pause",
            FaultKind::Kill => "kill",
            FaultKind::Partition => "partition",
            FaultKind::Terminate => "terminate",
        }
    }
}

impl fmt::Display for FaultKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for FaultKind {
    type Err = ChaosError;

    fn from_str(s: &str) -> Result<Self> {
        FaultKind::ALL
            .into_iter()
            .find(|kind| kind.name() == s)
            .ok_or_else(|| {
                ChaosError::config(format!(
                    "unknown fault {s:?} (expected pause, kill, partition or terminate)"
                ))
            })
    }
}

/// What the workers do: which lock kind they take, and what they keep under it. Every
/// workload is a fenced read-modify-write of counters, so the same checker, the same history
/// checker and the same negative control apply to each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase", tag = "kind")]
pub enum Workload {
    /// Each cycle takes the exclusive lock and increments one counter under its fence.
    Lock,
    /// A semaphore of `permits` permits: each holder increments the counter of the slot it
    /// holds, fenced with the slot's fence (a resource per slot, as DESIGN section 4.1 says a
    /// permit fences).
    Semaphore {
        /// Permits, fewer than the workers so that slots change hands.
        permits: u16,
    },
    /// Workers campaign; the leader increments a leader-only counter a few times with its
    /// term as the fence, then resigns. The leadership is held with the watchdog, so a paused
    /// leader stops renewing and loses it.
    Election,
    /// A read/write lock: even workers are writers (increment the counter under the writer's
    /// fence), odd workers readers (two fenced reads under the shared read fence, with the
    /// work between them). Needs a backend that offers shared locks.
    RwLock,
    /// Composite locks: `members + 1` counters, each with a lock key of its own; worker `i`
    /// takes the keys of counters `i .. i + members` (modulo the count) with one
    /// `Locker::lock_all`, so every two workers' sets overlap, and increments each member's
    /// counter under that member's own fence.
    Composite {
        /// Keys in each worker's set, 2 to [`MAX_MEMBERS`].
        members: u16,
    },
}

/// The most keys a composite workload's sets may have.
pub const MAX_MEMBERS: u16 = 16;

impl Workload {
    /// Every name `--workload` takes.
    pub const NAMES: [&'static str; 5] = ["lock", "semaphore", "election", "rwlock", "composite"];

    /// The name `--workload` uses.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Lock => "lock",
            Workload::Semaphore { .. } => "semaphore",
            Workload::Election => "election",
            Workload::RwLock => "rwlock",
            Workload::Composite { .. } => "composite",
        }
    }

    /// Counters the workers keep: one per permit for a semaphore, one more than a composite
    /// set's members (so that sets overlap without all being equal), else one.
    pub fn resources(self) -> usize {
        match self {
            Workload::Semaphore { permits } => usize::from(permits).max(1),
            Workload::Composite { members } => usize::from(members).max(1) + 1,
            Workload::Lock | Workload::Election | Workload::RwLock => 1,
        }
    }
}

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Workload::Semaphore { permits } => write!(f, "semaphore of {permits} permits"),
            Workload::Composite { members } => write!(f, "composite of {members} keys"),
            other => f.write_str(other.name()),
        }
    }
}

/// The two runs of a chaos run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Fenced reads and writes with each grant's fence, held to every rule of the checker.
    Fenced,
    /// The negative control: unfenced reads (`peek`) and one shared fence for every write, so
    /// the storage admits everything, as a store without fencing would. Only measured.
    Control,
}

impl Mode {
    /// `fenced` or `control`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Fenced => "fenced",
            Mode::Control => "control",
        }
    }
}

/// A chaos run: the target, the faults and the workload. [`ChaosConfig::new`] gives the
/// defaults the `fencelock chaos` command documents.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct ChaosConfig {
    /// The servers.
    pub target: Target,
    /// Where the workers keep their counters when not in the lock service's own storage: a
    /// storage spec (`s3://bucket/prefix?endpoint=...`) or another backend's storage.
    pub storage: Option<fencelock::spec::StorageSpec>,
    /// Worker processes, 2 to 256 (default 5).
    pub workers: u16,
    /// Length of the fenced run (default 30 s).
    pub duration: Duration,
    /// Length of the control run (it may go on to [`control_limit`](Self::control_limit));
    /// `None`: a third of `duration`, at least 5 s, at most
    /// `duration`.
    pub control_duration: Option<Duration>,
    /// Faults to inject (default: pause).
    pub faults: Vec<FaultKind>,
    /// What the workers do (default: [`Workload::Lock`]).
    pub workload: Workload,
    /// Lease ttl of the workers' locks, never renewed; at least 10 ms (default 200 ms).
    pub ttl: Duration,
    /// Sleep between each cycle's read and write; `None`: ttl / 10.
    pub work: Option<Duration>,
    /// The longest a worker waits for one storage or lock call before counting its outcome
    /// unknown (default 1 s).
    pub op_timeout: Duration,
    /// States the history checker may visit per key before its verdict is "unknown"
    /// (default [`DEFAULT_STATE_BUDGET`](crate::linearizability::DEFAULT_STATE_BUDGET)).
    pub search_budget: usize,
}

/// The shortest ttl a run accepts: below it the workers' own scheduling dominates.
pub const MIN_TTL: Duration = Duration::from_millis(10);

impl ChaosConfig {
    /// The defaults for `target`.
    pub fn new(target: Target) -> Self {
        ChaosConfig {
            target,
            storage: None,
            workers: 5,
            duration: Duration::from_secs(30),
            control_duration: None,
            faults: vec![FaultKind::Pause],
            workload: Workload::Lock,
            ttl: Duration::from_millis(200),
            work: None,
            op_timeout: Duration::from_secs(1),
            search_budget: crate::linearizability::DEFAULT_STATE_BUDGET,
        }
    }

    /// Checks the values that do not depend on the servers.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.ttl < MIN_TTL {
            return Err(ChaosError::config(format!(
                "the ttl must be at least {}ms",
                MIN_TTL.as_millis()
            )));
        }
        if self.duration.is_zero() {
            return Err(ChaosError::config("the duration must be greater than zero"));
        }
        if !(2..=256).contains(&self.workers) {
            return Err(ChaosError::config(format!(
                "{} workers: between 2 and 256 are needed",
                self.workers
            )));
        }
        if self.op_timeout.is_zero() {
            return Err(ChaosError::config(
                "the operation time-out must be greater than zero",
            ));
        }
        if self.search_budget == 0 {
            return Err(ChaosError::config(
                "the history checker's search budget must be at least one state",
            ));
        }
        if let Workload::Semaphore { permits } = self.workload
            && (permits == 0 || permits >= self.workers)
        {
            return Err(ChaosError::config(format!(
                "a semaphore of {permits} permits for {} workers: give between 1 and {} permits \
                 (fewer than the workers, so that permits change hands)",
                self.workers,
                self.workers - 1
            )));
        }
        if let Workload::Composite { members } = self.workload
            && !(2..=MAX_MEMBERS).contains(&members)
        {
            return Err(ChaosError::config(format!(
                "a composite of {members} keys: give between 2 and {MAX_MEMBERS} keys per set"
            )));
        }
        if let Target::Spawn {
            scheme, nodes: 0, ..
        } = &self.target
        {
            return Err(ChaosError::config(format!(
                "spawning {scheme}:// needs at least one server"
            )));
        }
        Ok(())
    }

    /// The faults, each once, in the order given.
    pub(crate) fn distinct_faults(&self) -> Vec<FaultKind> {
        let mut faults = Vec::with_capacity(self.faults.len());
        for fault in &self.faults {
            if !faults.contains(fault) {
                faults.push(*fault);
            }
        }
        faults
    }

    /// The work sleep: as given, or ttl / 10.
    pub fn work(&self) -> Duration {
        self.work.unwrap_or(self.ttl / 10)
    }

    /// The control run's length: as given, or a third of the fenced run's, at least 5 s and
    /// at most the fenced run's.
    pub fn control_duration(&self) -> Duration {
        self.control_duration.unwrap_or_else(|| {
            (self.duration / 3)
                .max(Duration::from_secs(5))
                .min(self.duration)
        })
    }

    /// How long the control may run in all: a control that has shown no lost update after
    /// [`control_duration`](Self::control_duration) goes on until its first one, up to the
    /// longer of that and the fenced run's length. Lost updates come from rare coincidences
    /// (a pause long enough for another holder to write in it), so a short control on a slow
    /// server can miss them by chance; waiting for one, within a bound, keeps such a run from
    /// being reported as proving nothing.
    pub fn control_limit(&self) -> Duration {
        self.control_duration().max(self.duration)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_names_round_trip_and_junk_is_refused() {
        for kind in FaultKind::ALL {
            assert_eq!(kind.name().parse::<FaultKind>().unwrap(), kind);
        }
        let err = "flood".parse::<FaultKind>().unwrap_err();
        assert!(err.to_string().contains("unknown fault \"flood\""), "{err}");
    }

    #[test]
    fn out_of_range_settings_are_refused() {
        let target = Target::spawn("redis", 1);
        assert!(ChaosConfig::new(target.clone()).validate().is_ok());
        let mut short = ChaosConfig::new(target.clone());
        short.ttl = Duration::from_millis(5);
        assert!(short.validate().unwrap_err().to_string().contains("10ms"));
        let mut none = ChaosConfig::new(target.clone());
        none.duration = Duration::ZERO;
        assert!(none.validate().is_err());
        let mut lonely = ChaosConfig::new(target.clone());
        lonely.workers = 1;
        assert!(lonely.validate().is_err());
        let mut crowded = ChaosConfig::new(target);
        crowded.workload = Workload::Semaphore { permits: 5 };
        assert!(
            crowded
                .validate()
                .unwrap_err()
                .to_string()
                .contains("between 1 and 4 permits")
        );
        crowded.workload = Workload::Semaphore { permits: 4 };
        assert!(crowded.validate().is_ok());
        for (members, ok) in [
            (1, false),
            (2, true),
            (MAX_MEMBERS, true),
            (MAX_MEMBERS + 1, false),
        ] {
            crowded.workload = Workload::Composite { members };
            let outcome = crowded.validate();
            assert_eq!(outcome.is_ok(), ok, "{members} members: {outcome:?}");
        }
        assert_eq!(Workload::Composite { members: 2 }.resources(), 3);
        let empty = ChaosConfig::new(Target::spawn("redis", 0));
        assert!(empty.validate().unwrap_err().is_input());
    }

    #[test]
    fn the_control_run_is_a_third_within_bounds() {
        let spec = BackendSpec::parse("redis://x").unwrap();
        let mut config = ChaosConfig::new(Target::Backend(Box::new(spec)));
        config.duration = Duration::from_secs(30);
        assert_eq!(config.control_duration(), Duration::from_secs(10));
        config.duration = Duration::from_secs(3);
        assert_eq!(config.control_duration(), Duration::from_secs(3));
        config.duration = Duration::from_secs(9);
        assert_eq!(config.control_duration(), Duration::from_secs(5));
        assert_eq!(config.control_limit(), Duration::from_secs(9));
        config.control_duration = Some(Duration::from_secs(1));
        assert_eq!(config.control_duration(), Duration::from_secs(1));
        assert_eq!(config.control_limit(), Duration::from_secs(9));
        config.control_duration = Some(Duration::from_secs(20));
        assert_eq!(config.control_limit(), Duration::from_secs(20));
        assert_eq!(config.work(), config.ttl / 10);
    }
}
