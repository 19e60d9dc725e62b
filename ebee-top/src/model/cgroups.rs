//! Cgroups as the screen shows them: each cgroup the kernel charged, with its CPU% and WAIT%
//! over the last second and the memory it reports, kept a minute after its last charge and a
//! few seconds after its directory was found gone (marked removed), like an exited process.

use std::collections::VecDeque;

// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::HashMap;

use crate::batch::Batch;

/// The span CPU% and WAIT% average over (as the process table's).
pub const SPAN_NS: u64 = 1_000_000_000;
/// How long a removed cgroup keeps its row, ns of batch time.
pub const REMOVED_KEEP_NS: u64 = 5_000_000_000;
/// A cgroup not charged for this long is forgotten.
pub const IDLE_FORGET_NS: u64 = 60_000_000_000;

/// One cgroup's history.
#[derive(Clone, Debug, Default)]
struct CgEntry {
    path: String,
    /// (end_ns, cpu_ns, wait_ns) of the intervals that charged it within the last span.
    recent: VecDeque<(u64, u64, u64)>,
    /// This interval's charge (0 when not charged in the last Batch).
    last_cpu_ns: u64,
    rss_bytes: Option<u64>,
    last_seen_ns: u64,
    removed_ns: Option<u64>,
}

/// One row of the cgroups view.
#[derive(Clone, Debug, PartialEq)]
pub struct CgroupView {
    pub id: u64,
    pub path: String,
    /// Share of one CPU over the last second (100 = one core).
    pub cpu_pct: f64,
    /// Share of the last second its threads waited for a CPU (100 = one thread waiting).
    pub wait_pct: f64,
    /// On-CPU ns in the last interval.
    pub last_cpu_ns: u64,
    pub rss_bytes: Option<u64>,
    pub removed: bool,
}

/// The cgroups the kernel charged lately.
#[derive(Clone, Debug, Default)]
pub struct CgroupsModel {
    entries: HashMap<u64, CgEntry>,
    now_ns: u64,
    /// The last Batch followed a hierarchy.
    pub available: bool,
    /// Which (`v2`, `v1 cpuacct`).
    pub hierarchy: String,
    /// The last Batch carried waits (WAIT% is meaningful).
    pub waits: bool,
}

impl CgroupsModel {
    pub fn ingest(&mut self, b: &Batch) {
        self.available = b.cgroup_stats.available;
        self.hierarchy.clone_from(&b.cgroup_stats.hierarchy);
        self.waits = b.wait_stats.available;
        self.now_ns = b.end_ns;
        for e in self.entries.values_mut() {
            e.last_cpu_ns = 0;
        }
        for r in &b.cgroups {
            let e = self.entries.entry(r.id).or_default();
            if !r.path.is_empty() {
                e.path.clone_from(&r.path);
            }
            e.recent.push_back((b.end_ns, r.cpu_ns, r.wait_ns));
            e.last_cpu_ns = r.cpu_ns;
            if r.rss_bytes.is_some() {
                e.rss_bytes = r.rss_bytes;
            }
            e.last_seen_ns = b.end_ns;
            // Charged again: a key reused by a new cgroup, or a stale removal.
            e.removed_ns = None;
        }
        for id in &b.cgroups_removed {
            if let Some(e) = self.entries.get_mut(id) {
                e.removed_ns.get_or_insert(b.end_ns);
            }
        }
        let now = b.end_ns;
        self.entries.retain(|_, e| {
            while e
                .recent
                .front()
                .is_some_and(|(t, _, _)| now.saturating_sub(*t) >= SPAN_NS)
            {
                e.recent.pop_front();
            }
            match e.removed_ns {
                Some(t) => now.saturating_sub(t) < REMOVED_KEEP_NS,
                None => now.saturating_sub(e.last_seen_ns) < IDLE_FORGET_NS,
            }
        });
    }

