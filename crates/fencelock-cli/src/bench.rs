//! `fencelock bench`: the scenarios of `fencelock-bench` against any backend, next to the raw
//! baseline on the same server, as a table (or JSON).

use std::io::IsTerminal;
use std::time::Duration;

use fencelock::spec::BackendSpec;
use fencelock_bench::{BenchError, Report, Settings, Suite};

use crate::args::BackendArg;
use crate::error::CliError;
use crate::exit::Exit;
use crate::signals::Signals;
use crate::spec::Spec;

pub(crate) const EXAMPLES: &str = "  fencelock bench
  fencelock bench --backend redis://127.0.0.1:6379 --duration 5s
  fencelock bench --backend 'postgres://postgres@127.0.0.1:5432/test?backend=advisory&schema=fencelock_advisory' --concurrency 16 --keys 256
  fencelock bench --backend redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002
  fencelock bench --backend 'mysql://root@127.0.0.1:3306/test?prefix=fl_bench_'
  fencelock bench --backend redis://127.0.0.1:6379 --json > redis.json
  fencelock bench --backend 'postgres://postgres@127.0.0.1:5432/test?schema=fl_sweep' --sweep 16,256,1024,2048
";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    /// Tasks in the contended scenarios.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    concurrency: u32,
    /// Measure only the one-hot-key scenario, once per task count (comma-separated, each
    /// 1-4096): grants/s and p99 of the fenced lock, fair and barging, beside the raw
    /// baseline and the peers at each count.
    #[arg(
        long,
        value_delimiter = ',',
        num_args = 1..,
        conflicts_with_all = ["concurrency", "keys"],
        value_parser = clap::value_parser!(u32).range(1..=4096)
    )]
    sweep: Vec<u32>,
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
    let duration = crate::args::parse_duration(text)?;
    if duration < Duration::from_millis(10) || duration > Duration::from_secs(3600) {
        return Err("the duration must be between 10ms and 1h".into());
    }
    Ok(duration)
}

/// The backend's own bench kit: its raw baseline, peers and cleanup.
async fn suite(spec: &BackendSpec) -> Result<Suite, CliError> {
    match spec.config().bench_kit().await? {
        Some(kit) => Ok(Suite::from_kit(kit)),
        None => Err(CliError::Input(format!(
            "fencelock bench has no baseline for {spec} yet"
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
    let mut signals = Signals::install()?;
    let counts: Vec<usize> = args.sweep.iter().map(|&n| n as usize).collect();
    let measure = async {
        if counts.is_empty() {
            fencelock_bench::run_all(&suite, settings, &mut progress)
                .await
                .map(|report| vec![report])
        } else {
            fencelock_bench::run_sweep(&suite, settings, &counts, &mut progress).await
        }
    };
    let outcome = tokio::select! {
        outcome = measure => Ok(outcome),
        // Dropping the run aborts its tasks; the keys it wrote are removed below.
        signal = signals.recv() => Err(signal),
    };
    if tty {
        eprint!("\r\x1b[2K");
    }
    let closed = suite.close().await;
    let cleanup_note = |e: &BenchError| {
        format!(
            "fencelock bench: could not remove the run's keys under {:?}: {e}",
            suite.key_prefix()
        )
    };
    let reports = match outcome {
        Ok(reports) => reports,
        Err(signal) => {
            match &closed {
                Ok(()) => eprintln!("fencelock: {signal}: bench stopped and removed its keys"),
                Err(e) => eprintln!("fencelock: {signal}: bench stopped; {}", cleanup_note(e)),
            }
            return Ok(Exit::Signal(signal as i32));
        }
    };
    let reports = reports?;
    match reports.as_slice() {
        [report] if counts.is_empty() => {
            if args.json {
                println!("{}", json(spec, report));
            } else {
                print!("{}", table(spec, report));
            }
        }
        sweep if args.json => {
            let runs: Vec<serde_json::Value> =
                sweep.iter().map(|report| json(spec, report)).collect();
            println!(
                "{}",
                serde_json::json!({ "spec": spec.to_string(), "sweep": runs })
            );
        }
        sweep => {
            for (index, report) in sweep.iter().enumerate() {
                if index > 0 {
                    println!();
                }
                print!("{}", table(spec, report));
            }
        }
    }
    // The measurements stand even when the cleanup failed (say, a Redlock node went down at
    // the end): they are printed first, then the leftover keys are named.
    closed.map_err(|e| CliError::Bench(BenchError::Run(cleanup_note(&e))))?;
    Ok(Exit::Success)
}

fn table(spec: &Spec, report: &Report) -> String {
    format!(
        "fencelock bench: {} ({}), {} per subject and scenario\n\n{}",
        spec,
        report.backend,
        crate::duration::shown(report.settings.duration),
        report.table()
    )
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
                } else if row.scenario.compared_with() != row.scenario {
                    "p50_over_exclusive_grant"
                } else {
                    "p50"
                },
                "ttl_ms": row.ttl.map(|ttl| ttl.as_secs_f64() * 1000.0),
                "ttls": row.ttls(),
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
    fn durations_are_bounded() {
        assert!(parse_bench_duration("0s").is_err());
        assert!(parse_bench_duration("2h").is_err());
        assert!(parse_bench_duration("nonsense").is_err());
        assert_eq!(parse_bench_duration("2s"), Ok(Duration::from_secs(2)));
    }
}
