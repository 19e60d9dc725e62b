//! The Model: a pure fold of Batches into what the screens and batch output show. No aya, no
//! ratatui, no I/O, no clocks: everything it knows came in a Batch.

pub mod cgroups;
pub mod mem;
pub mod procs;
pub mod qos;
pub mod rank;
pub mod servers;
pub mod tree;
pub mod wait;

use foldhash::HashMap;

use crate::batch::cgroup::ThreadRow;
use crate::batch::{Batch, CpuRow, Exit, ProcInfo};

/// How long (in intervals) an exited process stays in the ranking and the name table.
pub const EXITED_KEEP_INTERVALS: u64 = 100;

/// Intervals a Model must be fed before the one it is to show, so that what it keeps across
/// intervals (names of exited processes, exit marks) is what it was live (export, and replay
/// after a seek). Must cover every history the Model keeps in intervals.
pub const WARMUP_INTERVALS: usize = EXITED_KEEP_INTERVALS as usize;

/// Recorded time a Model must be fed before the interval it is to show, so the process
/// table's burst history (60 s) is what it was live, plus a second of margin.
pub const HISTORY_WARMUP_MS: u64 = procs::HISTORY_CELLS * procs::CELL_NS / 1_000_000 + 1_000;

/// One line of the CPU ranking.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuEntry {
    pub pid: u32,
    pub comm: String,
    pub cmdline: String,
    pub uid: Option<u32>,
    pub kthread: bool,
    /// On-CPU ns in the last interval.
    pub cpu_ns: u64,
    /// Share of one CPU over the last interval (100 = one full core).
    pub cpu_pct: f64,
    /// Burst bins of the last interval, ns each.
    pub bins: Vec<u64>,
    /// The process ended during or before the last interval.
    pub exited: bool,
    /// Its threads' run-queue wait in the last interval; None when the kernel gives none.
    pub wait_ns: Option<u64>,
    /// Its threads' off-CPU time in the last interval by reason: blocked on I/O, blocked
    /// otherwise, sleeping; None when the split was not measured.
    pub offcpu: Option<crate::batch::wait::OffCpuRow>,
    /// Run-queue wait it caused other processes in the last interval (it ran on their CPU
    /// while they waited); None when not measured.
    pub caused_wait_ns: Option<u64>,
    /// Its cgroup path (empty: unknown, or cgroups off).
    pub cgroup: String,
    /// In a thread ranking, the thread (`pid` is then its process, `comm` the thread's name).
    pub tid: Option<u32>,
}

#[derive(Clone, Default)]
pub struct Model {
    latest: Option<Batch>,
    procs: HashMap<u32, ProcInfo>,
    /// pid -> seq of the interval it exited in.
    exited: HashMap<u32, u64>,
    /// Pids whose info came with the last Batch, sorted: with those leaving `exited`, the only
    /// names the next Batch may forget (every other name is of an exited or memory-known
    /// process).
    last_procs: Vec<u32>,
    /// The buffer of the list of names to forget, kept between Batches.
    forget: Vec<u32>,
    /// Syscall and request QoS of pinned processes.
    pub qos: qos::QosModel,
    /// The interactive screen's process table: burst history, exited processes, pins.
    pub table: procs::ProcTable,
    /// Resident memory per process: last known, rankings by RES and by growth.
    pub mem: mem::MemModel,
    /// Run-queue waits and disk I/O of the last interval.
    pub wait: wait::WaitModel,
    /// Servers found by the kernel and every process's network bytes.
    pub servers: servers::ServersModel,
    /// Cgroups the kernel charged lately.
    pub cgroups: cgroups::CgroupsModel,
    /// The thread table (the per-thread mode): the process table's fold, keyed by thread id.
    pub threads: procs::ProcTable,
    /// The last Batch carried threads.
    pub threads_on: bool,
    /// tid -> its process, for the threads in `threads`.
    thread_pid: HashMap<u32, u32>,
    /// Who is whose parent (the process tree).
    pub lineage: tree::Lineage,
}

impl Model {
    pub fn new() -> Self {
        Self::default()
    }

    /// Fold one interval in (a copy of it is kept as the latest).
    pub fn ingest(&mut self, b: &Batch) {
        self.fold(b);
        self.latest = Some(b.clone());
    }

