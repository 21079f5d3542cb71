//! `fencelock chaos`: Jepsen-style fault injection against a real backend, with a checker and a
//! negative control (DESIGN section 6).
//!
//! Worker processes (this binary, `fencelock worker`) loop over lock, fenced read, work, fenced
//! write of the counter + 1, release, and report every step on stdout. The nemesis pauses
//! holders with SIGSTOP past their ttl, kills and restarts redis-server nodes this command
//! started, partitions the network through fault proxies and ends Postgres sessions. The
//! checker then reads the history and the final counter: no admitted write lost, no fence
//! admitted after a newer one.
//!
//! The negative control repeats the workload and the faults against the same storage without
//! fencing: every worker reads with `peek` and writes with one shared fence (the largest token
//! and one fixed owner), which the storage always admits. It must show lost updates, or the
//! run proves nothing and is reported invalid.

mod checker;
mod cluster;
mod events;
mod nemesis;
mod report;
pub(crate) mod worker;

use std::collections::VecDeque;
use std::io::IsTerminal;
use std::process::{ExitCode, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use fencelock::{Error, LockKey, OwnerId, Result};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};
use tokio::sync::{mpsc, watch};
use tokio::time::{Instant, sleep, timeout};

use self::checker::{History, Verdict};
use self::cluster::{Cluster, SpawnRedis};
use self::events::{Event, Outcome};
use self::nemesis::{FaultCounts, FaultKind, Pauser};
use crate::parse_duration;

/// Exit code: the fenced run broke a safety rule.
const VIOLATIONS: u8 = 3;
/// Exit code: the negative control found no lost update, so the run proves nothing.
const CONTROL_FOUND_NOTHING: u8 = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Persistence {
    /// AOF with appendfsync always: counters survive kill -9.
    Always,
    /// No persistence: a killed node comes back with its token counters gone.
    None,
}

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Backend spec of servers you run: redis://, redlock://, postgres://...?backend=lease|advisory.
    /// memory:// is refused: it cannot be shared between worker processes.
    #[arg(
        long,
        required_unless_present = "spawn_redis",
        conflicts_with = "spawn_redis"
    )]
    backend: Option<String>,
    /// Start N redis-server processes instead (N = 1: redis://, N > 1: redlock://), so that the
    /// kill fault can kill -9 and restart them. The counter lives on a separate persistent node
    /// that is never killed, unless there is one node with --persistence always.
    #[arg(long, value_name = "N")]
    spawn_redis: Option<usize>,
    /// Persistence of the spawned lock nodes.
    #[arg(long, value_enum, default_value = "always", requires = "spawn_redis")]
    persistence: Persistence,
    /// Worker processes.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u16).range(2..=256))]
    workers: u16,
    /// Length of the fenced run.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    duration: Duration,
    /// Length of the negative control run [default: a third of --duration, at least 5s, at
    /// most --duration].
    #[arg(long, value_parser = parse_duration)]
    control_duration: Option<Duration>,
    /// Faults to inject, comma separated: pause, kill, partition, terminate.
    #[arg(long, value_delimiter = ',', default_value = "pause", value_parser = clap::value_parser!(FaultKind))]
    faults: Vec<FaultKind>,
    /// Lease ttl of the workers' locks (never renewed).
    #[arg(long, default_value = "200ms", value_parser = parse_duration)]
    ttl: Duration,
    /// Sleep between each cycle's read and write [default: ttl / 10].
    #[arg(long, value_parser = parse_duration)]
    work: Option<Duration>,
    /// The longest a worker waits for one storage or lock call before counting it unknown.
    #[arg(long, default_value = "1s", value_parser = parse_duration, hide = true)]
    op_timeout: Duration,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

impl clap::builder::ValueParserFactory for FaultKind {
    type Parser = clap::builder::ValueParser;
    fn value_parser() -> Self::Parser {
        clap::builder::ValueParser::new(|s: &str| s.parse::<FaultKind>())
    }
}

/// Settings shared by both runs.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) workers: u16,
    pub(crate) ttl: Duration,
    pub(crate) work: Duration,
    pub(crate) op_timeout: Duration,
    pub(crate) faults: Vec<FaultKind>,
    pub(crate) tag: String,
}

/// What one run (fenced or control) did.
#[derive(Debug, Clone)]
pub(crate) struct RunReport {
    pub(crate) elapsed: Duration,
    pub(crate) verdict: Verdict,
    pub(crate) pauses: u64,
    pub(crate) paused_writes_refused: u64,
    pub(crate) paused_writes_admitted: u64,
    pub(crate) kill_episodes: u64,
    pub(crate) nodes_killed: u64,
    pub(crate) partitions: [u64; 3],
    pub(crate) terminate_episodes: u64,
    pub(crate) sessions_terminated: u64,
}

