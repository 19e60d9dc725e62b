//! Who a process is: its key (pid and start time, so a reused pid is a new process) and its
//! entry in the table, filled from what Batches say of it.

use std::collections::hash_map;

use super::{Burst, ProcTable};
use crate::batch::{Name, ProcInfo};

/// A process: its pid and start time (clock ticks after boot; 0 when it was gone before we
/// could read it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcKey {
    pub pid: u32,
    pub start_ticks: u64,
}

/// One process in the table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcEntry {
    pub key: ProcKey,
    pub comm: Name,
    pub cmdline: Name,
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
    /// Run-queue wait per 10 ms cell (each interval's wait spread evenly over its cells, the
    /// kernel gives one sum per interval).
    pub wait: Burst,
    /// Share of the last second its threads waited for a CPU (100 = one thread waiting all
    /// the time); frozen at the exit like `cpu_pct`.
    pub wait_pct: f64,
    /// Off-CPU time per 10 ms cell by reason: blocked on I/O, blocked otherwise, sleeping
    /// (each interval's sum spread evenly over its cells, as the wait). Charged when the
    /// thread is back on a CPU, so a long block lands in the interval that ends it.
    pub iow: Burst,
    pub blocked: Burst,
    pub sleep: Burst,
    /// Shares of the last second (100 = one thread all the time), frozen at the exit.
    pub iow_pct: f64,
    pub blocked_pct: f64,
    pub sleep_pct: f64,
    /// Run-queue wait it caused other processes per 10 ms cell (it ran on their CPU while
    /// they waited), and its share of the last second (100 = one CPU's worth of waiting).
    pub caused: Burst,
    pub caused_pct: f64,
    /// Disk bytes read and written per 10 ms cell, and their rates over the last second.
    pub read: Burst,
    pub write: Burst,
    pub read_per_s: f64,
    pub write_per_s: f64,
    /// `end_ns` of the last interval that charged it.
    pub last_charged_ns: u64,
    /// `end_ns` of the interval it exited in.
    pub exited_ns: Option<u64>,
    /// The kernel follows it for QoS (from the Batch's `pinned`).
    pub kernel_pinned: bool,
    /// Its cgroup path (empty: unknown).
    pub cgroup: Name,
    /// The process: its own pid, or for a thread in the thread table, its process's.
    pub tgid: u32,
}

impl ProcEntry {
    pub fn exited(&self) -> bool {
        self.exited_ns.is_some()
    }

    /// The oldest cell of any of its histories.
    pub(super) fn first_cell(&self) -> Option<u64> {
        self.histories()
            .into_iter()
            .filter_map(Burst::first_cell)
            .min()
    }

    fn histories(&self) -> [&Burst; 8] {
        [
            &self.caused,
            &self.burst,
            &self.wait,
            &self.read,
            &self.write,
            &self.iow,
            &self.blocked,
            &self.sleep,
        ]
    }

    /// Update the rates over the last second (cells `first..=now`, `span_ns` long); false when
    /// all of them are 0 again.
    pub(super) fn last_second(&mut self, first: u64, now: u64, span_ns: u64) -> bool {
        let (cpu, wait) = (
            self.burst.window_sum(first, now),
            self.wait.window_sum(first, now),
        );
        let (read, write) = (
            self.read.window_sum(first, now),
            self.write.window_sum(first, now),
        );
        let (iow, blocked, sleep) = (
            self.iow.window_sum(first, now),
            self.blocked.window_sum(first, now),
            self.sleep.window_sum(first, now),
        );
        let caused = self.caused.window_sum(first, now);
        let span = span_ns as f64;
        self.caused_pct = caused as f64 * 100.0 / span;
        self.cpu_pct = cpu as f64 * 100.0 / span;
        self.wait_pct = wait as f64 * 100.0 / span;
        self.read_per_s = read as f64 * 1e9 / span;
        self.write_per_s = write as f64 * 1e9 / span;
        self.iow_pct = iow as f64 * 100.0 / span;
        self.blocked_pct = blocked as f64 * 100.0 / span;
        self.sleep_pct = sleep as f64 * 100.0 / span;
        cpu | wait | read | write | iow | blocked | sleep | caused != 0
    }

