//! The scenarios: the one list both drivers (the wall-clock [`run_all`](crate::run_all) and
//! the criterion benches) loop over, and what each scenario's figures mean.

use std::time::Duration;

/// What a run measures and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Time per subject per scenario.
    pub duration: Duration,
    /// Tasks in the contended scenarios.
    pub concurrency: usize,
    /// Keys the tasks spread over in the many-keys contended scenario.
    pub keys: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            duration: Duration::from_secs(2),
            concurrency: 64,
            keys: 1024,
        }
    }
}

/// A scenario: one kind of row in a report.
///
/// A run is the steps of [`Scenario::STEPS`], in order; each step measures its subjects
/// (the baseline, the fenced lock, the peers) under one scenario, except the hand-off step,
/// which also measures the [`IdleRoundTrip`](Scenario::IdleRoundTrip) its ratio is counted in,
/// the exclusive-grant step, which measures the other lock kinds next to it (readers,
/// writers, permits: the fenced lock's, no baseline of their own), and the composite steps,
/// which measure a set's single grants next to its `lock_all` (both the fenced lock's).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scenario {
    /// The baseline's cheapest request, back to back: the unit of the extend ratio.
    RoundTrip,
    /// The same request after the pause a hand-off's waiter is given to block: the unit of
    /// the hand-off ratio. Idle processes wake slower than busy ones (scheduler, CPU idle
    /// states), and a hand-off pays that on both ends, so it is counted in these round trips.
    /// Measured by the [`Handoff`](Scenario::Handoff) step, next to the hand-offs.
    IdleRoundTrip,
    /// Take a free lock without waiting, release it.
    AcquireRelease,
    /// A write under a held lease: fenced for the fenced lock, plain for the baseline.
    FencedWrite,
    /// A holder releases, a waiter blocked in `Locker::lock(..).wait(..)` gets the lock:
    /// release-call start to the waiter's guard. Two rows: the waiter with its watchdog off
    /// (a grant the release handed over for a short hand-off ttl is extended to the waiter's
    /// ttl before the guard is returned) and on, the `Locker`'s default (the watchdog renews
    /// it in the background).
    Handoff,
    /// Renew a held lease.
    Extend,
    /// `concurrency` tasks lock and release one key.
    ContendedOneKey,
    /// `concurrency` tasks lock and release keys drawn from `keys`.
    ContendedManyKeys,
    /// The exclusive lock through `Locker` (a guard, watchdog off), taken free and released:
    /// the unit the other lock kinds are counted in.
    ExclusiveGrant,
    /// A reader joins the free read phase of a read/write lock and leaves it (`RwLocker::read`
    /// and `ReadGuard::release`); measured where the backend offers shared locks.
    ReaderGrant,
    /// A writer takes the free read/write lock and releases it (`RwLocker::write`).
    WriterGrant,
    /// A permit of a free semaphore of [`PERMITS`] permits, taken and released
    /// (`Semaphore::acquire` and `PermitGuard::release`).
    PermitGrant,
    /// A leader is killed (it neither renews nor releases) just after its grant and a write;
    /// a standby blocked in `Election::campaign` takes over: from the kill to the standby's
    /// first admitted write. The old leader's write after that (a paused leader waking up)
    /// must be refused, or the step fails.
    ElectionFailover,
    /// [`COMPOSITE_SMALL`] free keys taken one `Locker::lock` at a time and released: the
    /// unit of [`CompositeSmall`](Scenario::CompositeSmall).
    SinglesSmall,
    /// The same number of free keys taken with one `Locker::lock_all` and released, as a
    /// ratio of [`SinglesSmall`](Scenario::SinglesSmall) in the same run.
    CompositeSmall,
    /// [`COMPOSITE_LARGE`] free keys taken one `Locker::lock` at a time and released.
    SinglesLarge,
    /// [`COMPOSITE_LARGE`] free keys taken with one `Locker::lock_all` and released, as a
    /// ratio of [`SinglesLarge`](Scenario::SinglesLarge).
    CompositeLarge,
}

/// Keys of the small composite set ([`Scenario::CompositeSmall`]).
pub const COMPOSITE_SMALL: usize = 2;

/// Keys of the large composite set ([`Scenario::CompositeLarge`]).
pub const COMPOSITE_LARGE: usize = 8;

/// Permits of the semaphore of [`Scenario::PermitGrant`].
pub const PERMITS: usize = 4;

/// The lease ttl of [`Scenario::ElectionFailover`]'s leaders (or the backend's shortest
/// lease, if longer): a failover takes about one ttl, so it is short.
pub const FAILOVER_TTL: Duration = Duration::from_millis(100);

impl Scenario {
    /// The steps of a run, in order: the one list the wall-clock driver and the criterion
    /// driver loop over. A step is named by the scenario of its main rows.
    pub const STEPS: [Scenario; 11] = [
        Scenario::RoundTrip,
        Scenario::AcquireRelease,
        Scenario::FencedWrite,
        Scenario::Handoff,
        Scenario::Extend,
        Scenario::ContendedOneKey,
        Scenario::ContendedManyKeys,
        Scenario::ExclusiveGrant,
        Scenario::ElectionFailover,
        Scenario::CompositeSmall,
        Scenario::CompositeLarge,
    ];

