//! Metrics of cgroups, summed in the kernel at every context switch: on-CPU and run-queue wait
//! seconds as counters and the cgroup's memory as a gauge, label `cgroup` (the path). Only the
//! top K by recent CPU are exported; a removed cgroup is exported once more, then forgotten.
//! And which cgroup holds which waiting: the Batches' (victim, culprit) pairs of processes
//! summed by the cgroups of both (labels `cgroup`, `culprit_cgroup`), the top K pairs by recent
//! wait.

use std::collections::HashMap;

use prometheus_client::registry::Unit;

use super::exposition::{Family, Kind, Value};
use super::meter::{Section, secs};
use super::process::{FORGET_NS, RANK_WINDOW_NS};
use crate::batch::Batch;
use crate::model::cgroups::{CgroupWaitBy, sum_by_cgroup};

#[derive(Debug, Default)]
struct Cgroup {
    path: String,
    cpu_ns: u64,
    wait_ns: u64,
    memory: Option<u64>,
    recent: f64,
    last_seen_ns: u64,
    removed: bool,
}

/// One (cgroup, culprit cgroup) pair: wait ns since first seen, and recent.
#[derive(Debug, Default)]
struct Pair {
    ns: u64,
    recent: f64,
    last_seen_ns: u64,
}

/// Every cgroup's counters, and K.
#[derive(Debug)]
pub struct Cgroups {
    k: usize,
    cgroups: HashMap<u64, Cgroup>,
    available: bool,
    /// Each process's cgroup path, as the Batches named it.
    cgroup_of: HashMap<u32, crate::batch::Name>,
    pairs: HashMap<(String, String), Pair>,
    /// The last Batch's pairs by cgroup (kept for its buffer).
    summed: Vec<CgroupWaitBy>,
}

impl Cgroups {
    pub fn new(k: usize) -> Self {
        Self {
            k,
            cgroups: HashMap::new(),
            available: false,
            cgroup_of: HashMap::new(),
            pairs: HashMap::new(),
            summed: Vec::new(),
        }
    }
}

impl Section for Cgroups {
    fn ingest(&mut self, b: &Batch) {
        self.available = b.cgroup_stats.available;
        let now = b.end_ns;
        self.cgroups
            .retain(|_, c| !c.removed && now.saturating_sub(c.last_seen_ns) < FORGET_NS);
        let decay = (-(b.interval_ns() as f64) / RANK_WINDOW_NS).exp();
        for c in self.cgroups.values_mut() {
            c.recent *= decay;
        }
        for r in &b.cgroups {
            let c = self.cgroups.entry(r.id).or_default();
            if !r.path.is_empty() {
                c.path.clone_from(&r.path);
            }
            c.cpu_ns += r.cpu_ns;
            c.wait_ns += r.wait_ns;
            c.recent += r.cpu_ns as f64;
            c.last_seen_ns = now;
            if r.rss_bytes.is_some() {
                c.memory = r.rss_bytes;
            }
        }
        for p in &b.procs {
            if !p.cgroup.is_empty() {
                self.cgroup_of.insert(p.pid, p.cgroup.clone());
            }
        }
        self.pairs
            .retain(|_, p| now.saturating_sub(p.last_seen_ns) < FORGET_NS);
        for p in self.pairs.values_mut() {
            p.recent *= decay;
        }
        let mut summed = std::mem::take(&mut self.summed);
        sum_by_cgroup(
            b,
            |pid| self.cgroup_of.get(&pid).map(AsRef::as_ref),
            &mut summed,
        );
        for r in &summed {
            let key = (r.cgroup.clone(), r.culprit.clone());
            let p = self.pairs.entry(key).or_default();
            p.ns += r.wait_ns;
            p.recent += r.wait_ns as f64;
            p.last_seen_ns = now;
        }
        self.summed = summed;
        for e in &b.exits {
            self.cgroup_of.remove(&e.pid);
        }
        for id in &b.cgroups_removed {
            if let Some(c) = self.cgroups.get_mut(id) {
                c.removed = true;
            }
        }
    }

