//! Schedule exploration of the code where tasks race: a guard's watchdog, the user's
//! `extend`, `release` (awaited, cancelled), drop and `Locker::shutdown`, the lost signal, and
//! waiters woken by the memory backend. See `explore/mod.rs` for how a seed fixes a schedule
//! and how to replay one.
//!
//! Properties:
//! - **held means held**: whenever a guard says `is_held()`, the server gives the lock to the
//!   guard's fence; and once `is_held()` turned false it stays false.
//! - **lost fires, once, on every path that ends the lease**: by the time `release()` returns
//!   or is cancelled, the guard is dropped, `shutdown()` returns, or `extend` reports
//!   `LeaseLost`; and no later than the guard's local deadline. Its reason never changes after.
//! - **no waiter sleeps while the lock is free**: a waiter inside `wait_for_release` never
//!   stays there for any stretch of time during which no lease is live; every waiter gets the
//!   lock in the end.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod explore;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fencelock_core::{
    Backoff, CancellationToken, Error, Fence, LockBackend, LockGuard, LockKey, Locker, LostReason,
};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep, sleep_until, timeout};

use explore::wire::{Event, Wire, WireHandle};
use explore::{Schedule, at_once, explore};

const KEY: &str = "explored";

/// Lease ttls the scenarios draw from; every one is at least `MIN_TTL`.
const TTLS: [Duration; 5] = [
    Duration::from_millis(10),
    Duration::from_millis(30),
    Duration::from_millis(100),
    Duration::from_millis(600),
    Duration::from_secs(5),
];

/// How a guard's lease ends in a scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// `release().await`.
    Release,
    /// `release()` cancelled by a timeout after the drawn delay.
    CancelledRelease,
    /// The guard is dropped.
    Drop,
    /// `Locker::shutdown().await`, then the guard is dropped.
    Shutdown,
    /// The guard is kept for a while (failures, the deadline and takeovers play out), then
    /// dropped.
    Keep,
}

const ENDINGS: &[Ending] = &[
    Ending::Release,
    Ending::CancelledRelease,
    Ending::Drop,
    Ending::Shutdown,
    Ending::Keep,
];

/// How the user calls `extend`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Call {
    /// Awaited in the user's task.
    Awaited,
    /// In a task of its own, running alongside the next steps.
    Spawned,
    /// In a task of its own, cancelled by a timeout after the drawn delay.
    CancelledAfter(Duration),
}

/// `Locker::shutdown`, which came after the guard fixes: the one call that explorations of
/// older code leave out.
async fn shutdown(locker: &Locker) -> fencelock_core::Result<usize> {
    locker.shutdown().await
}

/// What the checks can see of one guard.
struct Probe {
    schedule: Arc<Schedule>,
    wire: Arc<Wire>,
    key: LockKey,
    fence: Fence,
    /// The guard while the user has not ended it; checks borrow it without awaiting.
    guard: Mutex<Option<Arc<LockGuard>>>,
    /// A child of the lost signal, taken at the grant.
    lost: CancellationToken,
    /// What `lost()` completed with, and when.
    fired: Mutex<Option<(LostReason, Instant)>>,
    /// When `is_held()` was first seen false, and the deadline it had then.
    seen_not_held: Mutex<Option<(Instant, Instant)>>,
    /// When the server's lease of the guard last ended or is due to end, as last seen.
    server_until: Mutex<Option<Instant>>,
    /// How and when the server's lease of the guard ended, as first seen.
    server_gone: Mutex<Option<(&'static str, Instant)>>,
    stop: AtomicBool,
    /// The contender stops once the guard's lease has ended, so the log ends there too.
    contender_stop: AtomicBool,
}

impl Probe {
    /// Checks "held means held" and "lost fires when the lease ends" at this instant.
    fn check(&self, at: &str) {
        let s = &self.schedule;
        let now = Instant::now();
        // Tokio's timers fire on the millisecond: a task that sleeps until a deadline wakes at
        // the next whole millisecond, possibly after this check in the same instant.
        let tick = Duration::from_millis(1);
        let server = self.wire.holder(&self.key);
        let ours = matches!(server, Some((fence, _)) if fence == self.fence);
        if let Some((fence, until)) = server
            && fence == self.fence
        {
            *self.server_until.lock().unwrap() = Some(until);
        }
        let server_until = *self.server_until.lock().unwrap();
        if !ours {
            // Expired (then the guard's deadline, which comes before the server's expiry, has
            // passed too), or released while it would still run.
            let first = match server_until {
                Some(until) if until <= now => ("expired", until),
                _ => ("was released", now),
            };
            let (ended, when) = *self.server_gone.lock().unwrap().get_or_insert(first);
            let overdue = ended == "was released" || now >= when + tick;
            s.check(!overdue || self.lost.is_cancelled(), || {
                format!(
                    "{at}: the server's lease {ended} at {}, and lost() has not fired",
                    s.at(when)
                )
            });
        }
        let slot = self.guard.lock().unwrap();
        let Some(guard) = slot.as_ref() else { return };
        let lease = guard.lease();
        if guard.is_held() {
            if !ours {
                let describe = match (server, server_until) {
                    (Some((other, _)), _) => {
                        format!("the server gives the lock to token {}", other.token)
                    }
                    (None, Some(until)) => format!("the server's lease ended at {}", s.at(until)),
                    (None, None) => "the server has no lease".to_owned(),
                };
                s.violation(format!(
                    "{at}: is_held() is true (valid_until {}), but {describe}",
                    s.at(lease.valid_until)
                ));
            }
            if let Some((seen, deadline)) = *self.seen_not_held.lock().unwrap() {
                // A reply due in the deadline's millisecond may still be stored.
                s.check(seen < deadline + tick, || {
                    format!(
                        "{at}: is_held() is true again, after it was false at {} (deadline {})",
                        s.at(seen),
                        s.at(deadline)
                    )
                });
            }
        } else {
            self.seen_not_held
                .lock()
                .unwrap()
                .get_or_insert((now, lease.valid_until));
        }
        let overdue = now >= lease.valid_until + tick;
        s.check(!overdue || self.lost.is_cancelled(), || {
            format!(
                "{at}: the guard's deadline passed at {}, and lost() has not fired",
                s.at(lease.valid_until)
            )
        });
    }

