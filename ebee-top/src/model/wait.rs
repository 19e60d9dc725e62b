//! Waits and disk I/O of the last interval, as the line output and the screen rank them: who
//! waited longest for a CPU, who read and wrote the most. Pure: everything came in a Batch.

use std::collections::VecDeque;

// foldhash, not SipHash: the keys are pids the kernel chose (see `model::procs`).
use foldhash::{HashMap, HashMapExt as _};

use crate::batch::Batch;
use crate::batch::wait::{CULPRIT_IDLE, CULPRIT_UNKNOWN, IoRow, OffCpuRow, WaitByRow, WaitRow};

/// What the culprits of a process's waits are summed over: the last second of intervals.
const CULPRIT_WINDOW_NS: u64 = 1_000_000_000;

/// Who held a process waiting for a CPU, over the last second.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Culprits {
    /// Processes that ran on its CPU while it waited, with the wait each caused, heaviest
    /// first (its own other threads included, under its own pid).
    pub by: Vec<(u32, u64)>,
    /// Wait with its CPU idle (wakeup latency), and wait nothing on its CPU explains.
    pub wakeup_ns: u64,
    pub unattributed_ns: u64,
}

impl Culprits {
    pub fn total_ns(&self) -> u64 {
        self.by.iter().map(|c| c.1).sum::<u64>() + self.wakeup_ns + self.unattributed_ns
    }
}

/// One line of the `wait_by[]` ranking.
#[derive(Clone, Debug, PartialEq)]
pub struct WaitByEntry {
    pub pid: u32,
    pub culprit: u32,
    pub wait_ns: u64,
}

/// One line of the wait ranking.
#[derive(Clone, Debug, PartialEq)]
pub struct WaitEntry {
    pub pid: u32,
    pub wait_ns: u64,
    /// Share of the interval its threads waited: 100 is one thread waiting all the time.
    pub wait_pct: f64,
}

/// One line of the disk I/O ranking.
#[derive(Clone, Debug, PartialEq)]
pub struct IoEntry {
    pub pid: u32,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// One line of the `blocked[]` ranking: a process's off-CPU time by reason.
#[derive(Clone, Debug, PartialEq)]
pub struct BlockedEntry {
    pub pid: u32,
    pub io_ns: u64,
    pub blocked_ns: u64,
    pub sleep_ns: u64,
    /// `io_ns` as a share of the interval (100 = one thread all of it).
    pub io_pct: f64,
    pub blocked_pct: f64,
}

/// The last interval's waits and I/O.
#[derive(Clone, Debug, Default)]
pub struct WaitModel {
    /// The kernel gives waits, and disk I/O (from the last Batch; a recording made without
    /// this pipeline has neither).
    pub available: bool,
    pub io_available: bool,
    /// The off-CPU split was measured.
    pub offcpu_available: bool,
    interval_ns: u64,
    /// Off-CPU rows, most held up first, and by pid.
    offcpu: Vec<OffCpuRow>,
    offcpu_by_pid: HashMap<u32, usize>,
    wait: Vec<WaitRow>,
    wait_by_pid: HashMap<u32, u64>,
    wait_exact: Option<Vec<WaitRow>>,
    io: Vec<IoRow>,
    io_exact: Option<Vec<IoRow>>,
    /// The last interval's (victim, culprit) pairs, and the wait each process caused.
    wait_by: Vec<WaitByRow>,
    caused_by_pid: HashMap<u32, u64>,
    /// The pairs of the intervals of the last second (interval ns, pairs), newest last.
    recent_pairs: VecDeque<(u64, Vec<WaitByRow>)>,
}

impl WaitModel {
    pub fn ingest(&mut self, b: &Batch) {
        self.available = b.wait_stats.available;
        self.io_available = b.wait_stats.io_available;
        self.offcpu_available = b.wait_stats.offcpu_available;
        self.offcpu.clone_from(&b.offcpu);
        self.offcpu_by_pid = b
            .offcpu
            .iter()
            .enumerate()
            .map(|(i, r)| (r.pid, i))
            .collect();
        self.interval_ns = b.interval_ns();
        self.wait.clone_from(&b.wait);
        self.wait_by_pid = b.wait.iter().map(|w| (w.pid, w.ns)).collect();
        self.wait_exact.clone_from(&b.wait_exact);
        self.io.clone_from(&b.io);
        self.io_exact.clone_from(&b.io_exact);
        self.wait_by.clone_from(&b.wait_by);
        self.caused_by_pid = b.caused.iter().map(|w| (w.pid, w.ns)).collect();
        self.recent_pairs
            .push_back((b.interval_ns(), b.wait_by.clone()));
        let mut span: u64 = self.recent_pairs.iter().map(|p| p.0).sum();
        while span > CULPRIT_WINDOW_NS && self.recent_pairs.len() > 1 {
            span -= self.recent_pairs.pop_front().map_or(0, |p| p.0);
        }
    }

