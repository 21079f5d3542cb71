//! The report of a chaos run, as text or JSON, and the progress line shown while it runs.

use std::fmt::{self, Write};
use std::io;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::checker::Verdict;
use crate::config::{FaultKind, Mode, Workload};
use crate::history::RunHistory;
use crate::linearizability::Linearizability;
use crate::nemesis::FaultTally;
use crate::page;

/// What one run (fenced or control) did.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RunReport {
    /// Fenced or control.
    pub mode: Mode,
    /// How long the faults were on.
    pub elapsed: Duration,
    /// What the checker found.
    pub verdict: Verdict,
    /// What the nemesis did.
    pub faults: FaultTally,
    /// The history checker's verdict: is the history linearizable for the fenced register?
    pub linearizability: Linearizability,
    /// Every operation, lease and fault, on one time line.
    pub history: RunHistory,
}

/// A whole chaos run: the fenced run, the negative control and what they mean together.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChaosReport {
    /// The servers, in words (passwords hidden).
    pub backend: String,
    /// What the workers did.
    pub workload: Workload,
    /// Worker processes per run.
    pub workers: u16,
    /// The workers' lease ttl.
    pub ttl: Duration,
    /// The workers' sleep between read and write.
    pub work: Duration,
    /// The faults injected.
    pub faults: Vec<FaultKind>,
    /// What the backend calls its session fault (`terminate`), when the run's servers have
    /// one: the name the backend's `SessionFaults::label` gives.
    pub session_fault: Option<&'static str>,
    /// The fenced run.
    pub fenced: RunReport,
    /// The negative control.
    pub control: RunReport,
    /// What the two mean together.
    pub outcome: Outcome,
}

/// How a whole chaos run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// No violation, and the control found lost updates.
    Pass,
    /// The fenced run broke a safety rule.
    Violations,
    /// The control found no lost update: the faults did not bite, so the run proves nothing.
    ControlFoundNothing,
}

impl Outcome {
    /// The outcome of a fenced run and its control.
    pub fn of(fenced: &RunReport, control: &RunReport) -> Self {
        if fenced.verdict.violations > 0
            || fenced.verdict.lost_updates > 0
            || fenced.linearizability.is_violation()
        {
            Outcome::Violations
        } else if control.verdict.lost_updates == 0 {
            Outcome::ControlFoundNothing
        } else {
            Outcome::Pass
        }
    }

    /// `pass`, `violations` or `control-found-nothing`.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Violations => "violations",
            Outcome::ControlFoundNothing => "control-found-nothing",
        }
    }

    /// One sentence saying what the outcome means.
    pub fn explain(self) -> &'static str {
        match self {
            Outcome::Pass => {
                "PASS: no violation under fencing; the control without fencing lost updates, \
                 so the checker can fail"
            }
            Outcome::Violations => "FAIL: the fenced run broke the safety model",
            Outcome::ControlFoundNothing => {
                "INVALID: the control without fencing lost no update, so these faults prove \
                 nothing (run longer, or add the pause fault)"
            }
        }
    }
}

fn names(faults: &[FaultKind]) -> String {
    faults
        .iter()
        .map(|f| f.name())
        .collect::<Vec<_>>()
        .join(",")
}

fn run_json(r: &RunReport) -> Value {
    let v = &r.verdict;
    let f = &r.faults;
    json!({
        "seconds": r.elapsed.as_secs_f64(),
        "lock_cycles": v.cycles,
        "reads": {
            "admitted": v.reads_admitted,
            "refused_stale": v.reads_stale,
            "unknown": v.reads_unknown,
        },
        "writes": {
            "admitted": v.writes_admitted,
            "refused_stale": v.writes_stale,
            "unknown": v.writes_unknown,
        },
        "token_heals": v.heals,
        "backend_errors": v.errors,
        "final_value": v.final_value,
        "lost_updates": v.lost_updates,
        "violations": v.violations,
        "violation_examples": v.examples,
        "linearizability": {
            "verdict": r.linearizability.as_str(),
            "detail": r.linearizability.to_string(),
        },
        "faults": {
            "pause": f.pauses,
            "paused_writes_refused": f.paused_writes_refused,
            "paused_writes_admitted": f.paused_writes_admitted,
            "kill": f.kill_episodes,
            "nodes_killed": f.nodes_killed,
            "partition_delay": f.partition_delay,
            "partition_blackhole": f.partition_blackhole,
            "partition_reset": f.partition_reset,
            "terminate": f.terminate_episodes,
            "sessions_terminated": f.sessions_terminated,
        },
    })
}

