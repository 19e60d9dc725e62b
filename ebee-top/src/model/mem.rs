//! Resident memory per process, folded from the Batches' `mem` rows: the last-known RSS of every
//! process seen (a Batch carries only what changed plus the largest, see `MEM_TOP_ROWS`), the
//! growth of the last interval, and the two rankings the screens and batch output show: by RES
//! and by growth per second, both kept ranked as Batches arrive (see [`super::rank`]). Pure,
//! like the rest of the Model.

// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::HashMap;

use super::rank::Ranked;
use crate::batch::{Batch, MemRow};

/// One process in a memory ranking.
#[derive(Clone, Debug, PartialEq)]
pub struct MemEntry {
    pub pid: u32,
    /// Resident bytes (last known).
    pub rss_bytes: u64,
    /// Change in the last interval (0 when it did not change then).
    pub rss_delta_bytes: i64,
    /// `rss_delta_bytes` per second of the last interval.
    pub growth_per_s: f64,
}

/// Last-known RSS of every process, from one stream of rows (sketch or exact), ranked as it
/// arrives: each Batch touches only the processes it carries (what changed plus the top), so
/// reading a ranking costs the rows read, not a sort of every process known.
#[derive(Clone, Debug, Default)]
pub struct MemView {
    rss: Ranked,
    /// This interval's changes (pid -> delta), of processes still known.
    deltas: HashMap<u32, i64>,
    /// Those that grew, fastest first (ties by pid).
    growth: Vec<(u32, i64)>,
    interval_ns: u64,
}

impl MemView {
    fn ingest(&mut self, b: &Batch, rows: &[MemRow]) {
        self.interval_ns = b.interval_ns();
        self.deltas.clear();
        for r in rows {
            self.rss.insert(r.pid, r.rss_bytes);
            // A row repeated in the same Batch: the last one counts, as for the RSS.
            self.deltas.insert(r.pid, r.rss_delta_bytes);
        }
        for e in &b.exits {
            self.rss.remove(e.pid);
            self.deltas.remove(&e.pid);
        }
        self.growth = self
            .deltas
            .iter()
            .filter(|(_, d)| **d > 0)
            .map(|(p, d)| (*p, *d))
            .collect();
        self.growth
            .sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        self.deltas.retain(|_, d| *d != 0);
    }

    fn entry(&self, pid: u32, rss: u64) -> MemEntry {
        let delta = self.deltas.get(&pid).copied().unwrap_or(0);
        MemEntry {
            pid,
            rss_bytes: rss,
            rss_delta_bytes: delta,
            growth_per_s: if self.interval_ns == 0 {
                0.0
            } else {
                delta as f64 * 1e9 / self.interval_ns as f64
            },
        }
    }

    /// Every known process by resident memory, largest first (ties by pid); lazy, so taking
    /// the first k (after a filter, say) reads only as far as needed.
    pub fn by_rss(&self) -> impl Iterator<Item = MemEntry> + '_ {
        self.rss.iter().map(|(p, r)| self.entry(p, r))
    }

    /// The `k` processes with the most resident memory, largest first (ties by pid).
    pub fn top_rss(&self, k: usize) -> Vec<MemEntry> {
        self.by_rss().take(k).collect()
    }

    /// The processes that grew in the last interval (only those), fastest first; ranked once
    /// per Batch from that Batch's changes.
    pub fn by_growth(&self) -> impl Iterator<Item = MemEntry> + '_ {
        self.growth
            .iter()
            .map(|(p, _)| self.entry(*p, self.rss.get(*p).unwrap_or(0)))
    }

    /// The `k` processes that grew most in the last interval (only those that grew), fastest
    /// first.
    pub fn top_growth(&self, k: usize) -> Vec<MemEntry> {
        self.by_growth().take(k).collect()
    }

    /// Known RSS of a process.
    pub fn rss_of(&self, pid: u32) -> Option<u64> {
        self.rss.get(pid)
    }

    /// Processes with a known RSS.
    pub fn len(&self) -> usize {
        self.rss.len()
    }

    /// True when nothing is known.
    pub fn is_empty(&self) -> bool {
        self.rss.is_empty()
    }
}

/// The sketch's view and, when the Batches carry it, the exact shadow's.
#[derive(Clone, Debug, Default)]
pub struct MemModel {
    pub sketch: MemView,
    /// None until a Batch carries `mem_exact`.
    pub exact: Option<MemView>,
    /// Whether the last Batch came from a kernel with the memory pipeline.
    pub available: bool,
}