pub(crate) async fn run(args: Args) -> Result<ExitCode> {
    if args.ttl < Duration::from_millis(10) {
        return Err(Error::config("--ttl must be at least 10ms"));
    }
    if args.duration.is_zero() {
        return Err(Error::config("--duration must be greater than zero"));
    }
    let mut faults = args.faults.clone();
    faults.dedup();
    let tag = format!("{}-{:08x}", std::process::id(), rand::random::<u32>());
    let proxied = faults.contains(&FaultKind::Partition);
    let cluster = match (&args.backend, args.spawn_redis) {
        (_, Some(nodes)) => {
            Cluster::spawn_redis(
                SpawnRedis {
                    nodes,
                    persistent: args.persistence == Persistence::Always,
                },
                proxied,
            )
            .await?
        }
        (Some(spec), None) => Cluster::external(spec, &tag, proxied).await?,
        (None, None) => return Err(Error::config("give --backend SPEC or --spawn-redis N")),
    };
    nemesis::check_applicable(&faults, &cluster)?;
    // Connecting once up front checks the spec (and migrates a Postgres schema) before any
    // worker starts.
    cluster.direct_storage.connect().await?;
    let settings = Settings {
        workers: args.workers,
        ttl: args.ttl,
        work: args.work.unwrap_or(args.ttl / 10),
        op_timeout: args.op_timeout,
        faults,
        tag,
    };
    let control_duration = args.control_duration.unwrap_or_else(|| {
        (args.duration / 3)
            .max(Duration::from_secs(5))
            .min(args.duration)
    });
    let cluster = Arc::new(cluster);
    let both = async {
        let fenced = run_phase(&cluster, &settings, true, args.duration).await?;
        let control = run_phase(&cluster, &settings, false, control_duration).await?;
        Ok::<_, Error>((fenced, control))
    };
    let (fenced, control) = tokio::select! {
        done = both => done?,
        () = interrupted() => {
            eprintln!("fencelock: chaos interrupted; its workers and servers are stopped");
            return Ok(ExitCode::from(crate::exit::INTERRUPTED));
        }
    };
    let outcome = report::Outcome::of(&fenced, &control);
    if args.json {
        println!(
            "{}",
            report::json(&cluster, &settings, &fenced, &control, outcome)
        );
    } else {
        print!(
            "{}",
            report::text(&cluster, &settings, &fenced, &control, outcome)
        );
    }
    Ok(match outcome {
        report::Outcome::Pass => ExitCode::SUCCESS,
        report::Outcome::Violations => ExitCode::from(VIOLATIONS),
        report::Outcome::ControlFoundNothing => ExitCode::from(CONTROL_FOUND_NOTHING),
    })
}

/// Completes on SIGINT or SIGTERM. Returning from `run` then drops the workers (killed on
/// drop) and the spawned servers (killed on drop).
async fn interrupted() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// A worker process and what it said on stderr lately.
struct WorkerProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    stderr: Arc<Mutex<VecDeque<String>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WorkerProcess {
    fn stderr_tail(&self) -> String {
        lock(&self.stderr)
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join(" | ")
    }
}

