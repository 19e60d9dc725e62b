//! Cgroups as the screen shows them: each cgroup the kernel charged, with its CPU% and WAIT%
//! over the last second and the memory it reports, kept a minute after its last charge and a
//! few seconds after its directory was found gone (marked removed), like an exited process.
//! Also which cgroup holds which waiting for a CPU: the interval's (victim, culprit) process
//! pairs summed by both processes' cgroups.

use std::collections::VecDeque;

// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::HashMap;

use crate::batch::Batch;
use crate::batch::wait::{CULPRIT_IDLE, CULPRIT_UNKNOWN};

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
    /// Share of the last second other cgroups' processes waited for a CPU while this one's
    /// ran on it (100 = one thread waiting all the time).
    pub hold_pct: f64,
    /// The cgroups its processes waited behind over the last second (its own included),
    /// heaviest first, with the wait each caused in ns.
    pub behind: Vec<(String, u64)>,
}

/// The Batch's (victim, culprit) process pairs summed by the cgroups of both into `out`
/// (cleared first), heaviest first, `cgroup_of` giving a process's cgroup path. Only the pairs
/// the Batch keeps (the heaviest 50) are summed; wakeup latency and unattributed wait have no
/// culprit cgroup, and a process whose cgroup is unknown is left out. The Model's window and
/// the metrics' counters both fold these.
pub fn sum_by_cgroup<'a>(
    b: &Batch,
    cgroup_of: impl Fn(u32) -> Option<&'a str>,
    out: &mut Vec<CgroupWaitBy>,
) {
    out.clear();
    for r in &b.wait_by {
        if r.culprit == CULPRIT_IDLE || r.culprit == CULPRIT_UNKNOWN {
            continue;
        }
        let (Some(v), Some(c)) = (cgroup_of(r.pid), cgroup_of(r.culprit)) else {
            continue;
        };
        if v.is_empty() || c.is_empty() {
            continue;
        }
        // At most 50 pairs: a walk beats a map.
        match out.iter_mut().find(|p| p.cgroup == v && p.culprit == c) {
            Some(p) => p.wait_ns += r.ns,
            None => out.push(CgroupWaitBy {
                cgroup: v.to_owned(),
                culprit: c.to_owned(),
                wait_ns: r.ns,
            }),
        }
    }
    out.sort_by(|a, b| {
        b.wait_ns
            .cmp(&a.wait_ns)
            .then_with(|| a.cgroup.cmp(&b.cgroup))
            .then_with(|| a.culprit.cmp(&b.culprit))
    });
}

/// Run-queue wait of a cgroup's processes while a process of `culprit` ran on their CPU.
#[derive(Clone, Debug, PartialEq)]
pub struct CgroupWaitBy {
    pub cgroup: String,
    pub culprit: String,
    pub wait_ns: u64,
}

/// The cgroups the kernel charged lately.
#[derive(Clone, Debug, Default)]
pub struct CgroupsModel {
    entries: HashMap<u64, CgEntry>,
    /// (victim cgroup, culprit cgroup) -> (end_ns, wait ns) of the intervals of the last span
    /// that charged the pair.
    pairs: HashMap<(String, String), VecDeque<(u64, u64)>>,
    /// The last interval's pairs, heaviest first.
    last_pairs: Vec<CgroupWaitBy>,
    /// The last Batch measured the culprits of waits (HOLD% and BEHIND are meaningful).
    pub culprits: bool,
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

