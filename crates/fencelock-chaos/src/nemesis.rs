//! The nemesis: pauses lock holders with SIGSTOP, kills and restarts redis-server nodes and
//! etcd members, partitions the network through the fault proxies and ends Postgres sessions.
//!
//! Two schedules run side by side. The pauser arms itself every ttl/2 to 3 x ttl and then stops
//! the next worker that reports a successful read (so the pause lands between its read and its
//! write) for 1 to 5 times the ttl. The infrastructure schedule waits 2 to 6 x ttl (at least
//! 0.5 to 1.5 s), then runs one episode of a kind drawn among those enabled (kill, partition,
//! terminate) for 1 to 4 x ttl, and heals it before the next gap. Kinds are drawn as from a
//! shuffled deck, refilled when empty, so every enabled kind comes within as many episodes as
//! there are kinds, even in a short run (etcd's whole-second ttl leaves room for few).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use rand::seq::{IndexedRandom, SliceRandom};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock;
use crate::cluster::Cluster;
use crate::config::FaultKind;
use crate::error::{ChaosError, Result};
use crate::history::FaultSpan;
use crate::process::Stoppable;

/// What the nemesis did in one run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct FaultTally {
    /// Holders stopped with SIGSTOP, each for at least the ttl.
    pub pauses: u64,
    /// Paused holders whose write, once continued, was refused as stale.
    pub paused_writes_refused: u64,
    /// Paused holders whose write was still admitted (nobody took the lock meanwhile).
    pub paused_writes_admitted: u64,
    /// Kill episodes (each kills one node, or a minority of Redlock nodes).
    pub kill_episodes: u64,
    /// Nodes killed over every kill episode.
    pub nodes_killed: u64,
    /// Partition episodes that delayed traffic.
    pub partition_delay: u64,
    /// Partition episodes that swallowed traffic.
    pub partition_blackhole: u64,
    /// Partition episodes that cut connections and refused new ones.
    pub partition_reset: u64,
    /// Terminate episodes.
    pub terminate_episodes: u64,
    /// Server sessions ended over every terminate episode.
    pub sessions_terminated: u64,
}

impl FaultTally {
    /// Partition episodes of every kind.
    pub fn partitions(&self) -> u64 {
        self.partition_delay + self.partition_blackhole + self.partition_reset
    }
}

/// What the nemesis did so far, counted from several tasks, and when.
#[derive(Debug, Default)]
pub(crate) struct FaultCounts {
    /// Every fault, from start to heal, in monotonic nanoseconds.
    spans: Mutex<Vec<FaultSpan>>,
    pauses: AtomicU64,
    paused_writes_refused: AtomicU64,
    paused_writes_admitted: AtomicU64,
    kill_episodes: AtomicU64,
    nodes_killed: AtomicU64,
    partition_delay: AtomicU64,
    partition_blackhole: AtomicU64,
    partition_reset: AtomicU64,
    terminate_episodes: AtomicU64,
    sessions_terminated: AtomicU64,
}

impl FaultCounts {
    fn bump(counter: &AtomicU64, by: u64) {
        counter.fetch_add(by, Ordering::Relaxed);
    }

    fn span(&self, kind: FaultKind, worker: Option<usize>, label: String, start_ns: u64) {
        lock(&self.spans).push(FaultSpan {
            kind,
            worker,
            label,
            start_ns,
            end_ns: clock::now_ns(),
        });
    }

    /// The faults so far, from start to heal.
    pub(crate) fn spans(&self) -> Vec<FaultSpan> {
        lock(&self.spans).clone()
    }

    /// The counts now.
    pub(crate) fn tally(&self) -> FaultTally {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        FaultTally {
            pauses: get(&self.pauses),
            paused_writes_refused: get(&self.paused_writes_refused),
            paused_writes_admitted: get(&self.paused_writes_admitted),
            kill_episodes: get(&self.kill_episodes),
            nodes_killed: get(&self.nodes_killed),
            partition_delay: get(&self.partition_delay),
            partition_blackhole: get(&self.partition_blackhole),
            partition_reset: get(&self.partition_reset),
            terminate_episodes: get(&self.terminate_episodes),
            sessions_terminated: get(&self.sessions_terminated),
        }
    }
}

