//! How late the numbers are: for every live interval, the time from its end in the kernel (the
//! flip that closed it, `CLOCK_MONOTONIC`) to the Batch reaching the consumer ("drain") and to
//! its frame or line being written out ("shown"). Kept in histograms and written as one JSON
//! object on exit with `--latency-report FILE`, which is what `cargo xtask bench scale` reads.

use std::io::Write as _;
use std::path::Path;

use anyhow::Context as _;
use hdrhistogram::Histogram;

/// Latency histograms, in ns, 3 significant digits, up to 60 s (later values are clamped).
/// (`None` only if hdrhistogram refused the constant bounds, which would be a bug there.)
pub struct Latency {
    drain: Option<Histogram<u64>>,
    shown: Option<Histogram<u64>>,
}

const MAX_NS: u64 = 60_000_000_000;

fn hist() -> Option<Histogram<u64>> {
    Histogram::new_with_bounds(1, MAX_NS, 3).ok()
}

fn record(h: &mut Option<Histogram<u64>>, ns: u64) {
    if let Some(h) = h {
        let _ = h.record(ns.clamp(1, MAX_NS));
    }
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

impl Latency {
    pub fn new() -> Self {
        Self {
            drain: hist(),
            shown: hist(),
        }
    }

    /// The Batch of the interval that ended at `end_ns` has arrived (at `now_ns`).
    pub fn drained(&mut self, end_ns: u64, now_ns: u64) {
        record(&mut self.drain, now_ns.saturating_sub(end_ns));
    }

    /// The interval that ended at `end_ns` is on screen (or written out) at `now_ns`.
    pub fn shown(&mut self, end_ns: u64, now_ns: u64) {
        record(&mut self.shown, now_ns.saturating_sub(end_ns));
    }

    /// The summary: counts and p50/p90/p99/max in microseconds for both stages.
    pub fn report(&self) -> serde_json::Value {
        let stage = |h: &Option<Histogram<u64>>| {
            let Some(h) = h else {
                return serde_json::Value::Null;
            };
            let us = |ns: u64| (ns as f64 / 100.0).round() / 10.0;
            serde_json::json!({
                "count": h.len(),
                "p50_us": us(h.value_at_quantile(0.50)),
                "p90_us": us(h.value_at_quantile(0.90)),
                "p99_us": us(h.value_at_quantile(0.99)),
                "max_us": us(h.max()),
            })
        };
        serde_json::json!({ "drain": stage(&self.drain), "shown": stage(&self.shown) })
    }

    /// Write the summary to `path` (created 0600; never through a symlink; a regular file is
    /// replaced).
    pub fn write_report(&self, path: &Path) -> anyhow::Result<()> {
        let mut f = crate::record::writer::create_file(path, true)
            .with_context(|| format!("writing the latency report {}", path.display()))?;
        writeln!(f, "{}", self.report())
            .with_context(|| format!("writing the latency report {}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_has_the_percentiles_of_what_was_recorded() {
        let mut l = Latency::new();
        for i in 1..=100u64 {
            l.drained(1_000_000, 1_000_000 + i * 1_000);
            l.shown(1_000_000, 1_000_000 + i * 10_000);
        }
        let r = l.report();
        assert_eq!(r["drain"]["count"], 100);
        // 3 significant digits: within 0.1%.
        let near = |v: &serde_json::Value, want: f64| {
            let got = v.as_f64().unwrap_or(f64::NAN);
            assert!((got - want).abs() <= want * 0.001, "{got} vs {want}");
        };
        near(&r["drain"]["p50_us"], 50.0);
        near(&r["shown"]["p99_us"], 990.0);
        near(&r["shown"]["max_us"], 1000.0);
    }

    #[test]
    fn clocks_going_backwards_do_not_panic() {
        let mut l = Latency::new();
        l.drained(5_000, 1_000);
        l.shown(u64::MAX, 0);
        assert_eq!(l.report()["drain"]["count"], 1);
    }
}
