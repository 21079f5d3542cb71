//! The scenarios, and a run of all of them against one [`Suite`].

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use fencelock_core::LockKey;
use tokio::task::JoinSet;

use crate::error::{BenchError, Result};
use crate::histogram::Histogram;
use crate::suite::{Op, Subject, Suite};

/// Each latency scenario's time is split into this many slices, run in turn by each subject,
/// so a burst of noise on the machine hits them alike.
const ROUNDS: u32 = 4;

/// How long a contended operation may wait for its lock before the run is called failed.
const CONTENDED_WAIT: Duration = Duration::from_secs(60);

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

/// A scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Scenario {
    /// The baseline's cheapest request, back to back: the unit of the extend ratio.
    RoundTrip,
    /// The same request after the pause a hand-off's waiter is given to block: the unit of
    /// the hand-off ratio. Idle processes wake slower than busy ones (scheduler, CPU idle
    /// states), and a hand-off pays that on both ends, so it is counted in these round trips.
    IdleRoundTrip,
    /// Take a free lock without waiting, release it.
    AcquireRelease,
    /// A write under a held lease: fenced for fencelock, plain for the baseline.
    FencedWrite,
    /// A holder releases, a waiter blocked in `Locker::lock(..).wait(..)` gets the lock:
    /// release-call start to grant.
    Handoff,
    /// Renew a held lease.
    Extend,
    /// `concurrency` tasks lock and release one key.
    ContendedOneKey,
    /// `concurrency` tasks lock and release keys drawn from `keys`.
    ContendedManyKeys,
}

impl Scenario {
    /// Every scenario, in report order.
    pub const ALL: [Scenario; 8] = [
        Scenario::RoundTrip,
        Scenario::IdleRoundTrip,
        Scenario::AcquireRelease,
        Scenario::FencedWrite,
        Scenario::Handoff,
        Scenario::Extend,
        Scenario::ContendedOneKey,
        Scenario::ContendedManyKeys,
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
        }
    }

    /// Whether the ratio compares throughput (ops/s) rather than the median latency.
    pub fn is_throughput(self) -> bool {
        matches!(
            self,
            Scenario::ContendedOneKey | Scenario::ContendedManyKeys
        )
    }

    /// Whether the ratio counts round trips (hand-off: after idle; extend: back to back).
    pub fn in_round_trips(self) -> bool {
        matches!(self, Scenario::Handoff | Scenario::Extend)
    }
}

/// Latencies and throughput of one subject in one scenario.
#[derive(Debug, Clone, Default)]
pub struct Measurement {
    /// Per-operation latencies.
    pub latencies: Histogram,
    /// Operations completed.
    pub ops: u64,
    /// Wall time spent.
    pub elapsed: Duration,
}

impl Measurement {
    /// Operations per second of wall time.
    pub fn ops_per_sec(&self) -> f64 {
        if self.elapsed.is_zero() {
            0.0
        } else {
            self.ops as f64 / self.elapsed.as_secs_f64()
        }
    }

    fn merge(&mut self, other: &Measurement) {
        self.latencies.merge(&other.latencies);
        self.ops += other.ops;
        self.elapsed += other.elapsed;
    }
}

/// One line of a report.
#[derive(Debug, Clone)]
pub struct Row {
    /// The scenario.
    pub scenario: Scenario,
    /// Who ran it.
    pub subject: String,
    /// Whether this row is the scenario's baseline.
    pub baseline: bool,
    /// What was measured.
    pub measurement: Measurement,
    /// Cost relative to the scenario's baseline (above 1 is slower): median latency over the
    /// baseline's, or for throughput scenarios the baseline's ops/s over this row's; for
    /// hand-off and extend, the median in round trips.
    pub ratio: Option<f64>,
}

/// The outcome of [`run_all`].
#[derive(Debug, Clone)]
pub struct Report {
    /// The backend.
    pub backend: String,
    /// The settings of the run.
    pub settings: Settings,
    /// One row per scenario and subject.
    pub rows: Vec<Row>,
}

