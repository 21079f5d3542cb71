//! `fencelock inspect`: who holds a lock, with which token, for how long; and what the backend
//! guarantees.

use fencelock::{LockKey, Locker, Semaphore};

use crate::args::SharedBackendArg;
use crate::error::CliError;
use crate::exit::Exit;

pub(crate) const EXAMPLES: &str =
    "  fencelock inspect --backend redis://127.0.0.1:6379 nightly-report
  FENCELOCK_BACKEND=postgres://postgres@127.0.0.1:5432/test fencelock inspect migrate
  # the 4 permits of a semaphore (fencelock run --permits 4 --key transcode)
  fencelock inspect --permits 4 transcode
";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) backend: SharedBackendArg,
    /// Also show the N permits of the semaphore on this key (`fencelock run --permits N`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    permits: Option<u32>,
    /// The lock's key (an election's key shows its leader: the holder, whose token is the
    /// term).
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
    if caps.kinds.shared {
        match backend.inspect_shared(&key).await? {
            Some(phase) => println!(
                "readers     {} sharing token {} owner {} ({} ms left)",
                phase.readers,
                phase.fence.token,
                phase.fence.owner,
                phase.remaining.as_millis()
            ),
            None => println!("readers     none"),
        }
    }
    if let Some(permits) = args.permits {
        let locker = Locker::new(backend.clone());
        let semaphore = Semaphore::new(&locker, key.as_str(), permits as usize)?;
        let slots = semaphore.inspect().await?;
        let held = slots.iter().filter(|slot| slot.holder.is_some()).count();
        println!("permits     {held} of {permits} held");
        for (slot, info) in slots.iter().enumerate() {
            match info.holder {
                Some(holder) => println!(
                    "  permit {slot:<4} token {} owner {} ({} ms left)",
                    holder.token,
                    holder.owner,
                    info.remaining.map_or(0, |left| left.as_millis())
                ),
                None => println!("  permit {slot:<4} free"),
            }
        }
    }
    println!("capabilities");
    println!("  tokens              {:?}", caps.tokens);
    println!("  time authority      {:?}", caps.time_authority);
    println!("  wake-up             {:?}", caps.wake_up);
    println!(
        "  max ttl             {}",
        humantime::format_duration(caps.max_ttl)
    );
    println!("  locks survive restart  {}", caps.locks_survive_restart);
    let kinds = [
        ("exclusive", caps.kinds.exclusive),
        ("shared", caps.kinds.shared),
        ("semaphore", caps.kinds.semaphore),
        ("election", caps.kinds.election),
    ];
    let offered: Vec<&str> = kinds
        .iter()
        .filter(|(_, on)| *on)
        .map(|(name, _)| *name)
        .collect();
    println!("  kinds               {}", offered.join(", "));
    Ok(Exit::Success)
}
