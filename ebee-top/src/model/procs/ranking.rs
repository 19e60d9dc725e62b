//! The table's order: pinned processes first, then the heaviest by CPU% (or by resident
//! memory), filtered by name, command line or pid.

use super::{ProcEntry, ProcTable};

impl ProcTable {
    /// The `k` heaviest by CPU% (then pid), plus every pinned one, pinned first. Exited
    /// processes rank by the CPU they used before they ended.
    pub fn ranked(&self, k: usize, filter: &str) -> Vec<&ProcEntry> {
        self.ranked_by(k, filter, None::<fn(u32) -> Option<u64>>)
    }

    /// As `ranked`, or by resident memory (`rss` of a pid, largest first) when given; a
    /// process without a known RSS then ranks by CPU after those with one.
    pub fn ranked_by(
        &self,
        k: usize,
        filter: &str,
        rss: Option<impl Fn(u32) -> Option<u64>>,
    ) -> Vec<&ProcEntry> {
        let f = filter.to_lowercase();
        let matches = |e: &ProcEntry| {
            f.is_empty()
                || e.key.pid.to_string() == f
                || e.comm.to_lowercase().contains(&f)
                || e.cmdline.to_lowercase().contains(&f)
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
                    || rss.as_ref().is_some_and(|f| f(e.key.pid).is_some())
            })
            .collect();
        let mem = |e: &ProcEntry| match (&rss, e.exited()) {
            (Some(f), false) => f(e.key.pid).unwrap_or(0),
            _ => 0,
        };
        rest.sort_by(|a, b| {
            mem(b)
                .cmp(&mem(a))
                .then(b.cpu_pct.total_cmp(&a.cpu_pct))
                .then(b.last_ns.cmp(&a.last_ns))
                .then(a.key.cmp(&b.key))
        });
        rest.truncate(k.saturating_sub(pinned.len()));
        pinned.extend(rest);
        pinned
    }
}
