//! Every map and load-time global of the eBPF object, in one place.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, LruHashMap, PerCpuArray, PerCpuHashMap, RingBuf},
};
use ebee_shared::{
    cgroup::{CG_SHADOW_ENTRIES, CgOffsets, CgSketch},
    cpu::{CpuSketch, CpuState, SHADOW_ENTRIES, TRACE_BYTES, ThreadSketch},
    ctl::Ctl,
    lifecycle::LIFECYCLE_BYTES,
};

/// Control block: the epoch word and the next interval's burst-bin geometry. Mappable, so
/// userspace reads the epoch after a flip without a lookup.
#[map]
pub static CTL: Array<Ctl> = Array::with_max_entries(1, BPF_F_MMAPABLE);

/// Per-CPU bookkeeping of the `sched_switch` program.
#[map]
pub static CPU_STATE: PerCpuArray<CpuState> = PerCpuArray::with_max_entries(1, 0);

/// HashPipe sketches, one per (CPU, interval parity): entry
/// [`ebee_shared::cpu::sketch_entry`], found through [`sketch`]. A `BPF_F_MMAPABLE` plain
/// array, sized by the loader to twice the possible CPUs (2 here is a placeholder), so
/// userspace reads and clears a closed interval in place, with no bpf(2) copy.
#[map]
pub static CPU_SKETCH: Array<CpuSketch> = Array::with_max_entries(2, BPF_F_MMAPABLE);

/// Exact per-process on-CPU ns, one map per interval parity (ground truth for tests and the
/// precision benchmark; shrunk to one entry by the loader when not wanted).
#[map]
pub static CPU_SHADOW0: PerCpuHashMap<u32, u64> =
    PerCpuHashMap::with_max_entries(SHADOW_ENTRIES, 0);
#[map]
pub static CPU_SHADOW1: PerCpuHashMap<u32, u64> =
    PerCpuHashMap::with_max_entries(SHADOW_ENTRIES, 0);

/// Thread sketches (the per-thread mode), one per (CPU, interval parity), as `CPU_SKETCH`.
#[map]
pub static THREAD_SKETCH: Array<ThreadSketch> = Array::with_max_entries(2, BPF_F_MMAPABLE);

/// Exact per-thread on-CPU ns (tests; shrunk to one entry by the loader when not wanted).
#[map]
pub static THREAD_SHADOW0: PerCpuHashMap<u32, u64> =
    PerCpuHashMap::with_max_entries(SHADOW_ENTRIES, 0);
#[map]
pub static THREAD_SHADOW1: PerCpuHashMap<u32, u64> =
    PerCpuHashMap::with_max_entries(SHADOW_ENTRIES, 0);

/// Cgroup sketches, one per (CPU, interval parity), as `CPU_SKETCH`.
#[map]
pub static CG_SKETCH: Array<CgSketch> = Array::with_max_entries(2, BPF_F_MMAPABLE);

/// Exact per-cgroup [on-CPU ns, wait ns] (tests; shrunk when not wanted).
#[map]
pub static CG_SHADOW0: PerCpuHashMap<u32, [u64; 2]> =
    PerCpuHashMap::with_max_entries(CG_SHADOW_ENTRIES, 0);
#[map]
pub static CG_SHADOW1: PerCpuHashMap<u32, [u64; 2]> =
    PerCpuHashMap::with_max_entries(CG_SHADOW_ENTRIES, 0);

/// Every sketch update, in order per CPU (tests and benchmarks; shrunk when not wanted).
#[map]
pub static CPU_TRACE: RingBuf = RingBuf::with_byte_size(TRACE_BYTES, 0);

/// Events the kernel could not deliver, per CPU, in one value (so userspace reads them in one
/// lookup): index [`ebee_shared::drops::LIFECYCLE_LOST`] and [`ebee_shared::drops::TRACE_LOST`];
/// and failed program runs, [`ebee_shared::drops::PROG_ERRORS`] (see [`crate::exit_code`]).
#[map]
pub static DROPS: PerCpuArray<[u64; ebee_shared::drops::LEN as usize]> =
    PerCpuArray::with_max_entries(1, 0);

