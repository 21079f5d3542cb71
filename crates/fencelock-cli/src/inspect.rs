//! `fencelock inspect`: who holds a lock, with which token, for how long; and what the backend
//! guarantees.

use std::process::ExitCode;

use fencelock::{LockKey, Result};

use crate::BackendArg;

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    backend: BackendArg,
    /// The lock's key.
    key: String,
}

pub(crate) async fn run(args: Args) -> Result<ExitCode> {
    let key = LockKey::new(&args.key)?;
    let connected = args.backend.backend.connect().await?;
    let backend = connected.backend;
    let info = backend.inspect(&key).await?;
    println!("key         {key}");
    println!("backend     {} ({})", args.backend.backend, backend.name());
    match (info.holder, info.remaining) {
        (Some(holder), remaining) => {
            println!("holder      owner {}", holder.owner);
            println!("token       {}", holder.token);
            match remaining {
                Some(left) => println!("time left   {} ms", left.as_millis()),
                None => println!("time left   unknown"),
            }
        }
        (None, _) => println!("holder      none (the lock is free)"),
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
    Ok(ExitCode::SUCCESS)
}