    /// Wait `pid` caused other processes in the last interval; None when not measured.
    pub fn caused_of(&self, pid: u32) -> Option<u64> {
        self.offcpu_available
            .then(|| self.caused_by_pid.get(&pid).copied().unwrap_or(0))
    }

    /// Who held `pid` waiting over the last second (None when not measured).
    pub fn culprits_of(&self, pid: u32) -> Option<Culprits> {
        if !self.offcpu_available {
            return None;
        }
        let mut c = Culprits::default();
        let mut by: HashMap<u32, u64> = HashMap::new();
        for r in self
            .recent_pairs
            .iter()
            .flat_map(|p| &p.1)
            .filter(|r| r.pid == pid)
        {
            match r.culprit {
                CULPRIT_IDLE => c.wakeup_ns += r.ns,
                CULPRIT_UNKNOWN => c.unattributed_ns += r.ns,
                x => *by.entry(x).or_default() += r.ns,
            }
        }
        c.by = by.into_iter().collect();
        c.by.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        Some(c)
    }

    /// The `k` heaviest (victim, culprit) pairs of the last interval.
    pub fn top_wait_by(&self, k: usize) -> Vec<WaitByEntry> {
        self.wait_by
            .iter()
            .take(k)
            .map(|r| WaitByEntry {
                pid: r.pid,
                culprit: r.culprit,
                wait_ns: r.ns,
            })
            .collect()
    }

    /// Wait of `pid` in the last interval; None when the kernel gives no waits.
    pub fn wait_of(&self, pid: u32) -> Option<u64> {
        self.available
            .then(|| self.wait_by_pid.get(&pid).copied().unwrap_or(0))
    }

    /// Off-CPU time of `pid` in the last interval (all 0 when it had none); None when the
    /// split was not measured.
    pub fn offcpu_of(&self, pid: u32) -> Option<OffCpuRow> {
        self.offcpu_available.then(|| {
            self.offcpu_by_pid
                .get(&pid)
                .and_then(|&i| self.offcpu.get(i))
                .cloned()
                .unwrap_or(OffCpuRow {
                    pid,
                    ..Default::default()
                })
        })
    }

    fn pct(&self, ns: u64) -> f64 {
        if self.interval_ns == 0 {
            0.0
        } else {
            ns as f64 * 100.0 / self.interval_ns as f64
        }
    }

    /// The `k` processes held up longest in the kernel (blocked on I/O + blocked otherwise)
    /// in the last interval; those that only slept are not listed.
    pub fn top_blocked(&self, k: usize) -> Vec<BlockedEntry> {
        self.offcpu
            .iter()
            .filter(|r| r.held_ns() != 0)
            .take(k)
            .map(|r| BlockedEntry {
                pid: r.pid,
                io_ns: r.io_ns,
                blocked_ns: r.blocked_ns,
                sleep_ns: r.sleep_ns,
                io_pct: self.pct(r.io_ns),
                blocked_pct: self.pct(r.blocked_ns),
            })
            .collect()
    }

    fn entry(&self, w: &WaitRow) -> WaitEntry {
        WaitEntry {
            pid: w.pid,
            wait_ns: w.ns,
            wait_pct: if self.interval_ns == 0 {
                0.0
            } else {
                w.ns as f64 * 100.0 / self.interval_ns as f64
            },
        }
    }

    /// The `k` processes that waited longest in the last interval.
    pub fn top_wait(&self, k: usize) -> Vec<WaitEntry> {
        self.wait.iter().take(k).map(|w| self.entry(w)).collect()
    }

    /// The exact shadow's top `k`, when the Batch carried it.
    pub fn top_wait_exact(&self, k: usize) -> Option<Vec<WaitEntry>> {
        let e = self.wait_exact.as_ref()?;
        Some(e.iter().take(k).map(|w| self.entry(w)).collect())
    }

    /// The `k` processes with the most disk bytes (read + written) in the last interval.
    pub fn top_io(&self, k: usize) -> Vec<IoEntry> {
        io_entries(&self.io, k)
    }