/// Count one lost event of kind `idx`.
#[inline(always)]
pub fn count_drop(idx: u32) {
    if let Some(p) = DROPS.get_ptr_mut(0) {
        let i = idx as usize;
        if i < ebee_shared::drops::LEN as usize {
            // SAFETY: this CPU's value of a per-CPU array; `i` is within it.
            unsafe { (*p)[i] += 1 };
        }
    }
}

/// Process exec and exit events.
#[map]
pub static LIFECYCLE: RingBuf = RingBuf::with_byte_size(LIFECYCLE_BYTES, 0);

// Load-time globals (.rodata): the loader sets them, the verifier sees them as constants and
// prunes the branches they switch off. Read them with `read_volatile` so the compiler does
// not fold the defaults in.
#[unsafe(no_mangle)]
pub static SHADOW_ON: u32 = 0;
#[unsafe(no_mangle)]
pub static TRACE_ON: u32 = 0;
#[unsafe(no_mangle)]
pub static TASK_TGID_OFF: u32 = 0;
/// Offset of `se.exec_start` in `task_struct`.
#[unsafe(no_mangle)]
pub static TASK_EXEC_START_OFF: u32 = 0;
#[unsafe(no_mangle)]
pub static EXIT_HAS_GROUP_DEAD: u32 = 0;
/// Offset of `pid` (the thread id) in `task_struct`.
#[unsafe(no_mangle)]
pub static TASK_PID_OFF: u32 = 0;
/// The task -> cgroup key load chain (`on` 0: cgroups off).
#[unsafe(no_mangle)]
pub static CG_OFFSETS: CgOffsets = CgOffsets {
    task_cgroups: 0,
    css: 0,
    css_cgroup: 0,
    cgroup_kn: 0,
    kn_id: 0,
    on: 0,
};

/// Read a load-time global.
#[inline(always)]
pub fn global(g: &'static u32) -> u32 {
    // SAFETY: `g` is a valid, aligned static; volatile only stops constant folding.
    unsafe { core::ptr::read_volatile(g) }
}

// The QoS pipeline (qos.rs); sizes in ebee_shared::qos.

/// The pinned processes: one [`ebee_shared::qos::PinTable`].
#[map]
pub static QOS_PINS: Array<ebee_shared::qos::PinTable> = Array::with_max_entries(1, 0);

/// Start of the open syscall of each pinned thread, by `tid & (THREAD_SLOTS - 1)`.
#[map]
pub static QOS_THREADS: Array<ebee_shared::qos::ThreadSlot> =
    Array::with_max_entries(ebee_shared::qos::THREAD_SLOTS, 0);

/// Per interval parity and pin slot: count, total and maximum latency per syscall number, per
/// CPU (plain adds instead of locked ones; userspace sums the CPUs).
#[map]
pub static QOS_SYS: PerCpuArray<ebee_shared::qos::SysTable> =
    PerCpuArray::with_max_entries((2 * ebee_shared::qos::MAX_PINS) as u32, 0);

/// Per interval parity and pin slot: syscall latency histograms.
#[map]
pub static QOS_HIST: Array<ebee_shared::qos::HistTable> =
    Array::with_max_entries((2 * ebee_shared::qos::MAX_PINS) as u32, 0);

/// Per pin slot: the histogram of each syscall number (0: none yet).
#[map]
pub static QOS_HIST_IDX: Array<ebee_shared::qos::HistIdx> =
    Array::with_max_entries(ebee_shared::qos::MAX_PINS as u32, 0);

/// Per interval parity and pin slot: requests and losses, per CPU (as `QOS_SYS`).
#[map]
pub static QOS_PIN: PerCpuArray<ebee_shared::qos::PinStat> =
    PerCpuArray::with_max_entries((2 * ebee_shared::qos::MAX_PINS) as u32, 0);

