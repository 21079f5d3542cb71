//! One process's new connections to one server while that server refuses them as full
//! ("too many connections": PostgreSQL's SQLSTATE 53300, MySQL's error 1040).
//!
//! Every waiter of a process would otherwise open a connection of its own at each try and be
//! refused at each, thousands of times a second against a server at its limit, which only
//! keeps the server busier. A [`FullServer`] gate, one per server and process, lets exactly one
//! connect through at a time while the server is full, and not before a pause that grows
//! exponentially with each refusal (with jitter, so that processes spread apart): at most
//! `1 / (initial / 2)` refused connects a second, ten with the default. The others are told at
//! once that the server is full, with the refusal's message, and try again later as with any
//! retryable error. A connect that succeeds opens the gate for everyone.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;

/// The pauses between connects to a full server: the n-th is uniform in `[cap / 2, cap]`,
/// `cap = min(max, initial * 2^n)`.
const PAUSES: Backoff = Backoff {
    initial: Duration::from_millis(200),
    max: Duration::from_secs(5),
};

/// The gate of one server's new connections (see the module's documentation).
#[derive(Debug, Default)]
pub struct FullServer {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Refusals since the last connect that succeeded.
    refusals: u32,
    /// No connect before this instant.
    not_before: Option<Instant>,
    /// A connect is in flight while the server is known full.
    probing: bool,
    /// What the server said at its last refusal.
    said: String,
}

/// What [`FullServer::enter`] lets a caller do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// Connect: the server is not known to be full, or this caller is the one probe.
    Connect,
    /// Do not connect: the server refused as full (it said `said`), and the next connect is
    /// allowed in `retry_in` (or another caller's is in flight).
    Full {
        /// What the server said at its last refusal.
        said: String,
        /// When the next connect may be tried.
        retry_in: Duration,
    },
}

impl FullServer {
    /// A gate for a server not known to be full.
    pub fn new() -> Self {
        FullServer::default()
    }

    /// Whether a caller that may need a new connection should try: call before acquiring a
    /// connection, then [`connected`](Self::connected) or [`refused`](Self::refused) with
    /// the outcome (any other outcome: [`abandoned`](Self::abandoned)).
    pub fn enter(&self) -> Entry {
        let mut state = self.lock();
        if state.refusals == 0 {
            return Entry::Connect;
        }
        let now = Instant::now();
        let not_before = state.not_before.unwrap_or(now);
        if state.probing || now < not_before {
            return Entry::Full {
                said: state.said.clone(),
                retry_in: not_before.saturating_duration_since(now),
            };
        }
        state.probing = true;
        Entry::Connect
    }

    /// The connect succeeded (or needed none): the server is not full.
    pub fn connected(&self) {
        let mut state = self.lock();
        state.refusals = 0;
        state.not_before = None;
        state.probing = false;
    }

    /// The server refused the connect as full, saying `said`. Returns the pause before the
    /// next connect, and whether this refusal starts a streak (the first since a connect
    /// succeeded: the one to tell the user about).
    pub fn refused(&self, said: &str) -> (Duration, bool) {
        let mut state = self.lock();
        let now = Instant::now();
        said.clone_into(&mut state.said);
        if let Some(not_before) = state.not_before.filter(|t| *t > now && !state.probing) {
            // Another connect sent before the server was known full, refused in the same
            // window: the pause already set stands, and the streak grows once per window.
            return (not_before - now, false);
        }
        let first = state.refusals == 0;
        // Half the cap, plus half of the backoff's own full-jitter pause: `[cap / 2, cap]`.
        let pause = PAUSES.cap(state.refusals) / 2 + PAUSES.pause(state.refusals) / 2;
        state.refusals = state.refusals.saturating_add(1);
        state.not_before = Some(now + pause);
        state.probing = false;
        (pause, first)
    }

    /// The connect ended otherwise (another error, a time-out): the next caller may probe.
    pub fn abandoned(&self) {
        self.lock().probing = false;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn full(entry: &Entry) -> bool {
        matches!(entry, Entry::Full { .. })
    }

    #[tokio::test(start_paused = true)]
    async fn one_probe_at_a_time_and_not_before_the_pause() {
        let gate = FullServer::new();
        assert_eq!(gate.enter(), Entry::Connect);
        assert_eq!(
            gate.enter(),
            Entry::Connect,
            "a server not known full: everyone"
        );
        let (pause, first) = gate.refused("too many connections");
        assert!(first);
        assert!(pause >= Duration::from_millis(100) && pause <= Duration::from_millis(200));
        let Entry::Full { said, retry_in } = gate.enter() else {
            panic!("connected during the pause");
        };
        assert_eq!(said, "too many connections");
        assert!(retry_in <= pause);
        tokio::time::advance(pause).await;
        assert_eq!(gate.enter(), Entry::Connect, "the probe after the pause");
        assert!(
            full(&gate.enter()),
            "a second caller while the probe is out"
        );
        let (second, first) = gate.refused("too many connections");
        assert!(!first);
        assert!(
            second >= Duration::from_millis(200),
            "the pause grows: {second:?}"
        );
        tokio::time::advance(second).await;
        assert_eq!(gate.enter(), Entry::Connect);
        gate.connected();
        assert_eq!(gate.enter(), Entry::Connect);
        assert_eq!(gate.enter(), Entry::Connect, "open for everyone again");
    }

    #[tokio::test(start_paused = true)]
    async fn refused_connects_stay_under_ten_a_second_and_the_pause_is_capped() {
        let gate = FullServer::new();
        let started = Instant::now();
        let mut refused = 0u32;
        let mut longest = Duration::ZERO;
        while started.elapsed() < Duration::from_secs(60) {
            if gate.enter() == Entry::Connect {
                refused += 1;
                longest = longest.max(gate.refused("full").0);
            }
            tokio::time::advance(Duration::from_millis(1)).await;
        }
        assert!(refused <= 10 * 60, "{refused} refused connects in 60 s");
        assert!(
            refused >= 12,
            "the server was tried only {refused} times in 60 s"
        );
        assert!(longest <= Duration::from_secs(5), "{longest:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn connects_refused_together_escalate_once() {
        let gate = FullServer::new();
        // Sixteen connects sent before the server was known full, all refused.
        for _ in 0..16 {
            assert_eq!(gate.enter(), Entry::Connect);
        }
        let (first, _) = gate.refused("full");
        for _ in 1..16 {
            let (pause, streak_start) = gate.refused("full");
            assert!(!streak_start);
            assert!(pause <= first);
        }
        tokio::time::advance(first).await;
        assert_eq!(gate.enter(), Entry::Connect);
        let (second, _) = gate.refused("full");
        assert!(
            second <= Duration::from_millis(400),
            "the second pause grew as if sixteen probes had failed: {second:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_abandoned_probe_lets_the_next_one_through() {
        let gate = FullServer::new();
        let (pause, _) = gate.refused("full");
        tokio::time::advance(pause).await;
        assert_eq!(gate.enter(), Entry::Connect);
        gate.abandoned();
        assert_eq!(gate.enter(), Entry::Connect);
    }
}
