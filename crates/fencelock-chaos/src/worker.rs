//! One chaos worker process, and the configuration its coordinator hands it.
//!
//! Loops until its stdin closes: take the lock (watchdog off, so a paused process renews
//! nothing), read the counter, "work", write counter + 1, release; every step is reported on
//! stdout as one [`Event`] line. In the fenced run the read and the write are fenced with the
//! grant's fence. In the control run the read is an unfenced `peek` and every worker writes with
//! the same control fence, which the storage always admits: the storage then behaves like one
//! without fencing, while everything else (lock, faults, timings) stays the same.
//!
//! The configuration is the first line of stdin, as JSON. It carries the backend spec with its
//! credentials, so it travels through the pipe, never on the command line (which every user of
//! the machine can read).

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fencelock::spec::BackendSpec;
use fencelock::{
    Backoff, Error, Fence, FencedStorage, FencingToken, LockBackend, LockKey, Locker, OwnerId,
    Result as LockResult,
};
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::time::{sleep, timeout};

use crate::clock;
use crate::config::Mode;
use crate::error::{ChaosError, Result};
use crate::events::{Event, Outcome, Stamped};

/// What one worker does; written by the coordinator as the first line of the worker's stdin.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct WorkerConfig {
    /// The lock service's spec, credentials included.
    pub(crate) backend: String,
    /// Where the counter lives, when not in the lock service's own storage.
    pub(crate) storage: Option<String>,
    /// The lock's key.
    pub(crate) key: String,
    /// The counter's resource name.
    pub(crate) resource: String,
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
            .field("resource", &self.resource)
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

/// Writes events to stdout; when the coordinator is gone the worker stops.
struct Reporter {
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
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{stamped}")
            .and_then(|()| out.flush())
            .is_err()
        {
            self.gone.store(true, Ordering::Relaxed);
        }
    }
}

/// Runs one worker process: reads its configuration from the first line of stdin, connects,
/// reports `ready`, and runs lock cycles until stdin closes (the coordinator's signal to stop,
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
    let key = LockKey::new(&config.key)?;
    let resource = LockKey::new(&config.resource)?;
    let connected = BackendSpec::parse(&config.backend)?.connect().await?;
    let storage = match &config.storage {
        Some(spec) => BackendSpec::parse(spec)?.connect().await?.storage,
        None => connected.storage,
    };
    let backend = connected.backend;
    let reporter = Arc::new(Reporter {
        gone: AtomicBool::new(false),
    });
    let stop = Arc::new(AtomicBool::new(false));
    tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut buf = [0u8; 64];
            while matches!(stdin.read(&mut buf).await, Ok(n) if n > 0) {}
            stop.store(true, Ordering::Relaxed);
        }
    });
    let worker = Worker {
        locker: Locker::new(backend.clone()),
        backend,
        storage,
        key,
        resource,
        ttl: config.ttl,
        work: config.work,
        op_timeout: config.op_timeout,
        mode: config.mode,
        reporter: reporter.clone(),
    };
    reporter.emit(&Event::Ready);
    while !stop.load(Ordering::Relaxed) && !reporter.gone.load(Ordering::Relaxed) {
        worker.cycle().await;
    }
    Ok(())
}

struct Worker {
    locker: Locker,
    backend: Arc<dyn LockBackend>,
    storage: Arc<dyn FencedStorage>,
    key: LockKey,
    resource: LockKey,
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

impl Worker {
    fn emit(&self, event: Event) {
        self.reporter.emit(&event);
    }

    /// One lock cycle.
    async fn cycle(&self) {
        let backoff = Backoff {
            initial: Duration::from_millis(2),
            max: (self.ttl / 4).clamp(Duration::from_millis(5), Duration::from_millis(500)),
        };
        let request = self
            .locker
            .lock(self.key.as_str())
            .ttl(self.ttl)
            .wait(self.ttl.saturating_mul(2).max(Duration::from_millis(500)))
            .watchdog(false)
            .backoff(backoff);
        let guard = match request.await {
            Ok(guard) => guard,
            Err(Error::Timeout { .. }) => return,
            Err(e) => {
                self.emit(Event::Error {
                    reason: format!("acquire: {e}"),
                });
                sleep(self.ttl / 4).await;
                return;
            }
        };
        let fence = guard.fence();
        self.emit(Event::Acquired { fence });
        match self.mode {
            Mode::Fenced => self.fenced(fence).await,
            Mode::Control => self.unfenced(CONTROL_FENCE).await,
        }
        let released = match bounded(self.op_timeout, guard.release()).await {
            Ok(Ok(released)) => released,
            Ok(Err(_)) | Err(_) => false,
        };
        self.emit(Event::Released { fence, released });
    }

    /// Fenced read, work, fenced write of the value + 1.
    async fn fenced(&self, fence: Fence) {
        self.emit(Event::ReadBegin { fence });
        let read = bounded(self.op_timeout, self.storage.read(&self.resource, fence)).await;
        let value = match read {
            Ok(Ok(bytes)) => match counter(bytes) {
                Ok(value) => {
                    self.emit(Event::Read {
                        fence,
                        outcome: Outcome::Admitted(value),
                    });
                    value.unwrap_or(0)
                }
                Err(reason) => {
                    self.emit(Event::Error { reason });
                    return;
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
                self.heal(current.token).await;
                return;
            }
            Ok(Err(e)) => {
                self.emit(Event::Read {
                    fence,
                    outcome: Outcome::Unknown {
                        reason: e.to_string(),
                    },
                });
                return;
            }
            Err(reason) => {
                self.emit(Event::Read {
                    fence,
                    outcome: Outcome::Unknown { reason },
                });
                return;
            }
        };
        sleep(self.work).await;
        let next = value.saturating_add(1);
        self.write(fence, next).await;
    }

    /// Unfenced read, work, write of the value + 1 under the shared control fence.
    async fn unfenced(&self, control: Fence) {
        self.emit(Event::PeekBegin);
        let value = match bounded(self.op_timeout, self.storage.peek(&self.resource)).await {
            Ok(Ok(snapshot)) => match counter(snapshot.and_then(|s| s.value)) {
                Ok(value) => value,
                Err(reason) => {
                    self.emit(Event::Error { reason });
                    return;
                }
            },
            Ok(Err(e)) => {
                self.emit(Event::Error {
                    reason: format!("peek: {e}"),
                });
                return;
            }
            Err(reason) => {
                self.emit(Event::Error {
                    reason: format!("peek: {reason}"),
                });
                return;
            }
        };
        self.emit(Event::Peek { value });
        sleep(self.work).await;
        self.write(control, value.unwrap_or(0).saturating_add(1))
            .await;
    }

    async fn write(&self, fence: Fence, value: u64) {
        self.emit(Event::WriteBegin { fence, value });
        let bytes = value.to_string().into_bytes();
        let written = bounded(
            self.op_timeout,
            self.storage.write(&self.resource, fence, &bytes),
        )
        .await;
        let outcome = match written {
            Ok(Ok(())) => Outcome::Admitted(()),
            Ok(Err(Error::Stale { current, .. })) => Outcome::Stale { current },
            Ok(Err(e)) => Outcome::Unknown {
                reason: e.to_string(),
            },
            Err(reason) => Outcome::Unknown { reason },
        };
        self.emit(Event::Write {
            fence,
            value,
            outcome,
        });
    }

    async fn heal(&self, floor: FencingToken) {
        match bounded(
            self.op_timeout,
            self.backend.advance_token(&self.key, floor),
        )
        .await
        {
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
            resource: "chaos/k/counter".into(),
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
