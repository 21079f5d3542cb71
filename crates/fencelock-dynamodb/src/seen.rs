//! What a contender has seen of held locks, on its own monotonic clock: the ground for taking
//! over a lock whose holder stopped renewing it.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

/// The clock-rate bound: a contender takes over an unreleased lock only once it has seen the
/// same record version unchanged for `lease × DRIFT` (plus [`TAKEOVER_MARGIN`]) on its own
/// monotonic clock. 1.25 admits clocks whose rates differ by up to about 11 % (the holder's
/// slow, the contender's fast: `(1 + ρ) / (1 - ρ) ≤ 1.25 / 0.99`); no synchronized clocks
/// are needed, only clocks that tick at about the right rate (DESIGN.md section 5.8).
pub const DRIFT: f64 = 1.25;

/// Added to `lease × DRIFT`: a floor for short leases, covering the scheduling delay between
/// a response's arrival and the moment it is timestamped.
pub const TAKEOVER_MARGIN: Duration = Duration::from_millis(50);

/// Locks remembered at once; past that, observations older than their takeover time are
/// dropped (a forgotten lock only restarts its contender's clock).
const REMEMBERED: usize = 4_096;

/// One observation: a held lock's record version, its lease, and when this process first
/// received an answer showing that version.
#[derive(Debug, Clone)]
struct Seen {
    version: String,
    lease: Duration,
    since: Instant,
}

impl Seen {
    fn takeover_at(&self) -> Instant {
        self.since + self.lease.mul_f64(DRIFT) + TAKEOVER_MARGIN
    }
}

/// Observations per lock item (partition key).
#[derive(Debug, Default)]
pub(crate) struct Observations {
    seen: Mutex<HashMap<String, Seen>>,
}

/// How long a lock has looked the same to this process.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Watched {
    /// The lease that version carries.
    pub(crate) lease: Duration,
    /// Time since this process first saw the version.
    pub(crate) for_how_long: Duration,
    /// Whether a takeover conditioned on the version may be sent now.
    pub(crate) takeover: bool,
}

impl Observations {
    /// Records that an answer received at `at` (taken after the answer arrived, so the write
    /// it shows happened before) showed `pk` held at `version` with `lease`. A version seen
    /// before keeps its first time.
    pub(crate) fn observe(&self, pk: &str, version: &str, lease: Duration, at: Instant) -> Watched {
        let mut seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        if seen.len() >= REMEMBERED && !seen.contains_key(pk) {
            let now = Instant::now();
            seen.retain(|_, s| s.takeover_at() > now);
        }
        let entry = seen.entry(pk.to_owned()).or_insert_with(|| Seen {
            version: version.to_owned(),
            lease,
            since: at,
        });
        if entry.version != version {
            *entry = Seen {
                version: version.to_owned(),
                lease,
                since: at,
            };
        }
        Watched {
            lease: entry.lease,
            for_how_long: at.saturating_duration_since(entry.since),
            takeover: at >= entry.takeover_at(),
        }
    }

    /// The version a takeover of `pk` may be conditioned on now: one seen unchanged for its
    /// lease × [`DRIFT`] + [`TAKEOVER_MARGIN`].
    pub(crate) fn takeover(&self, pk: &str) -> Option<String> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.get(pk)
            .filter(|s| Instant::now() >= s.takeover_at())
            .map(|s| s.version.clone())
    }

    /// Forgets `pk` (this process was just granted it, or saw it free).
    pub(crate) fn forget(&self, pk: &str) {
        self.seen
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(pk);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_version_is_taken_over_only_after_lease_times_drift() {
        let observations = Observations::default();
        let lease = Duration::from_secs(10);
        let start = Instant::now();
        observations.observe("k", "v1", lease, start);
        tokio::time::advance(Duration::from_millis(12_499)).await;
        assert_eq!(observations.takeover("k"), None, "before lease × DRIFT");
        // The same version seen again keeps its first time.
        observations.observe("k", "v1", lease, Instant::now());
        tokio::time::advance(Duration::from_millis(50)).await;
        assert_eq!(observations.takeover("k"), None, "within the margin");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(observations.takeover("k").as_deref(), Some("v1"));
        // A new version (the holder renewed) starts the clock again.
        let watched = observations.observe("k", "v2", lease, Instant::now());
        assert!(!watched.takeover);
        assert_eq!(watched.for_how_long, Duration::ZERO);
        assert_eq!(observations.takeover("k"), None);
        observations.forget("k");
        assert_eq!(observations.takeover("k"), None);
    }
}
