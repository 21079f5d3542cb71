//! One chaos worker, and the configuration its coordinator hands it.
//!
//! Loops until its stdin closes: take a grant of the workload's kind, read a counter, "work",
//! write counter + 1, release; every step is reported on stdout as one [`Event`] line. In the
//! fenced run the read and the write are fenced with the grant's fence. In the control run the
//! read is an unfenced `peek` and every worker writes with the same control fence, which the
//! storage always admits: the storage then behaves like one without fencing, while everything
//! else (lock, faults, timings) stays the same.
//!
//! The grant per [`Workload`]: the exclusive lock (watchdog off, so a paused worker renews
//! nothing); a semaphore permit (watchdog off), whose slot names the counter; a campaign for
//! the election (watchdog on, as a leader holds it: a paused leader stops renewing and loses
//! it), under which the leader increments the counter up to [`TERM_WRITES`] times while it
//! still believes it leads; a writer's lock (watchdog off) or a reader's, under which the
//! reader reads the counter twice with the shared read fence, the work between, and rests
//! as long again after its release (readers that came straight back would keep their read
//! phase alive for good, and the writers out: readers have no writer preference, DESIGN.md
//! section 4.1).
//!
//! A worker for an in-process backend runs as a thread of the coordinator
//! ([`serve_in_process`]) and sends its events on a channel instead.
//!
//! The configuration is the first line of stdin, as JSON. It carries the backend spec with its
//! credentials, so it travels through the pipe, never on the command line (which every user of
//! the machine can read).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fencelock::spec::{BackendSpec, StorageSpec};
use fencelock::{
    Backoff, Election, Error, Fence, FencedStorage, FencingToken, LockBackend, LockGuard, LockKey,
    Locker, OwnerId, Result as LockResult, RwLocker, Semaphore,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::sync::mpsc;
use tokio::time::{sleep, timeout};

use crate::clock;
use crate::config::{Mode, Workload};
use crate::error::{ChaosError, Result};
use crate::events::{Event, Outcome, Stamped};

mod composite;

/// What one worker does; written by the coordinator as the first line of the worker's stdin.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WorkerConfig {
    /// The lock service's spec, credentials included.
    pub(crate) backend: String,
    /// Where the counter lives, when not in the lock service's own storage.
    pub(crate) storage: Option<String>,
    /// The lock's key (the semaphore's, the election's).
    pub(crate) key: String,
    /// The counters' resource names: one per semaphore slot, else one.
    pub(crate) resources: Vec<String>,
    /// What the worker does.
    pub(crate) workload: Workload,
    /// The worker's place in the run (a read/write lock's even workers write).
    pub(crate) index: usize,
    /// Lease ttl (never renewed).
    pub(crate) ttl: Duration,
    /// Sleep between the read and the write.
    pub(crate) work: Duration,
    /// The longest one storage or lock call may take before its outcome counts as unknown.
    pub(crate) op_timeout: Duration,
    /// Fenced or control.
    pub(crate) mode: Mode,
}

