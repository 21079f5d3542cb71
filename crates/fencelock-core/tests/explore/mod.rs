//! Seeded schedule exploration on paused Tokio time.
//!
//! Each case runs a scenario on a fresh current-thread runtime whose clock is paused, so time
//! only moves when every task waits, and the order in which ready tasks run is fixed. What
//! varies is drawn from one seeded generator ([`Schedule`]): how long each request takes to
//! reach the server and to come back, whether its reply is lost, how many times a task yields
//! at each step (which reorders the tasks that are ready at the same instant), and what the
//! user does (extend, release, cancel, drop). The same seed gives the same schedule, so a
//! failure is replayed with `FENCELOCK_EXPLORE_SEED=<seed>`.
//!
//! The one thing a seed does not fix is which branch `tokio::select!` polls first when several
//! are ready at once (Tokio seeds that only under `--cfg tokio_unstable`); the properties do
//! not depend on it, and a replay that passes says so.
//!
//! Knobs (environment variables):
//! - `FENCELOCK_EXPLORE_SEED=<n>` (decimal or `0x` hex): run that one case, and print its
//!   choices.
//! - `FENCELOCK_EXPLORE_CASES=<n>`: cases per test (default: each test's own, a few seconds in
//!   all on two cores).
//! - `FENCELOCK_EXPLORE_BASE=<n>`: the first seed; the default is fixed per test, so CI runs
//!   the same schedules every time, and a longer or different exploration is one variable away.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub(crate) mod wire;

use std::fmt::Write as _;
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::time::Instant;

/// SplitMix64: a fixed algorithm, so a seed written down today replays the same schedule with
/// any version of any dependency (rand's `StdRng` does not promise that).
#[derive(Debug, Clone)]
struct SplitMix64(u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The choices of one case, drawn from its seed, and what its checks found.
#[derive(Debug)]
pub(crate) struct Schedule {
    seed: u64,
    rng: Mutex<SplitMix64>,
    started: Mutex<Option<Instant>>,
    choices: Mutex<Vec<String>>,
    violations: Mutex<Vec<String>>,
    /// How many choices had been made at the first violation.
    first_violation: Mutex<Option<usize>>,
}

impl Schedule {
    fn new(seed: u64) -> Self {
        Schedule {
            seed,
            rng: Mutex::new(SplitMix64(seed)),
            started: Mutex::new(None),
            choices: Mutex::new(Vec::new()),
            violations: Mutex::new(Vec::new()),
            first_violation: Mutex::new(None),
        }
    }

    /// Virtual time since the case started, for messages.
    pub(crate) fn elapsed(&self) -> Duration {
        let started = *self.started.lock().unwrap();
        started.map_or(Duration::ZERO, |s| s.elapsed())
    }

    /// `t` as an offset from the start of the case.
    pub(crate) fn at(&self, t: Instant) -> String {
        let started = self.started.lock().unwrap().unwrap_or(t);
        if t >= started {
            format!("+{:?}", t - started)
        } else {
            format!("-{:?}", started - t)
        }
    }

    fn record(&self, what: &str, value: impl std::fmt::Debug) {
        let line = format!("[+{:?}] {what} = {value:?}", self.elapsed());
        self.choices.lock().unwrap().push(line);
    }

    /// Adds a line about what happened (not a choice) to the case's log.
    pub(crate) fn note(&self, what: impl std::fmt::Display) {
        let line = format!("[+{:?}] {what}", self.elapsed());
        self.choices.lock().unwrap().push(line);
    }

    /// A number in `0..n`.
    pub(crate) fn below(&self, what: &str, n: u64) -> u64 {
        let value = self.rng.lock().unwrap().next() % n.max(1);
        self.record(what, value);
        value
    }

    /// True with probability `percent` / 100.
    pub(crate) fn chance(&self, what: &str, percent: u64) -> bool {
        let value = self.rng.lock().unwrap().next() % 100 < percent;
        self.record(what, value);
        value
    }

    /// One of `options`.
    pub(crate) fn pick<T: Copy + std::fmt::Debug>(&self, what: &str, options: &[T]) -> T {
        let index = (self.rng.lock().unwrap().next() % options.len() as u64) as usize;
        let value = options[index];
        self.record(what, value);
        value
    }

    /// Yields to the scheduler 0 to 3 times: the tasks ready at this instant run in another
    /// order.
    pub(crate) async fn interleave(&self, what: &str) {
        for _ in 0..self.below(what, 4) {
            tokio::task::yield_now().await;
        }
    }

    /// A delay for a message on the way, relative to `scale` (the lease's ttl): mostly none,
    /// sometimes a good part of the lease or more.
    pub(crate) fn delay(&self, what: &str, scale: Duration) -> Duration {
        let menu = [
            Duration::ZERO,
            Duration::ZERO,
            Duration::ZERO,
            Duration::from_millis(1),
            scale / 10,
            scale / 3,
            scale / 2,
            scale,
            scale * 2,
        ];
        self.pick(what, &menu)
    }

    /// Records a broken property; the case fails when it ends.
    pub(crate) fn violation(&self, message: impl Into<String>) {
        let line = format!("[+{:?}] {}", self.elapsed(), message.into());
        self.violations.lock().unwrap().push(line);
        let made = self.choices.lock().unwrap().len();
        self.first_violation.lock().unwrap().get_or_insert(made);
    }

    /// Records a broken property unless `ok`.
    pub(crate) fn check(&self, ok: bool, message: impl FnOnce() -> String) {
        if !ok {
            self.violation(message());
        }
    }

    pub(crate) fn has_violations(&self) -> bool {
        !self.violations.lock().unwrap().is_empty()
    }
}

/// Runs a future that completes without waiting (the memory backend's calls never wait), from
/// code that cannot await, such as a check between two steps of a task.
pub(crate) fn at_once<F: Future>(future: F) -> F::Output {
    let mut future = pin!(future);
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(output) => output,
        Poll::Pending => panic!("a call expected to complete at once waited"),
    }
}

