//! `Batch`: one closed interval of raw data, whatever its source (the kernel, or a recording).
//! The Model folds Batches; a recording is a stream of them. This layer is the vocabulary every
//! other one shares: plain data, no I/O, nothing below it.

pub mod build;
pub mod cgroup;
pub mod qos;
pub mod servers;
pub mod syscalls;
pub mod wait;

use serde::{Deserialize, Serialize};

/// One process's on-CPU time in the interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuRow {
    pub pid: u32,
    /// On-CPU nanoseconds in the interval (all threads, all CPUs).
    pub ns: u64,
    /// On-CPU ns per burst bin of `Batch::bin_width_ns`, from the interval start; only the
    /// bins the interval covers.
    pub bins: Vec<u64>,
}

/// One process's resident memory (RES, as /proc/PID/status VmRSS: file + anon + shmem pages).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemRow {
    pub pid: u32,
    /// Resident bytes at the end of the interval (last known value when it did not change).
    pub rss_bytes: u64,
    /// Change of `rss_bytes` during the interval (0 when unchanged; the whole RSS for a
    /// process first seen in the interval).
    pub rss_delta_bytes: i64,
}

/// Counters of the memory pipeline for one interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct MemStats {
    /// False when the kernel lacks the rss_stat tracepoint or the struct layout it needs
    /// (then `mem` is empty).
    pub available: bool,
    /// rss_stat events seen (all CPUs).
    pub events: u64,
    /// Of them, readings recorded in the sketch (the others repeated their CPU's previous
    /// reading of the same process in the interval).
    pub recorded: u64,
    /// Sketch entries evicted (their reading was lost for the interval).
    pub evictions: u64,
    /// Largest RSS among the evicted entries, bytes: below the k-th largest RSS shown, an
    /// eviction cannot have changed the top k.
    pub evicted_max_bytes: u64,
    /// Events on an mm with neither an owner nor `current` as its user (exit teardown).
    pub unattributed: u64,
    /// Readings the exact shadow could not store (only with `--exact`).
    pub shadow_full: u64,
    /// CPUs still inside the memory program when the interval had to be read.
    pub handshake_timeouts: u64,
    /// Processes with a known RSS.
    pub tracked: u64,
}

/// A process's name, command line or cgroup path: shared, not copied, between the /proc
/// cache, each Batch and the Model (a Batch's names were most of the allocations an interval
/// made and freed).
pub type Name = std::sync::Arc<str>;

/// What we know of a process, from /proc or from its exit event.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcInfo {
    pub pid: u32,
    /// Start time in clock ticks after boot (/proc/PID/stat field 22); 0 when unknown.
    pub start_ticks: u64,
    /// Short name (`comm`).
    pub comm: Name,
    /// Command line, arguments joined by spaces; empty for kernel threads and unknown.
    pub cmdline: Name,
    /// Real user id, when known.
    pub uid: Option<u32>,
    /// True for kernel threads.
    pub kthread: bool,
    /// Its cgroup in the followed hierarchy (see `Batch::cgroup_stats`), from the kernel's key
    /// at its last context switch, else /proc/PID/cgroup; empty when unknown or cgroups are off.
    #[serde(default, skip_serializing_if = "str::is_empty")]
    pub cgroup: Name,
    /// For a thread's row in the thread table (never in a Batch): its process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tgid: Option<u32>,
    /// Its parent process (/proc/PID/stat field 4, re-read when the parent exits and the
    /// process is reparented); None when unknown (an older recording, gone before it was read).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ppid: Option<u32>,
}

/// A process that ended during the interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Exit {
    pub pid: u32,
    /// `CLOCK_MONOTONIC` ns of the exit.
    pub ts_ns: u64,
}

/// Counters of what was lost; zero is the normal case. Cumulative counters are per interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Dropped {
    /// On-CPU ns that fell out of the last sketch stage (not attributed to any process).
    pub sketch_evicted_ns: u64,
    /// Sketch entries that fell out of the last stage.
    pub sketch_evictions: u64,
    /// Lifecycle (exec/exit) events lost to a full ring buffer.
    pub lifecycle_lost: u64,
    /// CPUs whose slice across the interval boundary could not be read in time.
    pub handshake_timeouts: u64,
    /// Updates the exact shadow map could not store (only with `--exact`).
    pub shadow_full: u64,
    /// eBPF program runs cut short by a map lookup that cannot fail (always 0 unless the
    /// kernel misbehaves; the run's update is lost).
    pub prog_errors: u64,
}

impl Dropped {
    /// Something was lost in the interval.
    pub fn any(&self) -> bool {
        self.sketch_evictions
            + self.lifecycle_lost
            + self.handshake_timeouts
            + self.shadow_full
            + self.prog_errors
            > 0
    }
}

/// What ebee-top itself cost in the interval.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SelfCost {
    /// CPU time of the ebee-top process (user + system, all threads).
    pub cpu_ns: u64,
    /// Run time of its eBPF programs (kernel BPF stats); None when stats are off.
    pub bpf_ns: Option<u64>,
    /// Number of eBPF program runs; None when stats are off.
    pub bpf_runs: Option<u64>,
    /// `bpf_ns` and `bpf_runs` are estimates: the kernel's BPF statistics were on for a
    /// sampling window (about a tenth of the time: 1 s in every 10 at the default interval) and the rate measured there is applied to this
    /// interval, so measuring costs a tenth of what it would.
    #[serde(default)]
    pub bpf_sampled: bool,
}