    /// Where its threads' time went in cells `first..=last`: on a CPU, waiting for one,
    /// blocked on I/O, blocked otherwise, sleeping (ns, in that order, threads summed).
    pub fn split(&self, first: u64, last: u64) -> [u64; 5] {
        [
            self.burst.sum(first, last),
            self.wait.sum(first, last),
            self.iow.sum(first, last),
            self.blocked.sum(first, last),
            self.sleep.sum(first, last),
        ]
    }

    /// Drop every history cell before `first_kept`.
    pub(super) fn trim(&mut self, first_kept: u64) {
        for b in [
            &mut self.burst,
            &mut self.wait,
            &mut self.read,
            &mut self.write,
            &mut self.iow,
            &mut self.blocked,
            &mut self.sleep,
            &mut self.caused,
        ] {
            b.trim(first_kept);
        }
    }

    /// What the table shows as the command: the command line, or `[comm]` for kernel
    /// threads, or the name.
    pub fn command(&self) -> String {
        if !self.cmdline.is_empty() {
            self.cmdline.to_string()
        } else if self.kthread {
            format!("[{}]", self.comm)
        } else {
            self.comm.to_string()
        }
    }
}

impl ProcTable {
    /// The entry for what a Batch says of a process, made if new; a known pid with another
    /// start time ends the old process there.
    pub(super) fn info_for(&mut self, p: &ProcInfo, end_ns: u64) -> ProcKey {
        let fresh_key = ProcKey {
            pid: p.pid,
            start_ticks: p.start_ticks,
        };
        let (key, ended) = match self.current.entry(p.pid) {
            hash_map::Entry::Occupied(mut o) => {
                let k = *o.get();
                // Start time unknown (gone before /proc was read): the process we already know.
                if p.start_ticks == 0 || k.start_ticks == p.start_ticks {
                    (k, None)
                } else {
                    // The pid was reused: the old process is over.
                    o.insert(fresh_key);
                    (fresh_key, Some(k))
                }
            }
            hash_map::Entry::Vacant(v) => (*v.insert(fresh_key), None),
        };
        if let Some(old) = ended
            && let Some(e) = self.entries.get_mut(&old)
            && e.exited_ns.is_none()
        {
            e.exited_ns = Some(end_ns);
            self.schedule(old);
        }
        // One lookup, whether the entry is new or known.
        let e = match self.entries.entry(key) {
            hash_map::Entry::Occupied(o) => o.into_mut(),
            hash_map::Entry::Vacant(v) => {
                self.fresh.push(key);
                v.insert(ProcEntry {
                    key,
                    tgid: p.pid,
                    ..ProcEntry::default()
                })
            }
        };
        // The names are shared (`Arc<str>`): the same one again, as it nearly always is,
        // is left alone rather than cloned over itself (two reference-count updates each).
        let set = |to: &mut Name, from: &Name| {
            if !std::sync::Arc::ptr_eq(to, from) {
                to.clone_from(from);
            }
        };
        // A name from an exit event (no start time) does not overwrite what /proc said.
        if !p.comm.is_empty() && (p.start_ticks != 0 || e.comm.is_empty()) {
            set(&mut e.comm, &p.comm);
        }
        if !p.cmdline.is_empty() {
            set(&mut e.cmdline, &p.cmdline);
        }
        if p.uid.is_some() {
            e.uid = p.uid;
        }
        if !p.cgroup.is_empty() {
            set(&mut e.cgroup, &p.cgroup);
        }
        e.tgid = p.tgid.unwrap_or(p.pid);
        e.kthread |= p.kthread;
        key
    }
}
