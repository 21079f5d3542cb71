//! `fencelock`: demonstrate, run under, inspect, benchmark and stress-test a fencelock backend.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    fencelock_cli::warnings::install();
    fencelock_cli::main_with(&[]).await
}
