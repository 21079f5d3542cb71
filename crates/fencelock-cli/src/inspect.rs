//! `fencelock inspect`: who holds a lock, with which token, for how long; and what the backend
//! guarantees.

use fencelock::LockKey;

use crate::args::SharedBackendArg;
use crate::error::CliError;
use crate::exit::Exit;

pub(crate) const EXAMPLES: &str =
    "  fencelock inspect --backend redis://127.0.0.1:6379 nightly-report
  FENCELOCK_BACKEND=postgres://postgres@127.0.0.1:5432/test fencelock inspect migrate
";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) backend: SharedBackendArg,
    /// The lock's key.
    key: String,
}

pub(crate) async fn run(args: Args) -> Result<Exit, CliError> {
    let spec = args.backend.shared("fencelock inspect")?;
    let key = LockKey::new(&args.key)?;
    let connected = spec.spec().connect().await?;
    let backend = connected.backend;
    let info = backend.inspect(&key).await?;
    println!("key         {key}");
    println!("backend     {spec} ({})", backend.name());
    match (info.holder, info.remaining) {
        (Some(holder), remaining) => {
            println!("holder      owner {}", holder.owner);
            println!("token       {}", holder.token);
            match remaining {
                Some(left) => println!("time left   {} ms", left.as_millis()),
                None => println!("time left   unknown"),
            }
        }
        (None, _) => match &info.unfenced_holder {
            Some(who) => println!("holder      held without a fence by {who}"),
            None => println!("holder      none (the lock is free)"),
        },
    }
    match info.last_token {
        Some(token) => println!("last token  {token}"),
        None => println!("last token  none (never granted)"),
    }
    let caps = backend.capabilities();
    println!("capabilities");
    println!("  tokens              {:?}", caps.tokens);
    println!("  time authority      {:?}", caps.time_authority);
    println!("  wake-up             {:?}", caps.wake_up);
    println!(
        "  max ttl             {}",
        humantime::format_duration(caps.max_ttl)
    );
    println!("  locks survive restart  {}", caps.locks_survive_restart);
    Ok(Exit::Success)
}