    /// Every scenario, in report order.
    pub const ALL: [Scenario; 17] = [
        Scenario::RoundTrip,
        Scenario::IdleRoundTrip,
        Scenario::AcquireRelease,
        Scenario::FencedWrite,
        Scenario::Handoff,
        Scenario::Extend,
        Scenario::ContendedOneKey,
        Scenario::ContendedManyKeys,
        Scenario::ExclusiveGrant,
        Scenario::ReaderGrant,
        Scenario::WriterGrant,
        Scenario::PermitGrant,
        Scenario::ElectionFailover,
        Scenario::SinglesSmall,
        Scenario::CompositeSmall,
        Scenario::SinglesLarge,
        Scenario::CompositeLarge,
    ];

    /// A short stable identifier (`acquire_release`, ...), as in criterion group names and
    /// JSON.
    pub fn id(self) -> &'static str {
        match self {
            Scenario::RoundTrip => "round_trip",
            Scenario::IdleRoundTrip => "idle_round_trip",
            Scenario::AcquireRelease => "acquire_release",
            Scenario::FencedWrite => "fenced_write",
            Scenario::Handoff => "handoff",
            Scenario::Extend => "extend",
            Scenario::ContendedOneKey => "contended_one_key",
            Scenario::ContendedManyKeys => "contended_many_keys",
            Scenario::ExclusiveGrant => "exclusive_grant",
            Scenario::ReaderGrant => "reader_grant",
            Scenario::WriterGrant => "writer_grant",
            Scenario::PermitGrant => "permit_grant",
            Scenario::ElectionFailover => "election_failover",
            Scenario::SinglesSmall => "singles_2",
            Scenario::CompositeSmall => "composite_2",
            Scenario::SinglesLarge => "singles_8",
            Scenario::CompositeLarge => "composite_8",
        }
    }

    /// How the scenario shows in a table.
    pub fn title(self, settings: &Settings) -> String {
        match self {
            Scenario::RoundTrip => "round trip".into(),
            Scenario::IdleRoundTrip => "round trip after idle".into(),
            Scenario::AcquireRelease => "acquire+release".into(),
            Scenario::FencedWrite => "fenced write".into(),
            Scenario::Handoff => "hand-off".into(),
            Scenario::Extend => "extend".into(),
            Scenario::ContendedOneKey => format!("contended {}x1 key", settings.concurrency),
            Scenario::ContendedManyKeys => {
                format!("contended {}x{} keys", settings.concurrency, settings.keys)
            }
            Scenario::ExclusiveGrant => "exclusive grant+release".into(),
            Scenario::ReaderGrant => "reader grant+release".into(),
            Scenario::WriterGrant => "writer grant+release".into(),
            Scenario::PermitGrant => format!("permit grant+release (of {PERMITS})"),
            Scenario::ElectionFailover => "election failover (leader killed)".into(),
            Scenario::SinglesSmall => format!("{COMPOSITE_SMALL} single grants+releases"),
            Scenario::CompositeSmall => format!("composite of {COMPOSITE_SMALL} grant+release"),
            Scenario::SinglesLarge => format!("{COMPOSITE_LARGE} single grants+releases"),
            Scenario::CompositeLarge => format!("composite of {COMPOSITE_LARGE} grant+release"),
        }
    }

    /// Whether the ratio compares throughput (ops/s) rather than the median latency.
    pub fn is_throughput(self) -> bool {
        matches!(
            self,
            Scenario::ContendedOneKey | Scenario::ContendedManyKeys
        )
    }

    /// The scenario whose median is this one's unit, for the scenarios counted in round
    /// trips rather than against a baseline of their own: hand-off in round trips after idle,
    /// extend in round trips back to back.
    pub fn round_trip_unit(self) -> Option<Scenario> {
        match self {
            Scenario::Handoff => Some(Scenario::IdleRoundTrip),
            Scenario::Extend | Scenario::ElectionFailover => Some(Scenario::RoundTrip),
            _ => None,
        }
    }

    /// The scenario whose baseline row this one's ratio is counted against: the lock kinds
    /// against the exclusive lock's grant on the same backend, a composite set against as many
    /// single grants, every other scenario against its own baseline.
    pub fn compared_with(self) -> Scenario {
        match self {
            Scenario::ReaderGrant | Scenario::WriterGrant | Scenario::PermitGrant => {
                Scenario::ExclusiveGrant
            }
            Scenario::CompositeSmall => Scenario::SinglesSmall,
            Scenario::CompositeLarge => Scenario::SinglesLarge,
            other => other,
        }
    }

    /// The keys of a composite scenario and of its single grants.
    pub fn set_size(self) -> Option<usize> {
        match self {
            Scenario::SinglesSmall | Scenario::CompositeSmall => Some(COMPOSITE_SMALL),
            Scenario::SinglesLarge | Scenario::CompositeLarge => Some(COMPOSITE_LARGE),
            _ => None,
        }
    }

    /// Whether the scenario is also counted in lease ttls (see [`Row::ttl`](crate::Row::ttl)).
    pub fn in_ttls(self) -> bool {
        self == Scenario::ElectionFailover
    }

    /// Whether the ratio counts round trips (hand-off: after idle; extend: back to back).
    pub fn in_round_trips(self) -> bool {
        self.round_trip_unit().is_some()
    }

    /// Whether each operation waits before its measured part (the hand-off's waiter is left
    /// to block), so a criterion group of it keeps its sample small.
    #[cfg(feature = "criterion")]
    pub(crate) fn pauses(self) -> bool {
        matches!(
            self,
            Scenario::Handoff | Scenario::IdleRoundTrip | Scenario::ElectionFailover
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_distinct() {
        let ids: std::collections::HashSet<_> = Scenario::ALL.iter().map(|s| s.id()).collect();
        assert_eq!(ids.len(), Scenario::ALL.len());
    }
}