    /// Fold one interval in, keeping it as the latest without a copy: for callers done with
    /// it (a busy interval's Batch is hundreds of rows, names and command lines).
    pub fn ingest_owned(&mut self, b: Batch) {
        self.fold(&b);
        self.latest = Some(b);
    }

    fn fold(&mut self, b: &Batch) {
        for e in &b.exits {
            self.exited.insert(e.pid, b.seq);
        }
        // Names that may no longer be needed: the last Batch's, and those of processes that
        // leave `exited` now (a walk of the recent exits only, not of every known process).
        let mut forget = std::mem::take(&mut self.last_procs);
        self.exited.retain(|pid, seq| {
            let keep = b.seq.saturating_sub(*seq) < EXITED_KEEP_INTERVALS;
            if !keep {
                forget.push(*pid);
            }
            keep
        });
        self.mem.ingest(b);
        let mut now = std::mem::take(&mut self.forget);
        now.clear();
        now.extend(b.procs.iter().map(|p| p.pid));
        now.sort_unstable();
        // Keep names only for what can still be shown: this interval's processes, the
        // recently exited, and those with a known RSS (a memory ranking shows them while their
        // memory does not change). A pid that comes back is a new process and brings its own
        // info. A memory-known process leaves the memory view only by exiting, and then is in
        // `exited`: so only the pids in `forget` can have stopped being either. This
        // interval's are kept in place (most Batches name the same processes as the last
        // one): removing and cloning them again was hundreds of allocations an interval.
        for pid in forget.drain(..) {
            if now.binary_search(&pid).is_err()
                && !self.exited.contains_key(&pid)
                && self.mem.sketch.rss_of(pid).is_none()
            {
                self.procs.remove(&pid);
            }
        }
        for p in &b.procs {
            match self.procs.entry(p.pid) {
                std::collections::hash_map::Entry::Occupied(mut o) => {
                    if o.get() != p {
                        o.get_mut().clone_from(p);
                    }
                }
                std::collections::hash_map::Entry::Vacant(v) => {
                    v.insert(p.clone());
                }
            }
        }
        self.forget = forget;
        self.last_procs = now;
        self.qos.ingest(b);
        self.wait.ingest(b);
        self.servers.ingest(b);
        self.cgroups.ingest(b);
        let procs = &self.procs;
        self.cgroups
            .ingest_pairs(b, |pid| procs.get(&pid).map(|p| p.cgroup.as_ref()));
        self.table.ingest(b);
        self.lineage.ingest(b);
        self.ingest_threads(b);
    }

    /// The thread table takes the Batch's threads as a process table takes processes: one
    /// Batch of thread rows, each thread named by its own name, with its process's command
    /// line, owner and cgroup; a process's exit ends its threads.
    fn ingest_threads(&mut self, b: &Batch) {
        self.threads_on = b.threads.is_some();
        let Some(rows) = &b.threads else {
            if !self.thread_pid.is_empty() {
                self.threads = procs::ProcTable::new();
                self.thread_pid.clear();
            }
            return;
        };
        // Only what a process table reads of a Batch: the interval, the rows, their names and
        // the exits (a process's exit ends its threads).
        let exited: HashMap<u32, u64> = b.exits.iter().map(|e| (e.pid, e.ts_ns)).collect();
        let t = Batch {
            seq: b.seq,
            t_ms: b.t_ms,
            start_ns: b.start_ns,
            end_ns: b.end_ns,
            bin_width_ns: b.bin_width_ns,
            ncpus: b.ncpus,
            cpu: rows
                .iter()
                .map(|r| CpuRow {
                    pid: r.tid,
                    ns: r.ns,
                    bins: r.bins.clone(),
                })
                .collect(),
            procs: rows.iter().map(|r| self.thread_info(r)).collect(),
            exits: if exited.is_empty() {
                Vec::new()
            } else {
                self.thread_pid
                    .iter()
                    .filter_map(|(tid, p)| exited.get(p).map(|&ts_ns| Exit { pid: *tid, ts_ns }))
                    .collect()
            },
            ..Batch::default()
        };
        for r in rows {
            self.thread_pid.insert(r.tid, r.pid);
        }
        self.threads.ingest(&t);
        if b.seq.is_multiple_of(100) {
            let threads = &self.threads;
            self.thread_pid
                .retain(|tid, _| threads.by_pid(*tid).is_some());
        }
    }