/// Per pin slot: histogram allocation.
#[map]
pub static QOS_PIN_STATE: Array<ebee_shared::qos::PinState> =
    Array::with_max_entries(ebee_shared::qos::MAX_PINS as u32, 0);

/// Per-CPU sequence of `sys_exit` runs that write interval data.
#[map]
pub static QOS_CPU: PerCpuArray<ebee_shared::qos::QosCpu> = PerCpuArray::with_max_entries(1, 0);

/// Request-model state per (pin slot, fd) of pinned processes, for fds below `FD_SLOTS`.
#[map]
pub static QOS_FDS: Array<ebee_shared::qos::Conn> = Array::with_max_entries(
    ebee_shared::qos::MAX_PINS as u32 * ebee_shared::qos::FD_SLOTS,
    0,
);

/// Kernel stacks that have had a pinned syscall (`ebee_shared::qos::OpenStacks`): the first
/// check of every `sys_exit`.
#[map]
pub static QOS_OPEN: Array<ebee_shared::qos::OpenStacks> = Array::with_max_entries(1, 0);

/// Kernel stacks of threads `sys_enter` found unpinned (`ebee_shared::qos::StackCache`): the
/// first check of every `sys_enter`.
#[map]
pub static QOS_STACKS: Array<ebee_shared::qos::StackCache> = Array::with_max_entries(1, 0);

/// One bit per tgid, set for the pinned processes: the check of `sys_enter` on a thread the
/// stack cache does not know.
#[map]
pub static QOS_PIN_BITS: Array<u64> = Array::with_max_entries(ebee_shared::qos::PIN_BIT_WORDS, 0);

/// Request-model state per (process, fd) of pinned processes, for fds from `FD_SLOTS` up.
#[map]
pub static QOS_CONNS: LruHashMap<u64, ebee_shared::qos::Conn> =
    LruHashMap::with_max_entries(ebee_shared::qos::CONN_ENTRIES, 0);

/// Listening TCP/UDP ports of pinned processes, one bit per port.
#[map]
pub static QOS_PORTS: Array<u64> = Array::with_max_entries(ebee_shared::qos::PORT_WORDS, 0);

/// Run-queue waits of pinned processes' threads, index `parity * MAX_PINS + slot` (written
/// from `sched_switch` on any CPU, with atomic adds).
#[map]
pub static QOS_RUNQ: Array<ebee_shared::qos::RunqStat> =
    Array::with_max_entries((2 * ebee_shared::qos::MAX_PINS) as u32, 0);

/// Kernel struct offsets for the request model (set by the loader from BTF).
#[unsafe(no_mangle)]
pub static QOS_OFFSETS: ebee_shared::qos::Offsets = ebee_shared::qos::Offsets {
    regs_di: 0,
    regs_si: 0,
    task_files: 0,
    files_fdt: 0,
    fdt_max_fds: 0,
    fdt_fd: 0,
    file_inode: 0,
    file_private: 0,
    inode_mode: 0,
    socket_sk: 0,
    sk_family: 0,
    sk_num: 0,
    valid: 0,
};

// The memory pipeline (mem.rs); sizes in ebee_shared::mem.

/// Per-CPU sequence of `rss_stat` runs (the interval handshake) and event count.
#[map]
pub static MEM_CPU: PerCpuArray<ebee_shared::mem::MemCpu> = PerCpuArray::with_max_entries(1, 0);

/// Memory HashPipe sketches, one per (CPU, interval parity), as `CPU_SKETCH` (the entry is
/// in `MEM_CPU`).
#[map]
pub static MEM_SKETCH: Array<ebee_shared::mem::MemSketch> =
    Array::with_max_entries(2, BPF_F_MMAPABLE);

