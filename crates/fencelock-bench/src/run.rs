//! The wall-clock driver: [`run_all`] runs every step of [`Scenario::STEPS`] for a set time
//! and reports one row per case. Also the contended loop the criterion driver shares.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fencelock_core::LockKey;
use tokio::task::JoinSet;

use crate::cases::{Case, Workload, finish_all, measure_for, prepare};
use crate::error::{BenchError, Result};
use crate::report::{Measurement, Report, Row, fill_ratios};
use crate::scenario::{Scenario, Settings};
use crate::subject::Subject;
use crate::suite::Suite;

/// Each latency case's time is split into this many slices, run in turn by each case of the
/// step, so a burst of noise on the machine hits them alike. Contended cases run half as
/// many, longer slices, since each slice starts its tasks cold.
const ROUNDS: u32 = 4;

/// How long a contended operation may wait for its lock before the run is called failed.
const CONTENDED_WAIT: Duration = Duration::from_secs(60);

/// Runs every step of [`Scenario::STEPS`] against `suite`, `settings.duration` per case,
/// calling `progress` with a line (`[3/7] fenced write: ...`) before each step. Leases the
/// steps take are released; what stays on the servers is removed by
/// [`Suite::close`], which the caller runs after this, whatever its outcome.
pub async fn run_all(
    suite: &Suite,
    settings: Settings,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Report> {
    let steps = Scenario::STEPS.len();
    let mut rows = Vec::new();
    for (index, step) in Scenario::STEPS.into_iter().enumerate() {
        let cases = prepare(suite, step, &settings).await?;
        let names: Vec<String> = cases.iter().map(|c| c.name(step, &settings)).collect();
        progress(&format!(
            "[{}/{steps}] {}: {}",
            index + 1,
            step.title(&settings),
            names.join(", ")
        ));
        let measured = measure_step(&cases, &settings).await;
        let finished = finish_all_after(cases, measured).await?;
        rows.extend(finished);
    }
    fill_ratios(&mut rows);
    Ok(Report {
        backend: suite.backend.clone(),
        settings,
        rows,
    })
}

/// The one-hot-key curve: the [`ContendedOneKey`](Scenario::ContendedOneKey) step alone (the
/// fenced lock fair and barging, the raw baseline, the peers) at each task count of `counts`,
/// in order, `settings.duration` per case; one report per count, whose settings carry it.
/// `progress` is called before each count. Cleanup as for [`run_all`].
pub async fn run_sweep(
    suite: &Suite,
    settings: Settings,
    counts: &[usize],
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Vec<Report>> {
    let step = Scenario::ContendedOneKey;
    let mut reports = Vec::with_capacity(counts.len());
    for (index, &concurrency) in counts.iter().enumerate() {
        let settings = Settings {
            concurrency,
            ..settings
        };
        let cases = prepare(suite, step, &settings).await?;
        let names: Vec<String> = cases.iter().map(|c| c.name(step, &settings)).collect();
        progress(&format!(
            "[{}/{}] {}: {}",
            index + 1,
            counts.len(),
            step.title(&settings),
            names.join(", ")
        ));
        let measured = measure_step(&cases, &settings).await;
        let mut rows = finish_all_after(cases, measured).await?;
        fill_ratios(&mut rows);
        reports.push(Report {
            backend: suite.backend.clone(),
            settings,
            rows,
        });
    }
    Ok(reports)
}

/// Finishes `cases` whether or not they were measured, then makes their rows.
async fn finish_all_after(
    cases: Vec<Case>,
    measured: Result<Vec<Measurement>>,
) -> Result<Vec<Row>> {
    let heads: Vec<(Scenario, String, bool, Option<Duration>)> = cases
        .iter()
        .map(|c| (c.scenario, c.subject.clone(), c.baseline, c.ttl))
        .collect();
    let finished = finish_all(cases).await;
    let measured = measured?;
    finished?;
    Ok(heads
        .into_iter()
        .zip(measured)
        .map(|((scenario, subject, baseline, ttl), measurement)| Row {
            scenario,
            subject,
            baseline,
            measurement,
            ratio: None,
            ttl,
        })
        .collect())
}

/// Runs the cases of one step in turn, slice by slice.
async fn measure_step(cases: &[Case], settings: &Settings) -> Result<Vec<Measurement>> {
    let mut measured = vec![Measurement::default(); cases.len()];
    for round in 0..ROUNDS {
        for (case, into) in cases.iter().zip(measured.iter_mut()) {
            match &case.workload {
                Workload::Latency(op) => {
                    measure_for(op.as_ref(), settings.duration / ROUNDS, into).await?;
                }
                Workload::Contended { subject, keys } if round < ROUNDS / 2 => {
                    let m = contended(
                        subject.clone(),
                        keys.clone(),
                        settings.concurrency,
                        Stop::After(settings.duration / 2),
                    )
                    .await?;
                    into.merge(&m);
                }
                Workload::Contended { .. } => {}
            }
        }
    }
    Ok(measured)
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test]
    async fn a_run_reports_every_scenario_with_ratios() {
        let suite = Suite::connect(&fencelock_memory::MemoryConfig)
            .await
            .unwrap();
        let settings = Settings {
            duration: Duration::from_millis(20),
            concurrency: 2,
            keys: 4,
        };
        let mut lines = Vec::new();
        let report = run_all(&suite, settings, &mut |line: &str| {
            lines.push(line.to_owned())
        })
        .await
        .unwrap();
        assert_eq!(lines.len(), Scenario::STEPS.len());
        assert!(lines[0].starts_with("[1/11] round trip: "), "{lines:?}");
        assert!(
            lines[6].starts_with("[7/11] contended 2x4 keys: "),
            "{lines:?}"
        );
        assert!(
            lines[8].starts_with("[9/11] election failover (leader killed): "),
            "{lines:?}"
        );
        assert!(
            lines[10].starts_with("[11/11] composite of 8 grant+release: "),
            "{lines:?}"
        );
        // Memory: the baseline and the fenced lock, no peers; the hand-off with the watchdog
        // off and on; both contended steps fair and barging; every lock kind; the singles and
        // composite rows of both set sizes.
        assert_eq!(report.rows.len(), 24);
        let contended: Vec<&str> = report
            .rows
            .iter()
            .filter(|r| r.scenario == Scenario::ContendedOneKey)
            .map(|r| r.subject.as_str())
            .collect();
        assert_eq!(
            contended,
            [
                "raw tokio Mutex<HashMap> insert + remove",
                "fencelock memory",
                "fencelock memory (barging)"
            ]
        );
        let handoffs: Vec<&str> = report
            .rows
            .iter()
            .filter(|r| r.scenario == Scenario::Handoff)
            .map(|r| r.subject.as_str())
            .collect();
        assert_eq!(
            handoffs,
            ["fencelock memory", "fencelock memory (watchdog on)"]
        );
        for scenario in Scenario::ALL {
            let rows: Vec<&Row> = report
                .rows
                .iter()
                .filter(|r| r.scenario == scenario)
                .collect();
            assert!(!rows.is_empty(), "{scenario:?}");
            assert_eq!(
                rows.iter().any(|r| r.baseline),
                !scenario.in_round_trips() && scenario.compared_with() == scenario,
                "{scenario:?}"
            );
            assert_eq!(
                rows.iter().all(|r| r.ttls().is_some()),
                scenario.in_ttls(),
                "{scenario:?}"
            );
        }
        for row in &report.rows {
            assert!(row.measurement.ops > 0, "{row:?}");
            assert!(row.ratio.is_some_and(|r| r > 0.0), "{row:?}");
        }
        suite.close().await.unwrap();
    }

    #[tokio::test]
    async fn contended_runs_stop_after_their_operations() {
        let suite = Suite::connect(&fencelock_memory::MemoryConfig)
            .await
            .unwrap();
        let keys = Arc::new(vec![suite.key(1, "k").unwrap()]);
        let fenced: Arc<dyn Subject> = suite.fenced.clone();
        let m = contended(fenced, keys, 3, Stop::Ops(10)).await.unwrap();
        assert_eq!(m.ops, 10);
        assert!(
            contended(suite.fenced.clone(), Arc::new(Vec::new()), 3, Stop::Ops(1))
                .await
                .is_err()
        );
    }
}
