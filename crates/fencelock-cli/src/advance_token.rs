//! `fencelock advance-token`: raise a key's token counter past a floor, the way to heal a lock
//! server that lost its counters.

use fencelock::{FencingToken, LockKey};

use crate::args::SharedBackendArg;
use crate::error::CliError;
use crate::exit::Exit;

pub(crate) const EXAMPLES: &str =
    "  # after a Redis restart without persistence, the storage is at token 41
  fencelock advance-token --backend redis://127.0.0.1:6379 --key nightly-report --to 41
";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) backend: SharedBackendArg,
    /// The lock's key.
    #[arg(long)]
    key: String,
    /// The floor: the next grant carries a token greater than N (at least 1).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    to: u64,
}

pub(crate) async fn run(args: Args) -> Result<Exit, CliError> {
    let spec = args.backend.shared("fencelock advance-token")?;
    let key = LockKey::new(&args.key)?;
    let floor = FencingToken::new(args.to)
        .ok_or_else(|| CliError::Input("--to must be at least 1".into()))?;
    let backend = spec.spec().connect().await?.backend;
    let counter = backend.advance_token(&key, floor).await?;
    println!(
        "token counter of {key} is at {counter}: the next grant carries a token above {floor}"
    );
    Ok(Exit::Success)
}
