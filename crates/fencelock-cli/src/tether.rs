//! The command `run` and `elect` start is tied to fencelock's life: on Linux it gets SIGKILL
//! from the kernel the moment fencelock dies, however it dies (SIGKILL, a crash, the OOM
//! killer), so a command never goes on working under a lock whose lease nobody renews.
//!
//! The tie is the parent-death signal (`PR_SET_PDEATHSIG`). It has to be asked for by the
//! command's own process, after the fork, and survives the exec of the command. fencelock
//! takes no `unsafe` code (a `pre_exec` hook would be), so the process it starts is this same
//! binary, as a hidden `tether` subcommand, which asks for the signal, checks that its parent
//! is still the fencelock that started it (one that died in between would never send it), and
//! then execs the command in its own place: the command keeps the process, its pid, its
//! process group and its environment, and fencelock waits for it and signals it as before.
//!
//! The kernel sends the signal when the *thread* that forked the child ends, not the process,
//! so the child is forked on a thread of its own that lives as long as the process: a
//! runtime's worker threads may come and go (a blocking section hands a worker's place to a
//! new thread), and a task may move between them, so a fork from one of them could let the
//! signal fire while fencelock still runs. A pipe watched by a supervisor process would give
//! the same tie at the cost of a third process per command and a protocol between them; the
//! kernel's signal needs neither.
//!
//! What the tie does not reach: processes the command started itself (the kernel signals the
//! direct child only; a shell line `-c '...'` should `exec` its last program), and a
//! fencelock that is stopped (SIGSTOP) rather than dead. Then the lease runs out while the
//! command works on, and the fence is what protects the data: the command presents its
//! FENCELOCK_TOKEN with every write, and the next holder's greater token has the storage
//! refuse it.

use std::ffi::OsString;
use std::io;
use std::os::unix::process::CommandExt;
use std::sync::OnceLock;
use std::sync::mpsc;

use tokio::process::{Child, Command};
use tokio::runtime::Handle;
use tokio::sync::oneshot;

use crate::error::CliError;
use crate::exit::Exit;

/// The hidden subcommand that ties itself to its parent and execs the command.
const SUBCOMMAND: &str = "tether";

/// `fencelock tether --parent PID -- CMD...`: started by `run` and `elect`, never by hand.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The process id of the fencelock that started this one.
    #[arg(long)]
    parent: u32,
    /// The command and its arguments.
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
    command: Vec<OsString>,
}

/// A command to start, the runtime its child is registered with, and where the outcome goes.
type Request = (Command, Handle, oneshot::Sender<io::Result<Child>>);

/// The spawner thread's inbox. The sender lives in a static and is never dropped, so the
/// thread runs until the process ends.
static SPAWNER: OnceLock<io::Result<mpsc::Sender<Request>>> = OnceLock::new();

/// The command that runs `program` with `args` tied to this process: this binary's `tether`
/// subcommand in front of it, on Linux. Elsewhere, or when this binary cannot be found, the
/// program itself, untied.
pub(crate) fn command(program: &std::ffi::OsStr, args: &[&std::ffi::OsStr]) -> Command {
    match std::env::current_exe() {
        Ok(this) if cfg!(target_os = "linux") => {
            let mut command = Command::new(this);
            command
                .arg(SUBCOMMAND)
                .arg("--parent")
                .arg(std::process::id().to_string())
                .arg("--")
                .arg(program)
                .args(args);
            command
        }
        _ => {
            let mut command = Command::new(program);
            command.args(args);
            command
        }
    }
}

/// Starts `command` from the spawner thread, registered with the current runtime so it can be
/// awaited and killed as any Tokio child.
pub(crate) async fn spawn(command: Command) -> io::Result<Child> {
    let spawner = SPAWNER.get_or_init(|| {
        let (requests, inbox) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("fencelock-spawner".to_owned())
            .spawn(move || {
                for (mut command, runtime, reply) in inbox {
                    let _entered = runtime.enter();
                    // The caller may have given up waiting; the child is then dropped and
                    // killed (`kill_on_drop`).
                    let _ = reply.send(command.spawn());
                }
            })?;
        Ok(requests)
    });
    let spawner = spawner
        .as_ref()
        .map_err(|e| io::Error::new(e.kind(), format!("starting the spawner thread: {e}")))?;
    let (reply, outcome) = oneshot::channel();
    spawner
        .send((command, Handle::current(), reply))
        .map_err(|_| io::Error::other("the spawner thread is gone"))?;
    outcome
        .await
        .map_err(|_| io::Error::other("the spawner thread ended without an answer"))?
}

/// The `tether` subcommand: asks for SIGKILL when the parent thread dies, makes sure that
/// parent is still the fencelock that started it, and execs the command. Returns only when
/// that fails: 126 or 127 as a shell would, with the reason on stderr.
pub(crate) fn exec(args: Args) -> Result<Exit, CliError> {
    tie_to(args.parent)?;
    let Some((program, rest)) = args.command.split_first() else {
        return Err(CliError::Input("no command given".into()));
    };
    let e = std::process::Command::new(program).args(rest).exec();
    eprintln!("fencelock: cannot run {program:?}: {e}");
    Ok(if e.kind() == io::ErrorKind::NotFound {
        Exit::CommandNotFound
    } else {
        Exit::CannotExecute
    })
}

#[cfg(target_os = "linux")]
fn tie_to(parent: u32) -> Result<(), CliError> {
    use nix::sys::prctl::set_pdeathsig;
    use nix::sys::signal::Signal;
    use nix::unistd::getppid;

    set_pdeathsig(Signal::SIGKILL)
        .map_err(|e| CliError::io("asking for the parent-death signal", e.into()))?;
    if u32::try_from(getppid().as_raw()).ok() != Some(parent) {
        // The fencelock that started this one is gone already: the command must not start.
        return Err(CliError::io(
            "tying the command to fencelock",
            io::Error::other("fencelock exited before the command started"),
        ));
    }
    Ok(())
}

/// Other systems have no parent-death signal, and `command` never starts `tether` there.
#[cfg(not(target_os = "linux"))]
fn tie_to(_parent: u32) -> Result<(), CliError> {
    Ok(())
}
