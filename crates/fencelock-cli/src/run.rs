//! `fencelock run`: hold a lock while a command runs.

use std::ffi::OsString;
use std::io::ErrorKind;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitCode, ExitStatus};
use std::time::Duration;

use fencelock::{Error, Locker, Result};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::process::{Child, Command};

use crate::{BackendArg, exit, parse_duration};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    backend: BackendArg,
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

pub(crate) async fn run(args: Args) -> Result<ExitCode> {
    let connected = args.backend.backend.connect().await?;
    let locker = Locker::new(connected.backend);
    let guard = match locker.lock(&args.key).ttl(args.ttl).wait(args.wait).await {
        Ok(guard) => guard,
        Err(Error::Timeout { waited, .. }) => {
            eprintln!(
                "fencelock: lock {:?} is held by another owner; not obtained within {waited:?}",
                args.key
            );
            return Ok(ExitCode::from(exit::NOT_OBTAINED));
        }
        Err(e) => return Err(e),
    };
    let lease = guard.lease();
    let (program, rest) = args
        .command
        .split_first()
        .ok_or_else(|| Error::config("no command given"))?;
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
            let code = if e.kind() == ErrorKind::NotFound {
                exit::COMMAND_NOT_FOUND
            } else {
                exit::COMMAND_NOT_EXECUTABLE
            };
            eprintln!("fencelock: cannot run {program:?}: {e}");
            return Ok(ExitCode::from(code));
        }
    };
    let lost = guard.lost();
    tokio::select! {
        status = child.wait() => {
            let status = status.map_err(|e| io_error("waiting for the command", e))?;
            if !guard.release().await? {
                eprintln!("fencelock: the lease on {:?} was lost before the command exited", args.key);
            }
            Ok(ExitCode::from(status_code(status)))
        }
        reason = lost => {
            eprintln!(
                "fencelock: lease on {:?} lost ({reason}); sending SIGTERM to the command",
                args.key
            );
            stop(&mut child, args.grace).await?;
            Ok(ExitCode::from(exit::LEASE_LOST))
        }
        _ = tokio::signal::ctrl_c() => {
            eprintln!("fencelock: interrupted; stopping the command and releasing the lock");
            stop(&mut child, args.grace).await?;
            guard.release().await?;
            Ok(ExitCode::from(exit::INTERRUPTED))
        }
    }
}

/// SIGTERM, then SIGKILL after `grace`.
async fn stop(child: &mut Child, grace: Duration) -> Result<()> {
    if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
        // The child may have exited a moment ago; then there is nothing to signal.
        let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    }
    if tokio::time::timeout(grace, child.wait()).await.is_err() {
        eprintln!("fencelock: the command outlived the {grace:?} grace period; sending SIGKILL");
        child
            .kill()
            .await
            .map_err(|e| io_error("killing the command", e))?;
    }
    Ok(())
}

/// The shell's convention: the exit code, or 128 + the signal that ended the process.
fn status_code(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(exit::FAILURE),
        (None, Some(signal)) => u8::try_from(128 + signal).unwrap_or(exit::FAILURE),
        (None, None) => exit::FAILURE,
    }
}

fn io_error(what: &str, e: std::io::Error) -> Error {
    Error::Backend {
        backend: "process",
        message: format!("{what}: {e}"),
        source: Some(Box::new(e)),
    }
}
