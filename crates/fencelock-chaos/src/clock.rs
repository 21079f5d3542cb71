//! The one clock of a run's history: `CLOCK_MONOTONIC`, which every process on the machine
//! reads alike, so the workers' stamps and the coordinator's (faults, the final read) can be
//! put on one time line. It never goes back, and a paused process does not stop it.

use nix::time::{ClockId, clock_gettime};

/// Nanoseconds on the machine's monotonic clock.
pub(crate) fn now_ns() -> u64 {
    match clock_gettime(ClockId::CLOCK_MONOTONIC) {
        Ok(t) => {
            let secs = u64::try_from(t.tv_sec()).unwrap_or(0);
            let nanos = u64::try_from(t.tv_nsec()).unwrap_or(0);
            secs.saturating_mul(1_000_000_000).saturating_add(nanos)
        }
        // CLOCK_MONOTONIC is always there on Linux and the BSDs. Were it not, every stamp
        // would be 0 and every operation would look concurrent with every other, which the
        // history checker can only accept more easily, never reject wrongly.
        Err(_) => 0,
    }
}