/// Takes the free lock on a key and releases it.
struct AcquireRelease {
    subject: Arc<dyn Subject>,
    key: LockKey,
}

#[async_trait]
impl Op for AcquireRelease {
    async fn once(&self) -> Result<Option<Duration>> {
        self.subject.acquire_release(&self.key).await?;
        Ok(None)
    }
}

/// One round trip to the baseline's server.
pub(crate) struct RoundTrip(pub(crate) Arc<dyn crate::suite::Baseline>);

#[async_trait]
impl Op for RoundTrip {
    async fn once(&self) -> Result<Option<Duration>> {
        self.0.round_trip().await?;
        Ok(None)
    }
}

/// One round trip after a pause of `settle`, timed without the pause.
pub(crate) struct IdleRoundTrip {
    pub(crate) baseline: Arc<dyn crate::suite::Baseline>,
    pub(crate) settle: Duration,
}

#[async_trait]
impl Op for IdleRoundTrip {
    async fn once(&self) -> Result<Option<Duration>> {
        tokio::time::sleep(self.settle).await;
        let sent = Instant::now();
        self.baseline.round_trip().await?;
        Ok(Some(sent.elapsed()))
    }
}

/// Runs `op` for `budget` (at least once), adding to `into`.
pub(crate) async fn measure_for(
    op: &dyn Op,
    budget: Duration,
    into: &mut Measurement,
) -> Result<()> {
    let start = Instant::now();
    let end = start + budget;
    loop {
        let sent = Instant::now();
        let latency = match op.once().await? {
            Some(latency) => latency,
            None => sent.elapsed(),
        };
        into.latencies.record(latency);
        into.ops += 1;
        if Instant::now() >= end {
            break;
        }
    }
    into.elapsed += start.elapsed();
    Ok(())
}

/// When a contended run stops.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stop {
    /// After this much wall time (operations in flight complete).
    After(Duration),
    /// After this many operations in all (criterion's iteration counts).
    #[cfg_attr(not(feature = "criterion"), allow(dead_code))]
    Ops(u64),
}

/// `tasks` tasks lock and release keys drawn from `keys` through `subject` until `stop`.
pub(crate) async fn contended(
    subject: Arc<dyn Subject>,
    keys: Arc<Vec<LockKey>>,
    tasks: usize,
    stop: Stop,
) -> Result<Measurement> {
    if keys.is_empty() || tasks == 0 {
        return Err(BenchError::Run(
            "a contended run needs a key and a task".into(),
        ));
    }
    let started = Instant::now();
    let issued = Arc::new(AtomicU64::new(0));
    let mut set = JoinSet::new();
    for _ in 0..tasks {
        let subject = subject.clone();
        let keys = keys.clone();
        let issued = issued.clone();
        set.spawn(async move {
            let mut mine = Measurement::default();
            loop {
                match stop {
                    Stop::After(budget) if started.elapsed() >= budget => break,
                    Stop::Ops(n) if issued.fetch_add(1, Ordering::Relaxed) >= n => break,
                    _ => {}
                }
                let key = &keys[if keys.len() == 1 {
                    0
                } else {
                    rand::random_range(0..keys.len())
                }];
                let sent = Instant::now();
                subject.lock_release(key, CONTENDED_WAIT).await?;
                mine.latencies.record(sent.elapsed());
                mine.ops += 1;
            }
            Ok::<_, BenchError>(mine)
        });
    }
    let mut total = Measurement::default();
    while let Some(joined) = set.join_next().await {
        let mine =
            joined.map_err(|e| BenchError::Run(format!("a contending task died: {e}")))??;
        total.latencies.merge(&mine.latencies);
        total.ops += mine.ops;
    }
    total.elapsed = started.elapsed();
    Ok(total)
}

/// How long a hand-off's waiter is left to block before the holder releases: long enough for
/// its first try to come back refused on a server `round_trip` away.
pub(crate) fn settle_time(round_trip: Duration) -> Duration {
    (round_trip * 10).max(Duration::from_millis(5))
}

