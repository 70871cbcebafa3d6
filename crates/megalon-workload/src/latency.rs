//! Latency histograms: per-thread, no allocation per sample, merged at the end.
//!
//! Buckets are log-linear: 16 sub-buckets per power of two of nanoseconds, so any
//! percentile is reported within 1/16 (6.25%) of the true sample, from 1 ns to 2^63 ns.

use std::fmt;
use std::time::Duration;

/// Sub-buckets per power of two.
const SUB_BUCKETS: usize = 16;
const SUB_BITS: u32 = SUB_BUCKETS.trailing_zeros();
/// Powers of two covered (nanoseconds up to 2^64).
const POWERS: usize = 64;

/// A histogram of durations.
#[derive(Clone)]
pub struct LatencyHistogram {
    counts: Box<[u64]>,
    samples: u64,
    sum_ns: u128,
    max_ns: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for LatencyHistogram {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LatencyHistogram")
            .field("samples", &self.samples)
            .field("max_ns", &self.max_ns)
            .finish()
    }
}

/// The bucket of `ns`: values below `SUB_BUCKETS` exactly, above that 16 buckets per
/// power of two.
fn bucket_of(ns: u64) -> usize {
    if ns < SUB_BUCKETS as u64 {
        return ns as usize;
    }
    let power = 63 - ns.leading_zeros(); // >= SUB_BITS
    let sub = (ns >> (power - SUB_BITS)) as usize & (SUB_BUCKETS - 1);
    ((power - SUB_BITS + 1) as usize) * SUB_BUCKETS + sub
}

/// The smallest value that lands in `bucket`.
fn bucket_floor(bucket: usize) -> u64 {
    if bucket < SUB_BUCKETS {
        return bucket as u64;
    }
    let power = (bucket / SUB_BUCKETS) as u32 - 1 + SUB_BITS;
    let sub = (bucket % SUB_BUCKETS) as u64;
    (1u64 << power) | (sub << (power - SUB_BITS))
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        Self {
            counts: vec![0; (POWERS - SUB_BITS as usize + 1) * SUB_BUCKETS].into_boxed_slice(),
            samples: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }

    /// Records one sample.
    #[inline]
    pub fn record(&mut self, latency: Duration) {
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        self.counts[bucket_of(ns)] += 1;
        self.samples += 1;
        self.sum_ns += u128::from(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
        self.samples += other.samples;
        self.sum_ns += other.sum_ns;
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Samples recorded.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// The mean, or zero without samples.
    pub fn mean(&self) -> Duration {
        if self.samples == 0 {
            return Duration::ZERO;
        }
        Duration::from_nanos((self.sum_ns / u128::from(self.samples)) as u64)
    }

    /// The largest sample.
    pub fn max(&self) -> Duration {
        Duration::from_nanos(self.max_ns)
    }

    /// The `quantile` (0..=1): the floor of the bucket holding the sample of that rank
    /// (at most 6.25% below it), or zero without samples.
    pub fn quantile(&self, quantile: f64) -> Duration {
        if self.samples == 0 {
            return Duration::ZERO;
        }
        let rank = ((quantile.clamp(0.0, 1.0) * self.samples as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (bucket, count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                return Duration::from_nanos(bucket_floor(bucket).min(self.max_ns));
            }
        }
        self.max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotone_and_within_a_sixteenth() {
        let mut last = 0;
        for ns in (0..100_000u64).chain([1 << 40, (1 << 40) + 12345, u64::MAX]) {
            let bucket = bucket_of(ns);
            assert!(bucket >= last, "{ns}");
            last = bucket;
            let floor = bucket_floor(bucket);
            assert!(floor <= ns, "{ns}: floor {floor}");
            assert!(ns - floor <= ns / 16, "{ns}: floor {floor}");
        }
    }

    #[test]
    fn quantiles_of_a_known_distribution() {
        let mut h = LatencyHistogram::new();
        for us in 1..=1000u64 {
            h.record(Duration::from_micros(us));
        }
        let near = |q: f64, us: u64| {
            let got = h.quantile(q).as_nanos() as f64;
            let want = (us * 1000) as f64;
            assert!(
                got <= want && got >= want * 15.0 / 16.0,
                "q{q}: {got} vs {want}"
            );
        };
        near(0.5, 500);
        near(0.99, 990);
        near(1.0, 1000);
        assert_eq!(h.max(), Duration::from_micros(1000));
        assert_eq!(h.mean(), Duration::from_nanos(500_500));
        let mut merged = LatencyHistogram::new();
        merged.merge(&h);
        merged.merge(&h);
        assert_eq!(merged.samples(), 2000);
        assert_eq!(merged.quantile(0.5), h.quantile(0.5));
    }
}
