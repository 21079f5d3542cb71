//! `fencelock`: demonstrate, run under, inspect, benchmark and stress-test a fencelock backend.

use std::process::ExitCode;

use clap::Parser;

#[tokio::main]
async fn main() -> ExitCode {
    fencelock_cli::run(fencelock_cli::Cli::parse()).await
}