    /// Fold the interval's (victim, culprit) process pairs in by cgroup, `cgroup_of` giving a
    /// process's cgroup path. Only the pairs the Batch keeps (the heaviest 50) are summed;
    /// wakeup latency and unattributed wait have no culprit cgroup, and a process whose cgroup
    /// is unknown is left out.
    pub fn ingest_pairs<'a>(&mut self, b: &Batch, cgroup_of: impl Fn(u32) -> Option<&'a str>) {
        self.culprits = b.wait_stats.offcpu_available;
        sum_by_cgroup(b, cgroup_of, &mut self.last_pairs);
        let now = b.end_ns;
        for p in &self.last_pairs {
            self.pairs
                .entry((p.cgroup.clone(), p.culprit.clone()))
                .or_default()
                .push_back((now, p.wait_ns));
        }
        self.pairs.retain(|_, q| {
            while q
                .front()
                .is_some_and(|(t, _)| now.saturating_sub(*t) >= SPAN_NS)
            {
                q.pop_front();
            }
            !q.is_empty()
        });
    }

    /// The `k` heaviest cgroup pairs of the last interval.
    pub fn top_wait_by(&self, k: usize) -> &[CgroupWaitBy] {
        &self.last_pairs[..k.min(self.last_pairs.len())]
    }

    /// Every cgroup kept, heaviest by CPU% first (then WAIT%, then path).
    pub fn view(&self) -> Vec<CgroupView> {
        // One walk over the pairs of the last second: what each cgroup caused others, and
        // whom each waited behind.
        let mut held: HashMap<&str, u64> = HashMap::default();
        let mut behind: HashMap<&str, Vec<(String, u64)>> = HashMap::default();
        for ((v, c), q) in &self.pairs {
            let ns: u64 = q.iter().map(|x| x.1).sum();
            if v != c {
                *held.entry(c.as_str()).or_default() += ns;
            }
            behind.entry(v.as_str()).or_default().push((c.clone(), ns));
        }
        for b in behind.values_mut() {
            b.sort_by(|x, y| y.1.cmp(&x.1).then_with(|| x.0.cmp(&y.0)));
        }
        let mut v: Vec<CgroupView> = self
            .entries
            .iter()
            .map(|(id, e)| {
                let (cpu, wait) = e
                    .recent
                    .iter()
                    .fold((0u64, 0u64), |(c, w), (_, a, b)| (c + a, w + b));
                let held = held.get(e.path.as_str()).copied().unwrap_or(0);
                CgroupView {
                    hold_pct: held as f64 * 100.0 / SPAN_NS as f64,
                    behind: behind.remove(e.path.as_str()).unwrap_or_default(),
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
    use crate::batch::wait::{CULPRIT_IDLE, CULPRIT_UNKNOWN};

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
    fn pairs_are_summed_by_cgroup_over_the_last_second() {
        use crate::batch::wait::WaitByRow;
        let cg = |pid: u32| match pid {
            1 | 2 => Some("/web.service"),
            3 => Some("/batch.slice"),
            4 => Some(""),
            _ => None,
        };
        let mut m = CgroupsModel::default();
        let pairs = |seq| {
            let mut b = batch(
                seq,
                &[(5, "/web.service", 1_000), (6, "/batch.slice", 90_000_000)],
            );
            b.wait_stats.offcpu_available = true;
            b.wait_by = [
                (1, 3, 30_000_000),
                (2, 3, 10_000_000),
                (1, 2, 5_000_000),
                (3, 1, 1_000_000),
                (1, CULPRIT_IDLE, 7_000_000),
                (1, CULPRIT_UNKNOWN, 7_000_000),
                (1, 4, 9_000_000),
                (1, 77, 9_000_000),
            ]
            .iter()
            .map(|&(pid, culprit, ns)| WaitByRow { pid, culprit, ns })
            .collect();
            b
        };
        for seq in 1..=20 {
            let b = pairs(seq);
            m.ingest(&b);
            m.ingest_pairs(&b, cg);
        }
        assert!(m.culprits);
        assert_eq!(
            m.top_wait_by(2),
            [
                CgroupWaitBy {
                    cgroup: "/web.service".into(),
                    culprit: "/batch.slice".into(),
                    wait_ns: 40_000_000
                },
                CgroupWaitBy {
                    cgroup: "/web.service".into(),
                    culprit: "/web.service".into(),
                    wait_ns: 5_000_000
                },
            ]
        );
        assert_eq!(
            m.top_wait_by(9).len(),
            3,
            "idle, unknown and unknown cgroups left out"
        );
        let v = m.view();
        let web = v.iter().find(|c| c.path == "/web.service").unwrap();
        let bs = v.iter().find(|c| c.path == "/batch.slice").unwrap();
        // 10 intervals of 100 ms in the last second.
        assert!((bs.hold_pct - 40.0).abs() < 1e-9, "{}", bs.hold_pct);
        assert!(
            (web.hold_pct - 1.0).abs() < 1e-9,
            "its own waits not counted"
        );
        assert_eq!(
            web.behind,
            [
                ("/batch.slice".to_owned(), 400_000_000),
                ("/web.service".to_owned(), 50_000_000)
            ]
        );
        // A second with no pairs empties the window.
        for seq in 21..=31 {
            let b = batch(seq, &[]);
            m.ingest(&b);
            m.ingest_pairs(&b, cg);
        }
        assert!(m.top_wait_by(5).is_empty());
        assert!(
            m.view()
                .iter()
                .all(|c| c.hold_pct == 0.0 && c.behind.is_empty())
        );
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
