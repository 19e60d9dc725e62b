//! The process table the interactive screen ranks: one entry per process, keyed by (pid, start
//! time) so a reused pid is a new process, with its on-CPU time in 10 ms cells over the last
//! minute taken from the kernel's burst bins, processes that exited kept (marked) for a few
//! seconds, and pins that keep a process listed whatever its rank and after it exits.
//!
//! Pure, like the rest of the Model: it knows only what Batches told it. The fold is here;
//! `entry` (who a process is: a reused pid is a new one), `burst` (the 10 ms cells),
//! `expiry` (the indexes that let a Batch touch only the entries it concerns), `pins` and
//! `ranking` each hold one part of it.

mod burst;
mod entry;
mod expiry;
mod pins;
mod ranking;
#[cfg(test)]
mod tests;

use std::collections::BTreeSet;

use foldhash::{HashMap, HashSet};

use crate::batch::{Batch, ProcInfo};

pub use burst::Burst;
pub use entry::{ProcEntry, ProcKey};
pub use ranking::{CGROUP_FILTER, Order, matches_filter};

/// Width of one history cell.
pub const CELL_NS: u64 = 10_000_000;
/// History kept per process: 60 s of 10 ms cells.
pub const HISTORY_CELLS: u64 = 6_000;
/// How long an exited (unpinned) process stays listed, ns of batch time.
pub const EXITED_KEEP_NS: u64 = 5_000_000_000;
/// The span the CPU% column averages over.
pub const CPU_PCT_SPAN_NS: u64 = 1_000_000_000;
/// A process not charged for this long (and not pinned) is forgotten.
pub const IDLE_FORGET_NS: u64 = HISTORY_CELLS * CELL_NS;

/// The table and its clock.
#[derive(Clone, Debug, Default)]
pub struct ProcTable {
    entries: HashMap<ProcKey, ProcEntry>,
    /// pid -> the newest process with it.
    current: HashMap<u32, ProcKey>,
    /// Pinned by the user; kept listed while pinned, exited or not.
    pins: BTreeSet<ProcKey>,
    /// `CLOCK_MONOTONIC` ns of cell 0 (the first interval's start, moved when the kernel's
    /// bins stop lining up with the cells after an interval change).
    anchor: Option<u64>,
    /// End of the last interval (ns) and its cell.
    now_ns: u64,
    // What follows lets a Batch touch only the entries it concerns (charged, exited, due),
    // not every process seen in the last minute: ebee-top's own cost must not grow with the
    // number of processes.
    /// Entries the last Batch charged (their `last_ns` is cleared by the next one) and those it
    /// marked kernel-pinned.
    charged: Vec<ProcKey>,
    kernel_pins: Vec<ProcKey>,
    /// Live entries whose CPU% may be non-zero: charged since their last second was last seen
    /// empty. Every other live entry's CPU% is 0.
    warm: HashSet<ProcKey>,
    /// (oldest history cell, entry) of every entry with history, to trim only what is due,
    /// and the cell each entry is filed under there.
    oldest: BTreeSet<(u64, ProcKey)>,
    indexed: HashMap<ProcKey, u64>,
    /// (time to look at it again, entry): when it will have been idle for a minute or exited
    /// for a while. A charge makes that later; rather than move the entry on every charge, it
    /// is looked at on the old time and put back (see `forget_due`), at most once a minute.
    due: BTreeSet<(u64, ProcKey)>,
    due_of: HashMap<ProcKey, u64>,
    /// Entries made by a name alone (the memory rows' processes, say), never charged: due at
    /// once, so they are looked at by the next `forget_due` without a place in `due`. Most
    /// are forgotten there, every Batch brings them again.
    fresh: Vec<ProcKey>,
    /// Entries past that time but kept by a pin (the user's, or the kernel's before any
    /// charge): checked on every Batch, there are few.
    parked: BTreeSet<ProcKey>,
}

