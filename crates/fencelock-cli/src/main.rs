//! `fencelock`: demonstrate, run under, inspect, benchmark and stress-test a fencelock backend.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use fencelock::spec::BackendSpec;

mod bench;
mod chaos;
mod demo;
mod inspect;
mod run;

/// Distributed locks with fencing tokens.
#[derive(Debug, Parser)]
#[command(name = "fencelock", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show a paused client's stale write refused by the fence, and the same run without
    /// fencing ending in a lost update.
    #[command(
        after_help = "Examples:\n  fencelock demo\n  fencelock demo --backend redis://127.0.0.1:6379 --ttl 500ms"
    )]
    Demo(demo::Args),
    /// Take a lock, run a command while holding it (renewing the lease), release when it exits.
    ///
    /// The command sees FENCELOCK_KEY, FENCELOCK_TOKEN and FENCELOCK_OWNER in its environment;
    /// it should present the token to whatever it writes. If the lease is lost while the
    /// command runs, the command gets SIGTERM, then SIGKILL after --grace.
    #[command(after_help = "Exit codes:
  the command's own exit code, or 128+N if signal N ended it
  1    fencelock failed (bad spec, unreachable backend, ...)
  2    bad arguments
  75   the lock was not obtained within --wait
  76   the lease was lost while the command ran; it was sent SIGTERM (SIGKILL after --grace)
  126  the command could not be executed
  127  the command was not found
  130  fencelock was interrupted; the command was stopped and the lock released

Examples:
  # a cron job that runs once across hosts
  fencelock run --backend redis://redis.example:6379 --key nightly-report -- ./report.sh
  # wait up to a minute for the lock, with a 10 s lease renewed while the job runs
  fencelock run --backend postgres://app@db.example/app --key migrate --wait 1m --ttl 10s -- ./migrate")]
    Run(run::Args),
    /// Show a lock's holder, token and time left, and the backend's capabilities.
    #[command(after_help = "Examples:
  fencelock inspect --backend redis://127.0.0.1:6379 nightly-report
  fencelock inspect --backend postgres://postgres@127.0.0.1:5432/test migrate")]
    Inspect(inspect::Args),
    /// Measure a backend against the raw baseline on the same server: acquire + release, fenced
    /// write, hand-off, extend and contended throughput, as p50, p99, ops/s and ratios.
    #[command(after_help = "Examples:
  fencelock bench
  fencelock bench --backend redis://127.0.0.1:6379 --duration 5s
  fencelock bench --backend 'postgres://postgres@127.0.0.1:5432/test?backend=advisory' --concurrency 16 --keys 256
  fencelock bench --backend redis://127.0.0.1:6379 --json > redis.json")]
    Bench(bench::Args),
    /// Inject faults (paused holders, killed servers, partitions, ended sessions) into worker
    /// processes sharing a counter, check that fencing lost nothing, and show that the same run
    /// without fencing does lose updates.
    #[command(after_help = "Exit codes:
  0    no violation, and the control run without fencing lost updates
  1    the run could not be carried out (bad spec, unreachable backend, a worker died, ...)
  2    bad arguments
  3    the fenced run broke the safety model (a lost update or a stale operation admitted)
  4    the control run lost no update: the faults did not bite, so the run proves nothing

Examples:
  fencelock chaos --spawn-redis 1 --faults pause,kill,partition --duration 30s
  fencelock chaos --spawn-redis 5 --persistence none --faults pause,kill
  fencelock chaos --backend 'postgres://postgres@127.0.0.1/test?backend=advisory' --faults pause,terminate,partition")]
    Chaos(chaos::Args),
    /// One chaos worker process (started by `fencelock chaos`).
    #[command(hide = true)]
    Worker(chaos::worker::Args),
}

/// The `--backend` option every subcommand shares.
#[derive(Debug, Clone, clap::Args)]
struct BackendArg {
    /// Backend spec: memory:// (in-process, the default); other schemes when built in.
    #[arg(long, default_value = "memory://", value_parser = parse_spec)]
    backend: BackendSpec,
}

fn parse_spec(spec: &str) -> Result<BackendSpec, String> {
    BackendSpec::parse(spec).map_err(|e| e.to_string())
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|e| format!("{e} (examples: 500ms, 2s, 1m)"))
}

/// Exit codes shared by the subcommands.
mod exit {
    /// The command failed: bad arguments, unreachable backend, or a broken invariant.
    pub(crate) const FAILURE: u8 = 1;
    /// `run`: the lock was not obtained within the wait (EX_TEMPFAIL).
    pub(crate) const NOT_OBTAINED: u8 = 75;
    /// `run`: the lease was lost while the command ran.
    pub(crate) const LEASE_LOST: u8 = 76;
    /// `run`: the command exists but could not be executed.
    pub(crate) const COMMAND_NOT_EXECUTABLE: u8 = 126;
    /// `run`: the command was not found.
    pub(crate) const COMMAND_NOT_FOUND: u8 = 127;
    /// `run`: fencelock itself was interrupted (SIGINT).
    pub(crate) const INTERRUPTED: u8 = 130;
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Demo(args) => demo::run(args).await,
        Command::Run(args) => run::run(args).await,
        Command::Inspect(args) => inspect::run(args).await,
        Command::Bench(args) => bench::run(args).await,
        Command::Chaos(args) => chaos::run(args).await,
        Command::Worker(args) => chaos::worker::run(args).await,
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fencelock: {e}");
            ExitCode::from(exit::FAILURE)
        }
    }
}