    fn thread_info(&self, r: &ThreadRow) -> ProcInfo {
        let p = self.procs.get(&r.pid);
        ProcInfo {
            pid: r.tid,
            start_ticks: r.start_ticks,
            comm: if r.comm.is_empty() {
                p.map(|p| p.comm.clone()).unwrap_or_default()
            } else {
                r.comm.as_str().into()
            },
            cmdline: p.map(|p| p.cmdline.clone()).unwrap_or_default(),
            uid: p.and_then(|p| p.uid),
            kthread: p.is_some_and(|p| p.kthread),
            cgroup: p.map(|p| p.cgroup.clone()).unwrap_or_default(),
            tgid: Some(r.pid),
            ppid: None,
        }
    }

    /// The `k` threads with the most on-CPU time in the last interval, heaviest first (None
    /// when the last Batch had no threads).
    pub fn top_threads(&self, k: usize) -> Option<Vec<CpuEntry>> {
        let b = self.latest.as_ref()?;
        Some(self.thread_entries(b.threads.as_ref()?, b.interval_ns(), k))
    }

    /// The exact shadow's top `k` threads, when the Batch carried it.
    pub fn top_threads_exact(&self, k: usize) -> Option<Vec<CpuEntry>> {
        let b = self.latest.as_ref()?;
        Some(self.thread_entries(b.threads_exact.as_ref()?, b.interval_ns(), k))
    }

    fn thread_entries(&self, rows: &[ThreadRow], n: u64, k: usize) -> Vec<CpuEntry> {
        rows.iter()
            .take(k)
            .map(|r| {
                let mut e = self.entry(
                    &CpuRow {
                        pid: r.pid,
                        ns: r.ns,
                        bins: r.bins.clone(),
                    },
                    n,
                );
                if !r.comm.is_empty() {
                    e.comm.clone_from(&r.comm);
                }
                e.tid = Some(r.tid);
                e.wait_ns = None;
                e.offcpu = None;
                e
            })
            .collect()
    }

    /// The last interval, if any.
    pub fn latest(&self) -> Option<&Batch> {
        self.latest.as_ref()
    }

    /// Length of the last interval in ns (0 before the first).
    pub fn interval_ns(&self) -> u64 {
        self.latest.as_ref().map_or(0, Batch::interval_ns)
    }

    /// Metadata of a pid, if known.
    pub fn proc_info(&self, pid: u32) -> Option<&ProcInfo> {
        self.procs.get(&pid)
    }

    fn entry(&self, r: &CpuRow, interval_ns: u64) -> CpuEntry {
        let info = self.procs.get(&r.pid);
        CpuEntry {
            pid: r.pid,
            comm: info.map(|p| p.comm.to_string()).unwrap_or_default(),
            cmdline: info.map(|p| p.cmdline.to_string()).unwrap_or_default(),
            uid: info.and_then(|p| p.uid),
            kthread: info.is_some_and(|p| p.kthread),
            cpu_ns: r.ns,
            cpu_pct: if interval_ns == 0 {
                0.0
            } else {
                r.ns as f64 * 100.0 / interval_ns as f64
            },
            bins: r.bins.clone(),
            exited: self.exited.contains_key(&r.pid),
            wait_ns: self.wait.wait_of(r.pid),
            offcpu: self.wait.offcpu_of(r.pid),
            caused_wait_ns: self.wait.caused_of(r.pid),
            cgroup: info.map(|p| p.cgroup.to_string()).unwrap_or_default(),
            tid: None,
        }
    }

    /// The `k` processes with the most on-CPU time in the last interval, heaviest first.
    pub fn top_cpu(&self, k: usize) -> Vec<CpuEntry> {
        let Some(b) = &self.latest else {
            return Vec::new();
        };
        let n = b.interval_ns();
        b.cpu.iter().take(k).map(|r| self.entry(r, n)).collect()
    }

