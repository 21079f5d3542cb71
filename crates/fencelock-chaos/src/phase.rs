//! One run of the workload under faults (fenced or control), step by step: start the workers,
//! wait until each is connected, let the nemesis loose while the events come in, stop and heal
//! everything, let the workers finish, then read the counter and check the history.

use std::sync::Arc;
use std::time::Duration;

use fencelock::LockKey;
use fencelock::spec::StorageSpec;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, timeout, timeout_at};

use crate::checker::{History, Verdict};
use crate::clock;
use crate::cluster::Cluster;
use crate::config::{FaultKind, Mode, Workload};
use crate::error::{ChaosError, Result};
use crate::events::{Event, Outcome, Stamped};
use crate::history::Recorder;
use crate::linearizability;
use crate::nemesis::{self, FaultCounts, Pauser};
use crate::process::{WorkerLauncher, WorkerProcess};
use crate::report::{Progress, RunReport};
use crate::worker::WorkerConfig;

/// How long every worker has to connect before the run is given up.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// What both runs share.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) workers: u16,
    pub(crate) ttl: Duration,
    pub(crate) work: Duration,
    pub(crate) op_timeout: Duration,
    pub(crate) faults: Vec<FaultKind>,
    /// What the workers do.
    pub(crate) workload: Workload,
    /// States the history checker may visit per key.
    pub(crate) search_budget: usize,
    /// Unique to the chaos run: keys and Postgres sessions carry it.
    pub(crate) tag: String,
}

/// Per-worker bookkeeping in the coordinator.
#[derive(Debug, Default, Clone)]
struct Seen {
    ready: bool,
    /// A write sent but not answered yet.
    pending_write: bool,
    /// The counter of the worker's current grant.
    resource: usize,
}

/// A run in progress.
struct Phase<'a> {
    cluster: &'a Arc<Cluster>,
    settings: &'a Settings,
    mode: Mode,
    /// The counters, by the index a grant names.
    resources: Vec<LockKey>,
    workers: Vec<WorkerProcess>,
    events: mpsc::UnboundedReceiver<(usize, Stamped)>,
    seen: Vec<Seen>,
    /// One history per counter.
    histories: Vec<History>,
    recorder: Recorder,
    /// When the nemesis was let loose (monotonic nanoseconds).
    faults_from: u64,
    counts: Arc<FaultCounts>,
    pauser: Arc<Pauser>,
}

/// Why a phase stopped taking events.
enum Ended {
    /// It ran its length, this long.
    Elapsed(Duration),
    /// A worker exited during the run: the run is invalid.
    WorkerExited(String),
}

/// The nemesis's two schedules, running.
struct Nemesis {
    stop: watch::Sender<bool>,
    pauses: JoinHandle<()>,
    infrastructure: JoinHandle<Result<()>>,
}

/// How long one phase runs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Length {
    /// The phase runs at least this long.
    pub(crate) duration: Duration,
    /// A phase that has shown no lost update after `duration` goes on until its first one,
    /// up to this long in all (the control); `None`: it ends at `duration` (the fenced run).
    pub(crate) until_lost_within: Option<Duration>,
}

/// Runs one phase for `length` and checks it.
pub(crate) async fn run_phase(
    cluster: &Arc<Cluster>,
    settings: &Settings,
    launcher: &WorkerLauncher,
    mode: Mode,
    length: Length,
    progress: &mut (dyn FnMut(&Progress) + Send),
) -> Result<RunReport> {
    let mut phase = Phase::start(cluster, settings, launcher, mode).await?;
    phase.wait_until_ready().await?;
    phase.faults_from = clock::now_ns();
    let nemesis = phase.unleash_nemesis();
    let early_exit = phase.observe(length, progress).await;
    let healed = nemesis.stop().await;
    phase.drain().await;
    healed?;
    let elapsed = match early_exit {
        Ended::Elapsed(elapsed) => elapsed,
        Ended::WorkerExited(message) => return Err(ChaosError::Worker { message }),
    };
    phase.check(elapsed).await
}