impl ChaosReport {
    /// The report as one JSON object.
    pub fn json(&self) -> Value {
        json!({
            "backend": self.backend,
            "workload": self.workload.name(),
            "permits": match self.workload {
                Workload::Semaphore { permits } => Some(permits),
                Workload::Lock
                | Workload::Election
                | Workload::RwLock
                | Workload::Composite { .. } => None,
            },
            "members": match self.workload {
                Workload::Composite { members } => Some(members),
                Workload::Lock
                | Workload::Election
                | Workload::RwLock
                | Workload::Semaphore { .. } => None,
            },
            "workers": self.workers,
            "ttl_ms": self.ttl.as_secs_f64() * 1000.0,
            "work_ms": self.work.as_secs_f64() * 1000.0,
            "faults": names(&self.faults),
            "session_fault": self.session_fault,
            "fenced": run_json(&self.fenced),
            "control": run_json(&self.control),
            "outcome": self.outcome.as_str(),
        })
    }

    /// The report as a table, fenced and control side by side, ending with the outcome.
    pub fn text(&self) -> String {
        let (fenced, control) = (&self.fenced, &self.control);
        let f = &fenced.verdict;
        let mut out = String::new();
        let _ = writeln!(out, "fencelock chaos: {}", self.backend);
        let _ = writeln!(out, "{}", self.settings_line());
        let _ = writeln!(out);
        out.push_str(&table(&self.rows()));
        for example in &f.examples {
            let _ = writeln!(out, "  violation: {example}");
        }
        let _ = writeln!(out, "  fenced history: {}", fenced.linearizability);
        let _ = writeln!(out, "  control history: {}", control.linearizability);
        let _ = writeln!(out);
        let _ = writeln!(out, "{}", self.outcome.explain());
        out
    }

    /// Workers, ttl, work and faults on one line.
    pub(crate) fn settings_line(&self) -> String {
        format!(
            "workload {}, workers {}, ttl {:?}, work {:?}, faults {}",
            self.workload,
            self.workers,
            self.ttl,
            self.work,
            names(&self.faults)
        )
    }

    /// The table's rows: label, fenced, control.
    pub(crate) fn rows(&self) -> Vec<[String; 3]> {
        let (fenced, control) = (&self.fenced, &self.control);
        let (f, c) = (&fenced.verdict, &control.verdict);
        let (ff, cf) = (&fenced.faults, &control.faults);
        let mut rows = Vec::with_capacity(20);
        let mut row = |label: &str, a: String, b: String| rows.push([label.to_owned(), a, b]);
        row(
            "duration",
            format!("{:.1}s", fenced.elapsed.as_secs_f64()),
            format!("{:.1}s", control.elapsed.as_secs_f64()),
        );
        row("lock cycles", f.cycles.to_string(), c.cycles.to_string());
        row(
            "reads admitted (fenced)",
            f.reads_admitted.to_string(),
            "-".into(),
        );
        row(
            "reads refused as stale",
            f.reads_stale.to_string(),
            "-".into(),
        );
        row(
            "writes admitted",
            f.writes_admitted.to_string(),
            c.writes_admitted.to_string(),
        );
        row(
            "writes refused as stale",
            f.writes_stale.to_string(),
            c.writes_stale.to_string(),
        );
        row(
            "operations with unknown outcome",
            (f.reads_unknown + f.writes_unknown).to_string(),
            (c.reads_unknown + c.writes_unknown).to_string(),
        );
        row(
            "token heals (advance_token)",
            f.heals.to_string(),
            c.heals.to_string(),
        );
        row("backend errors", f.errors.to_string(), c.errors.to_string());
        row(
            "faults: pause (1-5 x ttl)",
            ff.pauses.to_string(),
            cf.pauses.to_string(),
        );
        row(
            "  paused holder's write refused",
            ff.paused_writes_refused.to_string(),
            cf.paused_writes_refused.to_string(),
        );
        row(
            "  paused holder's write admitted",
            ff.paused_writes_admitted.to_string(),
            cf.paused_writes_admitted.to_string(),
        );
        row(
            "faults: kill -9 + restart",
            format!("{} ({} nodes)", ff.kill_episodes, ff.nodes_killed),
            format!("{} ({} nodes)", cf.kill_episodes, cf.nodes_killed),
        );
        row(
            "faults: partition delay/hole/reset",
            format!(
                "{}/{}/{}",
                ff.partition_delay, ff.partition_blackhole, ff.partition_reset
            ),
            format!(
                "{}/{}/{}",
                cf.partition_delay, cf.partition_blackhole, cf.partition_reset
            ),
        );
        row(
            "faults: terminate (sessions)",
            format!("{} ({})", ff.terminate_episodes, ff.sessions_terminated),
            format!("{} ({})", cf.terminate_episodes, cf.sessions_terminated),
        );
        row(
            "final counter",
            f.final_value.to_string(),
            c.final_value.to_string(),
        );
        row(
            "lost updates",
            f.lost_updates.to_string(),
            c.lost_updates.to_string(),
        );
        row("violations", f.violations.to_string(), "-".into());
        row(
            "history vs fenced register",
            fenced.linearizability.as_str().into(),
            control.linearizability.as_str().into(),
        );
        rows
    }
}