fn env_u64(name: &str) -> Option<u64> {
    let text = std::env::var(name).ok()?;
    let text = text.trim().replace('_', "");
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => text.parse(),
    };
    Some(parsed.unwrap_or_else(|_| panic!("{name}={text:?} is not a number")))
}

/// A fixed first seed per test, so CI explores the same schedules every run.
fn base_seed(test: &str) -> u64 {
    test.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// Runs `scenario` once per seed, each on a fresh paused current-thread runtime, and fails
/// with the seed, the broken properties and the choices that led there.
pub(crate) fn explore<F, Fut>(test: &str, default_cases: u64, scenario: F)
where
    F: Fn(Arc<Schedule>) -> Fut,
    Fut: Future<Output = ()>,
{
    let replay = env_u64("FENCELOCK_EXPLORE_SEED");
    let seeds: Vec<u64> = match replay {
        Some(seed) => vec![seed],
        None => {
            let base = env_u64("FENCELOCK_EXPLORE_BASE").unwrap_or_else(|| base_seed(test));
            let cases = env_u64("FENCELOCK_EXPLORE_CASES").unwrap_or(default_cases);
            (0..cases).map(|i| base.wrapping_add(i)).collect()
        }
    };
    let total = seeds.len();
    for (case, seed) in seeds.into_iter().enumerate() {
        let schedule = Arc::new(Schedule::new(seed));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            runtime.block_on(async {
                *schedule.started.lock().unwrap() = Some(Instant::now());
                scenario(schedule.clone()).await;
            })
        }));
        // Drops the tasks still alive (a contender, a late request) with the runtime.
        drop(runtime);
        let panicked = outcome.err().map(|p| panic_text(p.as_ref()));
        if panicked.is_some() || schedule.has_violations() {
            panic!(
                "{}",
                report(
                    test,
                    case,
                    total,
                    &schedule,
                    panicked.as_deref(),
                    replay.is_some()
                )
            );
        }
        if replay.is_some() {
            // A replay that passed still shows its choices (with `--nocapture`).
            let text = report(test, case, total, &schedule, None, true);
            let _ = std::io::Write::write_all(&mut std::io::stderr(), text.as_bytes());
        }
    }
}

fn panic_text(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_owned()
    }
}

fn report(
    test: &str,
    case: usize,
    total: usize,
    schedule: &Schedule,
    panicked: Option<&str>,
    everything: bool,
) -> String {
    let violations = schedule.violations.lock().unwrap();
    let choices = schedule.choices.lock().unwrap();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "schedule exploration `{test}`: seed {:#x} (case {} of {total})",
        schedule.seed,
        case + 1
    );
    if let Some(message) = panicked {
        let _ = writeln!(out, "panicked: {message}");
    }
    for violation in violations.iter().take(8) {
        let _ = writeln!(out, "violated: {violation}");
    }
    if violations.len() > 8 {
        let _ = writeln!(out, "violated: ... {} more", violations.len() - 8);
    }
    if violations.is_empty() && panicked.is_none() {
        let _ = writeln!(out, "no property was violated");
    }
    let _ = writeln!(
        out,
        "replay: FENCELOCK_EXPLORE_SEED={:#x} cargo test -p fencelock-core --test interleavings {test}",
        schedule.seed
    );
    // The choices that led to the first violation, and a few after it.
    let shown = if everything { usize::MAX } else { 60 };
    let until = if everything {
        choices.len()
    } else {
        let first = schedule
            .first_violation
            .lock()
            .unwrap()
            .unwrap_or(choices.len());
        (first + 10).min(choices.len())
    };
    let skipped = until.saturating_sub(shown);
    let _ = writeln!(
        out,
        "choices and events ({} in all; {}a replay shows them all):",
        choices.len(),
        if until - skipped < choices.len() {
            format!("{} to {} here; ", skipped + 1, until)
        } else {
            String::new()
        }
    );
    for line in &choices[skipped..until] {
        let _ = writeln!(out, "  {line}");
    }
    out
}