    fn families(&self, out: &mut Vec<Family>) {
        let mut cpu = Family::new(
            "ebee_cgroup_cpu",
            "On-CPU time of a cgroup's threads since ebee-top first saw it, summed in the kernel \
             at every context switch; the top K cgroups by recent CPU.",
            Some(Unit::Seconds),
            Kind::Counter,
        );
        let mut wait = Family::new(
            "ebee_cgroup_wait",
            "Time a cgroup's threads were runnable but waited for a CPU.",
            Some(Unit::Seconds),
            Kind::Counter,
        );
        let mut mem = Family::new(
            "ebee_cgroup_memory",
            "Memory charged to the cgroup (memory.current, or v1 memory.usage_in_bytes).",
            Some(Unit::Bytes),
            Kind::Gauge,
        );
        if self.available {
            let mut v: Vec<(&u64, &Cgroup)> = self
                .cgroups
                .iter()
                .filter(|(_, c)| !c.path.is_empty())
                .collect();
            v.sort_unstable_by(|a, b| {
                b.1.recent
                    .total_cmp(&a.1.recent)
                    .then(b.1.cpu_ns.cmp(&a.1.cpu_ns))
                    .then(a.0.cmp(b.0))
            });
            v.truncate(self.k);
            for (_, c) in v {
                let labels = vec![("cgroup", c.path.clone())];
                cpu.push(labels.clone(), Value::Counter(secs(c.cpu_ns)));
                wait.push(labels.clone(), Value::Counter(secs(c.wait_ns)));
                if let Some(m) = c.memory {
                    mem.push(labels, Value::Gauge(m as f64));
                }
            }
        }
        let mut by = Family::new(
            "ebee_cgroup_wait_by",
            "Run-queue wait of a cgroup's processes while processes of culprit_cgroup ran on \
             their CPU, since ebee-top first saw the pair; the top K pairs by recent wait.",
            Some(Unit::Seconds),
            Kind::Counter,
        );
        let mut v: Vec<(&(String, String), &Pair)> = self.pairs.iter().collect();
        v.sort_unstable_by(|a, b| {
            b.1.recent
                .total_cmp(&a.1.recent)
                .then(b.1.ns.cmp(&a.1.ns))
                .then(a.0.cmp(b.0))
        });
        v.truncate(self.k);
        for ((victim, culprit), p) in v {
            by.push(
                vec![
                    ("cgroup", victim.clone()),
                    ("culprit_cgroup", culprit.clone()),
                ],
                Value::Counter(secs(p.ns)),
            );
        }
        out.extend([cpu, wait, mem, by]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_accumulate_and_only_the_top_k_are_exported() {
        let mut s = Cgroups::new(2);
        for seq in 1..=4 {
            let b = Batch::build(seq, seq * 50_000_000, 50_000_000)
                .cgroup(7, "/system.slice/a.service", 30_000_000, 1_000_000)
                .cgroup(8, "/system.slice/b.service", 20_000_000, 0)
                .cgroup(9, "/system.slice/c.service", 1_000, 0)
                .done();
            s.ingest(&b);
        }
        let mut out = Vec::new();
        s.families(&mut out);
        let cpu = out
            .iter()
            .find(|f| f.exposed_name() == "ebee_cgroup_cpu_seconds_total")
            .unwrap();
        assert_eq!(cpu.series.len(), 2);
        assert_eq!(cpu.series[0].value, Value::Counter(0.12));
        let mut b = Batch::build(5, 250_000_000, 50_000_000).done();
        b.cgroup_stats.available = true;
        b.cgroups_removed = vec![7];
        s.ingest(&b);
        let mut out = Vec::new();
        s.families(&mut out);
        assert_eq!(
            out[0].series.len(),
            2,
            "a removed cgroup is exported once more"
        );
        s.ingest(
            &Batch::build(6, 300_000_000, 50_000_000)
                .cgroup(8, "/system.slice/b.service", 1, 0)
                .done(),
        );
        let mut out = Vec::new();
        s.families(&mut out);
        assert!(
            out[0]
                .series
                .iter()
                .all(|x| x.labels[0].1 != "/system.slice/a.service")
        );
    }

    #[test]
    fn process_pairs_are_summed_by_their_cgroups() {
        use crate::batch::ProcInfo;
        use crate::batch::wait::WaitByRow;
        let mut s = Cgroups::new(5);
        let info = |pid, cg: &str| ProcInfo {
            cgroup: cg.into(),
            ..ProcInfo::named(pid, "p")
        };
        let b = Batch::build(1, 50_000_000, 50_000_000)
            .proc(info(1, "/a"))
            .proc(info(2, "/b"))
            .proc(info(3, "/b"))
            .with(|b| {
                b.wait_by = vec![
                    WaitByRow {
                        pid: 1,
                        culprit: 2,
                        ns: 2_000_000_000,
                    },
                    WaitByRow {
                        pid: 1,
                        culprit: 3,
                        ns: 1_000_000_000,
                    },
                    WaitByRow {
                        pid: 2,
                        culprit: 1,
                        ns: 500_000_000,
                    },
                    // The idle CPU: no cgroup, not exported.
                    WaitByRow {
                        pid: 1,
                        culprit: 0,
                        ns: 7,
                    },
                ];
            })
            .done();
        s.ingest(&b);
        let mut out = Vec::new();
        s.families(&mut out);
        let f = out
            .iter()
            .find(|f| f.exposed_name() == "ebee_cgroup_wait_by_seconds_total")
            .unwrap();
        let got: Vec<(String, String, f64)> = f
            .series
            .iter()
            .map(|x| {
                let Value::Counter(v) = x.value else { panic!() };
                (x.labels[0].1.clone(), x.labels[1].1.clone(), v)
            })
            .collect();
        assert_eq!(
            got,
            vec![
                ("/a".into(), "/b".into(), 3.0),
                ("/b".into(), "/a".into(), 0.5)
            ]
        );
    }
}
