//! The memory backend as the server, behind a wire whose timing and losses the schedule
//! draws. The server decides who holds the lock; the wire only delays, reorders and loses what
//! travels between it and the client.
//!
//! A request leaves when the call is first polled: the server processes it after its delay
//! whether or not the caller is still waiting (a cancelled call does not recall a request on
//! the network). Its reply then takes a delay of its own, or is lost, in which case the caller
//! gets [`Error::Unavailable`] and cannot tell whether the server processed the request.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use fencelock_core::{
    Capabilities, Error, Fence, FencingToken, Lease, LockBackend, LockInfo, LockKey, Result,
};
use fencelock_memory::MemoryLockBackend;
use tokio::time::{Instant, sleep};

use super::{Schedule, at_once};

/// What happens to one request and its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    /// Processed, and the reply arrives.
    Answered,
    /// Processed, and the reply is lost: the caller gets an error once the reply is due.
    ReplyLost,
    /// Processed whenever it arrives; the caller gets an error at a time of its own, before or
    /// after that.
    ErrorAnyTime,
    /// Never reaches the server; the caller gets an error.
    RequestLost,
}

/// The server's view of one key after a call changed it, for the wake-up property.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Event {
    /// The key's holder, and when its lease ends on the server; `None`: free.
    Holder(Option<(Fence, Instant)>),
    /// A waiter entered the server's `wait_for_release`.
    SleepStart(u64),
    /// That waiter left it.
    SleepEnd(u64),
}

/// The instrumented backend.
pub(crate) struct Wire {
    pub(crate) server: MemoryLockBackend,
    schedule: Arc<Schedule>,
    /// Delays are drawn relative to this (the scenario's ttl).
    scale: Duration,
    /// Whether requests and replies may be lost.
    faults: bool,
    /// Whether `try_acquire` replies are delayed (off where a scenario needs its first grant
    /// at once).
    slow_acquire: bool,
    events: Mutex<Vec<(Instant, Event)>>,
    next_sleeper: AtomicU64,
    next_call: AtomicU64,
    /// Called with a description whenever a call changed the server, at that instant.
    on_change: Mutex<Option<OnChange>>,
}

/// A check run at the instant the server changed.
pub(crate) type OnChange = Box<dyn Fn(&str) + Send + Sync>;

fn unavailable(what: &str) -> Error {
    Error::Unavailable {
        backend: "wire",
        message: format!("{what}: connection reset after the request was sent"),
        source: None,
    }
}

impl Wire {
    pub(crate) fn new(schedule: Arc<Schedule>, scale: Duration, faults: bool) -> Self {
        Wire {
            server: MemoryLockBackend::new(),
            schedule,
            scale,
            faults,
            slow_acquire: false,
            events: Mutex::new(Vec::new()),
            next_sleeper: AtomicU64::new(0),
            next_call: AtomicU64::new(1),
            on_change: Mutex::new(None),
        }
    }

    /// Runs `check` at every instant a call changes the server.
    pub(crate) fn on_change(&self, check: OnChange) {
        *self.on_change.lock().unwrap() = Some(check);
    }

    /// Delays `try_acquire` replies too.
    pub(crate) fn with_slow_acquire(mut self) -> Self {
        self.slow_acquire = true;
        self
    }

    fn fate(&self, what: &str) -> Fate {
        if !self.faults {
            return Fate::Answered;
        }
        self.schedule.pick(
            what,
            &[
                Fate::Answered,
                Fate::Answered,
                Fate::Answered,
                Fate::Answered,
                Fate::Answered,
                Fate::ReplyLost,
                Fate::ErrorAnyTime,
                Fate::RequestLost,
            ],
        )
    }

    /// The key's live holder on the server and when its lease ends there.
    pub(crate) fn holder(&self, key: &LockKey) -> Option<(Fence, Instant)> {
        let info = at_once(self.server.inspect(key)).unwrap();
        let now = Instant::now();
        info.holder.zip(info.remaining).map(|(f, r)| (f, now + r))
    }

    fn log(&self, event: Event) {
        self.events.lock().unwrap().push((Instant::now(), event));
    }

    fn log_holder(&self, key: &LockKey, what: &str) {
        let holder = self.holder(key);
        match holder {
            Some((fence, until)) => self.schedule.note(format_args!(
                "server after {what}: token {} holds until {}",
                fence.token,
                self.schedule.at(until)
            )),
            None => self
                .schedule
                .note(format_args!("server after {what}: free")),
        }
        self.log(Event::Holder(holder));
        if let Some(check) = self.on_change.lock().unwrap().as_ref() {
            check(what);
        }
    }

    pub(crate) fn events(&self) -> Vec<(Instant, Event)> {
        self.events.lock().unwrap().clone()
    }

