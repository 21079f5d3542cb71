//! Exponential backoff with full jitter.

use std::time::Duration;

/// Exponential backoff with full jitter: the n-th pause is uniform in
/// `[0, min(max, initial * 2^n)]`, which spreads competing waiters apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The cap of the first pause.
    pub initial: Duration,
    /// The largest cap.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(5),
            max: Duration::from_millis(500),
        }
    }
}

impl Backoff {
    /// The cap of the pause after `attempt` failed tries (0-based).
    pub fn cap(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(31)).unwrap_or(u32::MAX);
        self.initial.saturating_mul(factor).min(self.max)
    }

    /// A random pause for `attempt`: uniform in `[0, cap(attempt)]`.
    pub fn pause(&self, attempt: u32) -> Duration {
        let cap = self.cap(attempt);
        let nanos = u64::try_from(cap.as_nanos()).unwrap_or(u64::MAX);
        if nanos == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos(rand::random_range(0..=nanos))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_double_up_to_max() {
        let b = Backoff::default();
        assert_eq!(b.cap(0), Duration::from_millis(5));
        assert_eq!(b.cap(1), Duration::from_millis(10));
        assert_eq!(b.cap(6), Duration::from_millis(320));
        assert_eq!(b.cap(7), Duration::from_millis(500));
        assert_eq!(b.cap(1000), Duration::from_millis(500));
    }

    #[test]
    fn pauses_stay_within_cap_and_vary() {
        let b = Backoff::default();
        let pauses: Vec<_> = (0..200).map(|_| b.pause(4)).collect();
        assert!(pauses.iter().all(|p| *p <= b.cap(4)));
        let first = pauses[0];
        assert!(pauses.iter().any(|p| *p != first), "no jitter");
    }
}