/// Which faults apply to `cluster`; an error names the first that does not.
pub(crate) fn check_applicable(faults: &[FaultKind], cluster: &Cluster) -> Result<()> {
    for fault in faults {
        match fault {
            FaultKind::Partition if cluster.in_process.is_some() => {
                return Err(ChaosError::config(
                    "the partition fault needs servers reached over the network: an \
                     in-process backend (memory://) only takes the pause fault",
                ));
            }
            // A backend that names no server (an out-of-tree file backend, say) has nothing
            // to put a proxy in front of: a run would inject no partition and still pass.
            FaultKind::Partition if cluster.proxies.is_empty() => {
                return Err(ChaosError::config(format!(
                    "the partition fault needs servers reached over the network, and {} names \
                     none to put a fault proxy in front of: use --faults pause (or kill with \
                     --spawn) for it",
                    cluster.described
                )));
            }
            FaultKind::Pause | FaultKind::Partition => {}
            FaultKind::Kill if cluster.spawned.is_none() => {
                return Err(ChaosError::config(format!(
                    "the kill fault needs servers the run started itself: use --spawn \
                     SCHEME[:N] instead of --backend (servers you run are never killed; \
                     schemes that can start servers: {})",
                    fencelock::spec::spawnable()
                )));
            }
            // Servers that come back without their data (an emulator that keeps everything in
            // memory) offer nothing to kill: a run would inject no kill and still pass.
            FaultKind::Kill
                if cluster
                    .spawned
                    .as_ref()
                    .is_some_and(|servers| servers.nodes() == 0 || servers.kill_at_most() == 0) =>
            {
                return Err(ChaosError::config(format!(
                    "the kill fault needs spawned servers that come back with their data after \
                     a kill, and {} has none: use --faults pause,partition for it",
                    cluster.described
                )));
            }
            FaultKind::Kill => {}
            FaultKind::Terminate if cluster.faults.is_none() => {
                return Err(ChaosError::config(
                    "the terminate fault ends the workers' server sessions, which only a backend \
                     whose server can end them offers (of the built-in ones, postgres:// \
                     backends only)",
                ));
            }
            FaultKind::Terminate => {}
        }
    }
    Ok(())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn between(low: Duration, high: Duration) -> Duration {
    if high <= low {
        return low;
    }
    let span = u64::try_from((high - low).as_micros()).unwrap_or(u64::MAX);
    low + Duration::from_micros(rand::random_range(0..=span))
}

/// A pid of 0 (a worker already reaped) would signal the whole process group.
fn pid(pid: u32) -> Option<Pid> {
    i32::try_from(pid)
        .ok()
        .filter(|p| *p > 0)
        .map(Pid::from_raw)
}

/// Stops a worker: SIGSTOP for a process, its gate for a thread. `false` when it could not.
fn stop(worker: &Stoppable) -> bool {
    match worker {
        Stoppable::Process(p) => pid(*p).is_some_and(|p| kill(p, Signal::SIGSTOP).is_ok()),
        Stoppable::Thread(gate) => gate.close(),
    }
}

/// Continues a stopped worker.
fn resume(worker: &Stoppable) {
    match worker {
        Stoppable::Process(p) => {
            if let Some(p) = pid(*p) {
                let _ = kill(p, Signal::SIGCONT);
            }
        }
        Stoppable::Thread(gate) => gate.open(),
    }
}

/// Stops lock holders between their read and their write.
#[derive(Debug)]
pub(crate) struct Pauser {
    ttl: Duration,
    workers: Vec<Stoppable>,
    armed: AtomicBool,
    /// Workers stopped right now, with when they were stopped.
    paused: Mutex<HashMap<usize, (JoinHandle<()>, u64)>>,
    /// Workers stopped after a read whose write has not been reported yet.
    resumed: Mutex<HashSet<usize>>,
    counts: Arc<FaultCounts>,
    enabled: bool,
}

impl Pauser {
    pub(crate) fn new(
        workers: Vec<Stoppable>,
        ttl: Duration,
        counts: Arc<FaultCounts>,
        enabled: bool,
    ) -> Arc<Self> {
        Arc::new(Pauser {
            ttl,
            workers,
            armed: AtomicBool::new(false),
            paused: Mutex::new(HashMap::new()),
            resumed: Mutex::new(HashSet::new()),
            counts,
            enabled,
        })
    }

    /// Workers stopped right now.
    pub(crate) fn paused_now(&self) -> usize {
        lock(&self.paused).len()
    }

    /// Arms the pauser every ttl/2 to 3 x ttl until `stop`.
    pub(crate) async fn schedule(self: Arc<Self>, mut stop: watch::Receiver<bool>) {
        if !self.enabled {
            return;
        }
        loop {
            let gap = between(self.ttl / 2, self.ttl * 3);
            tokio::select! {
                _ = stop.wait_for(|stopped| *stopped) => return,
                () = tokio::time::sleep(gap) => self.armed.store(true, Ordering::Relaxed),
            }
        }
    }

    /// Worker `worker` just read the counter: stop it now if the pauser is armed.
    pub(crate) fn on_read(self: &Arc<Self>, worker: usize) {
        if !self.enabled || !self.armed.load(Ordering::Relaxed) {
            return;
        }
        let Some(target) = self.workers.get(worker).cloned() else {
            return;
        };
        let mut paused = lock(&self.paused);
        // Keep one worker running so the run makes progress while others are stopped.
        if paused.contains_key(&worker) || paused.len() + 1 >= self.workers.len().max(2) {
            return;
        }
        if !stop(&target) {
            return;
        }
        let stopped_at = clock::now_ns();
        self.armed.store(false, Ordering::Relaxed);
        FaultCounts::bump(&self.counts.pauses, 1);
        lock(&self.resumed).insert(worker);
        let hold = between(self.ttl, self.ttl * 5);
        let this = Arc::clone(self);
        let task = tokio::spawn(async move {
            tokio::time::sleep(hold).await;
            resume(&target);
            if lock(&this.paused).remove(&worker).is_some() {
                this.counts
                    .span(FaultKind::Pause, Some(worker), "SIGSTOP".into(), stopped_at);
            }
        });
        paused.insert(worker, (task, stopped_at));
    }

    /// Worker `worker` reported the write of its cycle: admitted, refused or unknown.
    pub(crate) fn on_write(&self, worker: usize, admitted: Option<bool>) {
        if !lock(&self.resumed).remove(&worker) {
            return;
        }
        match admitted {
            Some(false) => FaultCounts::bump(&self.counts.paused_writes_refused, 1),
            Some(true) => FaultCounts::bump(&self.counts.paused_writes_admitted, 1),
            None => {}
        }
    }

    /// Continues every stopped worker now.
    pub(crate) fn release_all(&self) {
        for (worker, (task, stopped_at)) in lock(&self.paused).drain() {
            task.abort();
            if let Some(target) = self.workers.get(worker) {
                resume(target);
            }
            self.counts
                .span(FaultKind::Pause, Some(worker), "SIGSTOP".into(), stopped_at);
        }
    }
}

/// Runs infrastructure episodes until `stop`, then heals everything.
pub(crate) async fn infrastructure(
    cluster: Arc<Cluster>,
    kinds: Vec<FaultKind>,
    ttl: Duration,
    counts: Arc<FaultCounts>,
    mut stop: watch::Receiver<bool>,
) -> Result<()> {
    let mut outcome = Ok(());
    if !kinds.is_empty() {
        let floor = Duration::from_millis(100);
        let mut deck = Vec::with_capacity(kinds.len());
        loop {
            let gap = between((ttl * 2).max(floor * 5), (ttl * 6).max(floor * 15));
            tokio::select! {
                _ = stop.wait_for(|stopped| *stopped) => break,
                () = tokio::time::sleep(gap) => {}
            }
            if deck.is_empty() {
                deck.clone_from(&kinds);
                deck.shuffle(&mut rand::rng());
            }
            let Some(kind) = deck.pop() else {
                break;
            };
            let hold = between(ttl.max(floor), (ttl * 4).max(floor * 4));
            let episode = match kind {
                FaultKind::Kill => kill_episode(&cluster, hold, &counts, &mut stop).await,
                FaultKind::Partition => {
                    partition_episode(&cluster, ttl, hold, &counts, &mut stop).await;
                    Ok(())
                }
                FaultKind::Terminate => terminate_episode(&cluster, &counts).await,
                FaultKind::Pause => Ok(()),
            };
            if let Err(e) = episode {
                outcome = Err(e);
                break;
            }
        }
    }
    let healed = cluster.heal().await;
    outcome.and(healed)
}

/// Waits `hold` or until `stop`.
async fn hold_for(hold: Duration, stop: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = stop.wait_for(|stopped| *stopped) => {}
        () = tokio::time::sleep(hold) => {}
    }
}