    /// The lost signal must have fired by now.
    fn lost_by_now(&self, what: impl FnOnce() -> String) {
        self.schedule.check(self.lost.is_cancelled(), || {
            format!("{}: lost() has not fired", what())
        });
    }

    fn guard(&self) -> Arc<LockGuard> {
        self.guard
            .lock()
            .unwrap()
            .clone()
            .expect("the guard is still the user's")
    }
}

/// Wakes every quarter ttl, and at the instant the server's lease is due to end, to check.
async fn monitor(probe: Arc<Probe>, tick: Duration) {
    while !probe.stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        let mut next = now + tick;
        if let Some((fence, until)) = probe.wire.holder(&probe.key)
            && fence == probe.fence
            && until > now
        {
            next = next.min(until);
        }
        sleep_until(next).await;
        probe.check("monitor");
    }
}

/// Another client that takes the lock whenever the server lets it, holds it a while and
/// releases it: what a guard that outlives its lease would collide with.
async fn contender(probe: Arc<Probe>, scale: Duration) {
    let s = probe.schedule.clone();
    while !probe.contender_stop.load(Ordering::SeqCst) {
        let pause = s
            .delay("contender pause", scale)
            .max(Duration::from_millis(1));
        sleep(pause).await;
        let ttl = s.pick("contender ttl", &TTLS);
        if let Ok(Some(lease)) = at_once(probe.wire.server.try_acquire(&probe.key, ttl)) {
            s.note(format_args!(
                "contender took the lock: token {}",
                lease.token
            ));
            sleep(s.delay("contender hold", scale)).await;
            let _ = at_once(probe.wire.server.release(&lease));
        }
    }
}

/// One user `extend` call, checked: `LeaseLost` comes with the lost signal.
async fn extend(probe: Arc<Probe>, ttl: Duration, call: Call) {
    let guard = probe.guard();
    let s = &probe.schedule;
    s.note(format_args!("user: extend({ttl:?}), {call:?}"));
    let outcome = match call {
        Call::CancelledAfter(after) => timeout(after, guard.extend(ttl)).await.ok(),
        Call::Awaited | Call::Spawned => Some(guard.extend(ttl).await),
    };
    drop(guard);
    match &outcome {
        Some(outcome) => s.note(format_args!("user: extend({ttl:?}) returned {outcome:?}")),
        None => s.note(format_args!("user: extend({ttl:?}) cancelled")),
    }
    if let Some(Err(Error::LeaseLost { reason, .. })) = outcome {
        probe.lost_by_now(|| format!("extend({ttl:?}) returned LeaseLost ({reason})"));
    }
    probe.check("after extend");
}