/// One closed interval. Fields added later carry `#[serde(default)]` through the struct-level
/// default, so older recordings still read.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Batch {
    /// Interval number since the source started, from 1.
    pub seq: u64,
    /// Wall-clock time at the end of the interval, ms since the Unix epoch.
    pub t_ms: u64,
    /// `CLOCK_MONOTONIC` ns at the start and end of the interval.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Width of one burst bin.
    pub bin_width_ns: u64,
    /// CPUs the kernel may run on.
    pub ncpus: u32,
    /// Context switches charged in the interval.
    pub switches: u64,
    /// Every process the kernel charged, heaviest first.
    pub cpu: Vec<CpuRow>,
    /// The exact per-process shadow, heaviest first (only with `--exact`).
    pub cpu_exact: Option<Vec<CpuRow>>,
    /// Metadata of the processes in `cpu` (and `cpu_exact`).
    pub procs: Vec<ProcInfo>,
    /// The ancestors of the processes in `procs` that are not in `procs` themselves (so the
    /// process tree can show the idle shell above a busy `make`), and processes reparented in
    /// the interval. Each is sent when first seen and again at least every
    /// [`LINEAGE_REFRESH_MS`], so a consumer starting anywhere (a replay after a seek) has
    /// them once it has been fed the usual warm-up.
    pub lineage: Vec<ProcInfo>,
    /// Processes that ended in the interval.
    pub exits: Vec<Exit>,
    /// Processes pinned for detailed tracking (QoS) during the interval.
    pub pinned: Vec<u32>,
    pub dropped: Dropped,
    pub cost: SelfCost,
    /// Syscall and request QoS of the pinned processes.
    pub qos: qos::QosBatch,
    /// Resident memory: every process whose RSS changed in the interval plus the largest
    /// ones (see `MEM_TOP_ROWS`), largest first.
    pub mem: Vec<MemRow>,
    /// The same from the exact shadow (only with `--exact`).
    pub mem_exact: Option<Vec<MemRow>>,
    pub mem_stats: MemStats,
    /// Run-queue wait of every process the kernel charged, heaviest first.
    pub wait: Vec<wait::WaitRow>,
    /// The exact shadow's (only with `--exact`).
    pub wait_exact: Option<Vec<wait::WaitRow>>,
    /// Off-CPU time by reason of every process the kernel charged, most held up (I/O-blocked
    /// + blocked) first.
    pub offcpu: Vec<wait::OffCpuRow>,
    /// Who made whom wait: (victim, culprit) pairs, heaviest first, at most
    /// [`wait::WAIT_BY_ROWS`].
    pub wait_by: Vec<wait::WaitByRow>,
    /// The wait each process caused others (every pair it is the culprit of, its own threads'
    /// waits left out), heaviest first.
    pub caused: Vec<wait::WaitRow>,
    /// Disk I/O of every process the kernel charged, heaviest (read + written) first.
    pub io: Vec<wait::IoRow>,
    /// The exact shadow's (only with `--exact`).
    pub io_exact: Option<Vec<wait::IoRow>>,
    pub wait_stats: wait::WaitStats,
    /// Servers found by the kernel (no pin needed), busiest first.
    pub servers: Vec<servers::ServerRow>,
    /// Socket bytes of every process the kernel charged, heaviest (rx + tx) first.
    pub net: Vec<servers::NetRow>,
    pub servers_stats: servers::ServersStats,
    /// Cgroups the kernel charged, by CPU time, heaviest first.
    pub cgroups: Vec<cgroup::CgroupRow>,
    /// The exact shadow's (only with `--exact`).
    pub cgroups_exact: Option<Vec<cgroup::CgroupRow>>,
    /// Cgroups seen lately whose directory is gone (reported once, in the interval it was
    /// noticed): their rows are marked removed and kept a few seconds.
    pub cgroups_removed: Vec<u64>,
    pub cgroup_stats: cgroup::CgroupStats,
    /// In the per-thread mode, every thread the kernel charged, heaviest first (None when the
    /// mode was off for any part of the interval).
    pub threads: Option<Vec<cgroup::ThreadRow>>,
    /// The exact shadow's (only with `--exact`; `pid` and `comm` as in `threads`).
    pub threads_exact: Option<Vec<cgroup::ThreadRow>>,
}

/// How often the live source sends an ancestor again in `Batch::lineage` (less than the
/// replay's warm-up of recorded time, so a rebuilt Model knows every ancestor).
pub const LINEAGE_REFRESH_MS: u64 = 20_000;

/// Largest processes every Batch carries in `mem` even when their RSS did not change, so a
/// consumer that starts at any batch (a replay from the middle) ranks them right at once.
pub const MEM_TOP_ROWS: usize = 64;

impl Batch {
    /// Length of the interval in ns.
    pub fn interval_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}
