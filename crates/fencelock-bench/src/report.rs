//! What a wall-clock run reports: one row per scenario and subject, with its ratio.

use std::time::Duration;

use crate::histogram::Histogram;
use crate::scenario::{Scenario, Settings};

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

    pub(crate) fn merge(&mut self, other: &Measurement) {
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
    /// hand-off, extend and election failover, the median in round trips (see
    /// [`Scenario::round_trip_unit`]); for the lock kinds, the median over the exclusive
    /// grant's (see [`Scenario::compared_with`]).
    pub ratio: Option<f64>,
    /// The lease ttl the row ran with, when it is also counted in ttls (election failover:
    /// see [`Row::ttls`]).
    pub ttl: Option<Duration>,
}

impl Row {
    /// The median in lease ttls, for a row that ran with a [`ttl`](Self::ttl).
    pub fn ttls(&self) -> Option<f64> {
        let ttl = self.ttl?.as_secs_f64();
        (ttl > 0.0).then(|| self.measurement.latencies.quantile(0.5).as_secs_f64() / ttl)
    }
}

/// The outcome of [`run_all`](crate::run_all).
#[derive(Debug, Clone)]
pub struct Report {
    /// The backend.
    pub backend: String,
    /// The settings of the run.
    pub settings: Settings,
    /// One row per scenario and subject.
    pub rows: Vec<Row>,
}

/// Sets every row's [`Row::ratio`] from the baselines and round-trip units among `rows`.
pub(crate) fn fill_ratios(rows: &mut [Row]) {
    let baselines: Vec<(Scenario, Measurement)> = rows
        .iter()
        .filter(|r| r.baseline)
        .map(|r| (r.scenario, r.measurement.clone()))
        .collect();
    let baseline_of = |scenario: Scenario| {
        baselines
            .iter()
            .find(|(s, _)| *s == scenario)
            .map(|(_, m)| m)
    };
    for row in rows.iter_mut() {
        let p50 = row.measurement.latencies.quantile(0.5).as_secs_f64();
        row.ratio = match row.scenario.round_trip_unit() {
            Some(unit) => baseline_of(unit)
                .map(|m| m.latencies.quantile(0.5).as_secs_f64())
                .filter(|rt| *rt > 0.0)
                .map(|rt| p50 / rt),
            None => baseline_of(row.scenario.compared_with()).and_then(|base| {
                if row.scenario.is_throughput() {
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn row(scenario: Scenario, baseline: bool, latency_us: u64, ops: u64) -> Row {
        let mut measurement = Measurement {
            ops,
            elapsed: Duration::from_secs(1),
            ..Measurement::default()
        };
        measurement
            .latencies
            .record(Duration::from_micros(latency_us));
        Row {
            scenario,
            subject: format!("{scenario:?} {baseline}"),
            baseline,
            measurement,
            ratio: None,
            ttl: None,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() / b < 0.02
    }

    #[test]
    fn ratios_come_from_the_baseline_or_the_round_trip_unit() {
        let mut rows = vec![
            row(Scenario::RoundTrip, true, 100, 1),
            row(Scenario::IdleRoundTrip, true, 200, 1),
            row(Scenario::AcquireRelease, true, 100, 1),
            row(Scenario::AcquireRelease, false, 300, 1),
            row(Scenario::Handoff, false, 600, 1),
            row(Scenario::Extend, false, 150, 1),
            row(Scenario::ContendedOneKey, true, 1, 1000),
            row(Scenario::ContendedOneKey, false, 1, 250),
            row(Scenario::FencedWrite, false, 100, 1),
            row(Scenario::ExclusiveGrant, true, 200, 1),
            row(Scenario::PermitGrant, false, 500, 1),
            Row {
                ttl: Some(Duration::from_millis(100)),
                ..row(Scenario::ElectionFailover, false, 110_000, 1)
            },
        ];
        fill_ratios(&mut rows);
        let ratio = |i: usize| rows[i].ratio.unwrap();
        assert!(close(ratio(3), 3.0), "acquire+release: {}", ratio(3));
        assert!(
            close(ratio(4), 3.0),
            "hand-off in idle round trips: {}",
            ratio(4)
        );
        assert!(close(ratio(5), 1.5), "extend in round trips: {}", ratio(5));
        assert!(close(ratio(7), 4.0), "contended throughput: {}", ratio(7));
        assert_eq!(rows[8].ratio, None, "no baseline, no ratio");
        assert!(
            close(ratio(10), 2.5),
            "permit over exclusive: {}",
            ratio(10)
        );
        assert!(
            close(ratio(11), 1100.0),
            "failover in round trips: {}",
            ratio(11)
        );
        assert!(
            close(rows[11].ttls().unwrap(), 1.1),
            "{:?}",
            rows[11].ttls()
        );
        assert_eq!(rows[10].ttls(), None);
    }
}
