//! A log-linear latency histogram: constant memory however many operations a run makes,
//! under 1% relative error per recorded value.

use std::fmt;
use std::time::Duration;

/// Sub-buckets per power of two: 2^7 = 128, so each bucket spans under 1% of its value.
const SUB_BITS: u32 = 7;
const SUB: u64 = 1 << SUB_BITS;
const BUCKETS: usize = ((64 - SUB_BITS as usize) + 1) * SUB as usize;

/// Latencies in nanoseconds, bucketed.
#[derive(Clone)]
pub struct Histogram {
    counts: Vec<u64>,
    total: u64,
    sum_nanos: u128,
}

impl fmt::Debug for Histogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.total)
            .field("p50", &self.quantile(0.5))
            .field("p99", &self.quantile(0.99))
            .finish()
    }
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: vec![0; BUCKETS],
            total: 0,
            sum_nanos: 0,
        }
    }
}

fn index(nanos: u64) -> usize {
    if nanos < SUB {
        return nanos as usize;
    }
    let msb = 63 - nanos.leading_zeros();
    let group = (msb - SUB_BITS + 1) as usize;
    let sub = (nanos >> (msb - SUB_BITS)) - SUB;
    group * SUB as usize + sub as usize
}

/// The middle of bucket `index`.
fn value(index: usize) -> u64 {
    let index = index as u64;
    if index < SUB {
        return index;
    }
    let group = index / SUB;
    let shift = group - 1;
    let low = (SUB + index % SUB) << shift;
    low + (1u64 << shift) / 2
}

impl Histogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one latency.
    pub fn record(&mut self, latency: Duration) {
        let nanos = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.counts[index(nanos)] += 1;
        self.total += 1;
        self.sum_nanos += u128::from(nanos);
    }

    /// Adds every value of `other`.
    pub fn merge(&mut self, other: &Histogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.sum_nanos += other.sum_nanos;
    }

    /// How many latencies were recorded.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// The mean, or zero when empty.
    pub fn mean(&self) -> Duration {
        match self.total {
            0 => Duration::ZERO,
            n => Duration::from_nanos(
                u64::try_from(self.sum_nanos / u128::from(n)).unwrap_or(u64::MAX),
            ),
        }
    }

    /// The `q` quantile (0.5 for the median), or zero when empty.
    pub fn quantile(&self, q: f64) -> Duration {
        if self.total == 0 {
            return Duration::ZERO;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Duration::from_nanos(value(i));
            }
        }
        Duration::from_nanos(value(BUCKETS - 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_tight() {
        let mut last = 0;
        for nanos in (0..5_000u64).chain([1 << 20, (1 << 20) + 12_345, u64::MAX / 3, u64::MAX]) {
            let i = index(nanos);
            assert!(i < BUCKETS);
            assert!(i >= last || nanos > 5_000);
            last = i;
            let mid = value(i) as f64;
            assert!(
                (mid - nanos as f64).abs() <= nanos as f64 / 100.0 + 1.0,
                "{nanos} -> {mid}"
            );
        }
    }

    #[test]
    fn quantiles() {
        let mut h = Histogram::new();
        for micros in 1..=100 {
            h.record(Duration::from_micros(micros));
        }
        let p50 = h.quantile(0.5).as_nanos() as f64;
        let p99 = h.quantile(0.99).as_nanos() as f64;
        assert!((p50 - 50_000.0).abs() < 500.0, "{p50}");
        assert!((p99 - 99_000.0).abs() < 1_000.0, "{p99}");
        let mut other = Histogram::new();
        other.merge(&h);
        assert_eq!(other.count(), 100);
        assert_eq!(Histogram::new().quantile(0.5), Duration::ZERO);
    }
}
