//! Workers: how they are started, and what the coordinator keeps of each. A worker is a
//! process, or, for a backend that lives inside one process (`memory://`), a thread of the
//! coordinator with a runtime of its own, which the pause fault stops as a whole.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use fencelock::spec::Connected;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::runtime::Handle;
use tokio::sync::mpsc;

use crate::error::{ChaosError, Result};
use crate::events::{self, Stamped};
use crate::worker::{self, WorkerConfig};

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

/// A worker: a process and what it said on stderr lately, or a thread of this process.
pub(crate) enum WorkerProcess {
    /// A process started with a [`WorkerLauncher`].
    Process {
        child: Child,
        stdin: Option<ChildStdin>,
        stderr: Arc<Mutex<VecDeque<String>>>,
    },
    /// A thread with a runtime of its own, sharing an in-process backend.
    Thread(WorkerThread),
}

/// A worker thread: its stop flag, its pause gate and how it ended.
pub(crate) struct WorkerThread {
    stop: Arc<AtomicBool>,
    gate: Arc<Gate>,
    thread: Option<JoinHandle<()>>,
    /// Why it stopped early (a runtime that could not be built).
    failed: Arc<Mutex<Option<String>>>,
}

/// How the pause fault stops a worker thread as SIGSTOP stops a process: a task that blocks
/// the thread's runtime (one thread, so every task of the worker, its watchdog included,
/// stands still) until the gate opens again.
#[derive(Debug)]
pub(crate) struct Gate {
    runtime: Mutex<Option<Handle>>,
    closed: Mutex<bool>,
    opened: Condvar,
}

impl Gate {
    fn new() -> Self {
        Gate {
            runtime: Mutex::new(None),
            closed: Mutex::new(false),
            opened: Condvar::new(),
        }
    }

    /// Stops the worker: its runtime blocks as soon as it polls its next task. `false` when
    /// it has no runtime (yet or any more).
    pub(crate) fn close(self: &Arc<Self>) -> bool {
        let Some(runtime) = lock(&self.runtime).clone() else {
            return false;
        };
        *lock(&self.closed) = true;
        let gate = Arc::clone(self);
        runtime.spawn(async move { gate.block() });
        true
    }

    /// Continues the worker.
    pub(crate) fn open(&self) {
        *lock(&self.closed) = false;
        self.opened.notify_all();
    }

    fn block(&self) {
        let mut closed = lock(&self.closed);
        while *closed {
            closed = self
                .opened
                .wait(closed)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// How the nemesis stops and continues one worker.
#[derive(Debug, Clone)]
pub(crate) enum Stoppable {
    /// A process, by pid (0 once it was reaped).
    Process(u32),
    /// A thread, by its gate.
    Thread(Arc<Gate>),
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
        Ok(WorkerProcess::Process {
            child,
            stdin,
            stderr,
        })
    }

    /// Starts worker `index` with `config` as a thread of this process, on `connected`
    /// (an in-process backend every worker shares); its events arrive on `events`.
    pub(crate) fn spawn_thread(
        config: WorkerConfig,
        connected: &Connected,
        index: usize,
        events: mpsc::UnboundedSender<(usize, Stamped)>,
    ) -> Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let gate = Arc::new(Gate::new());
        let failed = Arc::new(Mutex::new(None));
        let (backend, storage) = (connected.backend.clone(), connected.storage.clone());
        let thread = std::thread::Builder::new()
            .name(format!("chaos-worker-{index}"))
            .spawn({
                let (stop, gate, failed) = (stop.clone(), gate.clone(), failed.clone());
                move || {
                    let runtime = match tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                    {
                        Ok(runtime) => runtime,
                        Err(e) => {
                            *lock(&failed) = Some(format!("cannot build a runtime: {e}"));
                            return;
                        }
                    };
                    *lock(&gate.runtime) = Some(runtime.handle().clone());
                    let sink = worker::Sink::Channel { index, events };
                    runtime.block_on(worker::serve_in_process(
                        config, backend, storage, sink, stop,
                    ));
                    *lock(&gate.runtime) = None;
                }
            })
            .map_err(|e| {
                ChaosError::harness_from(format!("cannot start worker {index}: {e}"), e)
            })?;
        Ok(WorkerProcess::Thread(WorkerThread {
            stop,
            gate,
            thread: Some(thread),
            failed,
        }))
    }

    /// Its last lines on stderr (a thread: why it failed), on one line.
    pub(crate) fn stderr_tail(&self) -> String {
        match self {
            WorkerProcess::Process { stderr, .. } => {
                lock(stderr).iter().cloned().collect::<Vec<_>>().join(" | ")
            }
            WorkerProcess::Thread(t) => lock(&t.failed).clone().unwrap_or_default(),
        }
    }

    /// Closes its stdin (a thread: sets its stop flag): the worker finishes the cycle it is in
    /// and exits.
    pub(crate) fn ask_to_stop(&mut self) {
        match self {
            WorkerProcess::Process { stdin, .. } => *stdin = None,
            WorkerProcess::Thread(t) => t.stop.store(true, Ordering::Relaxed),
        }
    }

    /// How the nemesis stops it.
    pub(crate) fn stoppable(&self) -> Stoppable {
        match self {
            WorkerProcess::Process { child, .. } => Stoppable::Process(child.id().unwrap_or(0)),
            WorkerProcess::Thread(t) => Stoppable::Thread(t.gate.clone()),
        }
    }

    /// How it ended, if it did.
    pub(crate) fn exited(&mut self) -> Option<String> {
        match self {
            WorkerProcess::Process { child, .. } => match child.try_wait() {
                Ok(Some(status)) => Some(status.to_string()),
                _ => None,
            },
            WorkerProcess::Thread(t) => t
                .thread
                .as_ref()
                .is_none_or(JoinHandle::is_finished)
                .then(|| "thread ended".to_owned()),
        }
    }

    /// Kills a process that takes too long to stop. A thread cannot be killed: it is left to
    /// finish (every call it makes is bounded by the operation time-out).
    pub(crate) fn kill(&mut self) {
        if let WorkerProcess::Process { child, .. } = self {
            let _ = child.start_kill();
        }
    }

    /// Waits up to `limit` for it to end.
    pub(crate) async fn wait(&mut self, limit: Duration) {
        match self {
            WorkerProcess::Process { child, .. } => {
                let _ = tokio::time::timeout(limit, child.wait()).await;
            }
            WorkerProcess::Thread(t) => {
                let deadline = tokio::time::Instant::now() + limit;
                while t.thread.as_ref().is_some_and(|h| !h.is_finished())
                    && tokio::time::Instant::now() < deadline
                {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                if t.thread.as_ref().is_some_and(JoinHandle::is_finished)
                    && let Some(handle) = t.thread.take()
                {
                    let _ = handle.join();
                }
            }
        }
    }
}

impl Drop for WorkerThread {
    /// A thread left behind stops at its next cycle, and a paused one is continued.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        self.gate.open();
    }
}
