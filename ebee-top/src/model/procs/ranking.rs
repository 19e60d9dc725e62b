//! The table's order: pinned processes first, then the heaviest by CPU% (or by resident
//! memory, run-queue wait or disk I/O), filtered by name, command line, cgroup or pid.

use super::{ProcEntry, ProcTable};

/// What the rest of the table is ranked by, after the pinned processes.
#[derive(Clone, Copy)]
pub enum Order<F> {
    /// CPU% over the last second.
    Cpu,
    /// Resident memory, from `F` (a process without a known RSS ranks after those with one).
    Rss(F),
    /// WAIT% over the last second, then CPU%.
    Wait,
    /// Disk bytes read and written per second, then CPU%.
    Io,
    /// IOW% (blocked on I/O) over the last second, then CPU%.
    Iow,
    /// HOLD% (run-queue wait caused others) over the last second, then CPU%.
    Hold,
    /// Network bytes received and sent per second (from `ranked_by`'s `net`), then CPU%.
    Net,
}

/// Prefix of a filter that selects one cgroup and those under it (`cg:/system.slice`), as the
/// cgroups view sets it.
pub const CGROUP_FILTER: &str = "cg:";

/// Whether `e` passes the filter (`lower` is `filter` in lower case): its pid (or, for a
/// thread, its process's pid), or a part of its name, command line or cgroup; with
/// [`CGROUP_FILTER`], its cgroup or one under it.
pub fn matches_filter(e: &ProcEntry, filter: &str, lower: &str) -> bool {
    if let Some(cg) = filter.strip_prefix(CGROUP_FILTER) {
        let under = e
            .cgroup
            .strip_prefix(cg)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/') || cg.ends_with('/'));
        return under;
    }
    lower.is_empty()
        || e.key.pid.to_string() == lower
        || (e.tgid != 0 && e.tgid.to_string() == lower)
        || e.comm.to_lowercase().contains(lower)
        || e.cmdline.to_lowercase().contains(lower)
        || e.cgroup.to_lowercase().contains(lower)
}

impl ProcTable {
    /// The `k` heaviest by CPU% (then pid), plus every pinned one, pinned first. Exited
    /// processes rank by the CPU they used before they ended.
    pub fn ranked(&self, k: usize, filter: &str) -> Vec<&ProcEntry> {
        self.ranked_by(k, filter, Order::<fn(u32) -> Option<u64>>::Cpu, |_| None)
    }

    /// As `ranked`, by `order`; ties go to CPU%, then the last interval's CPU, then the key.
    /// `net` gives a process's network bytes per second (the servers model keeps them).
    pub fn ranked_by(
        &self,
        k: usize,
        filter: &str,
        order: Order<impl Fn(u32) -> Option<u64>>,
        net: impl Fn(u32) -> Option<f64>,
    ) -> Vec<&ProcEntry> {
        self.ranked_for(k, filter, |_| true, order, net)
    }

    /// As `ranked_by`, of the entries `keep` accepts (one user's, for `-u`).
    pub fn ranked_for(
        &self,
        k: usize,
        filter: &str,
        keep: impl Fn(&ProcEntry) -> bool,
        order: Order<impl Fn(u32) -> Option<u64>>,
        net: impl Fn(u32) -> Option<f64>,
    ) -> Vec<&ProcEntry> {
        let f = filter.to_lowercase();
        let matches = |e: &ProcEntry| keep(e) && matches_filter(e, filter, &f);
        let rss = |e: &ProcEntry| match &order {
            Order::Rss(f) if !e.exited() => f(e.key.pid),
            _ => None,
        };
        let mut pinned: Vec<&ProcEntry> = self
            .entries
            .values()
            .filter(|e| self.is_pinned(&e.key) && matches(e))
            .collect();
        pinned.sort_by_key(|e| e.key);
        let mut rest: Vec<&ProcEntry> = self
            .entries
            .values()
            .filter(|e| !self.is_pinned(&e.key) && matches(e))
            .filter(|e| {
                e.cpu_pct > 0.0
                    || e.last_ns > 0
                    || e.exited()
                    || e.wait_pct > 0.0
                    || e.iow_pct + e.blocked_pct > 0.0
                    || e.caused_pct > 0.0
                    || e.read_per_s + e.write_per_s > 0.0
                    || rss(e).is_some()
            })
            .collect();
        // The primary measure, as a float so that one comparison serves all four.
        let primary = |e: &ProcEntry| -> f64 {
            match &order {
                Order::Cpu => 0.0,
                Order::Rss(_) => rss(e).unwrap_or(0) as f64,
                Order::Wait => e.wait_pct,
                Order::Io => e.read_per_s + e.write_per_s,
                Order::Iow => e.iow_pct,
                Order::Hold => e.caused_pct,
                Order::Net => net(e.key.pid).unwrap_or(0.0),
            }
        };
        rest.sort_by(|a, b| {
            primary(b)
                .total_cmp(&primary(a))
                .then(b.cpu_pct.total_cmp(&a.cpu_pct))
                .then(b.last_ns.cmp(&a.last_ns))
                .then(a.key.cmp(&b.key))
        });
        rest.truncate(k.saturating_sub(pinned.len()));
        pinned.extend(rest);
        pinned
    }
}