impl std::fmt::Debug for WorkerConfig {
    /// Without the specs, which carry credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerConfig")
            .field("key", &self.key)
            .field("resources", &self.resources)
            .field("workload", &self.workload)
            .field("index", &self.index)
            .field("ttl", &self.ttl)
            .field("work", &self.work)
            .field("op_timeout", &self.op_timeout)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl WorkerConfig {
    /// The line the worker reads.
    pub(crate) fn to_line(&self) -> Result<String> {
        let mut line = serde_json::to_string(self)
            .map_err(|e| ChaosError::harness_from("cannot encode the worker configuration", e))?;
        line.push('\n');
        Ok(line)
    }

    /// Reads the line back. The error never quotes the line: it holds credentials.
    fn from_line(line: &str) -> Result<Self> {
        serde_json::from_str(line).map_err(|e| {
            ChaosError::config(format!(
                "stdin does not start with a worker configuration ({:?} error at column {}); \
                 a worker is started by a chaos run, not by hand",
                e.classify(),
                e.column()
            ))
        })
    }
}

/// The most increments a leader makes in one term before it resigns, so that terms change
/// hands often even without faults.
pub(crate) const TERM_WRITES: u32 = 3;

/// The owner of the control fence: one for every worker, so the storage admits them all.
const CONTROL_OWNER: OwnerId = OwnerId::from_u128(0x00c0_471c_0000_0000_0000_0000_0000_0001);

/// The token of the control fence: the largest every storage can hold (Postgres keeps tokens
/// in a `bigint`), so the storage admits every control write.
const CONTROL_TOKEN: FencingToken = match FencingToken::new(i64::MAX as u64) {
    Some(token) => token,
    // Evaluated at compile time: i64::MAX is not zero.
    None => panic!("the control token is not zero"),
};

/// The fence every control write carries.
pub(crate) const CONTROL_FENCE: Fence = Fence::new(CONTROL_TOKEN, CONTROL_OWNER);

/// Where a worker's events go.
#[derive(Debug)]
pub(crate) enum Sink {
    /// Stdout, one line each: a worker process.
    Stdout,
    /// The coordinator's channel, tagged with the worker's index: a worker thread.
    Channel {
        index: usize,
        events: mpsc::UnboundedSender<(usize, Stamped)>,
    },
}

/// Writes events out; when the coordinator is gone the worker stops.
#[derive(Debug)]
struct Reporter {
    sink: Sink,
    gone: AtomicBool,
}

impl Reporter {
    /// Writes `event` stamped with the time now: before a call for a `*-begin` event, after
    /// it for its answer.
    fn emit(&self, event: &Event) {
        let stamped = Stamped {
            at: clock::now_ns(),
            event: event.clone(),
        };
        let sent = match &self.sink {
            Sink::Stdout => {
                let mut out = std::io::stdout().lock();
                writeln!(out, "{stamped}")
                    .and_then(|()| out.flush())
                    .is_ok()
            }
            Sink::Channel { index, events } => events.send((*index, stamped)).is_ok(),
        };
        if !sent {
            self.gone.store(true, Ordering::Relaxed);
        }
    }
}

/// Runs one worker process: reads its configuration from the first line of stdin, connects,
/// reports `ready`, and runs cycles until stdin closes (the coordinator's signal to stop,
/// and what its death looks like too) or stdout is gone.
///
/// This is what a program must do when a [`WorkerLauncher`](crate::WorkerLauncher) starts it;
/// the `fencelock` command does it in its hidden `worker` subcommand.
pub async fn serve_worker() -> Result<()> {
    let mut stdin = BufReader::new(tokio::io::stdin());
    let mut line = String::new();
    stdin
        .read_line(&mut line)
        .await
        .map_err(|e| ChaosError::harness_from(format!("cannot read stdin: {e}"), e))?;
    let config = WorkerConfig::from_line(&line)?;
    let connected = BackendSpec::parse(&config.backend)?.connect().await?;
    let storage = match &config.storage {
        Some(spec) => StorageSpec::parse(spec)?.connect().await?,
        None => connected.storage,
    };
    let stop = Arc::new(AtomicBool::new(false));
    tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut buf = [0u8; 64];
            while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {}
            stop.store(true, Ordering::Relaxed);
        }
    });
    let worker = Worker::new(&config, connected.backend, storage, Sink::Stdout).map_err(|e| e.0)?;
    worker.serve(&stop).await;
    Ok(())
}

/// Runs one worker on an in-process backend (`backend`, `storage`, shared by every worker
/// of the run) until `stop` is set or the coordinator is gone. A configuration the worker
/// cannot use is reported as an error event, and the worker ends.
pub(crate) async fn serve_in_process(
    config: WorkerConfig,
    backend: Arc<dyn LockBackend>,
    storage: Arc<dyn FencedStorage>,
    sink: Sink,
    stop: Arc<AtomicBool>,
) {
    match Worker::new(&config, backend, storage, sink) {
        Ok(worker) => worker.serve(&stop).await,
        Err((e, reporter)) => reporter.emit(&Event::Error {
            reason: format!("worker: {e}"),
        }),
    }
}

/// The grant a cycle takes, per workload.
enum Grant {
    Lock,
    Semaphore(Semaphore),
    Election(Election),
    Writer(RwLocker),
    Reader(RwLocker),
    /// The worker's set of composite member keys, in the order it asks for them, each with
    /// the index of its counter.
    Composite(Vec<(LockKey, usize)>),
}

struct Worker {
    locker: Locker,
    backend: Arc<dyn LockBackend>,
    storage: Arc<dyn FencedStorage>,
    grant: Grant,
    key: LockKey,
    resources: Vec<LockKey>,
    ttl: Duration,
    work: Duration,
    op_timeout: Duration,
    mode: Mode,
    reporter: Arc<Reporter>,
}

/// Runs `call` under the worker's time-out; `Err(reason)` when the outcome is unknown.
async fn bounded<T>(
    limit: Duration,
    call: impl Future<Output = LockResult<T>>,
) -> std::result::Result<LockResult<T>, String> {
    timeout(limit, call)
        .await
        .map_err(|_| format!("no answer within {limit:?}"))
}