impl MemModel {
    /// Fold one Batch in.
    pub fn ingest(&mut self, b: &Batch) {
        self.available = b.mem_stats.available;
        self.sketch.ingest(b, &b.mem);
        if let Some(rows) = &b.mem_exact {
            self.exact
                .get_or_insert_with(MemView::default)
                .ingest(b, rows);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Exit;

    /// Interval `seq` of 50 ms; `rows` are (pid, RSS, its change), the pipeline available.
    fn batch(seq: u64, rows: &[(u32, u64, i64)]) -> Batch {
        rows.iter()
            .fold(
                Batch::build(seq, seq * 50_000_000, 50_000_000).with(|b| {
                    b.mem_stats.available = true;
                }),
                |b, &(pid, rss, delta)| b.mem(pid, rss, delta),
            )
            .done()
    }

    #[test]
    fn unchanged_processes_keep_their_rank_and_growth_is_per_interval() {
        let mut m = MemModel::default();
        m.ingest(&batch(1, &[(1, 100, 0), (2, 300, 0), (3, 200, 0)]));
        // Batch 2 carries only process 1, which grew by 400 in 50 ms.
        m.ingest(&batch(2, &[(1, 500, 400)]));
        let top: Vec<u32> = m.sketch.top_rss(3).iter().map(|e| e.pid).collect();
        assert_eq!(top, vec![1, 2, 3]);
        let g = m.sketch.top_growth(5);
        assert_eq!(g.len(), 1);
        assert_eq!(g[0].pid, 1);
        assert!((g[0].growth_per_s - 8000.0).abs() < 1e-6);
        // Next interval nothing changes: no growth, same ranking.
        m.ingest(&batch(3, &[]));
        assert!(m.sketch.top_growth(5).is_empty());
        assert_eq!(m.sketch.top_rss(1)[0].rss_delta_bytes, 0);
        assert_eq!(m.sketch.top_rss(1)[0].pid, 1);
    }

    #[test]
    fn a_batch_recorded_before_memory_existed_still_reads() {
        // The JSON of a Batch from a recording made before the memory pipeline: no `mem`,
        // `mem_exact` or `mem_stats`.
        let old = r#"{"seq":3,"t_ms":1,"start_ns":0,"end_ns":50000000,"bin_width_ns":10000000,
            "ncpus":2,"switches":5,"cpu":[],"cpu_exact":null,"procs":[],"exits":[],
            "pinned":[],"dropped":{"sketch_evicted_ns":0,"sketch_evictions":0,
            "lifecycle_lost":0,"handshake_timeouts":0,"shadow_full":0},
            "cost":{"cpu_ns":0,"bpf_ns":null,"bpf_runs":null}}"#;
        let b: Batch = serde_json::from_str(old).unwrap();
        assert!(b.mem.is_empty() && b.mem_exact.is_none() && !b.mem_stats.available);
        let mut m = MemModel::default();
        m.ingest(&b);
        assert!(!m.available && m.sketch.is_empty());
    }

    /// The ranking as it was computed before it was kept incrementally: every known process
    /// collected and sorted on each call. The reference the ranked view must equal.
    #[derive(Default)]
    struct FullSort {
        known: HashMap<u32, (u64, i64, u64)>,
        seq: u64,
        interval_ns: u64,
    }

    impl FullSort {
        fn ingest(&mut self, b: &Batch) {
            self.seq = b.seq;
            self.interval_ns = b.interval_ns();
            for r in &b.mem {
                self.known
                    .insert(r.pid, (r.rss_bytes, r.rss_delta_bytes, b.seq));
            }
            for e in &b.exits {
                self.known.remove(&e.pid);
            }
        }

        fn all(&self) -> Vec<MemEntry> {
            self.known
                .iter()
                .map(|(&pid, &(rss, delta, seq))| {
                    let d = if seq == self.seq { delta } else { 0 };
                    MemEntry {
                        pid,
                        rss_bytes: rss,
                        rss_delta_bytes: d,
                        growth_per_s: d as f64 * 1e9 / self.interval_ns as f64,
                    }
                })
                .collect()
        }

        fn top_rss(&self, k: usize) -> Vec<MemEntry> {
            let mut v = self.all();
            v.sort_by(|a, b| b.rss_bytes.cmp(&a.rss_bytes).then(a.pid.cmp(&b.pid)));
            v.truncate(k);
            v
        }

        fn top_growth(&self, k: usize) -> Vec<MemEntry> {
            let mut v: Vec<MemEntry> = self
                .all()
                .into_iter()
                .filter(|e| e.rss_delta_bytes > 0)
                .collect();
            v.sort_by(|a, b| {
                b.rss_delta_bytes
                    .cmp(&a.rss_delta_bytes)
                    .then(a.pid.cmp(&b.pid))
            });
            v.truncate(k);
            v
        }
    }

    /// One Batch's memory: rows (pid, rss, delta) and exits.
    type MemStep = (Vec<(u32, u64, i64)>, Vec<u32>);

    fn step() -> impl proptest::strategy::Strategy<Value = MemStep> {
        (
            proptest::collection::vec((0u32..30, 0u64..6, -3i64..4), 0..12),
            proptest::collection::vec(0u32..30, 0..3),
        )
    }

    proptest::proptest! {
        #[test]
        fn rankings_equal_a_full_sort_of_every_known_process(
            steps in proptest::collection::vec(step(), 1..40),
            k in 0usize..40,
        ) {
            let mut m = MemModel::default();
            let mut full = FullSort::default();
            for (i, (rows, exits)) in steps.into_iter().enumerate() {
                let mut b = batch(i as u64 + 1, &rows);
                b.exits = exits.into_iter().map(|pid| Exit { pid, ts_ns: 0 }).collect();
                m.ingest(&b);
                full.ingest(&b);
                proptest::prop_assert_eq!(m.sketch.top_rss(k), full.top_rss(k));
                proptest::prop_assert_eq!(m.sketch.top_growth(k), full.top_growth(k));
                proptest::prop_assert_eq!(m.sketch.len(), full.known.len());
            }
        }
    }

    #[test]
    fn shrinking_and_exits() {
        let mut m = MemModel::default();
        m.ingest(&batch(1, &[(1, 1000, 0), (2, 10, 0)]));
        m.ingest(&batch(2, &[(1, 5, -995)]));
        assert_eq!(m.sketch.top_rss(1)[0].pid, 2);
        assert!(m.sketch.top_growth(5).is_empty(), "shrinking is not growth");
        let mut b = batch(3, &[]);
        b.exits.push(Exit { pid: 2, ts_ns: 0 });
        m.ingest(&b);
        assert_eq!(m.sketch.rss_of(2), None);
        assert_eq!(m.sketch.len(), 1);
        assert!(m.exact.is_none());
    }
}
