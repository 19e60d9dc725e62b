//! The process table the interactive screen ranks: one entry per process, keyed by (pid, start
//! time) so a reused pid is a new process, with its on-CPU time in 10 ms cells over the last
//! minute taken from the kernel's burst bins, processes that exited kept (marked) for a few
//! seconds, and pins that keep a process listed whatever its rank and after it exits.
//!
//! Pure, like the rest of the Model: it knows only what Batches told it.

use std::collections::{BTreeSet, HashMap, HashSet, VecDeque, hash_map};

use crate::batch::{Batch, ProcInfo};

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

/// A process: its pid and start time (clock ticks after boot; 0 when it was gone before we
/// could read it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcKey {
    pub pid: u32,
    pub start_ticks: u64,
}

/// On-CPU ns per 10 ms cell, sparse: only cells with time in them, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Burst {
    cells: VecDeque<(u64, u64)>,
}

impl Burst {
    fn add(&mut self, cell: u64, ns: u64) {
        if ns == 0 {
            return;
        }
        match self.cells.back_mut() {
            // Same cell (or, after the grid moved by a fraction of a cell, an earlier one):
            // merge rather than break the order.
            Some((c, v)) if *c >= cell => *v += ns,
            _ => self.cells.push_back((cell, ns)),
        }
    }

    fn trim(&mut self, first_kept: u64) {
        while self.cells.front().is_some_and(|(c, _)| *c < first_kept) {
            self.cells.pop_front();
        }
    }

    /// ns per cell for the `n` cells ending with `last` (inclusive), oldest first.
    pub fn dense(&self, last: u64, n: usize) -> Vec<u64> {
        let mut out = vec![0u64; n];
        for &(c, v) in self.cells.iter().rev() {
            if c > last {
                continue;
            }
            // Right-aligned on `last`, also when there is less history than `n` cells.
            let back = (last - c) as usize;
            if back >= n {
                break;
            }
            out[n - 1 - back] += v;
        }
        out
    }

    /// Sum of the cells from `first` to `last` inclusive.
    pub fn sum(&self, first: u64, last: u64) -> u64 {
        self.cells
            .iter()
            .rev()
            .take_while(|(c, _)| *c >= first)
            .filter(|(c, _)| *c <= last)
            .map(|(_, v)| v)
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.cells.is_empty()
    }
}

/// One process in the table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcEntry {
    pub key: ProcKey,
    pub comm: String,
    pub cmdline: String,
    pub uid: Option<u32>,
    pub kthread: bool,
    /// On-CPU ns in the last interval.
    pub last_ns: u64,
    /// Share of one CPU over the last second (100 = one core); frozen at the exit for an
    /// exited process.
    pub cpu_pct: f64,
    /// On-CPU ns since ebee-top first saw the process.
    pub total_ns: u64,
    pub burst: Burst,
    /// `end_ns` of the last interval that charged it.
    pub last_charged_ns: u64,
    /// `end_ns` of the interval it exited in.
    pub exited_ns: Option<u64>,
    /// The kernel follows it for QoS (from the Batch's `pinned`).
    pub kernel_pinned: bool,
}

impl ProcEntry {
    pub fn exited(&self) -> bool {
        self.exited_ns.is_some()
    }

    /// What the table shows as the command: the command line, or `[comm]` for kernel
    /// threads, or the name.
    pub fn command(&self) -> String {
        if !self.cmdline.is_empty() {
            self.cmdline.clone()
        } else if self.kthread {
            format!("[{}]", self.comm)
        } else {
            self.comm.clone()
        }
    }
}

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
    /// (oldest history cell, entry) of every entry with history, to trim only what is due.
    oldest: BTreeSet<(u64, ProcKey)>,
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

