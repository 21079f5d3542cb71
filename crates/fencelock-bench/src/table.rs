//! A [`Report`] as the text table `fencelock bench` prints.

use std::time::Duration;

use crate::report::{Report, Row};

/// The line under the table that says how to read the ratio column.
const LEGEND: &str = "ratio: p50 over the baseline's p50 (contended: the baseline's ops/s over \
                      ours; reader, writer, permit: over the exclusive grant's p50); RT: p50 in \
                      round trips (hand-off: the round trip after idle; extend and failover: the \
                      round trip); ttl: p50 in the leaders' lease ttls.";

impl Report {
    /// The report as a table: a header, one line per row (scenario, subject, p50, p99, ops/s,
    /// ratio; figures right-aligned), a blank line and a legend for the ratio column. Every
    /// line ends with a newline.
    ///
    /// ```text
    /// scenario         subject                           p50       p99   ops/s     ratio
    /// round trip       raw PING                      40.1 µs   95.3 µs   23410  baseline
    /// acquire+release  raw SET NX PX + DEL           80.9 µs  150.2 µs   11803  baseline
    /// acquire+release  fencelock redis               83.0 µs  161.0 µs   11500     1.03x
    /// ...
    /// ```
    pub fn table(&self) -> String {
        let header = ["scenario", "subject", "p50", "p99", "ops/s", "ratio"];
        let mut lines: Vec<[String; 6]> = vec![header.map(String::from)];
        for row in &self.rows {
            let m = &row.measurement;
            lines.push([
                row.scenario.title(&self.settings),
                row.subject.clone(),
                format_latency(m.latencies.quantile(0.5)),
                format_latency(m.latencies.quantile(0.99)),
                format!("{:.0}", m.ops_per_sec()),
                ratio(row),
            ]);
        }
        let mut widths = [0; 6];
        for line in &lines {
            for (w, cell) in widths.iter_mut().zip(line) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for line in &lines {
            let mut text = String::new();
            for (i, (cell, w)) in line.iter().zip(widths).enumerate() {
                let pad = " ".repeat(w - cell.chars().count());
                // Scenario and subject read left to right, figures line up on the right.
                if i >= 2 {
                    text.push_str(&pad);
                    text.push_str(cell);
                } else {
                    text.push_str(cell);
                    text.push_str(&pad);
                }
                text.push_str("  ");
            }
            out.push_str(text.trim_end());
            out.push('\n');
        }
        out.push('\n');
        out.push_str(LEGEND);
        out.push('\n');
        out
    }
}

/// A latency as the table shows it: `1.23 ms`, `45.6 µs`, `789 ns`.
pub fn format_latency(d: Duration) -> String {
    let nanos = d.as_nanos() as f64;
    if nanos >= 1e6 {
        format!("{:.2} ms", nanos / 1e6)
    } else if nanos >= 1e3 {
        format!("{:.1} µs", nanos / 1e3)
    } else {
        format!("{nanos:.0} ns")
    }
}

/// The ratio cell: `baseline`, `1.23x`, `2.50 RT` (in round trips), or `-` without one.
fn ratio(row: &Row) -> String {
    match (row.baseline, row.ratio) {
        (true, _) => "baseline".into(),
        (false, Some(r)) if row.scenario.in_round_trips() => match row.ttls() {
            Some(ttls) => format!("{r:.0} RT, {ttls:.2} ttl"),
            None => format!("{r:.2} RT"),
        },
        (false, Some(r)) => format!("{r:.2}x"),
        (false, None) => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::Measurement;
    use crate::scenario::{Scenario, Settings};

    fn row(scenario: Scenario, subject: &str, baseline: bool, ratio: Option<f64>) -> Row {
        let mut measurement = Measurement {
            ops: 2000,
            elapsed: Duration::from_secs(2),
            ..Measurement::default()
        };
        measurement.latencies.record(Duration::from_micros(40));
        Row {
            scenario,
            subject: subject.into(),
            baseline,
            measurement,
            ratio,
            ttl: None,
        }
    }

    #[test]
    fn latencies_read_well() {
        assert_eq!(format_latency(Duration::from_nanos(789)), "789 ns");
        assert_eq!(format_latency(Duration::from_nanos(45_600)), "45.6 µs");
        assert_eq!(format_latency(Duration::from_micros(1_234)), "1.23 ms");
    }

    #[test]
    fn the_table_lines_up_and_says_how_to_read_ratios() {
        let report = Report {
            backend: "redis".into(),
            settings: Settings::default(),
            rows: vec![
                row(
                    Scenario::AcquireRelease,
                    "raw SET NX PX + DEL",
                    true,
                    Some(1.0),
                ),
                row(
                    Scenario::AcquireRelease,
                    "fencelock redis",
                    false,
                    Some(1.234),
                ),
                row(Scenario::Extend, "fencelock redis", false, Some(2.5)),
                row(Scenario::FencedWrite, "fencelock redis", false, None),
            ],
        };
        let table = report.table();
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 1 + 4 + 2, "{table}");
        assert!(lines[0].starts_with("scenario         subject"), "{table}");
        assert!(lines[1].ends_with("  baseline"), "{table}");
        assert!(lines[2].ends_with("  1.23x"), "{table}");
        assert!(lines[3].ends_with("  2.50 RT"), "{table}");
        assert!(lines[4].ends_with("  -"), "{table}");
        assert!(lines[2].contains("  40.1 µs  "), "{table}");
        // Right-aligned figures: every row ends in the same column.
        let width = lines[0].chars().count();
        assert!(
            lines[1..5].iter().all(|l| l.chars().count() == width),
            "{table}"
        );
        assert_eq!(lines[5], "");
        assert!(lines[6].starts_with("ratio: p50 over the baseline's p50"));
    }
}
