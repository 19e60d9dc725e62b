//! The kernel's latency histograms as Prometheus histograms. The kernel counts in log-linear
//! buckets (`ebee_shared::qos::bucket`: 32 per power of two of nanoseconds); Prometheus gets
//! two buckets per power of two, from about 1 µs to about 34 s, whose bounds are bucket edges
//! of the kernel's, so every kernel bucket falls in exactly one of them and the counts are
//! exact. `histogram_quantile` then interpolates within a bucket at most 50% wide.

use ebee_shared::qos::{BUCKETS, MAX_EXP, bucket_low, bucket_width};

use crate::batch::qos::SparseHist;

/// Smallest power of two (ns) with a bound of its own: 2^10 ns, about 1 µs.
const MIN_EXP: u32 = 10;

/// Upper bounds (ns) of the Prometheus buckets, and the one each kernel bucket falls in.
#[derive(Clone, Debug)]
pub struct Buckets {
    bounds_ns: Vec<u64>,
    /// For each kernel bucket, the index of its Prometheus bucket (`bounds_ns.len()` is +Inf).
    of_kernel: Vec<usize>,
}

impl Default for Buckets {
    fn default() -> Self {
        Self::new()
    }
}

impl Buckets {
    /// Bounds 2^e and 1.5 * 2^e ns for e from 10 to `MAX_EXP`, and 2^(MAX_EXP+1).
    pub fn new() -> Self {
        let mut bounds_ns = Vec::new();
        for e in MIN_EXP..=MAX_EXP {
            bounds_ns.push(1u64 << e);
            bounds_ns.push((1u64 << e) + (1u64 << (e - 1)));
        }
        bounds_ns.push(1u64 << (MAX_EXP + 1));
        let of_kernel = (0..BUCKETS)
            .map(|i| {
                // The last kernel bucket is open-ended: +Inf.
                if i == BUCKETS - 1 {
                    return bounds_ns.len();
                }
                // Values in kernel bucket i are below low + width: the first bound at or
                // above that holds them all (every bound is a kernel bucket edge).
                let end = bucket_low(i) + bucket_width(i);
                bounds_ns.partition_point(|b| *b < end)
            })
            .collect();
        Self {
            bounds_ns,
            of_kernel,
        }
    }

    /// Number of finite buckets.
    pub fn len(&self) -> usize {
        self.bounds_ns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.bounds_ns.is_empty()
    }

    /// Counters for one histogram: one per bucket plus +Inf.
    pub fn zeros(&self) -> Vec<u64> {
        vec![0; self.bounds_ns.len() + 1]
    }

    /// Add a kernel histogram's counts to `acc` (from [`Buckets::zeros`]).
    pub fn add(&self, acc: &mut [u64], hist: &SparseHist) {
        for (i, n) in hist {
            let j = self.of_kernel.get(usize::from(*i)).copied();
            if let Some(a) = j.and_then(|j| acc.get_mut(j)) {
                *a += u64::from(*n);
            }
        }
    }

    /// `(upper bound in seconds, count)` per finite bucket, as the encoders take them (the
    /// +Inf bucket is the histogram's count).
    pub fn prometheus(&self, acc: &[u64]) -> Vec<(f64, u64)> {
        self.bounds_ns
            .iter()
            .zip(acc)
            .map(|(b, n)| (*b as f64 / 1e9, *n))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebee_shared::qos::bucket;

    #[test]
    fn every_value_lands_under_its_bound() {
        let b = Buckets::new();
        assert_eq!(b.len(), 2 * (MAX_EXP - MIN_EXP + 1) as usize + 1);
        // Values at, just under and just over every bound, and some between.
        let mut vals = vec![0u64, 1, 31, 32, 999, 1023, 1024, 1025];
        for bound in &b.bounds_ns {
            vals.extend([bound - 1, *bound, bound + 1, bound + bound / 3]);
        }
        for v in vals {
            let mut acc = b.zeros();
            b.add(&mut acc, &vec![(bucket(v) as u16, 1)]);
            let j = acc.iter().position(|n| *n == 1).unwrap();
            // Prometheus' le: the value is at most this bound, and above the one before.
            if j < b.len() {
                assert!(v <= b.bounds_ns[j], "{v} in bucket le={}", b.bounds_ns[j]);
                if j > 0 {
                    assert!(
                        v >= b.bounds_ns[j - 1],
                        "{v} above le={}",
                        b.bounds_ns[j - 1]
                    );
                }
            } else {
                // The kernel's last bucket is open-ended.
                assert!(v >= bucket_low(BUCKETS - 1), "{v} in +Inf");
            }
        }
    }

    #[test]
    fn counts_add_up() {
        let b = Buckets::new();
        let mut acc = b.zeros();
        b.add(
            &mut acc,
            &vec![(bucket(5_000) as u16, 3), (bucket(2_000_000) as u16, 4)],
        );
        b.add(&mut acc, &vec![(bucket(5_100) as u16, 1)]);
        assert_eq!(acc.iter().sum::<u64>(), 8);
        let p = b.prometheus(&acc);
        assert_eq!(p.len(), b.len());
        // 5 µs is in (4.096 µs, 6.144 µs].
        let i = p.iter().position(|(le, _)| *le > 5e-6).unwrap();
        assert_eq!(p[i], (6.144e-6, 4));
    }
}
