//! The cgroups and threads part of a `Batch`: each cgroup's CPU time and run-queue wait in the
//! interval, summed in the kernel at the context switch over every thread in it, with the
//! memory the cgroup itself reports; and, in the per-thread mode, each thread's on-CPU time.

use serde::{Deserialize, Serialize};

/// One cgroup in the interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CgroupRow {
    /// The kernel's key for it: the low 32 bits of its kernfs id (the directory's inode
    /// number), unique among live cgroups of the hierarchy.
    pub id: u64,
    /// Its path in the hierarchy (`/` for the root; bytes that are not UTF-8 as `\xNN`);
    /// empty when it was removed before its name could be read.
    pub path: String,
    /// On-CPU ns of its threads in the interval (all CPUs).
    pub cpu_ns: u64,
    /// Run-queue wait of its threads, ns.
    pub wait_ns: u64,
    /// The memory charged to it: `memory.current` (v2) or the v1 memory controller's
    /// `memory.usage_in_bytes` at the same path; None when neither is there. Read at most once
    /// a second per cgroup.
    pub rss_bytes: Option<u64>,
}

/// Counters of the cgroups pipeline for one interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CgroupStats {
    /// A hierarchy is followed (false: none mounted, `--cgroups off`, or the kernel's BTF
    /// lacks the fields).
    pub available: bool,
    /// Which: `v2`, `v1 cpuacct`, `v1 cpu`; empty when none.
    pub hierarchy: String,
    /// Sketch entries evicted, and the CPU time they held (lost for the interval).
    pub evictions: u64,
    pub evicted_ns: u64,
    /// Charges in the interval (context switches with a cgroup).
    pub updates: u64,
    /// Charges the exact shadow could not store (only with `--exact`).
    pub shadow_full: u64,
    /// The per-thread mode was on for the whole interval (`threads` holds its rows).
    pub threads: bool,
    /// Thread sketch entries evicted, and the CPU time they held.
    pub thread_evictions: u64,
    pub thread_evicted_ns: u64,
}

/// One thread's on-CPU time in the interval (the per-thread mode).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThreadRow {
    pub tid: u32,
    /// Its process.
    pub pid: u32,
    /// The thread's own name (/proc/PID/task/TID/stat; empty when it was gone).
    pub comm: String,
    /// When the thread started, clock ticks after boot (0: unknown): a tid used again by a
    /// new thread is another row.
    pub start_ticks: u64,
    pub ns: u64,
    /// On-CPU ns per burst bin, as `CpuRow::bins`.
    pub bins: Vec<u64>,
}