    /// The exact shadow's top `k`, when the batch carried it.
    pub fn top_cpu_exact(&self, k: usize) -> Option<Vec<CpuEntry>> {
        let b = self.latest.as_ref()?;
        let n = b.interval_ns();
        Some(
            b.cpu_exact
                .as_ref()?
                .iter()
                .take(k)
                .map(|r| self.entry(r, n))
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Exit;

    /// Interval `seq` of 50 ms; `rows` are (pid, on-CPU ns), each process named `p<pid>`.
    fn batch(seq: u64, rows: &[(u32, u64)]) -> Batch {
        rows.iter()
            .fold(
                Batch::build(seq, seq * 50_000_000, 50_000_000),
                |b, &(pid, ns)| {
                    b.cpu(pid, ns, &[])
                        .proc(ProcInfo::named(pid, format!("p{pid}")))
                },
            )
            .done()
    }

    #[test]
    fn top_is_heaviest_first_with_percent_of_one_cpu() {
        let mut m = Model::new();
        m.ingest(&batch(
            1,
            &[(10, 50_000_000), (11, 25_000_000), (12, 5_000_000)],
        ));
        let top = m.top_cpu(2);
        assert_eq!(top.len(), 2);
        assert_eq!(top[0].pid, 10);
        assert_eq!(&*top[0].comm, "p10");
        assert!((top[0].cpu_pct - 100.0).abs() < 1e-9);
        assert!((top[1].cpu_pct - 50.0).abs() < 1e-9);
    }

    #[test]
    fn a_tid_used_again_by_a_new_thread_starts_a_new_row() {
        let mut m = Model::new();
        let thread = |seq: u64, start_ticks: u64, comm: &str| {
            let mut b = batch(seq, &[(700, 10_000_000)]);
            b.threads = Some(vec![ThreadRow {
                tid: 712,
                pid: 700,
                comm: comm.into(),
                start_ticks,
                ns: 10_000_000,
                bins: vec![],
            }]);
            b
        };
        for seq in 1..=3 {
            m.ingest(&thread(seq, 100, "old-worker"));
        }
        assert_eq!(m.threads.by_pid(712).map(|e| e.total_ns), Some(30_000_000));
        m.ingest(&thread(4, 200, "new-worker"));
        let e = m.threads.by_pid(712).unwrap();
        assert_eq!(&*e.comm, "new-worker");
        assert_eq!(
            e.total_ns, 10_000_000,
            "the old thread's time is not carried over"
        );
    }

    #[test]
    fn exited_processes_are_marked() {
        let mut m = Model::new();
        let mut b = batch(1, &[(10, 1)]);
        b.exits.push(Exit { pid: 10, ts_ns: 0 });
        m.ingest(&b);
        assert!(m.top_cpu(5)[0].exited);
    }

    /// One Batch for the names test: processes with info, memory rows, exits.
    type NameStep = (Vec<u32>, Vec<(u32, u64)>, Vec<u32>);

    proptest::proptest! {
        /// The names kept equal those the full walk kept (every name checked on every Batch):
        /// this interval's, the recently exited, and those with a known RSS.
        #[test]
        fn names_kept_equal_a_full_walk(
            steps in proptest::collection::vec(
                (
                    proptest::collection::vec(0u32..25, 0..5),
                    proptest::collection::vec((0u32..25, 1u64..5), 0..5),
                    proptest::collection::vec(0u32..25, 0..3),
                ),
                1..300,
            ),
        ) {
            let steps: Vec<NameStep> = steps;
            let mut m = Model::new();
            let mut names: HashMap<u32, ProcInfo> = HashMap::default();
            let mut exited: HashMap<u32, u64> = HashMap::default();
            for (i, (procs, mem, exits)) in steps.into_iter().enumerate() {
                let seq = i as u64 + 1;
                let mut b = batch(seq, &[]);
                b.procs = procs
                    .iter()
                    .map(|&pid| ProcInfo { pid, comm: format!("p{pid}-{seq}").into(), ..Default::default() })
                    .collect();
                b.mem = mem
                    .iter()
                    .map(|&(pid, rss_bytes)| crate::batch::MemRow { pid, rss_bytes, rss_delta_bytes: 0 })
                    .collect();
                b.exits = exits.iter().map(|&pid| Exit { pid, ts_ns: 0 }).collect();
                m.ingest(&b);
                for e in &b.exits {
                    exited.insert(e.pid, seq);
                }
                exited.retain(|_, s| seq.saturating_sub(*s) < EXITED_KEEP_INTERVALS);
                names.retain(|p, _| exited.contains_key(p) || m.mem.sketch.rss_of(*p).is_some());
                for p in &b.procs {
                    names.insert(p.pid, p.clone());
                }
                for pid in 0..25 {
                    proptest::prop_assert_eq!(m.proc_info(pid), names.get(&pid));
                }
            }
        }
    }

    #[test]
    fn empty_model_has_no_rows() {
        assert!(Model::new().top_cpu(5).is_empty());
        assert_eq!(Model::new().interval_ns(), 0);
    }
}