fn counter(bytes: Option<Vec<u8>>) -> std::result::Result<Option<u64>, String> {
    match bytes {
        None => Ok(None),
        Some(bytes) => std::str::from_utf8(&bytes)
            .ok()
            .and_then(|s| s.parse().ok())
            .map(Some)
            .ok_or_else(|| {
                format!(
                    "the counter holds {} bytes that are not a number",
                    bytes.len()
                )
            }),
    }
}

/// A held grant of any kind, as a cycle uses it.
struct Held {
    fence: Fence,
    /// The counter it keeps (a semaphore's slot).
    resource: usize,
    /// The key whose token counter heals a stale fresh grant (a semaphore's: the slot's).
    key: LockKey,
    guard: LockGuard,
}

/// A worker that cannot start: why, and the reporter to say so.
type Refused = (ChaosError, Arc<Reporter>);

impl Worker {
    /// A worker for `config`; an error (with the reporter, to say so) when the configuration
    /// does not fit the backend.
    fn new(
        config: &WorkerConfig,
        backend: Arc<dyn LockBackend>,
        storage: Arc<dyn FencedStorage>,
        sink: Sink,
    ) -> std::result::Result<Self, Refused> {
        let reporter = Arc::new(Reporter {
            sink,
            gone: AtomicBool::new(false),
        });
        let locker = Locker::new(backend.clone());
        match Self::parts(config, &locker, backend.as_ref()) {
            Ok((grant, key, resources)) => Ok(Worker {
                locker,
                backend,
                storage,
                grant,
                key,
                resources,
                ttl: config.ttl,
                work: config.work,
                op_timeout: config.op_timeout,
                mode: config.mode,
                reporter,
            }),
            Err(e) => Err((e, reporter)),
        }
    }

    /// The grant, the key and the counters of `config`.
    fn parts(
        config: &WorkerConfig,
        locker: &Locker,
        backend: &dyn LockBackend,
    ) -> Result<(Grant, LockKey, Vec<LockKey>)> {
        let key = LockKey::new(&config.key)?;
        let resources = config
            .resources
            .iter()
            .map(LockKey::new)
            .collect::<LockResult<Vec<_>>>()?;
        if resources.len() != config.workload.resources() {
            return Err(ChaosError::config(format!(
                "{} counters for a {} workload",
                resources.len(),
                config.workload
            )));
        }
        let grant = match config.workload {
            Workload::Lock => Grant::Lock,
            Workload::Semaphore { permits } => {
                Grant::Semaphore(Semaphore::new(locker, key.as_str(), usize::from(permits))?)
            }
            Workload::Election => Grant::Election(Election::new(locker, key.as_str())?),
            Workload::RwLock if !backend.capabilities().kinds.shared => {
                return Err(Error::unsupported(backend.name(), "shared locks").into());
            }
            Workload::RwLock if config.index.is_multiple_of(2) => {
                Grant::Writer(RwLocker::new(locker.clone()))
            }
            Workload::RwLock => Grant::Reader(RwLocker::new(locker.clone())),
            Workload::Composite { members } => {
                Grant::Composite(composite::member_keys(&key, members, config.index)?)
            }
        };
        Ok((grant, key, resources))
    }

    /// Reports `ready`, then runs cycles until `stop` or the coordinator is gone.
    async fn serve(&self, stop: &AtomicBool) {
        self.emit(Event::Ready);
        while !stop.load(Ordering::Relaxed) && !self.reporter.gone.load(Ordering::Relaxed) {
            self.cycle().await;
        }
    }

    fn emit(&self, event: Event) {
        self.reporter.emit(&event);
    }

    /// How long a cycle waits for its grant: bounded, so that a stop is noticed.
    fn wait(&self) -> Duration {
        self.ttl.saturating_mul(2).max(Duration::from_millis(500))
    }

    fn backoff(&self) -> Backoff {
        Backoff {
            initial: Duration::from_millis(2),
            max: (self.ttl / 4).clamp(Duration::from_millis(5), Duration::from_millis(500)),
        }
    }

