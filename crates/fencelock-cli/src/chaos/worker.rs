//! `fencelock worker` (hidden): one chaos worker process.
//!
//! Loops until its stdin closes: take the lock (watchdog off, so a paused process renews
//! nothing), read the counter, "work", write counter + 1, release; every step is reported on
//! stdout as one [`Event`] line. In the fenced run the read and the write are fenced with the
//! grant's fence. In the control run the read is an unfenced `peek` and every worker writes with
//! the same control fence, which the storage always admits: the storage then behaves like one
//! without fencing, while everything else (lock, faults, timings) stays the same.

use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fencelock::spec::BackendSpec;
use fencelock::{
    Backoff, Error, Fence, FencedStorage, FencingToken, LockBackend, LockKey, Locker, OwnerId,
    Result,
};
use tokio::io::AsyncReadExt;
use tokio::time::{sleep, timeout};

use super::events::{Event, Outcome};
use crate::{parse_duration, parse_spec};

#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The lock service.
    #[arg(long, value_parser = parse_spec)]
    backend: BackendSpec,
    /// Where the counter lives (default: the lock service's own storage).
    #[arg(long, value_parser = parse_spec)]
    storage: Option<BackendSpec>,
    /// The lock's key.
    #[arg(long)]
    key: String,
    /// The counter's resource name.
    #[arg(long)]
    resource: String,
    /// Lease ttl (never renewed).
    #[arg(long, value_parser = parse_duration)]
    ttl: Duration,
    /// Sleep between the read and the write.
    #[arg(long, value_parser = parse_duration)]
    work: Duration,
    /// The longest one storage or lock call may take before its outcome counts as unknown.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    op_timeout: Duration,
    /// Control run: read with `peek` and write with this owner and the largest token.
    #[arg(long)]
    control_owner: Option<OwnerId>,
}

/// The token of the control fence: the largest every storage can hold (Postgres keeps tokens
/// in a `bigint`).
pub(crate) const CONTROL_TOKEN: u64 = i64::MAX as u64;

/// Writes events to stdout; when the coordinator is gone the worker stops.
struct Reporter {
    gone: AtomicBool,
}

impl Reporter {
    fn emit(&self, event: &Event) {
        let mut out = std::io::stdout().lock();
        if writeln!(out, "{event}").and_then(|()| out.flush()).is_err() {
            self.gone.store(true, Ordering::Relaxed);
        }
    }
}

pub(crate) async fn run(args: Args) -> Result<ExitCode> {
    let key = LockKey::new(&args.key)?;
    let resource = LockKey::new(&args.resource)?;
    let connected = args.backend.connect().await?;
    let storage = match &args.storage {
        Some(spec) => spec.connect().await?.storage,
        None => connected.storage,
    };
    let backend = connected.backend;
    let control = match args.control_owner {
        Some(owner) => Some(Fence::new(
            FencingToken::new(CONTROL_TOKEN)
                .ok_or_else(|| Error::config("control token must be non-zero"))?,
            owner,
        )),
        None => None,
    };
    let reporter = Arc::new(Reporter {
        gone: AtomicBool::new(false),
    });
    // The coordinator closes our stdin to stop us (and so does its death).
    let stop = Arc::new(AtomicBool::new(false));
    tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut stdin = tokio::io::stdin();
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
        ttl: args.ttl,
        work: args.work,
        op_timeout: args.op_timeout,
        control,
        reporter: reporter.clone(),
    };
    reporter.emit(&Event::Ready);
    while !stop.load(Ordering::Relaxed) && !reporter.gone.load(Ordering::Relaxed) {
        worker.cycle().await;
    }
    Ok(ExitCode::SUCCESS)
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
    control: Option<Fence>,
    reporter: Arc<Reporter>,
}

/// Runs `call` under the worker's time-out; `Err(reason)` when the outcome is unknown.
async fn bounded<T>(
    limit: Duration,
    call: impl Future<Output = Result<T>>,
) -> std::result::Result<Result<T>, String> {
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
        match self.control {
            None => self.fenced(fence).await,
            Some(control) => self.unfenced(control).await,
        }
        let released = match bounded(self.op_timeout, guard.release()).await {
            Ok(Ok(released)) => released,
            Ok(Err(_)) | Err(_) => false,
        };
        self.emit(Event::Released { fence, released });
    }

    /// Fenced read, work, fenced write of the value + 1.
    async fn fenced(&self, fence: Fence) {
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