    /// Every cgroup kept, heaviest by CPU% first (then WAIT%, then path).
    pub fn view(&self) -> Vec<CgroupView> {
        let mut v: Vec<CgroupView> = self
            .entries
            .iter()
            .map(|(id, e)| {
                let (cpu, wait) = e
                    .recent
                    .iter()
                    .fold((0u64, 0u64), |(c, w), (_, a, b)| (c + a, w + b));
                CgroupView {
                    id: *id,
                    path: e.path.clone(),
                    cpu_pct: cpu as f64 * 100.0 / SPAN_NS as f64,
                    wait_pct: wait as f64 * 100.0 / SPAN_NS as f64,
                    last_cpu_ns: e.last_cpu_ns,
                    rss_bytes: e.rss_bytes,
                    removed: e.removed_ns.is_some(),
                }
            })
            .collect();
        v.sort_by(|a, b| {
            b.cpu_pct
                .total_cmp(&a.cpu_pct)
                .then(b.wait_pct.total_cmp(&a.wait_pct))
                .then(a.path.cmp(&b.path))
                .then(a.id.cmp(&b.id))
        });
        v
    }
}

/// A cgroup path as people name it, for a narrow column: `/` for the root; a container id
/// (64 hex digits, in `docker-<id>.scope`, `cri-containerd-<id>.scope`, `/docker/<id>`, ...)
/// cut to 12; else the last component (a systemd unit or slice name).
pub fn short_name(path: &str) -> String {
    if path.is_empty() {
        return String::new();
    }
    let last = path.rsplit('/').find(|s| !s.is_empty()).unwrap_or("/");
    if last == "/" {
        return "/".into();
    }
    // A 64-hex-digit container id, bare or wrapped in a prefix and a suffix.
    let body = last
        .strip_suffix(".scope")
        .unwrap_or(last)
        .rsplit(['-', ':'])
        .next()
        .unwrap_or(last);
    if body.len() == 64 && body.bytes().all(|b| b.is_ascii_hexdigit()) {
        return body[..12].to_owned();
    }
    last.to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Batch;

    fn batch(seq: u64, rows: &[(u64, &str, u64)]) -> Batch {
        let mut b = Batch::build(seq, seq * 100_000_000, 100_000_000);
        for (id, path, cpu) in rows {
            b = b.cgroup(*id, path, *cpu, cpu / 10);
        }
        b.done()
    }

    #[test]
    fn ranks_by_the_last_second_and_keeps_idle_ones_a_minute() {
        let mut m = CgroupsModel::default();
        for seq in 1..=10 {
            m.ingest(&batch(
                seq,
                &[(5, "/a.service", 50_000_000), (6, "/b.service", 10_000_000)],
            ));
        }
        let v = m.view();
        assert_eq!(v[0].path, "/a.service");
        assert!((v[0].cpu_pct - 50.0).abs() < 1e-9, "{}", v[0].cpu_pct);
        assert!((v[0].wait_pct - 5.0).abs() < 1e-9);
        assert!((v[1].cpu_pct - 10.0).abs() < 1e-9);
        // Idle for 2 s: 0% but listed; after a minute, gone.
        for seq in 11..=30 {
            m.ingest(&batch(seq, &[]));
        }
        assert_eq!(m.view().len(), 2);
        assert_eq!(m.view()[0].cpu_pct, 0.0);
        for seq in 31..=700 {
            m.ingest(&batch(seq, &[]));
        }
        assert!(m.view().is_empty());
    }

    #[test]
    fn a_removed_cgroup_is_marked_then_dropped() {
        let mut m = CgroupsModel::default();
        m.ingest(&batch(1, &[(5, "/gone", 1_000)]));
        let mut b = batch(2, &[]);
        b.cgroups_removed = vec![5, 99];
        m.ingest(&b);
        assert!(m.view()[0].removed);
        for seq in 3..=51 {
            m.ingest(&batch(seq, &[]));
        }
        assert_eq!(m.view().len(), 1, "kept 5 s");
        m.ingest(&batch(52, &[]));
        assert!(m.view().is_empty());
    }

    #[test]
    fn short_names() {
        let id = "4f3a5c0d2b1e9f8a7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f1a0b9c8d7e6f5a4b";
        assert_eq!(short_name("/"), "/");
        assert_eq!(short_name(""), "");
        assert_eq!(short_name("/system.slice/nginx.service"), "nginx.service");
        assert_eq!(short_name("/user.slice"), "user.slice");
        assert_eq!(
            short_name(&format!("/system.slice/docker-{id}.scope")),
            "4f3a5c0d2b1e"
        );
        assert_eq!(short_name(&format!("/docker/{id}")), "4f3a5c0d2b1e");
        assert_eq!(
            short_name(&format!("/kubepods/besteffort/pod1/cri-containerd:{id}")),
            "4f3a5c0d2b1e"
        );
        assert_eq!(short_name("/a\\xffb/"), "a\\xffb");
    }
}