    /// Sends a request processed by `at_server` after the drawn delay, and waits for its reply
    /// as the drawn fate says.
    async fn call<T, F>(self: &Arc<Self>, what: &'static str, at_server: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Wire, &str) -> Result<T> + Send + 'static,
    {
        let schedule = self.schedule.clone();
        let call = format!("{what}#{}", self.next_call.fetch_add(1, Ordering::Relaxed));
        schedule
            .interleave(&format!("{call} yields before sending"))
            .await;
        let to_server = schedule.delay(&format!("{call} on the way"), self.scale);
        let fate = self.fate(&format!("{call} fate"));
        let processed = (fate != Fate::RequestLost).then(|| {
            let (wire, call) = (self.clone(), call.clone());
            tokio::spawn(async move {
                sleep(to_server).await;
                wire.schedule
                    .interleave(&format!("{call} yields at the server"))
                    .await;
                at_server(&wire, &call)
            })
        });
        let back = schedule.delay(&format!("{call} reply on the way"), self.scale);
        match (fate, processed) {
            (Fate::Answered, Some(processed)) => {
                let reply = processed.await.unwrap();
                sleep(back).await;
                schedule
                    .interleave(&format!("{call} yields on the reply"))
                    .await;
                reply
            }
            (Fate::ReplyLost, Some(processed)) => {
                let _ = processed.await.unwrap();
                sleep(back).await;
                Err(unavailable(&call))
            }
            _ => {
                sleep(back).await;
                Err(unavailable(&call))
            }
        }
    }
}

impl std::fmt::Debug for Wire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wire")
            .field("scale", &self.scale)
            .field("faults", &self.faults)
            .finish_non_exhaustive()
    }
}

/// A drop guard that logs the end of a sleep, however the wait ends.
struct Sleeping<'a>(&'a Wire, u64);

impl Drop for Sleeping<'_> {
    fn drop(&mut self) {
        self.0.log(Event::SleepEnd(self.1));
    }
}

/// The wire as a backend. `Arc<Wire>` is what a scenario hands to `Locker::new`: each call
/// spawns its server side, which needs the wire to outlive the call.
#[async_trait]
impl LockBackend for WireHandle {
    fn name(&self) -> &'static str {
        "wire"
    }

    fn capabilities(&self) -> Capabilities {
        self.0.server.capabilities()
    }

    async fn try_acquire(&self, key: &LockKey, ttl: Duration) -> Result<Option<Lease>> {
        let wire = &self.0;
        wire.schedule.interleave("try_acquire yields").await;
        let granted = wire.server.try_acquire(key, ttl).await;
        wire.log_holder(key, "try_acquire");
        if wire.slow_acquire {
            sleep(
                wire.schedule
                    .delay("try_acquire reply on the way", wire.scale),
            )
            .await;
            wire.schedule
                .interleave("try_acquire yields on the reply")
                .await;
        }
        granted
    }

    async fn extend(&self, lease: &Lease, ttl: Duration) -> Result<Lease> {
        let lease = lease.clone();
        self.0
            .call("extend", move |wire, call| {
                let renewed = at_once(wire.server.extend(&lease, ttl));
                let outcome = renewed.as_ref().map(|_| ());
                wire.log_holder(&lease.key, &format!("{call}({ttl:?}) -> {outcome:?}"));
                renewed
            })
            .await
    }

    async fn release(&self, lease: &Lease) -> Result<bool> {
        let lease = lease.clone();
        self.0
            .call("release", move |wire, call| {
                let released = at_once(wire.server.release(&lease));
                wire.log_holder(&lease.key, &format!("{call} -> {released:?}"));
                released
            })
            .await
    }

    async fn wait_for_release(&self, key: &LockKey, max: Duration) -> Result<()> {
        let wire = &self.0;
        wire.schedule.interleave("wait_for_release yields").await;
        let id = wire.next_sleeper.fetch_add(1, Ordering::Relaxed);
        wire.log(Event::SleepStart(id));
        let sleeping = Sleeping(wire, id);
        let woken = wire.server.wait_for_release(key, max).await;
        drop(sleeping);
        wire.schedule
            .interleave("wait_for_release yields on waking")
            .await;
        woken
    }

    async fn inspect(&self, key: &LockKey) -> Result<LockInfo> {
        self.0.server.inspect(key).await
    }

    async fn advance_token(&self, key: &LockKey, floor: FencingToken) -> Result<FencingToken> {
        self.0.server.advance_token(key, floor).await
    }
}

/// The backend handed to lockers: a handle on a shared [`Wire`].
#[derive(Debug, Clone)]
pub(crate) struct WireHandle(pub(crate) Arc<Wire>);