impl ProcTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// The cell holding time `t_ns`.
    fn cell_of(&self, t_ns: u64) -> u64 {
        t_ns.saturating_sub(self.anchor.unwrap_or(0)) / CELL_NS
    }

    /// The last complete-or-current cell (the one the last interval ended in, minus one when
    /// it ended right on a cell edge).
    pub fn now_cell(&self) -> u64 {
        self.cell_of(self.now_ns.saturating_sub(1))
    }

    /// What every fold of a Batch starts with: the cell grid's phase, the clock, the names,
    /// and `-p` pins resolved to processes. Returns the grid anchor as it was before.
    fn begin_batch(&mut self, b: &Batch) -> Option<u64> {
        let anchor = *self.anchor.get_or_insert(b.start_ns);
        let before = self.anchor;
        // Keep the kernel's 10 ms bins on our cells: after an interval change the intervals
        // start at another phase; move the grid by that fraction of a cell.
        if b.bin_width_ns == CELL_NS {
            let phase = b.start_ns.saturating_sub(anchor) % CELL_NS;
            if phase > CELL_NS / 10 && phase < CELL_NS - CELL_NS / 10 {
                self.anchor = Some(anchor + phase);
            }
        }
        self.now_ns = self.now_ns.max(b.end_ns);
        for p in &b.procs {
            self.info_for(p, b.end_ns);
        }
        self.resolve_pid_pins();
        before
    }

    /// Fold one interval in. Touches the entries this Batch names, those charged or pinned
    /// by the last one, those whose CPU% is not yet back to 0, and those due to be trimmed or
    /// forgotten: never every entry (except after the cell grid moved, see below).
    pub fn ingest(&mut self, b: &Batch) {
        let anchor_before = self.begin_batch(b);
        // Only the last Batch's charged and kernel-pinned entries can hold either (drained,
        // so that the vectors keep their room for this Batch).
        for k in self.charged.drain(..) {
            if let Some(e) = self.entries.get_mut(&k)
                && e.exited_ns.is_none()
            {
                e.last_ns = 0;
            }
        }
        for k in self.kernel_pins.drain(..) {
            if let Some(e) = self.entries.get_mut(&k) {
                e.kernel_pinned = false;
            }
        }
        let interval = b.interval_ns();
        // The cells of each row's time, one vector per history, reused from row to row.
        let (mut c0, mut c1, mut c2) = (Vec::new(), Vec::new(), Vec::new());
        for r in &b.cpu {
            let key = match self.current.get(&r.pid) {
                Some(k) => *k,
                None => self.info_for(
                    &ProcInfo {
                        pid: r.pid,
                        ..Default::default()
                    },
                    b.end_ns,
                ),
            };
            self.spread_into(b, &r.bins, r.ns, interval, &mut c0);
            if let Some(e) = self.entries.get_mut(&key) {
                e.last_ns = r.ns;
                e.total_ns += r.ns;
                for &(c, ns) in &c0 {
                    e.burst.add(c, ns);
                }
                self.charged.push(key);
                self.charged_now(key, b.end_ns);
            }
        }
        // Waits and disk bytes: one sum per interval each, spread over the interval's cells.
        for (pid, wait, read, write) in b
            .wait
            .iter()
            .map(|w| (w.pid, w.ns, 0, 0))
            .chain(b.io.iter().map(|r| (r.pid, 0, r.read_bytes, r.write_bytes)))
        {
            let key = self.key_of(pid, b.end_ns);
            self.spread_into(b, &[], wait, interval, &mut c0);
            self.spread_into(b, &[], read, interval, &mut c1);
            self.spread_into(b, &[], write, interval, &mut c2);
            if let Some(e) = self.entries.get_mut(&key) {
                for (hist, cells) in [(&mut e.wait, &c0), (&mut e.read, &c1), (&mut e.write, &c2)] {
                    for &(c, v) in cells {
                        hist.add(c, v);
                    }
                }
                self.charged_now(key, b.end_ns);
            }
        }
        // Off-CPU time by reason, the same way.
        for r in &b.offcpu {
            let key = self.key_of(r.pid, b.end_ns);
            self.spread_into(b, &[], r.io_ns, interval, &mut c0);
            self.spread_into(b, &[], r.blocked_ns, interval, &mut c1);
            self.spread_into(b, &[], r.sleep_ns, interval, &mut c2);
            if let Some(e) = self.entries.get_mut(&key) {
                for (hist, cells) in [
                    (&mut e.iow, &c0),
                    (&mut e.blocked, &c1),
                    (&mut e.sleep, &c2),
                ] {
                    for &(c, v) in cells {
                        hist.add(c, v);
                    }
                }
                self.charged_now(key, b.end_ns);
            }
        }
        // The wait each process caused others, the same way.
        for r in &b.caused {
            let key = self.key_of(r.pid, b.end_ns);
            let cells = self.spread(b, &[], r.ns, interval);
            if let Some(e) = self.entries.get_mut(&key) {
                for (c, v) in cells {
                    e.caused.add(c, v);
                }
                self.charged_now(key, b.end_ns);
            }
        }
        for pid in &b.pinned {
            if let Some(k) = self.current.get(pid).copied()
                && let Some(e) = self.entries.get_mut(&k)
            {
                e.kernel_pinned = true;
                self.kernel_pins.push(k);
            }
        }
        let now_cell = self.now_cell();
        self.trim_history((now_cell + 1).saturating_sub(HISTORY_CELLS));
        if self.anchor != anchor_before {
            // The grid moved back by a fraction of a cell: a cell that had left the CPU%
            // window can be in it again. Rare (an interval change); look at every entry.
            self.warm.extend(self.entries.keys().copied());
        }
        let pct_first = (now_cell + 1).saturating_sub(CPU_PCT_SPAN_NS / CELL_NS);
        let span = CPU_PCT_SPAN_NS.min(
            self.now_ns
                .saturating_sub(self.anchor.unwrap_or(0))
                .max(CELL_NS),
        );
        let entries = &mut self.entries;
        self.warm.retain(|k| {
            let Some(e) = entries.get_mut(k) else {
                return false;
            };
            if e.exited_ns.is_some() {
                // Frozen at the exit.
                return false;
            }
            e.last_second(pct_first, now_cell, span)
        });
        for ex in &b.exits {
            if let Some(k) = self.current.get(&ex.pid).copied()
                && let Some(e) = self.entries.get_mut(&k)
                && e.exited_ns.is_none()
            {
                e.exited_ns = Some(b.end_ns);
                self.schedule(k);
            }
        }
        self.forget_due();
    }

    /// The newest process with `pid`, made from the pid alone if unknown.
    fn key_of(&mut self, pid: u32, end_ns: u64) -> ProcKey {
        match self.current.get(&pid) {
            Some(k) => *k,
            None => self.info_for(
                &ProcInfo {
                    pid,
                    ..Default::default()
                },
                end_ns,
            ),
        }
    }

    /// `key` was charged in the interval that ended at `end_ns`: its rates may be non-zero,
    /// its history may have a new oldest cell, and it is not idle.
    fn charged_now(&mut self, key: ProcKey, end_ns: u64) {
        if let Some(e) = self.entries.get_mut(&key) {
            e.last_charged_ns = end_ns;
        }
        self.warm.insert(key);
        self.reindex(key);
        // Already queued: the old time is earlier, the entry is put back then.
        if !self.due_of.contains_key(&key) {
            self.schedule(key);
        }
    }

    pub fn get(&self, key: &ProcKey) -> Option<&ProcEntry> {
        self.entries.get(key)
    }

    /// The newest process with this pid.
    pub fn by_pid(&self, pid: u32) -> Option<&ProcEntry> {
        self.current.get(&pid).and_then(|k| self.entries.get(k))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Every entry, for ranking by the caller.
    pub fn entries(&self) -> impl Iterator<Item = &ProcEntry> {
        self.entries.values()
    }
}
