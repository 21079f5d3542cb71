//! `fencelock`: demonstrate, run under, inspect, benchmark and stress-test a fencelock backend.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use fencelock::spec::BackendSpec;

mod demo;

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
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Demo(args) => demo::run(args).await,
    };
    match outcome {
        Ok(code) => code,
        Err(e) => {
            eprintln!("fencelock: {e}");
            ExitCode::from(exit::FAILURE)
        }
    }
}