/// Exact latest RSS reading per process, one map per interval parity (ground truth for tests
/// and the precision benchmark; shrunk to one entry by the loader when not wanted).
#[map]
pub static MEM_SHADOW0: PerCpuHashMap<u32, ebee_shared::mem::MemShadow> =
    PerCpuHashMap::with_max_entries(ebee_shared::mem::MEM_SHADOW_ENTRIES, 0);
#[map]
pub static MEM_SHADOW1: PerCpuHashMap<u32, ebee_shared::mem::MemShadow> =
    PerCpuHashMap::with_max_entries(ebee_shared::mem::MEM_SHADOW_ENTRIES, 0);

/// Every memory sketch update, in order per CPU (tests and benchmarks; shrunk when not wanted).
#[map]
pub static MEM_TRACE: RingBuf = RingBuf::with_byte_size(ebee_shared::mem::MEM_TRACE_BYTES, 0);

/// `mm_struct`/`task_struct` offsets for `rss_stat` (set by the loader from BTF).
#[unsafe(no_mangle)]
pub static MEM_OFFSETS: ebee_shared::mem::MemOffsets = ebee_shared::mem::MemOffsets {
    rss_count: 0,
    counter_size: 0,
    file: 0,
    anon: 0,
    shmem: 0,
    swap: 0,
    mm_owner: 0,
    has_owner: 0,
    task_mm: 0,
    valid: 0,
};

// The waits and disk I/O pipeline (wait.rs); sizes in ebee_shared::wait.

/// Run-queue wait HashPipe sketches, one per (CPU, interval parity), as `CPU_SKETCH`.
#[map]
pub static WAIT_SKETCH: Array<ebee_shared::wait::WaitSketch> =
    Array::with_max_entries(2, BPF_F_MMAPABLE);

/// (victim, culprit) sketches of run-queue waits, one per (CPU, interval parity), as
/// `CPU_SKETCH`.
#[map]
pub static PAIR_SKETCH: Array<ebee_shared::wait::PairSketch> =
    Array::with_max_entries(2, BPF_F_MMAPABLE);

/// Disk I/O HashPipe sketches, one per (CPU, interval parity), as `CPU_SKETCH`.
#[map]
pub static IO_SKETCH: Array<ebee_shared::wait::IoSketch> =
    Array::with_max_entries(2, BPF_F_MMAPABLE);

/// Each thread's counters as last seen at a switch-out, by `tid & (THREAD_SLOTS - 1)`. Not
/// per-CPU: a thread switches out on one CPU at a time, wherever it ran.
#[map]
pub static WAIT_THREADS: Array<ebee_shared::wait::ThreadSeen> =
    Array::with_max_entries(ebee_shared::wait::THREAD_SLOTS as u32, 0);

/// Exact per-process wait, I/O-blocked, blocked and sleep ns, and disk bytes, one map per
/// interval parity (ground truth for tests and the precision benchmark; shrunk to one entry
/// by the loader when not wanted).
#[map]
pub static WAIT_SHADOW0: PerCpuHashMap<u32, [u64; 4]> =
    PerCpuHashMap::with_max_entries(ebee_shared::wait::SHADOW_ENTRIES, 0);
#[map]
pub static WAIT_SHADOW1: PerCpuHashMap<u32, [u64; 4]> =
    PerCpuHashMap::with_max_entries(ebee_shared::wait::SHADOW_ENTRIES, 0);
#[map]
pub static IO_SHADOW0: PerCpuHashMap<u32, [u64; 2]> =
    PerCpuHashMap::with_max_entries(ebee_shared::wait::SHADOW_ENTRIES, 0);
#[map]
pub static IO_SHADOW1: PerCpuHashMap<u32, [u64; 2]> =
    PerCpuHashMap::with_max_entries(ebee_shared::wait::SHADOW_ENTRIES, 0);

