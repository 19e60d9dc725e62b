//! The last-known RSS of every process: the kernel sends a reading only when a process's memory
//! changes, so the live source keeps every process's last value (seeded once from /proc right
//! after attaching), which gives RES and its growth per interval, also for processes whose
//! memory did not change. Pure: readings and exits in, Batch rows out.

// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::{HashMap, HashMapExt as _};

use crate::batch::MemRow;
use crate::model::rank::Ranked;
use crate::probes::mem::MemReading;

/// A change of one process's resident memory, as folded into a [`MemTable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemChange {
    pub pid: u32,
    pub rss_bytes: u64,
    /// `rss_bytes` minus the value known before this interval (0 when first seen: then the
    /// whole RSS counts as growth, the process is new or grew from nothing as far as we know).
    pub delta_bytes: i64,
}

/// Last-known RSS of every process. Pure: readings and exits in, rankings out. Kept ranked
/// (most processes never change), so each interval's rows cost what changed plus the top.
#[derive(Clone, Debug, Default)]
pub struct MemTable {
    rss: Ranked,
    page_size: u64,
}

impl MemTable {
    pub fn new(page_size: u64) -> Self {
        Self {
            rss: Ranked::new(),
            page_size,
        }
    }

    /// Seed with (pid, rss bytes) of processes that exist now (read once at start).
    pub fn seed(&mut self, procs: impl IntoIterator<Item = (u32, u64)>) {
        for (pid, bytes) in procs {
            if pid != 0 && bytes != 0 {
                self.rss.insert(pid, bytes);
            }
        }
    }

    /// Fold one interval's readings in; returns what changed, in pid order.
    pub fn apply(&mut self, readings: &[MemReading]) -> Vec<MemChange> {
        let mut out = Vec::new();
        for r in readings {
            let bytes = ebee_shared::mem::pages_to_bytes(r.pages, self.page_size);
            let before = self.rss.insert(r.tgid, bytes).unwrap_or(0);
            if before != bytes {
                out.push(MemChange {
                    pid: r.tgid,
                    rss_bytes: bytes,
                    delta_bytes: bytes as i64 - before as i64,
                });
            }
        }
        out
    }

    /// A process ended: forget it (its pid may be reused by a new process).
    pub fn exit(&mut self, pid: u32) {
        self.rss.remove(pid);
    }

    /// Known RSS of `pid`.
    pub fn get(&self, pid: u32) -> Option<u64> {
        self.rss.get(pid)
    }

    /// The `n` processes with the most RSS, largest first (ties by pid).
    pub fn top(&self, n: usize) -> Vec<(u32, u64)> {
        self.rss.top(n)
    }

    /// Processes known.
    pub fn len(&self) -> usize {
        self.rss.len()
    }

    /// True when no process is known.
    pub fn is_empty(&self) -> bool {
        self.rss.is_empty()
    }

    /// Batch rows: every process that changed plus the `n` largest, largest first, so a
    /// consumer that sees only this batch still ranks the top `n` right.
    pub fn rows(&self, changes: &[MemChange], n: usize) -> Vec<MemRow> {
        // Sized for every row up front: grown from empty, it was rehashed several times an
        // interval.
        let mut by: HashMap<u32, MemRow> = HashMap::with_capacity(n + changes.len());
        by.extend(self.top(n).into_iter().map(|(pid, rss_bytes)| {
            (
                pid,
                MemRow {
                    pid,
                    rss_bytes,
                    rss_delta_bytes: 0,
                },
            )
        }));
        for c in changes {
            // A process that changed and then exited in the same interval is gone.
            if self.rss.contains(c.pid) {
                by.insert(
                    c.pid,
                    MemRow {
                        pid: c.pid,
                        rss_bytes: c.rss_bytes,
                        rss_delta_bytes: c.delta_bytes,
                    },
                );
            }
        }
        let mut v: Vec<_> = by.into_values().collect();
        v.sort_unstable_by(|a, b| b.rss_bytes.cmp(&a.rss_bytes).then(a.pid.cmp(&b.pid)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rd(tgid: u32, pages: u64, ts: u64) -> MemReading {
        MemReading {
            tgid,
            pages,
            peak: pages,
            ts,
        }
    }

    #[test]
    fn seeded_processes_rank_without_any_event_and_growth_is_against_the_known_value() {
        let mut t = MemTable::new(4096);
        t.seed([(1, 10 << 20), (2, 50 << 20), (3, 0)]);
        assert_eq!(t.top(5), vec![(2, 50 << 20), (1, 10 << 20)]);
        // Process 1 grows to 100 MiB; 2 sends nothing and keeps its value.
        let ch = t.apply(&[rd(1, 25_600, 5)]);
        assert_eq!(
            ch,
            vec![MemChange {
                pid: 1,
                rss_bytes: 100 << 20,
                delta_bytes: 90 << 20
            }]
        );
        assert_eq!(t.top(1), vec![(1, 100 << 20)]);
        // Then shrinks: a negative delta, and it drops below 2.
        let ch = t.apply(&[rd(1, 256, 6)]);
        assert_eq!(ch[0].delta_bytes, (1 << 20) - (100 << 20));
        assert_eq!(t.top(1), vec![(2, 50 << 20)]);
        // A reading equal to the known value is not a change.
        assert!(t.apply(&[rd(1, 256, 7)]).is_empty());
    }

    #[test]
    fn a_new_process_grows_from_zero_and_exits_are_forgotten() {
        let mut t = MemTable::new(4096);
        let ch = t.apply(&[rd(7, 256, 1)]);
        assert_eq!(ch[0].delta_bytes, 1 << 20);
        t.exit(7);
        assert_eq!(t.get(7), None);
        assert!(t.is_empty());
    }

    #[test]
    fn rows_hold_the_top_and_every_change_largest_first() {
        let mut t = MemTable::new(4096);
        t.seed((1..=10).map(|p| (p, u64::from(p) << 20)));
        let ch = t.apply(&[rd(1, 512, 1)]); // 1 MiB -> 2 MiB, not in the top 3
        let rows = t.rows(&ch, 3);
        let pids: Vec<u32> = rows.iter().map(|r| r.pid).collect();
        assert_eq!(pids, vec![10, 9, 8, 1]);
        assert_eq!(rows[3].rss_delta_bytes, 1 << 20);
        assert_eq!(rows[0].rss_delta_bytes, 0);
        // A process that changed and exited in the same interval is not reported.
        t.exit(1);
        assert!(t.rows(&ch, 3).iter().all(|r| r.pid != 1));
    }
}