impl<'a> Phase<'a> {
    /// Starts every worker of the phase.
    async fn start(
        cluster: &'a Arc<Cluster>,
        settings: &'a Settings,
        launcher: &WorkerLauncher,
        mode: Mode,
    ) -> Result<Self> {
        let base = format!("chaos/{}/{}", settings.tag, mode.name());
        let names: Vec<String> = match settings.workload {
            Workload::Semaphore { .. } | Workload::Composite { .. } => {
                (0..settings.workload.resources())
                    .map(|slot| format!("{base}/counter/{slot}"))
                    .collect()
            }
            Workload::Lock | Workload::Election | Workload::RwLock => {
                vec![format!("{base}/counter")]
            }
        };
        let mut config = WorkerConfig {
            backend: cluster.worker_backend.to_url(),
            storage: cluster.worker_storage.as_ref().map(StorageSpec::to_url),
            key: format!("{base}/lock"),
            resources: names.clone(),
            workload: settings.workload,
            index: 0,
            ttl: settings.ttl,
            work: settings.work,
            op_timeout: settings.op_timeout,
            mode,
        };
        let resources = names
            .iter()
            .map(LockKey::new)
            .collect::<fencelock::Result<Vec<_>>>()?;
        let recorder = Recorder::new(clock::now_ns(), names, usize::from(settings.workers));
        let (tx, events) = mpsc::unbounded_channel();
        let count = usize::from(settings.workers);
        let mut workers = Vec::with_capacity(count);
        for index in 0..count {
            config.index = index;
            let worker = match &cluster.in_process {
                Some(connected) => {
                    WorkerProcess::spawn_thread(config.clone(), connected, index, tx.clone())?
                }
                None => WorkerProcess::spawn(launcher, &config, index, tx.clone()).await?,
            };
            workers.push(worker);
        }
        let counts = Arc::new(FaultCounts::default());
        let pauser = Pauser::new(
            workers.iter().map(WorkerProcess::stoppable).collect(),
            settings.ttl,
            counts.clone(),
            settings.faults.contains(&FaultKind::Pause),
        );
        Ok(Phase {
            cluster,
            settings,
            mode,
            seen: vec![Seen::default(); workers.len()],
            histories: resources.iter().map(|_| History::default()).collect(),
            resources,
            workers,
            events,
            recorder,
            faults_from: 0,
            counts,
            pauser,
        })
    }