impl ChaosReport {
    /// Writes both runs' operations as JSON lines (format in [`crate::history`]), the fenced
    /// run's first.
    pub fn write_history(&self, out: &mut dyn io::Write) -> io::Result<()> {
        self.fenced.history.write_jsonl(Mode::Fenced, out)?;
        self.control.history.write_jsonl(Mode::Control, out)
    }

    /// The report as one self-contained HTML page: the table, a time line per worker and
    /// latency plots, fenced run and control side by side.
    pub fn html(&self) -> String {
        page::render(self)
    }

    /// Writes `index.html` ([`html`](Self::html)) and `history.jsonl`
    /// ([`write_history`](Self::write_history)) into `dir`, creating it if needed.
    pub fn write_report_dir(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)?;
        std::fs::write(dir.join("index.html"), self.html())?;
        let mut history = io::BufWriter::new(std::fs::File::create(dir.join("history.jsonl"))?);
        self.write_history(&mut history)?;
        io::Write::flush(&mut history)
    }
}

/// Where a run stands, about once a second; `Display` gives the one-line form.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Progress {
    /// Fenced or control.
    pub mode: Mode,
    /// Time since the faults started.
    pub elapsed: Duration,
    /// The run's length: at most this long once `extended`.
    pub duration: Duration,
    /// The run is past its length, waiting for its first lost update (the control only).
    pub extended: bool,
    /// Lock cycles so far.
    pub cycles: u64,
    /// Writes admitted so far.
    pub writes_admitted: u64,
    /// Writes refused as stale so far.
    pub writes_stale: u64,
    /// Writes without a definite answer so far.
    pub writes_unknown: u64,
    /// Faults so far.
    pub faults: FaultTally,
    /// Workers stopped right now.
    pub paused_now: usize,
}

impl fmt::Display for Progress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "chaos {} {:>4}s/{}s{}: {} cycles, writes {} admitted / {} stale / {} unknown; \
             pauses {} (now {}), kills {}, partitions {}, terminates {}",
            self.mode.name(),
            self.elapsed.as_secs(),
            self.duration.as_secs(),
            if self.extended {
                " (no lost update yet, going on until one)"
            } else {
                ""
            },
            self.cycles,
            self.writes_admitted,
            self.writes_stale,
            self.writes_unknown,
            self.faults.pauses,
            self.paused_now,
            self.faults.kill_episodes,
            self.faults.partitions(),
            self.faults.terminate_episodes,
        )
    }
}

/// The rows as a table under the headers `fenced` and `control`: column widths from the
/// content (a kill count with its nodes, a long label), figures right-aligned, two spaces
/// between columns.
fn table(rows: &[[String; 3]]) -> String {
    let headers = ["", "fenced", "control"];
    let mut widths = [32, 10, 10];
    for row in std::iter::once(&headers.map(String::from)).chain(rows) {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let [w0, w1, w2] = widths;
    let mut out = String::new();
    for [label, a, b] in std::iter::once(&headers.map(String::from)).chain(rows) {
        let _ = writeln!(out, "{label:<w0$}  {a:>w1$}  {b:>w2$}");
    }
    out
}

#[cfg(test)]
mod table_tests {
    use super::table;

    #[test]
    fn the_table_stays_aligned_whatever_the_widths() {
        let rows = [
            ["lock cycles", "11849", "2426"],
            [
                "faults: kill -9 + restart",
                "12226 (12226 nodes)",
                "44 (44 nodes)",
            ],
            [
                "a label longer than any the report has today, to widen the column",
                "0",
                "-",
            ],
        ]
        .map(|row| row.map(String::from));
        let text = table(&rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        let width = lines[0].chars().count();
        for line in &lines {
            assert_eq!(line.chars().count(), width, "{text}");
        }
        let fenced_end = lines[0].find("fenced").unwrap() + "fenced".len();
        for (line, figure) in lines[1..].iter().zip(["11849", "12226 (12226 nodes)", "0"]) {
            assert_eq!(
                line.find(figure).unwrap() + figure.len(),
                fenced_end,
                "{text}"
            );
        }
        assert!(
            lines[2].contains("(12226 nodes)  "),
            "columns run together:\n{text}"
        );
    }
}
