//! `fencelock bench`: the scenarios of `fencelock-bench` against any backend, next to the raw
//! baseline on the same server, as a table (or JSON).

use std::io::IsTerminal;
use std::time::Duration;

use fencelock::spec::{BackendSpec, PgBackendKind};
use fencelock_bench::{PgLockKind, Report, Row, Settings, Suite};

use crate::error::CliError;
use crate::exit::Exit;
use crate::{BackendArg, Spec};

pub(crate) const EXAMPLES: &str = "  fencelock bench
  fencelock bench --backend redis://127.0.0.1:6379 --duration 5s
  fencelock bench --backend 'postgres://postgres@127.0.0.1:5432/test?backend=advisory' --concurrency 16 --keys 256
  fencelock bench --backend redis://127.0.0.1:6379 --json > redis.json
";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    /// Tasks in the contended scenarios.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    concurrency: u32,
    /// Keys the tasks spread over in the second contended scenario.
    #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    keys: u32,
    /// Time per scenario for each of fencelock, the baseline and the peers.
    #[arg(long, default_value = "2s", value_parser = parse_bench_duration)]
    duration: Duration,
    /// Print the report as JSON instead of a table.
    #[arg(long)]
    json: bool,
}

fn parse_bench_duration(text: &str) -> std::result::Result<Duration, String> {
    let duration = crate::parse_duration(text)?;
    if duration < Duration::from_millis(10) || duration > Duration::from_secs(3600) {
        return Err("the duration must be between 10ms and 1h".into());
    }
    Ok(duration)
}

async fn suite(spec: &BackendSpec) -> Result<Suite, CliError> {
    match spec {
        BackendSpec::Memory => Ok(Suite::memory()),
        BackendSpec::Redis(url) => Ok(Suite::redis(url).await?),
        BackendSpec::Redlock { nodes, storage } => Ok(Suite::redlock(nodes, storage).await?),
        BackendSpec::Postgres {
            url,
            backend,
            schema,
        } => {
            let kind = match backend {
                PgBackendKind::Advisory => PgLockKind::Advisory,
                _ => PgLockKind::Lease,
            };
            Ok(Suite::postgres(url, schema.as_deref(), kind).await?)
        }
        other => Err(CliError::Input(format!(
            "fencelock bench has no baseline for {other} yet"
        ))),
    }
}

pub(crate) async fn run(args: Args) -> Result<Exit, CliError> {
    let spec = &args.backend.backend;
    let settings = Settings {
        duration: args.duration,
        concurrency: args.concurrency as usize,
        keys: args.keys as usize,
    };
    let suite = suite(spec.spec()).await?;
    let tty = std::io::stderr().is_terminal();
    let mut progress = |line: &str| {
        if tty {
            eprint!("\r\x1b[2Kbench {spec}: {line}");
        } else {
            eprintln!("bench {spec}: {line}");
        }
    };
    let outcome = fencelock_bench::run_all(&suite, settings, &mut progress).await;
    if tty {
        eprint!("\r\x1b[2K");
    }
    let closed = suite.close().await;
    let report = outcome?;
    closed?;
    if args.json {
        println!("{}", json(spec, &report));
    } else {
        print!("{}", table(spec, &report));
    }
    Ok(Exit::Success)
}

/// `1.23 ms`, `45.6 µs`, `789 ns`.
fn latency(d: Duration) -> String {
    let nanos = d.as_nanos() as f64;
    if nanos >= 1e6 {
        format!("{:.2} ms", nanos / 1e6)
    } else if nanos >= 1e3 {
        format!("{:.1} µs", nanos / 1e3)
    } else {
        format!("{nanos:.0} ns")
    }
}

fn ratio(row: &Row) -> String {
    match (row.baseline, row.ratio) {
        (true, _) => "baseline".into(),
        (false, Some(r)) if row.scenario.in_round_trips() => format!("{r:.2} RT"),
        (false, Some(r)) => format!("{r:.2}x"),
        (false, None) => "-".into(),
    }
}

fn table(spec: &Spec, report: &Report) -> String {
    let header = ["scenario", "subject", "p50", "p99", "ops/s", "ratio"];
    let mut lines: Vec<[String; 6]> = vec![header.map(String::from)];
    for row in &report.rows {
        let m = &row.measurement;
        lines.push([
            row.scenario.title(&report.settings),
            row.subject.clone(),
            latency(m.latencies.quantile(0.5)),
            latency(m.latencies.quantile(0.99)),
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
    let mut out = format!(
        "fencelock bench: {} ({}), {} per subject and scenario\n\n",
        spec,
        report.backend,
        humantime::format_duration(report.settings.duration)
    );
    for line in &lines {
        let mut text = String::new();
        for (i, (cell, w)) in line.iter().zip(widths).enumerate() {
            let pad = w - cell.chars().count();
            if i >= 2 {
                text.push_str(&" ".repeat(pad));
                text.push_str(cell);
            } else {
                text.push_str(cell);
                text.push_str(&" ".repeat(pad));
            }
            text.push_str("  ");
        }
        out.push_str(text.trim_end());
        out.push('\n');
    }
    out.push_str(
        "\nratio: p50 over the baseline's p50 (contended: the baseline's ops/s over ours); \
         RT: p50 in round trips (hand-off: the round trip after idle; extend: the round trip).\n",
    );
    out
}

fn json(spec: &Spec, report: &Report) -> serde_json::Value {
    let rows: Vec<serde_json::Value> = report
        .rows
        .iter()
        .map(|row| {
            let m = &row.measurement;
            serde_json::json!({
                "scenario": row.scenario.id(),
                "title": row.scenario.title(&report.settings),
                "subject": row.subject,
                "baseline": row.baseline,
                "p50_ns": m.latencies.quantile(0.5).as_nanos() as u64,
                "p99_ns": m.latencies.quantile(0.99).as_nanos() as u64,
                "mean_ns": m.latencies.mean().as_nanos() as u64,
                "ops": m.ops,
                "ops_per_sec": m.ops_per_sec(),
                "ratio": row.ratio,
                "ratio_unit": if row.scenario.in_round_trips() {
                    "round_trips"
                } else if row.scenario.is_throughput() {
                    "throughput"
                } else {
                    "p50"
                },
            })
        })
        .collect();
    serde_json::json!({
        "backend": report.backend,
        "spec": spec.to_string(),
        "settings": {
            "duration_ms": report.settings.duration.as_millis() as u64,
            "concurrency": report.settings.concurrency,
            "keys": report.settings.keys,
        },
        "rows": rows,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_read_well() {
        assert_eq!(latency(Duration::from_nanos(789)), "789 ns");
        assert_eq!(latency(Duration::from_nanos(45_600)), "45.6 µs");
        assert_eq!(latency(Duration::from_micros(1_234)), "1.23 ms");
    }

    #[test]
    fn durations_are_bounded() {
        assert!(parse_bench_duration("0s").is_err());
        assert!(parse_bench_duration("2h").is_err());
        assert!(parse_bench_duration("nonsense").is_err());
        assert_eq!(parse_bench_duration("2s"), Ok(Duration::from_secs(2)));
    }
}