/// Kills one node (one node) or a minority (Redlock, etcd) with SIGKILL, waits, restarts
/// them. When one etcd member goes, it is the leader at least half of the time.
async fn kill_episode(
    cluster: &Cluster,
    hold: Duration,
    counts: &FaultCounts,
    stop: &mut watch::Receiver<bool>,
) -> Result<()> {
    let Some(servers) = &cluster.spawned else {
        return Ok(());
    };
    let n = servers.nodes();
    if n == 0 {
        return Ok(());
    }
    let victims = rand::random_range(1..=servers.kill_at_most().clamp(1, n));
    let leader = if n > 1 { servers.leader().await } else { None };
    let mut chosen = Vec::with_capacity(victims);
    if let Some(leader) = leader.filter(|_| victims == 1 && rand::random_bool(0.5)) {
        chosen.push(leader);
    } else {
        chosen = rand::seq::index::sample(&mut rand::rng(), n, victims).into_vec();
    }
    let leader = leader.is_some_and(|leader| chosen.contains(&leader));
    let started = clock::now_ns();
    for &node in &chosen {
        servers.kill(node).await?;
    }
    FaultCounts::bump(&counts.kill_episodes, 1);
    FaultCounts::bump(&counts.nodes_killed, chosen.len() as u64);
    hold_for(hold, stop).await;
    for &node in &chosen {
        servers.restart(node).await?;
    }
    let label = format!(
        "kill -9 {} of {n} nodes{}",
        chosen.len(),
        if leader { ", the leader" } else { "" }
    );
    counts.span(FaultKind::Kill, None, label, started);
    Ok(())
}