    pub fn top_io_exact(&self, k: usize) -> Option<Vec<IoEntry>> {
        Some(io_entries(self.io_exact.as_ref()?, k))
    }
}

fn io_entries(rows: &[IoRow], k: usize) -> Vec<IoEntry> {
    rows.iter()
        .take(k)
        .map(|r| IoEntry {
            pid: r.pid,
            read_bytes: r.read_bytes,
            write_bytes: r.write_bytes,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::wait::WaitStats;

    fn batch(wait: &[(u32, u64)], io: &[(u32, u64, u64)], available: bool) -> Batch {
        Batch::build(1, 0, 50_000_000)
            .with(|b| {
                b.wait = wait.iter().map(|&(pid, ns)| WaitRow { pid, ns }).collect();
                b.io = io
                    .iter()
                    .map(|&(pid, read_bytes, write_bytes)| IoRow {
                        pid,
                        read_bytes,
                        write_bytes,
                    })
                    .collect();
                b.wait_stats = WaitStats {
                    available,
                    io_available: available,
                    ..Default::default()
                };
            })
            .done()
    }

    #[test]
    fn culprits_are_summed_over_the_last_second() {
        let pairs = |seq: u64, rows: &[(u32, u32, u64)]| {
            Batch::build(seq, (seq - 1) * 400_000_000, 400_000_000)
                .with(|b| {
                    b.wait_by = rows
                        .iter()
                        .map(|&(pid, culprit, ns)| WaitByRow { pid, culprit, ns })
                        .collect();
                    b.caused = vec![WaitRow { pid: 20, ns: 300 }];
                    b.wait_stats = WaitStats {
                        available: true,
                        offcpu_available: true,
                        ..Default::default()
                    };
                })
                .done()
        };
        let mut m = WaitModel::default();
        m.ingest(&pairs(1, &[(10, 20, 1_000), (10, 30, 500)]));
        m.ingest(&pairs(2, &[(10, 20, 100), (10, CULPRIT_IDLE, 40)]));
        m.ingest(&pairs(
            3,
            &[(10, 30, 700), (10, CULPRIT_UNKNOWN, 9), (11, 10, 5)],
        ));
        // 1.2 s of intervals kept to 1 s: the first one is out.
        let c = m.culprits_of(10).unwrap();
        assert_eq!(c.by, vec![(30, 700), (20, 100)]);
        assert_eq!((c.wakeup_ns, c.unattributed_ns, c.total_ns()), (40, 9, 849));
        assert_eq!(m.caused_of(20), Some(300));
        assert_eq!(m.caused_of(30), Some(0));
        assert_eq!(m.top_wait_by(1)[0].culprit, 30);
        m.offcpu_available = false;
        assert_eq!(m.culprits_of(10), None);
    }

    #[test]
    fn shares_of_the_interval_and_rankings() {
        let mut m = WaitModel::default();
        m.ingest(&batch(
            &[(7, 25_000_000), (8, 5_000_000)],
            &[(9, 0, 1 << 20)],
            true,
        ));
        let top = m.top_wait(1);
        assert_eq!((top[0].pid, top[0].wait_pct), (7, 50.0));
        assert_eq!(m.wait_of(8), Some(5_000_000));
        assert_eq!(m.wait_of(99), Some(0), "no wait is a wait of 0");
        assert_eq!(m.top_io(5)[0].write_bytes, 1 << 20);
        assert!(m.top_wait_exact(5).is_none());
    }

    #[test]
    fn blocked_ranks_the_held_up_and_leaves_out_the_sleepers() {
        let mut m = WaitModel::default();
        let mut b = batch(&[], &[], true);
        b.wait_stats.offcpu_available = true;
        let row = |pid, io_ns, blocked_ns, sleep_ns| OffCpuRow {
            pid,
            io_ns,
            blocked_ns,
            sleep_ns,
        };
        b.offcpu = vec![
            row(3, 10_000_000, 5_000_000, 0),
            row(4, 0, 1_000_000, 40_000_000),
            row(5, 0, 0, 50_000_000),
        ];
        m.ingest(&b);
        let top = m.top_blocked(10);
        assert_eq!(top.iter().map(|e| e.pid).collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!((top[0].io_pct, top[0].blocked_pct), (20.0, 10.0));
        assert_eq!(m.offcpu_of(5).map(|r| r.sleep_ns), Some(50_000_000));
        assert_eq!(m.offcpu_of(9).map(|r| r.held_ns()), Some(0));
        b.wait_stats.offcpu_available = false;
        m.ingest(&b);
        assert_eq!(m.offcpu_of(5), None, "not measured is not zero");
    }

    #[test]
    fn without_the_pipeline_waits_are_unknown_not_zero() {
        let mut m = WaitModel::default();
        m.ingest(&batch(&[], &[], false));
        assert_eq!(m.wait_of(1), None);
        assert!(m.top_wait(5).is_empty());
    }
}