fn spawn_worker(
    cluster: &Cluster,
    settings: &Settings,
    key: &str,
    resource: &str,
    control_owner: Option<OwnerId>,
    index: usize,
    events: mpsc::UnboundedSender<(usize, Event)>,
) -> Result<WorkerProcess> {
    let exe = std::env::current_exe().map_err(|e| Error::InvalidConfig {
        message: format!("cannot find this program to start workers: {e}"),
        source: Some(Box::new(e)),
    })?;
    let mut command = Command::new(exe);
    command
        .arg("worker")
        .arg("--backend")
        .arg(worker_backend(cluster, settings))
        .args(["--key", key, "--resource", resource])
        .arg("--ttl")
        .arg(format!("{}us", settings.ttl.as_micros()))
        .arg("--work")
        .arg(format!("{}us", settings.work.as_micros()))
        .arg("--op-timeout")
        .arg(format!("{}us", settings.op_timeout.as_micros()));
    if let Some(storage) = &cluster.worker_storage {
        command.arg("--storage").arg(storage);
    }
    if let Some(owner) = control_owner {
        command.arg("--control-owner").arg(owner.to_string());
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| Error::Unavailable {
            backend: "chaos",
            message: format!("cannot start worker process: {e}"),
            source: Some(Box::new(e)),
        })?;
    let stdin = child.stdin.take();
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
                if tail.len() == 5 {
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

/// The lock service spec for workers; Postgres sessions are tagged with an application name
/// so that the terminate fault ends only this run's sessions.
fn worker_backend(cluster: &Cluster, settings: &Settings) -> String {
    match &cluster.pg {
        Some(pg) => {
            let sep = if cluster.worker_backend.contains('?') {
                '&'
            } else {
                '?'
            };
            let _ = settings;
            format!(
                "{}{sep}application_name={}",
                cluster.worker_backend, pg.application_name
            )
        }
        None => cluster.worker_backend.clone(),
    }
}

/// Per-worker bookkeeping in the coordinator.
#[derive(Debug, Default, Clone)]
struct Seen {
    ready: bool,
    /// A write sent but not answered yet.
    pending_write: bool,
}

async fn run_phase(
    cluster: &Arc<Cluster>,
    settings: &Settings,
    fenced: bool,
    duration: Duration,
) -> Result<RunReport> {
    let name = if fenced { "fenced" } else { "control" };
    let base = format!("chaos/{}/{name}", settings.tag);
    let key = format!("{base}/lock");
    let resource = format!("{base}/counter");
    let resource_key = LockKey::new(&resource)?;
    let control_owner = (!fenced).then(OwnerId::random);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut workers = Vec::with_capacity(usize::from(settings.workers));
    for index in 0..usize::from(settings.workers) {
        workers.push(spawn_worker(
            cluster,
            settings,
            &key,
            &resource,
            control_owner,
            index,
            tx.clone(),
        )?);
    }
    drop(tx);
    let mut seen = vec![Seen::default(); workers.len()];
    let mut history = History::default();
    let counts = Arc::new(FaultCounts::default());
    let pids: Vec<u32> = workers.iter().map(|w| w.child.id().unwrap_or(0)).collect();
    let pauser = Pauser::new(
        pids,
        settings.ttl,
        counts.clone(),
        settings.faults.contains(&FaultKind::Pause),
    );

    // Wait until every worker is connected.
    let ready_by = Instant::now() + Duration::from_secs(30);
    while seen.iter().any(|s| !s.ready) {
        match timeout_at_or_none(ready_by, rx.recv()).await {
            Some(Some((i, event))) => observe(&mut history, &mut seen, &pauser, i, &event, fenced),
            _ => {
                let mut tails: Vec<String> = workers
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| !seen[*i].ready)
                    .map(|(_, w)| w.stderr_tail())
                    .collect();
                tails.sort();
                tails.dedup();
                return Err(Error::Unavailable {
                    backend: "chaos",
                    message: format!(
                        "workers did not connect to {} within 30s: {}",
                        cluster.described,
                        tails.join("; ")
                    ),
                    source: None,
                });
            }
        }
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    let pause_task = tokio::spawn(pauser.clone().schedule(stop_rx.clone()));
    let infra_kinds: Vec<FaultKind> = settings
        .faults
        .iter()
        .copied()
        .filter(|k| *k != FaultKind::Pause)
        .collect();
    let infra_task = tokio::spawn(nemesis::infrastructure(
        cluster.clone(),
        infra_kinds,
        settings.ttl,
        counts.clone(),
        stop_rx,
    ));

    let started = Instant::now();
    let deadline = started + duration;
    let mut progress = tokio::time::interval(Duration::from_secs(1));
    progress.tick().await;
    let tty = std::io::stderr().is_terminal();
    let mut early_exit = None;
    loop {
        tokio::select! {
            received = rx.recv() => match received {
                Some((i, event)) => observe(&mut history, &mut seen, &pauser, i, &event, fenced),
                None => break,
            },
            _ = progress.tick() => {
                let line = progress_line(name, started.elapsed(), duration, &history, &counts, pauser.paused_now());
                if tty {
                    eprint!("\r\x1b[2K{line}");
                } else {
                    eprintln!("{line}");
                }
                if early_exit.is_none() {
                    early_exit = exited_early(&mut workers);
                    if early_exit.is_some() {
                        break;
                    }
                }
            }
            () = tokio::time::sleep_until(deadline) => break,
        }
    }
    if tty {
        eprintln!();
    }
    let elapsed = started.elapsed();

    // Stop the nemesis (it heals what it broke), continue stopped workers, close their stdin,
    // and let them finish the cycle they are in.
    let _ = stop_tx.send(true);
    let _ = pause_task.await;
    let healed = infra_task.await;
    pauser.release_all();
    for w in &mut workers {
        w.stdin = None;
    }
    let grace = settings.op_timeout * 4 + settings.ttl * 4 + Duration::from_secs(2);
    let drained = timeout(grace, async {
        while let Some((i, event)) = rx.recv().await {
            observe(&mut history, &mut seen, &pauser, i, &event, fenced);
        }
    })
    .await;
    if drained.is_err() {
        for w in &mut workers {
            let _ = w.child.start_kill();
        }
        while let Ok(Some((i, event))) = timeout(Duration::from_secs(2), rx.recv()).await {
            observe(&mut history, &mut seen, &pauser, i, &event, fenced);
        }
    }
    for w in &mut workers {
        let _ = timeout(Duration::from_secs(5), w.child.wait()).await;
    }
    match healed {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(e),
        Err(e) => {
            return Err(Error::Unavailable {
                backend: "chaos",
                message: format!("the nemesis failed: {e}"),
                source: None,
            });
        }
    }
    if let Some(message) = early_exit {
        return Err(Error::Unavailable {
            backend: "chaos",
            message,
            source: None,
        });
    }
    history.note_unanswered_writes(seen.iter().filter(|s| s.pending_write).count() as u64);

    // A request cut short may still be executing on the server; let it land before reading.
    sleep(Duration::from_millis(500)).await;
    let storage = cluster.direct_storage.connect().await?.storage;
    let snapshot = storage.peek(&resource_key).await?;
    let final_value = match snapshot.and_then(|s| s.value) {
        None => 0,
        Some(bytes) => std::str::from_utf8(&bytes)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| Error::Backend {
                backend: "chaos",
                message: format!("the counter {resource} holds something that is not a number"),
                source: None,
            })?,
    };
    let verdict = history.check(final_value, fenced);
    let get = FaultCounts::get;
    Ok(RunReport {
        elapsed,
        verdict,
        pauses: get(&counts.pauses),
        paused_writes_refused: get(&counts.paused_writes_refused),
        paused_writes_admitted: get(&counts.paused_writes_admitted),
        kill_episodes: get(&counts.kill_episodes),
        nodes_killed: get(&counts.nodes_killed),
        partitions: [
            get(&counts.partition_delay),
            get(&counts.partition_blackhole),
            get(&counts.partition_reset),
        ],
        terminate_episodes: get(&counts.terminate_episodes),
        sessions_terminated: get(&counts.sessions_terminated),
    })
}

async fn timeout_at_or_none<T>(at: Instant, f: impl Future<Output = T>) -> Option<T> {
    tokio::time::timeout_at(at, f).await.ok()
}

/// A worker that exited while the run was going: the run is invalid.
fn exited_early(workers: &mut [WorkerProcess]) -> Option<String> {
    for (i, w) in workers.iter_mut().enumerate() {
        if let Ok(Some(status)) = w.child.try_wait() {
            return Some(format!(
                "worker {i} exited during the run ({status}): {}",
                w.stderr_tail()
            ));
        }
    }
    None
}

fn observe(
    history: &mut History,
    seen: &mut [Seen],
    pauser: &Arc<Pauser>,
    worker: usize,
    event: &Event,
    fenced: bool,
) {
    history.record(event);
    let Some(seen) = seen.get_mut(worker) else {
        return;
    };
    match event {
        Event::Ready => seen.ready = true,
        Event::Read {
            outcome: Outcome::Admitted(_),
            ..
        } if fenced => pauser.on_read(worker),
        Event::Peek { .. } if !fenced => pauser.on_read(worker),
        Event::WriteBegin { .. } => seen.pending_write = true,
        Event::Write { outcome, .. } => {
            seen.pending_write = false;
            let admitted = match outcome {
                Outcome::Admitted(()) => Some(true),
                Outcome::Stale { .. } => Some(false),
                Outcome::Unknown { .. } => None,
            };
            pauser.on_write(worker, admitted);
        }
        _ => {}
    }
}

fn progress_line(
    name: &str,
    elapsed: Duration,
    duration: Duration,
    history: &History,
    counts: &FaultCounts,
    paused_now: usize,
) -> String {
    let v = history.verdict();
    let get = FaultCounts::get;
    format!(
        "chaos {name} {:>4}s/{}s: {} cycles, writes {} admitted / {} stale / {} unknown; \
         pauses {} (now {paused_now}), kills {}, partitions {}, terminates {}",
        elapsed.as_secs(),
        duration.as_secs(),
        v.cycles,
        v.writes_admitted,
        v.writes_stale,
        v.writes_unknown,
        get(&counts.pauses),
        get(&counts.kill_episodes),
        counts.partitions(),
        get(&counts.terminate_episodes),
    )
}
