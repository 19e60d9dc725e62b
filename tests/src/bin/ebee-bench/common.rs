//! What several benchmarks share: the sampling flags, starting `ebee-load` beside this binary,
//! a fixed-rate ticker, and the statistics of repeated runs.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::json;

/// How long each interval is and how many are measured (the precision benchmarks).
#[derive(clap::Args)]
pub struct Sampling {
    /// Interval length in ms.
    #[arg(long, default_value_t = 50)]
    pub interval_ms: u64,
    /// Intervals to measure.
    #[arg(long, default_value_t = 200)]
    pub intervals: u32,
}

/// A command for the `ebee-load` built beside this binary.
pub fn ebee_load() -> anyhow::Result<Command> {
    let exe = std::env::current_exe()?;
    Ok(Command::new(exe.with_file_name("ebee-load")))
}

/// A process to pin that is not the measured load: a sleeper doing ~100 syscalls/s, killed
/// when dropped.
pub fn sleeper() -> anyhow::Result<ebee_tests::Proc> {
    Ok(ebee_tests::Proc(
        ebee_load()?.args(["sleeper", "--ms", "10"]).spawn()?,
    ))
}

/// Wakes every `tick` from when it was made, however long the work between wakes took.
pub struct Ticker {
    tick: Duration,
    next: Instant,
}

impl Ticker {
    pub fn new(tick: Duration) -> Self {
        Self {
            tick,
            next: Instant::now(),
        }
    }

    /// Sleep until the next tick (at once when it has passed).
    pub fn wait(&mut self) {
        self.next += self.tick;
        if let Some(d) = self.next.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
    }
}

/// Median, minimum and every value of a benchmark's runs (ns).
pub fn run_stats(runs: Vec<f64>) -> serde_json::Value {
    let mut s = runs.clone();
    s.sort_by(f64::total_cmp);
    let med = s.get(s.len() / 2).copied().unwrap_or(f64::NAN);
    let min = s.first().copied().unwrap_or(f64::NAN);
    json!({"median_ns": med, "min_ns": min, "runs": runs})
}

/// Mean run time from BPF statistics: `ns` over `runs`, NaN when it never ran.
pub fn ns_per_run(ns: u64, runs: u64) -> f64 {
    if runs == 0 {
        f64::NAN
    } else {
        ns as f64 / runs as f64
    }
}