/// One guard, its watchdog (on or off), user extends in every manner, a wire that delays and
/// loses messages, maybe another client, and one of the endings.
async fn guard_scenario(s: Arc<Schedule>, endings: &[Ending]) {
    let scale = s.pick("ttl", &TTLS);
    let watchdog = s.chance("watchdog", 75);
    let faults = s.chance("faults", 50);
    let wire = Arc::new(Wire::new(s.clone(), scale, faults));
    let backend: Arc<dyn LockBackend> = Arc::new(WireHandle(wire.clone()));
    let locker = Locker::new(backend);
    let guard = locker
        .lock(KEY)
        .ttl(scale)
        .watchdog(watchdog)
        .await
        .expect("the first grant");
    let lost = guard.lost();
    let again = guard.lost();
    let probe = Arc::new(Probe {
        schedule: s.clone(),
        wire: wire.clone(),
        key: guard.lease().key,
        fence: guard.fence(),
        lost: guard.lost_token(),
        guard: Mutex::new(Some(Arc::new(guard))),
        fired: Mutex::new(None),
        seen_not_held: Mutex::new(None),
        server_until: Mutex::new(None),
        server_gone: Mutex::new(None),
        stop: AtomicBool::new(false),
        contender_stop: AtomicBool::new(false),
    });
    tokio::spawn({
        let probe = probe.clone();
        async move {
            let reason = lost.await;
            *probe.fired.lock().unwrap() = Some((reason, Instant::now()));
        }
    });
    let monitor = tokio::spawn(monitor(probe.clone(), scale / 4));
    let weak = Arc::downgrade(&probe);
    wire.on_change(Box::new(move |what| {
        if let Some(probe) = weak.upgrade() {
            probe.check(&format!("server after {what}"));
        }
    }));
    let contender = s
        .chance("contender", 40)
        .then(|| tokio::spawn(contender(probe.clone(), scale)));

    // The user extends with ttls shorter and longer than the lease's: a shorter renewal in
    // flight must not leave the guard believing in the longer deadline the server dropped.
    let shortest = (scale / 3).max(fencelock_core::MIN_TTL);
    let ttls = [shortest, scale, scale * 3, scale * 10];
    let mut extends: Vec<JoinHandle<()>> = Vec::new();
    for _ in 0..s.below("steps", 6) {
        if s.chance("step is a pause", 40) {
            sleep(s.delay("pause", scale)).await;
        } else {
            let ttl = s.pick("extend ttl", &ttls);
            let call = match s.below("extend call", 3) {
                0 => Call::Awaited,
                1 => Call::Spawned,
                _ => Call::CancelledAfter(s.delay("extend cancelled after", scale)),
            };
            let task = extend(probe.clone(), ttl, call);
            if call == Call::Awaited {
                task.await;
            } else {
                extends.push(tokio::spawn(task));
            }
        }
        probe.check("after a step");
    }

    let ending = s.pick("ending", endings);
    if ending == Ending::Keep {
        let until = Instant::now() + scale * 6;
        while Instant::now() < until {
            sleep(s.delay("kept", scale).max(scale / 8)).await;
            probe.check("while kept");
        }
    }
    for task in extends {
        if s.chance("extend left to finish", 50) {
            task.await.unwrap();
        } else {
            task.abort();
            let _ = task.await;
        }
    }
    probe.check("before the ending");
    let guard = probe.guard.lock().unwrap().take().unwrap();
    let guard =
        Arc::try_unwrap(guard).unwrap_or_else(|_| panic!("a guard clone outlived its task"));
    let lost_before = probe.lost.is_cancelled();
    let ended_at = Instant::now();
    match ending {
        Ending::Release => {
            let released = guard.release().await;
            probe.lost_by_now(|| format!("release() returned {released:?}"));
        }
        Ending::CancelledRelease => {
            let after = s.delay("release cancelled after", scale);
            match timeout(after, guard.release()).await {
                Ok(released) => probe.lost_by_now(|| format!("release() returned {released:?}")),
                Err(_) => probe.lost_by_now(|| format!("release() cancelled after {after:?}")),
            }
        }
        Ending::Drop | Ending::Keep => {
            drop(guard);
            probe.lost_by_now(|| "the guard was dropped".to_owned());
        }
        Ending::Shutdown => {
            let outcome = shutdown(&locker).await;
            probe.lost_by_now(|| format!("Locker::shutdown() returned {outcome:?}"));
            drop(guard);
        }
    }

    // Everything in flight lands: late requests, background releases, the contender's turn.
    probe.contender_stop.store(true, Ordering::SeqCst);
    sleep(scale * 30).await;
    probe.stop.store(true, Ordering::SeqCst);
    // The checking tasks end at their next wake; a panic in one fails the case here.
    monitor.await.unwrap();
    if let Some(contender) = contender {
        contender.await.unwrap();
    }
    let fired = *probe.fired.lock().unwrap();
    match fired {
        None => s.violation(format!(
            "the lease ended ({ending:?}) and lost() never fired"
        )),
        Some((reason, at)) => {
            let second = timeout(Duration::ZERO, again).await;
            s.check(second == Ok(reason), || {
                format!("lost() fired with {reason:?}, a later lost() gave {second:?}")
            });
            if !lost_before {
                s.check(reason == LostReason::Released, || {
                    format!(
                        "lost() fired at {} with {reason:?}, after the ending ({ending:?}) at {}",
                        s.at(at),
                        s.at(ended_at)
                    )
                });
            }
        }
    }
}

