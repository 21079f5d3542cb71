//! Every exit status of the `fencelock` command, defined once. The code returns an [`Exit`];
//! each subcommand's `--help` lists its codes from [`DOCUMENTED`], through `after_help`.

use std::fmt::Write;
use std::process::ExitCode;

/// The default code of [`Exit::NotObtained`]: 75, `EX_TEMPFAIL` of sysexits.h.
pub const NOT_OBTAINED: u8 = 75;

/// The subcommands, as the list of exit codes names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sub {
    /// `fencelock demo`.
    Demo,
    /// `fencelock run`.
    Run,
    /// `fencelock elect`.
    Elect,
    /// `fencelock inspect`.
    Inspect,
    /// `fencelock advance-token`.
    AdvanceToken,
    /// `fencelock bench`.
    Bench,
    /// `fencelock chaos`.
    Chaos,
}

/// How the command ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done; `chaos`: no violation, and the control lost updates.
    Success,
    /// 1: fencelock failed (an unreachable backend, a worker that died, ...).
    Failure,
    /// 2: bad input (arguments, backend spec, key, ttl); nothing was changed.
    Usage,
    /// 3, `chaos`: the fenced run broke the safety model.
    Violations,
    /// 4, `chaos`: the control run lost no update, so the run proves nothing.
    ControlFoundNothing,
    /// `run`, `elect`: the lock was not obtained within `--wait`; [`NOT_OBTAINED`] (75,
    /// `EX_TEMPFAIL`) unless `run -E CODE` chose another code.
    NotObtained(u8),
    /// 76, `run`, `elect`: the lease was lost while the command ran (or the release after it
    /// found it gone).
    LeaseLost,
    /// 126, `run`: the command exists but could not be executed.
    CannotExecute,
    /// 127, `run`: the command was not found.
    CommandNotFound,
    /// `run`: the command's own exit code.
    Command(u8),
    /// 128 + N: signal N ended the process (the command's, or fencelock's own).
    Signal(i32),
}

impl Exit {
    /// The process exit code.
    pub fn code(self) -> u8 {
        match self {
            Exit::Success => 0,
            Exit::Failure => 1,
            Exit::Usage => 2,
            Exit::Violations => 3,
            Exit::ControlFoundNothing => 4,
            Exit::NotObtained(code) => code,
            Exit::LeaseLost => 76,
            Exit::CannotExecute => 126,
            Exit::CommandNotFound => 127,
            Exit::Command(code) => code,
            Exit::Signal(signal) => u8::try_from(128 + signal).unwrap_or(1),
        }
    }

    /// How the help writes the code.
    fn label(self) -> String {
        match self {
            Exit::Command(_) => "CODE".into(),
            Exit::Signal(_) => "128+N".into(),
            other => other.code().to_string(),
        }
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit.code())
    }
}

use Sub::{AdvanceToken, Bench, Chaos, Demo, Elect, Inspect, Run};

/// What each code means, for the subcommands that use it, in the order the help lists them.
pub const DOCUMENTED: &[(Exit, &[Sub], &str)] = &[
    (
        Exit::Command(0),
        &[Run, Elect],
        "the command's own exit code, or 128+N if signal N ended it",
    ),
    (Exit::Success, &[Demo, Inspect, AdvanceToken, Bench], "done"),
    (
        Exit::Success,
        &[Chaos],
        "no violation, and the control run without fencing lost updates",
    ),
    (
        Exit::Failure,
        &[Demo],
        "fencelock failed (unreachable backend, ...), or the fenced storage admitted the stale write",
    ),
    (
        Exit::Failure,
        &[Run, Elect, Inspect, AdvanceToken],
        "fencelock failed (unreachable backend, ...)",
    ),
    (
        Exit::Failure,
        &[Bench],
        "fencelock failed (unreachable backend, ...), or the run's keys could not be removed \
         afterwards (the table is printed first)",
    ),
    (
        Exit::Failure,
        &[Chaos],
        "the run could not be carried out (unreachable backend, a worker died, ...)",
    ),
    (
        Exit::Usage,
        &[Demo, Run, Elect, Inspect, AdvanceToken, Bench, Chaos],
        "bad input (arguments, backend spec, key, ttl); nothing was changed",
    ),
    (
        Exit::Violations,
        &[Chaos],
        "the fenced run broke the safety model (a lost update or a stale operation admitted)",
    ),
    (
        Exit::ControlFoundNothing,
        &[Chaos],
        "the control run lost no update: the faults did not bite, so the run proves nothing",
    ),
    (
        Exit::NotObtained(NOT_OBTAINED),
        &[Run],
        "the lock was not obtained within --wait (or at once with -n); -E/--conflict-exit-code \
         CODE makes this CODE instead",
    ),
    (
        Exit::NotObtained(NOT_OBTAINED),
        &[Elect],
        "not elected within --wait",
    ),
    (
        Exit::LeaseLost,
        &[Elect],
        "leadership was lost while the command ran; it was sent SIGTERM (SIGKILL after --grace), \
         or it had exited by itself (with any code) and the release found the lease gone",
    ),
    (
        Exit::LeaseLost,
        &[Run],
        "the lease was lost while the command ran; it was sent SIGTERM (SIGKILL after --grace), \
         or it had exited by itself (with any code) and the release found the lease gone",
    ),
    (
        Exit::CannotExecute,
        &[Run, Elect],
        "the command could not be executed",
    ),
    (
        Exit::CommandNotFound,
        &[Run, Elect],
        "the command was not found",
    ),
    (
        Exit::Signal(0),
        &[Run, Elect],
        "fencelock received signal N (SIGHUP 129, SIGINT 130, SIGTERM 143): it passed the signal \
         to the command, waited for it (SIGKILL after --grace), then released the lock",
    ),
    (
        Exit::Signal(0),
        &[Bench],
        "fencelock received signal N (SIGHUP 129, SIGINT 130, SIGTERM 143); the run stopped and \
         its keys were removed from the server",
    ),
    (
        Exit::Signal(0),
        &[Chaos],
        "fencelock received signal N (SIGHUP 129, SIGINT 130, SIGTERM 143); the workers and \
         spawned servers are stopped",
    ),
];

/// The codes `sub` documents, as the help lists them.
pub fn documented(sub: Sub) -> impl Iterator<Item = (Exit, &'static str)> {
    DOCUMENTED
        .iter()
        .filter(move |(_, subs, _)| subs.contains(&sub))
        .map(|(exit, _, meaning)| (*exit, *meaning))
}

/// `Exit codes:` with every code of `sub`, then `examples`.
pub(crate) fn after_help(sub: Sub, examples: &str) -> String {
    let mut help = String::from("Exit codes:\n");
    for (exit, meaning) in documented(sub) {
        let _ = writeln!(help, "  {:<6} {meaning}", exit.label());
    }
    let _ = write!(help, "\nExamples:\n{examples}");
    help
}