/// `task_struct` offsets for waits and disk I/O (set by the loader from BTF).
#[unsafe(no_mangle)]
pub static WAIT_OFFSETS: ebee_shared::wait::WaitOffsets = ebee_shared::wait::WaitOffsets {
    pid: 0,
    flags: 0,
    run_delay: 0,
    read_bytes: 0,
    write_bytes: 0,
    wait_valid: 0,
    io_valid: 0,
    in_iowait: 0,
    iowait_mask: 0,
    offcpu_valid: 0,
};

// The servers pipeline (servers.rs); sizes in ebee_shared::servers.

/// Server sketches (requests per process), one per (CPU, interval parity), as `CPU_SKETCH`.
#[map]
pub static SRV_SKETCH: Array<ebee_shared::servers::SrvSketch> =
    Array::with_max_entries(2, BPF_F_MMAPABLE);

/// Network bytes sketches (every process's socket I/O), one per (CPU, interval parity), as
/// `CPU_SKETCH`.
#[map]
pub static NET_SKETCH: Array<ebee_shared::servers::NetSketch> =
    Array::with_max_entries(2, BPF_F_MMAPABLE);

/// Per-CPU request latency histograms, index `parity * HIST_SLOTS + slot`.
#[map]
pub static SRV_HIST: PerCpuArray<ebee_shared::servers::SrvHist> =
    PerCpuArray::with_max_entries((2 * ebee_shared::servers::HIST_SLOTS) as u32, 0);

/// The histogram slot of each server that has one, by `tgid & (SLOT_INDEX - 1)`, tagged with
/// the tgid (`ebee_shared::servers::slot_entry`). Written by userspace.
#[map]
pub static SRV_SLOT_OF: Array<u64> = Array::with_max_entries(ebee_shared::servers::SLOT_INDEX, 0);

/// Request state per server connection, keyed by the `struct sock` address; removed when the
/// connection closes. Not preallocated: it takes memory for the connections there are.
#[map]
pub static SRV_CONNS: HashMap<u64, ebee_shared::servers::SrvConn> =
    HashMap::with_max_entries(ebee_shared::servers::CONN_ENTRIES, BPF_F_NO_PREALLOC);

/// Open server connections per process (a gauge: +1 when first seen, -1 at close).
#[map]
pub static SRV_CONN_COUNT: HashMap<u32, i64> =
    HashMap::with_max_entries(ebee_shared::servers::CONN_COUNT_ENTRIES, BPF_F_NO_PREALLOC);

/// Listening TCP ports, one bit per port: seeded by userspace, kept by `sock_state`.
#[map]
pub static SRV_PORTS: Array<u64> = Array::with_max_entries(ebee_shared::servers::PORT_WORDS, 0);

/// Per-CPU busy word of the socket programs.
#[map]
pub static SRV_CPU: PerCpuArray<ebee_shared::servers::SrvCpu> = PerCpuArray::with_max_entries(1, 0);

/// `struct sock` offsets for the servers pipeline (set by the loader from BTF).
#[unsafe(no_mangle)]
pub static SRV_OFFSETS: ebee_shared::servers::SrvOffsets = ebee_shared::servers::SrvOffsets {
    family: 0,
    num: 0,
    sk_type: 0,
    valid: 0,
};

/// `BPF_F_NO_PREALLOC`: a hash map that allocates its entries as they come.
const BPF_F_NO_PREALLOC: u32 = 1;
/// `BPF_F_MMAPABLE`: an array userspace can mmap (kernel 5.5 on).
const BPF_F_MMAPABLE: u32 = 1 << 10;

/// This CPU's sketch of `parity` in a per-(CPU, parity) sketch array such as `CPU_SKETCH`:
/// the entry comes from `s` (userspace wrote it there before attaching), so no helper is
/// called. The array lookup checks the index against the map's size, so a wrong entry could
/// at worst land in another CPU's sketch, never out of the map.
#[inline(always)]
pub fn sketch<T>(map: &Array<T>, s: &CpuState, parity: u32) -> Option<*mut T> {
    map.get_ptr_mut(s.entry[(parity & 1) as usize])
}
