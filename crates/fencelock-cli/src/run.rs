//! `fencelock run`: hold a lock while a command runs.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use fencelock::{Error, Locker};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::error::CliError;
use crate::exit::Exit;
use crate::{BackendArg, parse_duration};

pub(crate) const EXAMPLES: &str = "  # a cron job that runs once across hosts
  fencelock run --backend redis://redis.example:6379 --key nightly-report -- ./report.sh
  # wait up to a minute for the lock, with a 10 s lease renewed while the job runs
  export FENCELOCK_BACKEND=postgres://app@db.example/app
  fencelock run --key migrate --wait 1m --ttl 10s -- ./migrate
";

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    pub(crate) backend: BackendArg,
    /// The lock's key.
    #[arg(long)]
    key: String,
    /// Lease ttl; the lease is renewed at about a third of it while the command runs.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    ttl: Duration,
    /// How long to wait for the lock; 0s tries once.
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    wait: Duration,
    /// After the lease is lost, how long the command has between SIGTERM and SIGKILL.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    grace: Duration,
    /// The command and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CMD"
    )]
    command: Vec<OsString>,
}

pub(crate) async fn run(args: Args) -> Result<Exit, CliError> {
    let connected = args.backend.backend.spec().connect().await?;
    let locker = Locker::new(connected.backend);
    let guard = match locker.lock(&args.key).ttl(args.ttl).wait(args.wait).await {
        Ok(guard) => guard,
        Err(Error::Timeout { waited, .. }) => {
            eprintln!(
                "fencelock: lock {:?} is held by another owner; not obtained within {waited:?}",
                args.key
            );
            return Ok(Exit::NotObtained);
        }
        Err(e) => return Err(e.into()),
    };
    let lease = guard.lease();
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| CliError::Input("no command given".into()))?;
    let spawned = Command::new(program)
        .args(rest)
        .env("FENCELOCK_KEY", lease.key.as_str())
        .env("FENCELOCK_TOKEN", lease.token.to_string())
        .env("FENCELOCK_OWNER", lease.owner.to_string())
        .kill_on_drop(true)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(e) => {
            guard.release().await?;
            let exit = if e.kind() == ErrorKind::NotFound {
                Exit::CommandNotFound
            } else {
                Exit::CannotExecute
            };
            eprintln!("fencelock: cannot run {program:?}: {e}");
            return Ok(exit);
        }
    };
    let lost = guard.lost();
    tokio::select! {
        status = child.wait() => {
            let status = status.map_err(|e| CliError::io("waiting for the command", e))?;
            if !guard.release().await? {
                eprintln!("fencelock: the lease on {:?} was lost before the command exited", args.key);
            }
            Ok(status_exit(status))
        }
        reason = lost => {
            eprintln!(
                "fencelock: lease on {:?} lost ({reason}); sending SIGTERM to the command",
                args.key
            );
            stop(&mut child, args.grace).await?;
            Ok(Exit::LeaseLost)
        }
        _ = tokio::signal::ctrl_c() => {
            eprintln!("fencelock: interrupted; stopping the command and releasing the lock");
            stop(&mut child, args.grace).await?;
            guard.release().await?;
            Ok(Exit::Signal(2))
        }
    }
}

/// SIGTERM, then SIGKILL after `grace`.
async fn stop(child: &mut Child, grace: Duration) -> Result<(), CliError> {
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        // The child may have exited a moment ago; then there is nothing to signal.
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        eprintln!("fencelock: the command outlived the {grace:?} grace period; sending SIGKILL");
        child
            .kill()
            .await
            .map_err(|e| CliError::io("killing the command", e))?;
    }
    Ok(())
}

/// The shell's convention: the exit code, or 128 + the signal that ended the process.
fn status_exit(status: ExitStatus) -> Exit {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).map_or(Exit::Failure, Exit::Command),
        (None, Some(signal)) => Exit::Signal(signal),
        (None, None) => Exit::Failure,
    }
}