    /// Waits until every worker reported `ready`; an error with the stderr of those that did
    /// not.
    async fn wait_until_ready(&mut self) -> Result<()> {
        let by = Instant::now() + READY_WITHIN;
        while self.seen.iter().any(|s| !s.ready) {
            match timeout_at(by, self.events.recv()).await {
                Ok(Some((worker, stamped))) => self.observe_one(worker, &stamped),
                Ok(None) | Err(_) => {
                    let mut tails: Vec<String> = self
                        .workers
                        .iter()
                        .zip(&self.seen)
                        .filter(|(_, seen)| !seen.ready)
                        .map(|(w, _)| w.stderr_tail())
                        .collect();
                    tails.sort();
                    tails.dedup();
                    return Err(ChaosError::Worker {
                        message: format!(
                            "workers did not connect to {} within {}s: {}",
                            self.cluster.described,
                            READY_WITHIN.as_secs(),
                            tails.join("; ")
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    /// Starts the pause schedule and the infrastructure schedule.
    fn unleash_nemesis(&self) -> Nemesis {
        let (stop, stopped) = watch::channel(false);
        let pauses = tokio::spawn(self.pauser.clone().schedule(stopped.clone()));
        let kinds = self
            .settings
            .faults
            .iter()
            .copied()
            .filter(|k| *k != FaultKind::Pause)
            .collect();
        let infrastructure = tokio::spawn(nemesis::infrastructure(
            self.cluster.clone(),
            kinds,
            self.settings.ttl,
            self.counts.clone(),
            stopped,
        ));
        Nemesis {
            stop,
            pauses,
            infrastructure,
        }
    }

    /// Records events for `length`, reporting progress about once a second. Returns how long
    /// the phase ran, or why it ended early: a worker that exited.
    async fn observe(
        &mut self,
        length: Length,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> Ended {
        let started = Instant::now();
        let mut duration = length.duration;
        // Past `duration`, the phase only waits for its first lost update.
        let mut extended = false;
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.tick().await;
        loop {
            tokio::select! {
                received = self.events.recv() => match received {
                    Some((worker, stamped)) => {
                        self.observe_one(worker, &stamped);
                        if extended && self.shown_lost_update() {
                            return Ended::Elapsed(started.elapsed());
                        }
                    }
                    None => return Ended::Elapsed(started.elapsed()),
                },
                _ = tick.tick() => {
                    progress(&self.progress(started.elapsed(), duration, extended));
                    if let Some(exited) = self.exited_early() {
                        return Ended::WorkerExited(exited);
                    }
                }
                () = tokio::time::sleep_until(started + duration) => {
                    match length.until_lost_within {
                        Some(within)
                            if !extended && within > duration && !self.shown_lost_update() =>
                        {
                            extended = true;
                            duration = within;
                        }
                        _ => return Ended::Elapsed(started.elapsed()),
                    }
                }
            }
        }
    }

    /// Whether some counter's history already has two admitted writes of one value.
    fn shown_lost_update(&self) -> bool {
        self.histories.iter().any(History::shown_lost_update)
    }

    /// The counts so far, over every counter.
    fn verdict(&self) -> Verdict {
        let mut v = Verdict::default();
        for history in &self.histories {
            v.merge(history.verdict());
        }
        v
    }

    fn progress(&self, elapsed: Duration, duration: Duration, extended: bool) -> Progress {
        let v = self.verdict();
        Progress {
            mode: self.mode,
            elapsed,
            duration,
            extended,
            cycles: v.cycles,
            writes_admitted: v.writes_admitted,
            writes_stale: v.writes_stale,
            writes_unknown: v.writes_unknown,
            faults: self.counts.tally(),
            paused_now: self.pauser.paused_now(),
        }
    }

    /// A worker that exited while the run was going: the run is invalid.
    fn exited_early(&mut self) -> Option<String> {
        for (i, w) in self.workers.iter_mut().enumerate() {
            if let Some(status) = w.exited() {
                return Some(format!(
                    "worker {i} exited during the run ({status}): {}",
                    w.stderr_tail()
                ));
            }
        }
        None
    }

    /// Continues stopped workers, asks every worker to stop and records what they report
    /// while they finish the cycle they are in; kills those that take too long.
    async fn drain(&mut self) {
        self.pauser.release_all();
        for w in &mut self.workers {
            w.ask_to_stop();
        }
        let s = self.settings;
        let grace = s.op_timeout * 4 + s.ttl * 4 + Duration::from_secs(2);
        let drained = timeout(grace, async {
            while let Some((worker, stamped)) = self.events.recv().await {
                self.observe_one(worker, &stamped);
            }
        })
        .await;
        if drained.is_err() {
            for w in &mut self.workers {
                w.kill();
            }
            while let Ok(Some((worker, stamped))) =
                timeout(Duration::from_secs(2), self.events.recv()).await
            {
                self.observe_one(worker, &stamped);
            }
        }
        for w in &mut self.workers {
            w.wait(Duration::from_secs(5)).await;
        }
    }

    /// Reads the final counters and checks each one's history against it.
    async fn check(mut self, elapsed: Duration) -> Result<RunReport> {
        let unanswered: Vec<usize> = self
            .seen
            .iter()
            .filter(|s| s.pending_write)
            .map(|s| s.resource)
            .collect();
        for resource in unanswered {
            if let Some(history) = self.histories.get_mut(resource) {
                history.note_unanswered_writes(1);
            }
        }
        // A request cut short may still be executing on the server; let it land before reading.
        sleep(Duration::from_millis(500)).await;
        let storage = self.cluster.storage().await?;
        let mut finals = Vec::with_capacity(self.resources.len());
        for (index, resource) in self.resources.iter().enumerate() {
            let invoked = clock::now_ns();
            let snapshot = storage.peek(resource).await?;
            let completed = clock::now_ns();
            let stored = match snapshot.and_then(|s| s.value) {
                None => None,
                Some(bytes) => Some(
                    std::str::from_utf8(&bytes)
                        .ok()
                        .and_then(|s| s.parse::<u64>().ok())
                        .ok_or_else(|| {
                            ChaosError::harness(format!(
                                "the counter {resource} holds something that is not a number"
                            ))
                        })?,
                ),
            };
            finals.push((index, stored, invoked, completed));
        }
        let mut verdict = Verdict::default();
        for (history, (_, stored, _, _)) in self.histories.into_iter().zip(&finals) {
            verdict.merge(&history.check(stored.unwrap_or(0), self.mode));
        }
        let history = self
            .recorder
            .finish(self.faults_from, finals, self.counts.spans());
        let operations = history.operations.clone();
        let budget = self.settings.search_budget;
        let linearizability =
            tokio::task::spawn_blocking(move || linearizability::check(&operations, budget))
                .await
                .map_err(|e| {
                    ChaosError::harness_from(format!("the history checker failed: {e}"), e)
                })?;
        Ok(RunReport {
            mode: self.mode,
            elapsed,
            verdict,
            faults: self.counts.tally(),
            linearizability,
            history,
        })
    }

    /// Records one event and tells the pauser what it needs to know.
    fn observe_one(&mut self, worker: usize, stamped: &Stamped) {
        let event = &stamped.event;
        self.recorder.record(worker, stamped);
        let Some(seen) = self.seen.get_mut(worker) else {
            return;
        };
        if let Event::Acquired { resource, .. } = event {
            seen.resource = (*resource).min(self.histories.len().saturating_sub(1));
        }
        if let Some(history) = self.histories.get_mut(seen.resource) {
            history.record(event);
        }
        match event {
            Event::Ready => seen.ready = true,
            Event::Read {
                outcome: Outcome::Admitted(_),
                ..
            } if self.mode == Mode::Fenced => self.pauser.on_read(worker),
            Event::Peek { .. } if self.mode == Mode::Control => self.pauser.on_read(worker),
            Event::WriteBegin { .. } => seen.pending_write = true,
            Event::Write { outcome, .. } => {
                seen.pending_write = false;
                let admitted = match outcome {
                    Outcome::Admitted(()) => Some(true),
                    Outcome::Stale { .. } => Some(false),
                    Outcome::Unknown { .. } => None,
                };
                self.pauser.on_write(worker, admitted);
            }
            _ => {}
        }
    }
}

impl Nemesis {
    /// Stops both schedules; the infrastructure schedule heals what it broke on the way out.
    async fn stop(self) -> Result<()> {
        let _ = self.stop.send(true);
        let _ = self.pauses.await;
        match self.infrastructure.await {
            Ok(healed) => healed,
            Err(e) => Err(ChaosError::harness_from(
                format!("the nemesis failed: {e}"),
                e,
            )),
        }
    }
}