/// Everything that contends in `suite`: the baseline first, then fencelock, then the peers.
pub(crate) fn contenders(suite: &Suite) -> Vec<(Arc<dyn Subject>, bool)> {
    let baseline: Arc<dyn Subject> = suite.baseline.clone();
    let fencelock: Arc<dyn Subject> = suite.fencelock.clone();
    let mut all = vec![(baseline, true), (fencelock, false)];
    all.extend(suite.peers.iter().map(|peer| (peer.clone(), false)));
    all
}

/// The keys of a contended scenario for contender `index`.
pub(crate) fn contended_keys(
    suite: &Suite,
    index: usize,
    scenario: Scenario,
    settings: &Settings,
) -> Result<Arc<Vec<LockKey>>> {
    let keys = match scenario {
        Scenario::ContendedOneKey => vec![suite.key(index, "contended")?],
        _ => (0..settings.keys.max(1))
            .map(|k| suite.key(index, &format!("spread/{k}")))
            .collect::<Result<_>>()?,
    };
    Ok(Arc::new(keys))
}

/// Runs every scenario against `suite`, calling `progress` with a line before each step.
pub async fn run_all(
    suite: &Suite,
    settings: Settings,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Report> {
    let slice = settings.duration / ROUNDS;
    let contenders = contenders(suite);
    let steps = 7;
    let mut step = 0;
    let mut announce = |what: &str| {
        step += 1;
        progress(&format!("[{step}/{steps}] {what}"));
    };
    let mut rows = Vec::new();

    // Round trip: the unit of the hand-off and extend rows.
    announce(&format!(
        "round trip: {}",
        suite.baseline.round_trip_label()
    ));
    let mut round_trip = Measurement::default();
    measure_for(
        &RoundTrip(suite.baseline.clone()),
        settings.duration,
        &mut round_trip,
    )
    .await?;
    rows.push(Row {
        scenario: Scenario::RoundTrip,
        subject: suite.baseline.round_trip_label(),
        baseline: true,
        measurement: round_trip.clone(),
        ratio: None,
    });

    // Acquire + release, every contender in turn.
    let mut ops: Vec<(String, bool, Box<dyn Op>)> = Vec::new();
    let labels: Vec<String> = contenders.iter().map(|(s, _)| s.label()).collect();
    announce(&format!("acquire+release: {}", labels.join(", ")));
    for (index, (subject, baseline)) in contenders.iter().enumerate() {
        ops.push((
            subject.label(),
            *baseline,
            Box::new(AcquireRelease {
                subject: subject.clone(),
                key: suite.key(index, "acquire-release")?,
            }),
        ));
    }
    rows.extend(alternate(Scenario::AcquireRelease, ops, slice).await?);

    // Fenced write vs plain write.
    announce(&format!(
        "fenced write: {}, {}",
        suite.baseline.write_label(),
        suite.fencelock.label()
    ));
    let ops: Vec<(String, bool, Box<dyn Op>)> = vec![
        (
            suite.baseline.write_label(),
            true,
            suite.baseline.writer(&suite.key(0, "write")?).await?,
        ),
        (
            format!("{} fenced write", suite.fencelock.label()),
            false,
            suite.fencelock.writer(&suite.key(1, "write")?).await?,
        ),
    ];
    rows.extend(alternate(Scenario::FencedWrite, ops, slice).await?);

    // Hand-off, in round trips after the same idle pause.
    announce(&format!(
        "hand-off: {} after idle, {}",
        suite.baseline.round_trip_label(),
        suite.fencelock.label()
    ));
    let settle = settle_time(round_trip.latencies.quantile(0.5));
    let ops: Vec<(String, bool, Box<dyn Op>)> = vec![
        (
            suite.baseline.round_trip_label(),
            true,
            Box::new(IdleRoundTrip {
                baseline: suite.baseline.clone(),
                settle,
            }),
        ),
        (
            suite.fencelock.label(),
            false,
            suite.fencelock.handoff(&suite.key(1, "handoff")?, settle),
        ),
    ];
    let mut handoff_rows = alternate(Scenario::Handoff, ops, slice).await?;
    if let Some(idle) = handoff_rows.first_mut() {
        idle.scenario = Scenario::IdleRoundTrip;
    }
    rows.extend(handoff_rows);

    // Extend, in round trips.
    announce(&format!("extend: {}", suite.fencelock.label()));
    let renewer = suite.fencelock.renewer(&suite.key(1, "extend")?).await?;
    let mut measured = Measurement::default();
    measure_for(renewer.as_ref(), settings.duration, &mut measured).await?;
    renewer.finish().await?;
    rows.push(Row {
        scenario: Scenario::Extend,
        subject: suite.fencelock.label(),
        baseline: false,
        measurement: measured,
        ratio: None,
    });

    // Contended throughput.
    for scenario in [Scenario::ContendedOneKey, Scenario::ContendedManyKeys] {
        let mut measured = vec![Measurement::default(); contenders.len()];
        announce(&format!(
            "{}: {}",
            scenario.title(&settings),
            labels.join(", ")
        ));
        let keys = (0..contenders.len())
            .map(|index| contended_keys(suite, index, scenario, &settings))
            .collect::<Result<Vec<_>>>()?;
        for _ in 0..ROUNDS / 2 {
            for (index, (subject, _)) in contenders.iter().enumerate() {
                let m = contended(
                    subject.clone(),
                    keys[index].clone(),
                    settings.concurrency,
                    Stop::After(settings.duration / 2),
                )
                .await?;
                measured[index].merge(&m);
            }
        }
        for ((subject, baseline), measurement) in contenders.iter().zip(measured) {
            rows.push(Row {
                scenario,
                subject: subject.label(),
                baseline: *baseline,
                measurement,
                ratio: None,
            });
        }
    }

    fill_ratios(&mut rows);
    Ok(Report {
        backend: suite.backend.clone(),
        settings,
        rows,
    })
}

/// Runs `ops` in turn, `ROUNDS` slices each, and finishes them.
async fn alternate(
    scenario: Scenario,
    ops: Vec<(String, bool, Box<dyn Op>)>,
    slice: Duration,
) -> Result<Vec<Row>> {
    let mut measured = vec![Measurement::default(); ops.len()];
    for _ in 0..ROUNDS {
        for (i, (_, _, op)) in ops.iter().enumerate() {
            measure_for(op.as_ref(), slice, &mut measured[i]).await?;
        }
    }
    let mut rows = Vec::new();
    for ((subject, baseline, op), measurement) in ops.into_iter().zip(measured) {
        op.finish().await?;
        rows.push(Row {
            scenario,
            subject,
            baseline,
            measurement,
            ratio: None,
        });
    }
    Ok(rows)
}

fn fill_ratios(rows: &mut [Row]) {
    let unit = |scenario: Scenario| {
        rows.iter()
            .find(|r| r.scenario == scenario)
            .map(|r| r.measurement.latencies.quantile(0.5))
            .filter(|rt| !rt.is_zero())
    };
    let round_trip = unit(Scenario::RoundTrip);
    let idle_round_trip = unit(Scenario::IdleRoundTrip);
    let baselines: Vec<(Scenario, Measurement)> = rows
        .iter()
        .filter(|r| r.baseline)
        .map(|r| (r.scenario, r.measurement.clone()))
        .collect();
    for row in rows.iter_mut() {
        let p50 = row.measurement.latencies.quantile(0.5).as_secs_f64();
        row.ratio = match row.scenario {
            Scenario::Handoff => idle_round_trip.map(|rt| p50 / rt.as_secs_f64()),
            Scenario::Extend => round_trip.map(|rt| p50 / rt.as_secs_f64()),
            scenario => baselines
                .iter()
                .find(|(s, _)| *s == scenario)
                .and_then(|(_, base)| {
                    if scenario.is_throughput() {
                        let ours = row.measurement.ops_per_sec();
                        (ours > 0.0).then(|| base.ops_per_sec() / ours)
                    } else {
                        let theirs = base.latencies.quantile(0.5).as_secs_f64();
                        (theirs > 0.0).then(|| p50 / theirs)
                    }
                }),
        };
    }
}
