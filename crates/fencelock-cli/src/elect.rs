//! `fencelock elect`: campaign for leadership of a key and run a command while leader.
//!
//! The campaign is `Election::campaign` (the key's lock, renewed by the watchdog); the term is
//! the lock's token, handed to the command as FENCELOCK_TOKEN (and FENCELOCK_TERM). The
//! command runs, and is stopped, exactly as under `fencelock run`: when leadership is lost it
//! gets SIGTERM, then SIGKILL after `--grace`.

use std::future::IntoFuture;
use std::time::Duration;

use fencelock::{Election, Error, LockKey, Locker};

use crate::args::{SharedBackendArg, parse_duration, parse_ttl, parse_wait};
use crate::error::CliError;
use crate::exit::Exit;
use nix::sys::signal::Signal;

use crate::run::{
    CommandArgs, TryOnce, Verbosity, WaitBudget, hold_while_running, record_holder, settle_backend,
};
use crate::signals::Signals;

pub(crate) const EXAMPLES: &str =
    "  # one scheduler across hosts; a standby takes over within a ttl when the leader dies
  fencelock elect --backend redis://redis.example:6379 --key scheduler -- ./scheduler
  # give up after a minute without leadership
  fencelock elect --key scheduler --wait 1m --ttl 10s -- ./scheduler
  # cron on every host: only one runs the job; the others exit 0 quietly
  fencelock elect -n -q -E 0 --key nightly -c 'backup --all'
";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) backend: SharedBackendArg,
    /// The election's key.
    #[arg(long)]
    key: String,
    /// Lease ttl of the leadership; renewed at about a third of it. A leader that dies is
    /// replaced within about this long.
    /// Default 30s, or the backend's longest lease when that is shorter (a ZooKeeper session).
    #[arg(long, value_parser = parse_ttl)]
    ttl: Option<Duration>,
    /// How long to campaign before giving up, connecting included (a bare number is
    /// seconds, as for flock -w); by default without a bound.
    #[arg(short, long, value_parser = parse_wait)]
    wait: Option<Duration>,
    #[command(flatten)]
    once: TryOnce,
    /// How long the command has between SIGTERM and SIGKILL when leadership is lost or
    /// fencelock is asked to stop.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    grace: Duration,
    #[command(flatten)]
    verbosity: Verbosity,
    #[command(flatten)]
    command: CommandArgs,
}

pub(crate) async fn run(args: Args) -> Result<Exit, CliError> {
    let spec = args.backend.shared("fencelock elect")?;
    let key = LockKey::new(&args.key)?;
    let holder = args.command.holder()?;
    let wait = if args.once.nonblock {
        Some(Duration::ZERO)
    } else {
        args.wait
    };
    let talk = args.verbosity;
    let mut signals = Signals::install()?;
    // `--wait` bounds connecting and a server that stops answering too, as under `run`;
    // without a bound, connecting has the time of a single try.
    let budget = WaitBudget::start(spec, wait.unwrap_or_default());
    let connected = tokio::select! {
        connected = budget.connect() => connected?,
        signal = signals.recv() => return Ok(not_started(signal)),
    };
    let locker = Locker::new(connected.backend);
    let storage = connected.storage;
    let outcome = async {
        let election = Election::new(&locker, key.as_str())?;
        let campaign = async {
            let request = election
                .campaign()
                .ttl(args.ttl.unwrap_or(locker.options().ttl));
            let elected = match wait {
                None => request.wait_forever().await,
                Some(_) => {
                    budget
                        .answer(request.wait(budget.left()).into_future())
                        .await?
                }
            };
            match elected {
                Ok(leadership) => Ok(Some(leadership)),
                Err(Error::Timeout { waited, .. }) => {
                    if !talk.quiet {
                        eprintln!(
                            "fencelock: not elected leader of {key:?} within {}",
                            crate::duration::shown(waited)
                        );
                    }
                    Ok(None)
                }
                Err(e) => Err(CliError::from(e)),
            }
        };
        let leadership = tokio::select! {
            elected = campaign => match elected? {
                Some(elected) => elected,
                None => return Ok(Exit::NotObtained(args.once.conflict_exit_code)),
            },
            signal = signals.recv() => return Ok(not_started(signal)),
        };
        let term = leadership.term().to_string();
        eprintln!("fencelock: leader of {key:?} for term {term}");
        let guard = leadership.into_guard();
        record_holder(&guard, &*storage, &holder, spec).await;
        let exit = hold_while_running(
            guard,
            &args.key,
            spec,
            &args.command,
            &[("FENCELOCK_TERM", term)],
            args.grace,
            &mut signals,
        )
        .await?;
        // A lost leadership has been said already, and there was nothing left to release.
        if talk.verbose && exit != Exit::LeaseLost {
            eprintln!(
                "fencelock: resigned leadership of {:?}; the command ended with {}",
                args.key,
                exit.code()
            );
        }
        Ok(exit)
    }
    .await;
    settle_backend(&locker).await;
    outcome
}

/// What a signal before the command started ends `elect` with.
fn not_started(signal: Signal) -> Exit {
    eprintln!("fencelock: {signal} while campaigning; the command was not started");
    Exit::Signal(signal as i32)
}