    /// Takes the cycle's grant: the guard, its counter's index and the key it is on.
    async fn grant(&self) -> LockResult<(LockGuard, usize, LockKey)> {
        let (ttl, wait, backoff) = (self.ttl, self.wait(), self.backoff());
        let key = || self.key.clone();
        match &self.grant {
            Grant::Lock => self
                .locker
                .lock(self.key.as_str())
                .ttl(ttl)
                .wait(wait)
                .watchdog(false)
                .backoff(backoff)
                .await
                .map(|guard| (guard, 0, key())),
            Grant::Writer(rw) => rw
                .write(self.key.as_str())
                .ttl(ttl)
                .wait(wait)
                .watchdog(false)
                .backoff(backoff)
                .await
                .map(|guard| (guard, 0, key())),
            Grant::Reader(rw) => rw
                .read(self.key.as_str())
                .ttl(ttl)
                .wait(wait)
                .watchdog(false)
                .backoff(backoff)
                .await
                .map(|reader| (reader.into_guard(), 0, key())),
            Grant::Semaphore(semaphore) => semaphore
                .acquire()
                .ttl(ttl)
                .wait(wait)
                .watchdog(false)
                .backoff(backoff)
                .await
                .map(|permit| {
                    let (slot, slot_key) = (permit.slot(), permit.slot_key());
                    (permit.into_guard(), slot, slot_key)
                }),
            Grant::Election(election) => election
                .campaign()
                .ttl(ttl)
                .wait(wait)
                .backoff(backoff)
                .await
                .map(|leadership| (leadership.into_guard(), 0, key())),
            Grant::Composite(_) => Err(Error::config(
                "a composite set is taken by its own cycle, not as one grant",
            )),
        }
    }

    /// Takes the cycle's grant; `None` when none came in time (or the call failed, reported).
    async fn take(&self) -> Option<Held> {
        match self.grant().await {
            Ok((guard, resource, key)) => Some(Held {
                fence: guard.fence(),
                resource: resource.min(self.resources.len().saturating_sub(1)),
                key,
                guard,
            }),
            Err(Error::Timeout { .. }) => None,
            Err(e) => {
                self.emit(Event::Error {
                    reason: format!("acquire: {e}"),
                });
                sleep(self.ttl / 4).await;
                None
            }
        }
    }

    /// One cycle: a grant, its counter work, its release.
    async fn cycle(&self) {
        if let Grant::Composite(members) = &self.grant {
            self.composite_cycle(members).await;
            return;
        }
        let Some(held) = self.take().await else {
            return;
        };
        let fence = held.fence;
        self.emit(Event::Acquired {
            fence,
            resource: held.resource,
        });
        let Some(resource) = self.resources.get(held.resource) else {
            return;
        };
        match (&self.grant, self.mode) {
            (Grant::Reader(_), Mode::Fenced) => {
                if self.fenced_read(resource, fence, &held.key).await.is_some() {
                    sleep(self.work).await;
                    self.fenced_read(resource, fence, &held.key).await;
                }
            }
            (Grant::Reader(_), Mode::Control) => {
                if self.peek(resource).await.is_some() {
                    sleep(self.work).await;
                    self.peek(resource).await;
                }
            }
            (Grant::Election(_), mode) => {
                // A leader writes while it believes it leads: its lease is renewed in the
                // background, so only a pause or a cut-off ends the term early.
                for _ in 0..TERM_WRITES {
                    if !held.guard.is_held()
                        || !self.increment(resource, fence, &held.key, mode).await
                    {
                        break;
                    }
                }
            }
            (_, mode) => {
                self.increment(resource, fence, &held.key, mode).await;
            }
        }
        let released = match bounded(self.op_timeout, held.guard.release()).await {
            Ok(Ok(released)) => released,
            Ok(Err(_)) | Err(_) => false,
        };
        self.emit(Event::Released { fence, released });
        if let Grant::Reader(_) = self.grant {
            sleep(self.work).await;
        }
    }

    /// Read, work, write of the value + 1: fenced with the grant's fence, or in the control
    /// run unfenced and under the control fence. `false` when the write was not made or not
    /// admitted.
    async fn increment(&self, resource: &LockKey, held: Fence, key: &LockKey, mode: Mode) -> bool {
        let (value, fence) = match mode {
            Mode::Fenced => match self.fenced_read(resource, held, key).await {
                Some(value) => (value, held),
                None => return false,
            },
            Mode::Control => match self.peek(resource).await {
                Some(value) => (value, CONTROL_FENCE),
                None => return false,
            },
        };
        sleep(self.work).await;
        self.write(resource, fence, value.unwrap_or(0).saturating_add(1))
            .await
    }

