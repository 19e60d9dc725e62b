//! ebee-top's own cost per interval: its process CPU time and its eBPF programs' run time
//! (the kernel's BPF statistics), as differences between ticks. The statistics add two clock
//! reads to every run of every program on the machine, so ebee-top keeps them on only for a
//! sampling window (1 s, and two intervals at least, in every 10 s or 20 intervals, whichever is
//! longer: about a tenth of the time): the programs' time per ns of wall time measured in the
//! last window is applied to every interval until the next one, and marked as an estimate.

use crate::batch::SelfCost;
use crate::probes::{Probes, ProgStats};
use crate::time::process_cpu_ns;

/// The readings at the last tick, and the sampling window's sums.
pub(super) struct CostMeter {
    cpu_ns: u64,
    bpf: ProgStats,
    window: Window,
    /// Program ns and runs per ns of interval, from the last complete window.
    rate: Option<(f64, f64)>,
}

/// Sums over the intervals of a sampling window (statistics on at both ends of each).
#[derive(Default)]
struct Window {
    bpf_ns: u64,
    runs: u64,
    ns: u64,
}

impl Window {
    fn rate(&self) -> Option<(f64, f64)> {
        (self.ns > 0).then(|| {
            (
                self.bpf_ns as f64 / self.ns as f64,
                self.runs as f64 / self.ns as f64,
            )
        })
    }
}

impl CostMeter {
    /// Start counting now.
    pub(super) fn start() -> Self {
        Self {
            cpu_ns: process_cpu_ns(),
            bpf: ProgStats::default(),
            window: Window::default(),
            rate: None,
        }
    }

    /// What was spent since the last tick, an interval of `interval_ns`.
    pub(super) fn tick(&mut self, probes: &Probes, interval_ns: u64) -> SelfCost {
        let cpu_now = process_cpu_ns();
        let now = probes.prog_stats();
        let (d_ns, d_runs) = (
            now.run_ns.saturating_sub(self.bpf.run_ns),
            now.run_count.saturating_sub(self.bpf.run_count),
        );
        let both_on = self.bpf.enabled && now.enabled;
        let mut cost = SelfCost {
            cpu_ns: cpu_now.saturating_sub(self.cpu_ns),
            ..Default::default()
        };
        if !probes.stats_sampled() {
            cost.bpf_ns = now.enabled.then_some(d_ns);
            cost.bpf_runs = now.enabled.then_some(d_runs);
        } else if probes.syscalls_attached() {
            // Something is pinned: the statistics stay off and the syscall hooks change what
            // the programs cost, so an earlier rate says nothing.
            self.window = Window::default();
            self.rate = None;
        } else {
            if both_on {
                self.window.bpf_ns += d_ns;
                self.window.runs += d_runs;
                self.window.ns += interval_ns;
            } else if !now.enabled && self.window.ns > 0 {
                self.rate = self.window.rate();
                self.window = Window::default();
            }
            // In a window, its own running rate (the freshest); else the last window's.
            if let Some((ns_per_ns, runs_per_ns)) = self.window.rate().or(self.rate) {
                cost.bpf_ns = Some((ns_per_ns * interval_ns as f64).round() as u64);
                cost.bpf_runs = Some((runs_per_ns * interval_ns as f64).round() as u64);
                cost.bpf_sampled = true;
            }
        }
        self.cpu_ns = cpu_now;
        self.bpf = now;
        cost
    }
}