/// When an unpinned entry is forgotten: a while after its exit, or a minute after it was last
/// charged (at once, for one never charged).
fn due_ns(e: &ProcEntry) -> u64 {
    match e.exited_ns {
        Some(t) => t.saturating_add(EXITED_KEEP_NS),
        None => e.last_charged_ns.max(1).saturating_add(IDLE_FORGET_NS),
    }
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

    fn info_for(&mut self, p: &ProcInfo, end_ns: u64) -> ProcKey {
        let key = match self.current.get(&p.pid) {
            // Start time unknown (gone before /proc was read): the process we already know.
            Some(k) if p.start_ticks == 0 || k.start_ticks == p.start_ticks => *k,
            Some(old) => {
                // The pid was reused: the old process is over.
                let old = *old;
                if let Some(e) = self.entries.get_mut(&old)
                    && e.exited_ns.is_none()
                {
                    e.exited_ns = Some(end_ns);
                    self.schedule(old);
                }
                ProcKey {
                    pid: p.pid,
                    start_ticks: p.start_ticks,
                }
            }
            None => ProcKey {
                pid: p.pid,
                start_ticks: p.start_ticks,
            },
        };
        self.current.insert(p.pid, key);
        if let hash_map::Entry::Vacant(v) = self.entries.entry(key) {
            v.insert(ProcEntry {
                key,
                ..Default::default()
            });
            self.fresh.push(key);
        }
        let Some(e) = self.entries.get_mut(&key) else {
            return key;
        };
        // A name from an exit event (no start time) does not overwrite what /proc said.
        if !p.comm.is_empty() && (p.start_ticks != 0 || e.comm.is_empty()) {
            e.comm.clone_from(&p.comm);
        }
        if !p.cmdline.is_empty() {
            e.cmdline.clone_from(&p.cmdline);
        }
        if p.uid.is_some() {
            e.uid = p.uid;
        }
        e.kthread |= p.kthread;
        key
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
        // Pins given by pid alone (`-p`) become pins of the process once it is known.
        let by_pid: Vec<ProcKey> = self
            .pins
            .iter()
            .filter(|k| k.start_ticks == 0)
            .copied()
            .collect();
        for k in by_pid {
            if let Some(cur) = self.current.get(&k.pid)
                && cur.start_ticks != 0
            {
                self.pins.remove(&k);
                self.pins.insert(*cur);
            }
        }
        before
    }

    /// Fold one interval in. Touches the entries this Batch names, those charged or pinned
    /// by the last one, those whose CPU% is not yet back to 0, and those due to be trimmed or
    /// forgotten: never every entry (except after the cell grid moved, see below).
    pub fn ingest(&mut self, b: &Batch) {
        let anchor_before = self.begin_batch(b);
        // Only the last Batch's charged and kernel-pinned entries can hold either.
        for k in std::mem::take(&mut self.charged) {
            if let Some(e) = self.entries.get_mut(&k)
                && e.exited_ns.is_none()
            {
                e.last_ns = 0;
            }
        }
        for k in std::mem::take(&mut self.kernel_pins) {
            if let Some(e) = self.entries.get_mut(&k) {
                e.kernel_pinned = false;
            }
        }
        let interval = b.interval_ns();
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
            let cells = self.spread(b, &r.bins, r.ns, interval);
            if let Some(e) = self.entries.get_mut(&key) {
                let had_history = !e.burst.is_empty();
                e.last_ns = r.ns;
                e.total_ns += r.ns;
                e.last_charged_ns = b.end_ns;
                for (c, ns) in cells {
                    e.burst.add(c, ns);
                }
                if !had_history && let Some(&(c, _)) = e.burst.cells.front() {
                    self.oldest.insert((c, key));
                }
                self.charged.push(key);
                self.warm.insert(key);
                // Already queued: the old time is earlier, the entry is put back then.
                if !self.due_of.contains_key(&key) {
                    self.schedule(key);
                }
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
        let first_kept = (now_cell + 1).saturating_sub(HISTORY_CELLS);
        while let Some(&(c, k)) = self.oldest.first()
            && c < first_kept
        {
            self.oldest.pop_first();
            if let Some(e) = self.entries.get_mut(&k) {
                e.burst.trim(first_kept);
                if let Some(&(c, _)) = e.burst.cells.front() {
                    self.oldest.insert((c, k));
                }
            }
        }
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
            let sum = e.burst.sum(pct_first, now_cell);
            e.cpu_pct = sum as f64 * 100.0 / span as f64;
            sum != 0
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

    /// (Re)place `key` in the queue of entries to forget, by its state now.
    fn schedule(&mut self, key: ProcKey) {
        let Some(e) = self.entries.get(&key) else {
            return;
        };
        let at = due_ns(e);
        if let Some(old) = self.due_of.insert(key, at) {
            if old == at {
                return;
            }
            self.due.remove(&(old, key));
        }
        self.due.insert((at, key));
    }

    /// Forget the entries whose time has come, unless a pin keeps them.
    fn forget_due(&mut self) {
        let now = self.now_ns;
        let mut check: Vec<ProcKey> = std::mem::take(&mut self.parked).into_iter().collect();
        // The fresh ones still never charged nor exited (the others are queued in `due`).
        // Every Batch brings dozens (the memory rows' processes), so the common case, one
        // forgotten at once, is done here with one lookup: it has no history, is not warm
        // and not queued.
        for k in std::mem::take(&mut self.fresh) {
            let hash_map::Entry::Occupied(o) = self.entries.entry(k) else {
                continue;
            };
            let e = o.get();
            if e.last_charged_ns != 0 || e.exited_ns.is_some() {
                continue;
            }
            if now < due_ns(e) || e.kernel_pinned || self.pins.contains(&k) {
                check.push(k);
                continue;
            }
            o.remove();
            if let hash_map::Entry::Occupied(c) = self.current.entry(k.pid)
                && *c.get() == k
            {
                c.remove();
            }
        }
        while let Some(&(at, k)) = self.due.first()
            && at <= now
        {
            self.due.pop_first();
            self.due_of.remove(&k);
            check.push(k);
        }
        for k in check {
            let Some(e) = self.entries.get(&k) else {
                continue;
            };
            if now < due_ns(e) {
                // Charged since it was queued (or parked), or fresh early after boot: back in
                // the queue at its time now.
                self.schedule(k);
                continue;
            }
            if self.pins.contains(&k)
                || e.exited_ns.is_none() && e.last_charged_ns == 0 && e.kernel_pinned
            {
                self.parked.insert(k);
                continue;
            }
            if let Some(e) = self.entries.remove(&k) {
                if let Some(&(c, _)) = e.burst.cells.front() {
                    self.oldest.remove(&(c, k));
                }
            }
            self.warm.remove(&k);
            if let Some(at) = self.due_of.remove(&k) {
                self.due.remove(&(at, k));
            }
            if self.current.get(&k.pid) == Some(&k) {
                self.current.remove(&k.pid);
            }
        }
    }

    /// The fold as it was before it was made incremental: every entry visited on every
    /// Batch. The reference `ingest` must equal (tests only).
    #[cfg(test)]
    fn ingest_full(&mut self, b: &Batch) {
        self.begin_batch(b);
        for e in self.entries.values_mut() {
            if e.exited_ns.is_none() {
                e.last_ns = 0;
            }
            e.kernel_pinned = false;
        }
        let interval = b.interval_ns();
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
            let cells = self.spread(b, &r.bins, r.ns, interval);
            if let Some(e) = self.entries.get_mut(&key) {
                e.last_ns = r.ns;
                e.total_ns += r.ns;
                e.last_charged_ns = b.end_ns;
                for (c, ns) in cells {
                    e.burst.add(c, ns);
                }
            }
        }
        for pid in &b.pinned {
            if let Some(e) = self.current.get(pid).and_then(|k| self.entries.get_mut(k)) {
                e.kernel_pinned = true;
            }
        }
        let now_cell = self.now_cell();
        let first_kept = (now_cell + 1).saturating_sub(HISTORY_CELLS);
        let pct_first = (now_cell + 1).saturating_sub(CPU_PCT_SPAN_NS / CELL_NS);
        let exits: BTreeSet<u32> = b.exits.iter().map(|e| e.pid).collect();
        for e in self.entries.values_mut() {
            e.burst.trim(first_kept);
            if e.exited_ns.is_none() {
                e.cpu_pct = e.burst.sum(pct_first, now_cell) as f64 * 100.0
                    / (CPU_PCT_SPAN_NS.min(
                        self.now_ns
                            .saturating_sub(self.anchor.unwrap_or(0))
                            .max(CELL_NS),
                    )) as f64;
            }
        }
        for pid in exits {
            if let Some(e) = self.current.get(&pid).and_then(|k| self.entries.get_mut(k))
                && e.exited_ns.is_none()
            {
                e.exited_ns = Some(b.end_ns);
            }
        }
        let now = self.now_ns;
        let pins = &self.pins;
        self.entries.retain(|k, e| {
            if pins.contains(k) {
                return true;
            }
            match e.exited_ns {
                Some(t) => now.saturating_sub(t) < EXITED_KEEP_NS,
                None => {
                    now.saturating_sub(e.last_charged_ns.max(1)) < IDLE_FORGET_NS
                        || e.last_charged_ns == 0 && e.kernel_pinned
                }
            }
        });
        let entries = &self.entries;
        self.current.retain(|_, k| entries.contains_key(k));
    }

    /// The kernel's bins of one row as (cell, ns) pairs. Bin `i` covers
    /// `[start + i*w, start + (i+1)*w)` (the last one up to the interval's end); a bin wider
    /// than a cell (long intervals) is spread evenly over the cells it covers.
    fn spread(&self, b: &Batch, bins: &[u64], ns: u64, interval: u64) -> Vec<(u64, u64)> {
        let w = b.bin_width_ns;
        let mut out = Vec::new();
        if bins.is_empty() || w == 0 {
            // No bins (an old recording): the whole interval, evenly.
            self.spread_span(b.start_ns, b.end_ns, ns, &mut out);
            return out;
        }
        let n = bins.len();
        for (i, &v) in bins.iter().enumerate() {
            let s = b.start_ns + i as u64 * w;
            let e = if i + 1 == n {
                b.start_ns + interval.max((i as u64) * w + 1)
            } else {
                s + w
            };
            self.spread_span(s, e.max(s + 1), v, &mut out);
        }
        out
    }

    fn spread_span(&self, s: u64, e: u64, v: u64, out: &mut Vec<(u64, u64)>) {
        if v == 0 {
            return;
        }
        let first = self.cell_of(s);
        let last = self.cell_of(e - 1);
        if first == last {
            out.push((first, v));
            return;
        }
        let len = (e - s) as u128;
        let mut given = 0u64;
        for c in first..=last {
            let cs = (self.anchor.unwrap_or(0) + c * CELL_NS).max(s);
            let ce = (self.anchor.unwrap_or(0) + (c + 1) * CELL_NS).min(e);
            let part = if c == last {
                v - given
            } else {
                (u128::from(v) * u128::from(ce.saturating_sub(cs)) / len) as u64
            };
            given += part;
            out.push((c, part));
        }
    }

    /// Pin or unpin a process; returns whether it is pinned now.
    pub fn toggle_pin(&mut self, key: ProcKey) -> bool {
        if self.pins.remove(&key) {
            false
        } else {
            self.pins.insert(key);
            true
        }
    }

    /// Pin a process by pid (from `-p` on the command line); false when unknown yet, in which
    /// case the pid is pinned with an unknown start time.
    pub fn pin_pid(&mut self, pid: u32) {
        let key = self.current.get(&pid).copied().unwrap_or(ProcKey {
            pid,
            start_ticks: 0,
        });
        self.pins.insert(key);
    }

    pub fn is_pinned(&self, key: &ProcKey) -> bool {
        self.pins.contains(key)
    }

    /// Pids of the pinned processes that still run (what the kernel should follow).
    pub fn live_pins(&self) -> Vec<u32> {
        let mut v: Vec<u32> = self
            .pins
            .iter()
            .filter(|k| self.entries.get(k).is_none_or(|e| !e.exited()))
            .map(|k| k.pid)
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    pub fn pins(&self) -> &BTreeSet<ProcKey> {
        &self.pins
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{CpuRow, Exit};

    const MS: u64 = 1_000_000;

    /// Interval `seq` (from 1) of 50 ms, starting at 1 s + (seq-1)*50 ms.
    fn batch(seq: u64, rows: &[(u32, u64, &[u64])]) -> Batch {
        let start = 1_000 * MS + (seq - 1) * 50 * MS;
        Batch {
            seq,
            start_ns: start,
            end_ns: start + 50 * MS,
            bin_width_ns: 10 * MS,
            cpu: rows
                .iter()
                .map(|&(pid, ns, bins)| CpuRow {
                    pid,
                    ns,
                    bins: bins.to_vec(),
                })
                .collect(),
            procs: rows
                .iter()
                .map(|&(pid, _, _)| ProcInfo {
                    pid,
                    start_ticks: 100 + u64::from(pid),
                    comm: format!("p{pid}"),
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_20ms_burst_is_two_full_cells() {
        let mut t = ProcTable::new();
        t.ingest(&batch(1, &[(7, 20 * MS, &[0, 10 * MS, 10 * MS, 0, 0])]));
        for s in 2..=4 {
            t.ingest(&batch(s, &[]));
        }
        let e = t.by_pid(7).unwrap();
        let d = e.burst.dense(t.now_cell(), 20);
        // 4 intervals of 5 cells: the burst is cells 1 and 2 of the first.
        assert_eq!(d[..5], [0, 10 * MS, 10 * MS, 0, 0]);
        assert_eq!(d[5..].iter().sum::<u64>(), 0);
        assert_eq!(e.total_ns, 20 * MS);
    }

    #[test]
    fn short_history_is_right_aligned() {
        let mut t = ProcTable::new();
        t.ingest(&batch(1, &[(7, 10 * MS, &[0, 0, 0, 0, 10 * MS])]));
        let d = t.by_pid(7).unwrap().burst.dense(t.now_cell(), 8);
        assert_eq!(d, vec![0, 0, 0, 0, 0, 0, 0, 10 * MS]);
    }

    #[test]
    fn history_covers_a_minute_and_no_more() {
        let mut t = ProcTable::new();
        let full: &[u64] = &[10 * MS; 5];
        for s in 1..=1300 {
            t.ingest(&batch(s, &[(1, 50 * MS, full)]));
        }
        let e = t.by_pid(1).unwrap();
        let d = e.burst.dense(t.now_cell(), HISTORY_CELLS as usize + 10);
        assert_eq!(d.iter().filter(|v| **v == 10 * MS).count(), 6000);
        assert_eq!(d[..10], [0; 10]);
        assert!((e.cpu_pct - 100.0).abs() < 1e-6, "{}", e.cpu_pct);
    }

    #[test]
    fn wide_bins_are_spread_evenly() {
        let mut t = ProcTable::new();
        let mut b = batch(1, &[(3, 40 * MS, &[40 * MS])]);
        b.bin_width_ns = 40 * MS;
        b.end_ns = b.start_ns + 40 * MS;
        t.ingest(&b);
        let e = t.by_pid(3).unwrap();
        assert_eq!(e.burst.dense(t.now_cell(), 4), vec![10 * MS; 4]);
    }

    #[test]
    fn exited_processes_stay_a_few_seconds_with_their_cpu() {
        let mut t = ProcTable::new();
        let mut b = batch(1, &[(9, 30 * MS, &[10 * MS, 10 * MS, 10 * MS, 0, 0])]);
        b.exits.push(Exit { pid: 9, ts_ns: 0 });
        t.ingest(&b);
        let top = t.ranked(5, "");
        assert_eq!(top.len(), 1);
        assert!(top[0].exited());
        let pct = top[0].cpu_pct;
        assert!(pct > 0.0);
        // Still there, same CPU, for a few seconds of intervals; gone after.
        for s in 2..=90 {
            t.ingest(&batch(s, &[(1, MS, &[MS, 0, 0, 0, 0])]));
        }
        let e = t.by_pid(9).unwrap();
        assert!(e.exited() && e.cpu_pct == pct);
        assert!(t.ranked(5, "").iter().any(|e| e.key.pid == 9));
        for s in 91..=110 {
            t.ingest(&batch(s, &[]));
        }
        assert!(t.by_pid(9).is_none());
    }

    #[test]
    fn a_reused_pid_is_a_new_process() {
        let mut t = ProcTable::new();
        t.ingest(&batch(1, &[(5, MS, &[MS])]));
        let old = t.by_pid(5).unwrap().key;
        let mut b = batch(2, &[(5, 2 * MS, &[2 * MS])]);
        b.procs[0].start_ticks = 999;
        b.procs[0].comm = "new".into();
        t.ingest(&b);
        let new = t.by_pid(5).unwrap();
        assert_ne!(new.key, old);
        assert_eq!(new.comm, "new");
        assert_eq!(new.total_ns, 2 * MS);
        assert!(t.get(&old).unwrap().exited());
    }

    #[test]
    fn pins_survive_ranking_and_exit() {
        let mut t = ProcTable::new();
        t.ingest(&batch(
            1,
            &[(1, 40 * MS, &[]), (2, 30 * MS, &[]), (3, MS, &[])],
        ));
        let k3 = t.by_pid(3).unwrap().key;
        assert!(t.toggle_pin(k3));
        let top: Vec<u32> = t.ranked(2, "").iter().map(|e| e.key.pid).collect();
        assert_eq!(top, vec![3, 1], "pinned first, then the heaviest");
        assert_eq!(t.live_pins(), vec![3]);
        let mut b = batch(2, &[(1, 40 * MS, &[])]);
        b.exits.push(Exit { pid: 3, ts_ns: 0 });
        t.ingest(&b);
        for s in 3..=400 {
            t.ingest(&batch(s, &[(1, 40 * MS, &[])]));
        }
        let e = t.get(&k3).unwrap();
        assert!(e.exited());
        assert!(t.ranked(2, "").iter().any(|e| e.key == k3));
        assert!(t.live_pins().is_empty(), "the kernel no longer follows it");
        assert!(!t.toggle_pin(k3));
        t.ingest(&batch(401, &[]));
        assert!(t.get(&k3).is_none());
    }

    #[test]
    fn filter_by_name_or_pid() {
        let mut t = ProcTable::new();
        t.ingest(&batch(1, &[(10, 2 * MS, &[]), (11, MS, &[])]));
        let pids = |f: &str| -> Vec<u32> { t.ranked(9, f).iter().map(|e| e.key.pid).collect() };
        assert_eq!(pids("P11"), vec![11]);
        assert_eq!(pids("10"), vec![10]);
        assert_eq!(pids("p1"), vec![10, 11]);
        assert!(pids("zzz").is_empty());
    }

    #[test]
    fn the_grid_follows_a_new_phase() {
        let mut t = ProcTable::new();
        t.ingest(&batch(1, &[(1, 10 * MS, &[10 * MS, 0, 0, 0, 0])]));
        // The next interval starts 5 ms off the grid (after an interval change).
        let mut b = batch(2, &[(1, 10 * MS, &[0, 10 * MS, 0, 0, 0])]);
        b.start_ns += 5 * MS;
        b.end_ns += 5 * MS;
        t.ingest(&b);
        let d = t.by_pid(1).unwrap().burst.dense(t.now_cell(), 11);
        // The 10 ms bin lands in one whole cell, not split over two.
        assert_eq!(d.iter().filter(|v| **v == 10 * MS).count(), 2, "{d:?}");
    }

    /// One Batch of the equivalence test, in the shape proptest makes.
    #[derive(Clone, Debug)]
    struct Step {
        /// Gap before the interval: 0 mostly, sometimes seconds or over a minute.
        gap_ms: u64,
        /// Interval length, ms, and an offset off the 10 ms grid.
        len_ms: u64,
        phase_ms: u64,
        /// (pid, generation, ns, bins) charged; the generation makes the start time, so a
        /// new one is a reused pid.
        cpu: Vec<(u32, u64, u64, Vec<u64>)>,
        /// Processes named without a charge (memory rows, exits): (pid, generation).
        named: Vec<(u32, u64)>,
        exits: Vec<u32>,
        kernel_pinned: Vec<u32>,
        /// Pins the user toggles before the Batch: (pid, generation).
        toggles: Vec<(u32, u64)>,
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        (
            prop_oneof![8 => Just(0u64), 1 => Just(2_000u64), 1 => Just(61_000u64)],
            prop_oneof![6 => Just(50u64), 1 => Just(20u64), 1 => Just(1_000u64)],
            prop_oneof![6 => Just(0u64), 1 => 1u64..10],
            proptest::collection::vec(
                (
                    0u32..12,
                    0u64..2,
                    0u64..60_000_000,
                    proptest::collection::vec(0u64..10_000_000, 0..6),
                ),
                0..6,
            ),
            proptest::collection::vec((0u32..12, 0u64..2), 0..3),
            proptest::collection::vec(0u32..12, 0..2),
            proptest::collection::vec(0u32..12, 0..2),
            proptest::collection::vec((0u32..12, 0u64..3), 0..2),
        )
            .prop_map(
                |(gap_ms, len_ms, phase_ms, cpu, named, exits, kernel_pinned, toggles)| Step {
                    gap_ms,
                    len_ms,
                    phase_ms,
                    cpu,
                    named,
                    exits,
                    kernel_pinned,
                    toggles,
                },
            )
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// The incremental fold leaves the same table as visiting every entry on every Batch:
        /// charges, reused pids, exits, pins of both kinds, idle minutes, interval changes.
        #[test]
        fn incremental_ingest_equals_the_full_walk(
            steps in proptest::collection::vec(step(), 1..80),
        ) {
            let mut fast = ProcTable::new();
            let mut full = ProcTable::new();
            let mut t = 1_000 * MS;
            for (i, st) in steps.into_iter().enumerate() {
                t += st.gap_ms * MS + st.phase_ms * MS;
                let start = t;
                t += st.len_ms * MS;
                let info = |pid: u32, generation: u64| ProcInfo {
                    pid,
                    start_ticks: 1 + generation,
                    comm: format!("p{pid}.{generation}"),
                    ..Default::default()
                };
                let b = Batch {
                    seq: i as u64 + 1,
                    start_ns: start,
                    end_ns: t,
                    bin_width_ns: 10 * MS,
                    cpu: st
                        .cpu
                        .iter()
                        .map(|(pid, _, ns, bins)| CpuRow {
                            pid: *pid,
                            ns: *ns,
                            bins: bins.clone(),
                        })
                        .collect(),
                    procs: st
                        .cpu
                        .iter()
                        .map(|(pid, g, _, _)| info(*pid, *g))
                        .chain(st.named.iter().map(|(pid, g)| info(*pid, *g)))
                        .collect(),
                    exits: st
                        .exits
                        .iter()
                        .map(|&pid| Exit { pid, ts_ns: t })
                        .collect(),
                    pinned: st.kernel_pinned.clone(),
                    ..Default::default()
                };
                for &(pid, g) in &st.toggles {
                    // Generation 2: a pin by pid alone (`-p`).
                    let key = ProcKey { pid, start_ticks: if g == 2 { 0 } else { 1 + g } };
                    fast.toggle_pin(key);
                    full.toggle_pin(key);
                }
                fast.ingest(&b);
                full.ingest_full(&b);
                proptest::prop_assert_eq!(&fast.entries, &full.entries, "after batch {}", i + 1);
                proptest::prop_assert_eq!(&fast.current, &full.current);
                proptest::prop_assert_eq!(&fast.pins, &full.pins);
                proptest::prop_assert_eq!(fast.now_cell(), full.now_cell());
            }
        }
    }
}
