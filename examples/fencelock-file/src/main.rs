//! `fencelock-file`: the `fencelock` command with the `lockdir://` scheme registered, so that
//! every subcommand (`run`, `inspect`, `bench`, `chaos`, ...) reaches the file backend.

use std::process::ExitCode;

#[tokio::main]
async fn main() -> ExitCode {
    fencelock_cli::main_with(fencelock_file::SCHEMES).await
}
