//! The report of a chaos run, as text or JSON.

use std::fmt::Write;

use serde_json::{Value, json};

use super::cluster::Cluster;
use super::{RunReport, Settings};

/// How the whole run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// No violation, and the control found lost updates.
    Pass,
    /// The fenced run broke a safety rule.
    Violations,
    /// The control found no lost update: the faults did not bite, so the run proves nothing.
    ControlFoundNothing,
}

impl Outcome {
    pub(crate) fn of(fenced: &RunReport, control: &RunReport) -> Self {
        if fenced.verdict.violations > 0 || fenced.verdict.lost_updates > 0 {
            Outcome::Violations
        } else if control.verdict.lost_updates == 0 {
            Outcome::ControlFoundNothing
        } else {
            Outcome::Pass
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Violations => "violations",
            Outcome::ControlFoundNothing => "control-found-nothing",
        }
    }

    fn explain(self) -> &'static str {
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

fn faults(settings: &Settings) -> String {
    settings
        .faults
        .iter()
        .map(|f| f.name())
        .collect::<Vec<_>>()
        .join(",")
}

fn run_json(r: &RunReport) -> Value {
    let v = &r.verdict;
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
        "faults": {
            "pause": r.pauses,
            "paused_writes_refused": r.paused_writes_refused,
            "paused_writes_admitted": r.paused_writes_admitted,
            "kill": r.kill_episodes,
            "nodes_killed": r.nodes_killed,
            "partition_delay": r.partitions[0],
            "partition_blackhole": r.partitions[1],
            "partition_reset": r.partitions[2],
            "terminate": r.terminate_episodes,
            "sessions_terminated": r.sessions_terminated,
        },
    })
}

pub(crate) fn json(
    cluster: &Cluster,
    settings: &Settings,
    fenced: &RunReport,
    control: &RunReport,
    outcome: Outcome,
) -> String {
    json!({
        "backend": cluster.described,
        "workers": settings.workers,
        "ttl_ms": settings.ttl.as_secs_f64() * 1000.0,
        "work_ms": settings.work.as_secs_f64() * 1000.0,
        "faults": faults(settings),
        "fenced": run_json(fenced),
        "control": run_json(control),
        "outcome": outcome.as_str(),
    })
    .to_string()
}

pub(crate) fn text(
    cluster: &Cluster,
    settings: &Settings,
    fenced: &RunReport,
    control: &RunReport,
    outcome: Outcome,
) -> String {
    let mut out = String::new();
    let (f, c) = (&fenced.verdict, &control.verdict);
    let _ = writeln!(out, "fencelock chaos: {}", cluster.described);
    let _ = writeln!(
        out,
        "workers {}, ttl {:?}, work {:?}, faults {}",
        settings.workers,
        settings.ttl,
        settings.work,
        faults(settings)
    );
    let _ = writeln!(out);
    let _ = writeln!(out, "{:<34} {:>16} {:>16}", "", "fenced", "control");
    let mut row = |label: &str, a: String, b: String| {
        let _ = writeln!(out, "{label:<34} {a:>16} {b:>16}");
    };
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
        fenced.pauses.to_string(),
        control.pauses.to_string(),
    );
    row(
        "  paused holder's write refused",
        fenced.paused_writes_refused.to_string(),
        control.paused_writes_refused.to_string(),
    );
    row(
        "  paused holder's write admitted",
        fenced.paused_writes_admitted.to_string(),
        control.paused_writes_admitted.to_string(),
    );
    row(
        "faults: kill -9 + restart",
        format!("{} ({} nodes)", fenced.kill_episodes, fenced.nodes_killed),
        format!("{} ({} nodes)", control.kill_episodes, control.nodes_killed),
    );
    row(
        "faults: partition delay/hole/reset",
        format!(
            "{}/{}/{}",
            fenced.partitions[0], fenced.partitions[1], fenced.partitions[2]
        ),
        format!(
            "{}/{}/{}",
            control.partitions[0], control.partitions[1], control.partitions[2]
        ),
    );
    row(
        "faults: terminate (sessions)",
        format!(
            "{} ({})",
            fenced.terminate_episodes, fenced.sessions_terminated
        ),
        format!(
            "{} ({})",
            control.terminate_episodes, control.sessions_terminated
        ),
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
    for example in &f.examples {
        let _ = writeln!(out, "  violation: {example}");
    }
    let _ = writeln!(out);
    let _ = writeln!(out, "{}", outcome.explain());
    out
}