/// Cases per exploration in CI; `FENCELOCK_EXPLORE_CASES` asks for more.
const CASES: u64 = 1500;

/// Renewals racing: the watchdog against user extends (awaited, concurrent, cancelled),
/// delayed and lost messages, another client taking the lock when it can. The guard ends by
/// a drop, here; `guard_endings` explores the other endings.
#[test]
fn guard_renewals() {
    explore("guard_renewals", CASES, |s| async move {
        guard_scenario(s, &[Ending::Drop, Ending::Keep]).await;
    });
}

/// Every way a lease ends, with renewals in flight when it does.
#[test]
fn guard_endings() {
    explore("guard_endings", CASES, |s| async move {
        guard_scenario(s, ENDINGS).await;
    });
}

/// Waiters on one key through `Locker`, with a backoff so long that only a wake-up gets them
/// the lock in time; holders release, drop, cancel their release, or let the lease expire.
#[test]
fn locker_wakeups() {
    explore("locker_wakeups", CASES, |s| async move {
        locker_scenario(s).await;
    });
}

async fn locker_scenario(s: Arc<Schedule>) {
    let scale = s.pick("ttl", &TTLS[..4]);
    let wire = Arc::new(Wire::new(s.clone(), scale, false).with_slow_acquire());
    let backend: Arc<dyn LockBackend> = Arc::new(WireHandle(wire.clone()));
    let hour = Duration::from_secs(3600);
    let waiters = 2 + s.below("waiters", 3);
    let mut tasks = Vec::new();
    let mut work = Duration::ZERO;
    for waiter in 0..waiters {
        let rounds = 1 + s.below("rounds", 3);
        work += scale * 8 * rounds as u32;
        let locker = Locker::new(backend.clone());
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..rounds {
                let watchdog = s.chance("holder watchdog", 50);
                let guard = locker
                    .lock(KEY)
                    .ttl(scale)
                    .watchdog(watchdog)
                    .wait(hour)
                    .backoff(Backoff {
                        initial: hour,
                        max: hour,
                    })
                    .await
                    .unwrap_or_else(|e| panic!("waiter {waiter} round {round}: {e}"));
                sleep(s.delay("hold", scale)).await;
                match s.below("holder ending", 4) {
                    0 => {
                        let _ = guard.release().await;
                    }
                    1 => {
                        let after = s.delay("release cancelled after", scale);
                        let _ = timeout(after, guard.release()).await;
                    }
                    2 if !watchdog => {
                        // Let the lease run out on the server, then drop the guard.
                        sleep(guard.lease().remaining() + scale).await;
                        drop(guard);
                    }
                    _ => drop(guard),
                }
            }
        }));
    }
    let all = async {
        for task in tasks {
            task.await.unwrap();
        }
    };
    if timeout(work + scale * 10, all).await.is_err() {
        s.violation(format!(
            "waiters still waiting after {:?}, enough for every round",
            work + scale * 10
        ));
    }
    free_while_sleeping(&s, &wire.events());
}

/// "No waiter sleeps while the lock is free", over the server's log: between two consecutive
/// events, the lock is free from the end of the last lease on; if a waiter sleeps through any
/// of that time, it was not woken.
fn free_while_sleeping(s: &Schedule, events: &[(Instant, Event)]) {
    let Some(&(mut previous, _)) = events.first() else {
        return;
    };
    let mut lease_until: Option<Instant> = None;
    let mut sleeping: Vec<(u64, Instant)> = Vec::new();
    for &(at, event) in events {
        if let Some(&(id, since)) = sleeping.first() {
            let free_from = lease_until.map_or(previous, |until| until.max(previous));
            if free_from < at {
                s.violation(format!(
                    "the lock was free from {} to {} while waiter sleep #{id} (since {}) slept",
                    s.at(free_from),
                    s.at(at),
                    s.at(since)
                ));
            }
        }
        match event {
            Event::Holder(holder) => lease_until = holder.map(|(_, until)| until),
            Event::SleepStart(id) => sleeping.push((id, at)),
            Event::SleepEnd(id) => sleeping.retain(|&(other, _)| other != id),
        }
        previous = at;
    }
}
