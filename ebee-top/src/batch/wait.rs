//! The waits and disk I/O part of a `Batch`: each process's run-queue wait (time its threads
//! were runnable but not running) and the bytes it read from and wrote to block devices in the
//! interval, as the kernel's own per-task counters grew (`/proc/PID/schedstat`'s second field,
//! `/proc/PID/io`'s `read_bytes` and `write_bytes`).

use serde::{Deserialize, Serialize};

/// One process's run-queue wait in the interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitRow {
    pub pid: u32,
    /// Nanoseconds its threads spent waiting for a CPU, summed.
    pub ns: u64,
}

/// One process's off-CPU time by reason in the interval (its threads summed): the time
/// they were neither running nor runnable, split by the state they left their CPU in.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffCpuRow {
    pub pid: u32,
    /// Uninterruptible with `in_iowait` (waiting for block I/O).
    pub io_ns: u64,
    /// Uninterruptible otherwise (kernel locks, page faults, NFS, a vfork parent).
    pub blocked_ns: u64,
    /// Interruptible, idle, stopped or traced (futexes, sockets, timers).
    pub sleep_ns: u64,
}

impl OffCpuRow {
    /// What ranks the `blocked[]` table: the time it was held up in the kernel.
    pub fn held_ns(&self) -> u64 {
        self.io_ns.saturating_add(self.blocked_ns)
    }
}

/// The order of `Batch::offcpu`: most held up (I/O-blocked + blocked) first, then by pid
/// (not by sleep: the recording codes an order by one column's weight with its ties in pid
/// order in next to nothing, and the sleepers-only rows are most of the table).
pub fn sort_offcpu(rows: &mut [OffCpuRow]) {
    rows.sort_by(|a, b| b.held_ns().cmp(&a.held_ns()).then(a.pid.cmp(&b.pid)));
}

/// The culprit of a wait that is no process: the CPU was idle when the waiter was queued
/// (wakeup latency).
pub const CULPRIT_IDLE: u32 = ebee_shared::wait::CULPRIT_IDLE;
/// The culprit of the part of a wait nothing on its CPU explains (older than the slices kept,
/// queued on another CPU before a migration, or spread over more slices than are walked).
pub const CULPRIT_UNKNOWN: u32 = ebee_shared::wait::CULPRIT_UNKNOWN;

/// A (victim, culprit) pair: the run-queue wait of `pid` while `culprit` ran on its CPU, or
/// [`CULPRIT_IDLE`], [`CULPRIT_UNKNOWN`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitByRow {
    pub pid: u32,
    pub culprit: u32,
    pub ns: u64,
}

/// Pairs a Batch keeps, heaviest first (the rest is in `WaitStats::wait_by_rest_ns`).
pub const WAIT_BY_ROWS: usize = 50;

/// Culprits a Batch keeps in `caused`, heaviest first (the rest is in
/// `WaitStats::caused_rest_ns`): on a busy machine nearly every process that ran delayed
/// someone a little, and a row for each doubled the recording.
pub const CAUSED_ROWS: usize = 50;

/// One process's disk I/O in the interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoRow {
    pub pid: u32,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// Counters of the pipeline for one interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct WaitStats {
    /// The kernel keeps per-task run-queue waits (`sched_info`) and they are read.
    pub available: bool,
    /// The kernel keeps per-task disk I/O (`ioac`) and it is read.
    pub io_available: bool,
    /// The off-CPU split (`offcpu`) is measured (off with `--no-culprits`, or without the
    /// kernel's `in_iowait`).
    pub offcpu_available: bool,
    /// Wait sketch entries evicted, and the wait they held (lost for the interval).
    pub evictions: u64,
    pub evicted_ns: u64,
    /// Off-CPU time (I/O-blocked, blocked, sleeping) those evictions held.
    pub evicted_off_ns: u64,
    /// I/O sketch entries evicted, and the bytes they held.
    pub io_evictions: u64,
    pub io_evicted_bytes: u64,
    /// Switch-outs of threads the "last seen" array did not hold (first sightings, or two
    /// threads sharing a slot): their growth since was not charged.
    pub thread_misses: u64,
    /// Charges the exact shadows could not store (only with `--exact`).
    pub shadow_full: u64,
    /// Run-queue wait charged to the processes that ran meanwhile on the waiter's CPU, spent
    /// with that CPU idle (wakeup latency), and explained by neither; their sum is all the
    /// wait of the interval (with the off-CPU split on).
    pub attributed_ns: u64,
    pub wakeup_latency_ns: u64,
    pub unattributed_ns: u64,
    /// Wait of the pairs beyond the [`WAIT_BY_ROWS`] kept in `wait_by`.
    pub wait_by_rest_ns: u64,
    /// Wait caused by the culprits beyond the [`CAUSED_ROWS`] kept in `caused`.
    pub caused_rest_ns: u64,
    /// Pairs the (victim, culprit) sketch let go, and the wait they held.
    pub wait_by_evictions: u64,
    pub wait_by_evicted_ns: u64,
}
