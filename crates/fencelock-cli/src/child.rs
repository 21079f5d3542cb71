//! The command's process group while fencelock waits for it to end: signals passed on,
//! SIGKILL after the grace period, and the shell's exit-code convention.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::Child;
use tokio::time::Instant;

use crate::error::CliError;
use crate::exit::Exit;
use crate::signals::Signals;

/// How often the command's process group is checked for processes left after the command
/// itself exited.
const GROUP_POLL: Duration = Duration::from_millis(20);

/// How long processes sent SIGKILL get to disappear.
const KILLED_GONE_WITHIN: Duration = Duration::from_secs(5);

/// Sends `signal` to the command's process group, passes on any signal fencelock receives
/// meanwhile, and waits until the command and everything else in its group have exited;
/// SIGKILL to the group when they have not after `grace`.
pub(crate) async fn stop(
    child: &mut Child,
    group: Option<Pid>,
    signal: Signal,
    grace: Duration,
    signals: &mut Signals,
) -> Result<(), CliError> {
    let send = |signal: Signal| {
        if let Some(group) = group {
            // The group may be gone already; then there is nothing to signal.
            let _ = killpg(group, signal);
        }
    };
    send(signal);
    let kill_at = Instant::now() + grace;
    let mut exited = false;
    loop {
        if exited && !alive(group) {
            return Ok(());
        }
        tokio::select! {
            status = child.wait(), if !exited => {
                status.map_err(|e| CliError::io("waiting for the command", e))?;
                exited = true;
            }
            again = signals.recv() => send(again),
            // Processes of the group other than the command cannot be waited for: poll.
            () = tokio::time::sleep(GROUP_POLL), if exited => {}
            () = tokio::time::sleep_until(kill_at) => {
                eprintln!(
                    "fencelock: the command outlived the {} grace period; sending SIGKILL",
                    crate::duration::shown(grace)
                );
                send(Signal::SIGKILL);
                child
                    .wait()
                    .await
                    .map_err(|e| CliError::io("waiting for the killed command", e))?;
                let gone_by = Instant::now() + KILLED_GONE_WITHIN;
                while alive(group) && Instant::now() < gone_by {
                    tokio::time::sleep(GROUP_POLL).await;
                }
                return Ok(());
            }
        }
    }
}

/// Whether any process of `group` is left.
fn alive(group: Option<Pid>) -> bool {
    group.is_some_and(|group| killpg(group, None).is_ok())
}

/// The shell's convention: the exit code, or 128 + the signal that ended the process.
pub(crate) fn status_exit(status: ExitStatus) -> Exit {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).map_or(Exit::Failure, Exit::Command),
        (None, Some(signal)) => Exit::Signal(signal),
        (None, None) => Exit::Failure,
    }
}