/// Slows, swallows or cuts the traffic to some servers for `hold`, then heals.
async fn partition_episode(
    cluster: &Cluster,
    ttl: Duration,
    hold: Duration,
    counts: &FaultCounts,
    stop: &mut watch::Receiver<bool>,
) {
    let proxies = &cluster.proxies;
    if proxies.is_empty() {
        return;
    }
    let count = rand::random_range(1..=proxies.len());
    let chosen: Vec<_> = proxies.sample(&mut rand::rng(), count).collect();
    let started = clock::now_ns();
    let what = match rand::random_range(0..3u8) {
        0 => {
            let delay = between(ttl / 4, ttl);
            for p in &chosen {
                p.set_delay(delay);
            }
            FaultCounts::bump(&counts.partition_delay, 1);
            format!("delay {}ms", delay.as_millis())
        }
        1 => {
            for p in &chosen {
                p.set_blackhole(true);
            }
            FaultCounts::bump(&counts.partition_blackhole, 1);
            "blackhole".to_owned()
        }
        _ => {
            for p in &chosen {
                p.set_reset(true);
            }
            FaultCounts::bump(&counts.partition_reset, 1);
            "reset".to_owned()
        }
    };
    hold_for(hold, stop).await;
    for p in &chosen {
        p.heal();
    }
    let label = format!("{what}, {} of {} servers", chosen.len(), proxies.len());
    counts.span(FaultKind::Partition, None, label, started);
}

/// Ends a random half of the workers' server sessions (all of them one time in three).
async fn terminate_episode(cluster: &Cluster, counts: &FaultCounts) -> Result<()> {
    let Some(faults) = &cluster.faults else {
        return Ok(());
    };
    let started = clock::now_ns();
    let everyone = rand::random_range(0..3u8) == 0;
    let ended = faults
        .end_sessions(everyone)
        .await
        .map_err(|e| ChaosError::harness(format!("{} failed: {e}", faults.label())))?;
    FaultCounts::bump(&counts.terminate_episodes, 1);
    FaultCounts::bump(&counts.sessions_terminated, ended);
    let label = format!("{}, {ended} sessions", faults.label());
    counts.span(FaultKind::Terminate, None, label, started);
    Ok(())
}
