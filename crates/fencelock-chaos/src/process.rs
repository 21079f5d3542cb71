//! Worker processes: how they are started, and what the coordinator keeps of each.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::mpsc;

use crate::error::{ChaosError, Result};
use crate::events::{self, Stamped};
use crate::worker::WorkerConfig;

/// How to start a worker process: a program and its arguments. The program must call
/// [`serve_worker`](crate::serve_worker) and nothing else (the `fencelock` command does in
/// `fencelock worker`). Its configuration arrives on stdin, never on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerLauncher {
    /// The program.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<OsString>,
}

impl WorkerLauncher {
    /// This very program, with `args` (for example `["worker"]`).
    pub fn current_exe<I, S>(args: I) -> Result<Self>
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        let program = std::env::current_exe().map_err(|e| {
            ChaosError::harness_from(format!("cannot find this program to start workers: {e}"), e)
        })?;
        Ok(WorkerLauncher {
            program,
            args: args.into_iter().map(Into::into).collect(),
        })
    }
}

/// Lines of a worker's stderr kept for error messages.
const STDERR_TAIL: usize = 5;

/// A worker process and what it said on stderr lately.
pub(crate) struct WorkerProcess {
    pub(crate) child: Child,
    stdin: Option<ChildStdin>,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WorkerProcess {
    /// Starts worker `index` with `config`; its events arrive on `events`, tagged with `index`.
    pub(crate) async fn spawn(
        launcher: &WorkerLauncher,
        config: &WorkerConfig,
        index: usize,
        events: mpsc::UnboundedSender<(usize, Stamped)>,
    ) -> Result<Self> {
        let mut child = Command::new(&launcher.program)
            .args(&launcher.args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                ChaosError::harness_from(format!("cannot start worker process: {e}"), e)
            })?;
        let mut stdin = child.stdin.take();
        if let Some(pipe) = stdin.as_mut() {
            pipe.write_all(config.to_line()?.as_bytes())
                .await
                .map_err(|e| {
                    ChaosError::harness_from(format!("cannot configure worker {index}: {e}"), e)
                })?;
        }
        let stderr = Arc::new(Mutex::new(VecDeque::new()));
        if let Some(out) = child.stdout.take() {
            tokio::spawn(async move {
                let mut lines = BufReader::new(out).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(event) = events::parse(&line)
                        && events.send((index, event)).is_err()
                    {
                        return;
                    }
                }
            });
        }
        if let Some(err) = child.stderr.take() {
            let tail = stderr.clone();
            tokio::spawn(async move {
                let mut lines = BufReader::new(err).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let mut tail = lock(&tail);
                    if tail.len() == STDERR_TAIL {
                        tail.pop_front();
                    }
                    tail.push_back(line);
                }
            });
        }
        Ok(WorkerProcess {
            child,
            stdin,
            stderr,
        })
    }

    /// Its last lines on stderr, on one line.
    pub(crate) fn stderr_tail(&self) -> String {
        lock(&self.stderr)
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join(" | ")
    }

    /// Closes its stdin: the worker finishes the cycle it is in and exits.
    pub(crate) fn ask_to_stop(&mut self) {
        self.stdin = None;
    }

    /// Its process id (0 once it was reaped).
    pub(crate) fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }
}
