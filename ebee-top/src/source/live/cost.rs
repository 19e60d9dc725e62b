//! ebee-top's own cost per interval: its process CPU time and its eBPF programs' run time
//! (the kernel's BPF statistics, when they are on), as differences between ticks.

use crate::batch::SelfCost;
use crate::probes::{Probes, ProgStats};
use crate::time::process_cpu_ns;

/// The readings at the last tick.
pub(super) struct CostMeter {
    cpu_ns: u64,
    bpf: ProgStats,
}

impl CostMeter {
    /// Start counting now.
    pub(super) fn start() -> Self {
        Self {
            cpu_ns: process_cpu_ns(),
            bpf: ProgStats::default(),
        }
    }

    /// What was spent since the last tick.
    pub(super) fn tick(&mut self, probes: &Probes) -> SelfCost {
        let cpu_now = process_cpu_ns();
        let bpf_now = probes.prog_stats();
        let cost = SelfCost {
            cpu_ns: cpu_now.saturating_sub(self.cpu_ns),
            bpf_ns: bpf_now
                .enabled
                .then(|| bpf_now.run_ns.saturating_sub(self.bpf.run_ns)),
            bpf_runs: bpf_now
                .enabled
                .then(|| bpf_now.run_count.saturating_sub(self.bpf.run_count)),
        };
        self.cpu_ns = cpu_now;
        self.bpf = bpf_now;
        cost
    }
}