    /// A fenced read of the counter; `None` when it was not admitted (a stale fresh grant
    /// also heals `key`'s token counter).
    async fn fenced_read(
        &self,
        resource: &LockKey,
        fence: Fence,
        key: &LockKey,
    ) -> Option<Option<u64>> {
        self.emit(Event::ReadBegin { fence });
        let read = bounded(self.op_timeout, self.storage.read(resource, fence)).await;
        match read {
            Ok(Ok(bytes)) => match counter(bytes) {
                Ok(value) => {
                    self.emit(Event::Read {
                        fence,
                        outcome: Outcome::Admitted(value),
                    });
                    Some(value)
                }
                Err(reason) => {
                    self.emit(Event::Error { reason });
                    None
                }
            },
            Ok(Err(Error::Stale { current, .. })) => {
                self.emit(Event::Read {
                    fence,
                    outcome: Outcome::Stale { current },
                });
                // Refused on a fresh grant: the key's token counter may have gone back (a lock
                // server that lost it); raising it past the storage's fence restores liveness.
                // When the counter is fine this changes nothing.
                self.heal(key, current.token).await;
                None
            }
            Ok(Err(e)) => {
                self.emit(Event::Read {
                    fence,
                    outcome: Outcome::Unknown {
                        reason: e.to_string(),
                    },
                });
                None
            }
            Err(reason) => {
                self.emit(Event::Read {
                    fence,
                    outcome: Outcome::Unknown { reason },
                });
                None
            }
        }
    }

    /// An unfenced read of the counter (the control run); `None` when it failed.
    async fn peek(&self, resource: &LockKey) -> Option<Option<u64>> {
        self.emit(Event::PeekBegin);
        let reason = match bounded(self.op_timeout, self.storage.peek(resource)).await {
            Ok(Ok(snapshot)) => match counter(snapshot.and_then(|s| s.value)) {
                Ok(value) => {
                    self.emit(Event::Peek { value });
                    return Some(value);
                }
                Err(reason) => reason,
            },
            Ok(Err(e)) => format!("peek: {e}"),
            Err(reason) => format!("peek: {reason}"),
        };
        self.emit(Event::Error { reason });
        None
    }

    /// Writes `value`; `true` when admitted.
    async fn write(&self, resource: &LockKey, fence: Fence, value: u64) -> bool {
        self.emit(Event::WriteBegin { fence, value });
        let bytes = value.to_string().into_bytes();
        let written = bounded(self.op_timeout, self.storage.write(resource, fence, &bytes)).await;
        let outcome = match written {
            Ok(Ok(())) => Outcome::Admitted(()),
            Ok(Err(Error::Stale { current, .. })) => Outcome::Stale { current },
            Ok(Err(e)) => Outcome::Unknown {
                reason: e.to_string(),
            },
            Err(reason) => Outcome::Unknown { reason },
        };
        let admitted = outcome == Outcome::Admitted(());
        self.emit(Event::Write {
            fence,
            value,
            outcome,
        });
        admitted
    }

    async fn heal(&self, key: &LockKey, floor: FencingToken) {
        match bounded(self.op_timeout, self.backend.advance_token(key, floor)).await {
            Ok(Ok(counter)) => self.emit(Event::Healed {
                floor: floor.get(),
                counter: counter.get(),
            }),
            Ok(Err(e)) => self.emit(Event::Error {
                reason: format!("advance_token: {e}"),
            }),
            Err(reason) => self.emit(Event::Error {
                reason: format!("advance_token: {reason}"),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_configuration_round_trips_and_hides_its_credentials() {
        let config = WorkerConfig {
            backend: "redis://:s3cret@127.0.0.1:6379".into(),
            storage: Some("redis://:s3cret@127.0.0.1:6380".into()),
            key: "chaos/k/lock".into(),
            resources: vec!["chaos/k/counter/0".into(), "chaos/k/counter/1".into()],
            workload: Workload::Semaphore { permits: 2 },
            index: 3,
            ttl: Duration::from_micros(200_001),
            work: Duration::from_millis(20),
            op_timeout: Duration::from_secs(1),
            mode: Mode::Control,
        };
        let line = config.to_line().unwrap();
        assert_eq!(line.matches('\n').count(), 1, "{line}");
        assert_eq!(WorkerConfig::from_line(&line).unwrap(), config);
        assert!(!format!("{config:?}").contains("s3cret"));
        let err = WorkerConfig::from_line("{\"backend\": \"redis://:s3cret@x\"").unwrap_err();
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }

    #[test]
    fn the_control_fence_is_the_largest_bigint() {
        assert_eq!(CONTROL_FENCE.token.get(), i64::MAX as u64);
    }
}
