//! Types, sizes and algorithms shared by the eBPF programs and the userspace binary.
//!
//! Everything here is `no_std`, fixed width and `#[repr(C)]` without implicit padding, so the
//! kernel and userspace agree on every byte. The HashPipe update lives here once: the kernel
//! calls it on every context switch and userspace calls the very same code to replay traces.
#![cfg_attr(not(test), no_std)]

/// `bytes` rounded up to whole 64-byte cache lines. Each sketch type is padded to this size
/// (a `pad` field, so no padding is implicit): userspace maps the per-(CPU, parity) arrays and
/// their entries lie side by side, `size_of` apart. Each CPU writes its own entry at every
/// event, its counters at the end, so without the padding the line where CPU 0's entry ends
/// would hold the start of CPU 1's: false sharing that a per-CPU array never had.
pub const fn cache_lines(bytes: usize) -> usize {
    bytes.div_ceil(64) * 64
}

/// The `u64`s that pad `bytes` (a multiple of 8) to [`cache_lines`].
pub const fn pad_words(bytes: usize) -> usize {
    (cache_lines(bytes) - bytes) / 8
}

// Every sketch read in place is whole cache lines.
const _: () = {
    use core::mem::size_of;
    assert!(size_of::<cpu::CpuSketch>().is_multiple_of(64));
    assert!(size_of::<cpu::ThreadSketch>().is_multiple_of(64));
    assert!(size_of::<cgroup::CgSketch>().is_multiple_of(64));
    assert!(size_of::<mem::MemSketch>().is_multiple_of(64));
    assert!(size_of::<servers::SrvSketch>().is_multiple_of(64));
    assert!(size_of::<servers::NetSketch>().is_multiple_of(64));
    assert!(size_of::<wait::WaitSketch>().is_multiple_of(64));
    assert!(size_of::<wait::IoSketch>().is_multiple_of(64));
    assert!(size_of::<wait::PairSketch>().is_multiple_of(64));
};

pub mod cgroup;
pub mod cpu;
pub mod hashpipe;
pub mod lifecycle;
pub mod mem;
pub mod qos;
pub mod servers;
pub mod wait;

/// aya's `Pod` for the types userspace reads from and writes to maps.
#[cfg(feature = "user")]
mod pod {
    macro_rules! pod {
        ($($t:ty),*) => {$(
            // SAFETY: a `#[repr(C)]` struct of integers and integer arrays with no padding
            // (sizes checked in tests): every byte pattern is a valid value.
            unsafe impl aya::Pod for $t {}
        )*};
    }
    // SAFETY: as above, for every width.
    unsafe impl<const W: usize> aya::Pod for crate::cpu::SketchOf<W> {}
    pod!(
        crate::cpu::CpuSlot,
        crate::cgroup::CgSlot,
        crate::cgroup::CgSketch,
        crate::cgroup::CgOffsets,
        crate::cpu::CpuState,
        crate::wait::PairSketch,
        crate::cpu::CpuTrace,
        crate::ctl::Ctl,
        crate::lifecycle::LifecycleEvent,
        crate::mem::MemSlot,
        crate::mem::MemSketch,
        crate::mem::MemCpu,
        crate::mem::MemShadow,
        crate::mem::MemOffsets,
        crate::mem::MemTrace,
        crate::qos::PinTable,
        crate::qos::ThreadSlot,
        crate::qos::SysStat,
        crate::qos::Hist,
        crate::qos::PinStat,
        crate::qos::PinState,
        crate::qos::QosCpu,
        crate::qos::Conn,
        crate::qos::Offsets,
        crate::qos::RunqStat,
        crate::wait::WaitSlot,
        crate::wait::IoSlot,
        crate::wait::WaitSketch,
        crate::wait::IoSketch,
        crate::wait::ThreadSeen,
        crate::wait::WaitOffsets,
        crate::servers::SrvConn,
        crate::servers::SrvSlot,
        crate::servers::NetSlot,
        crate::servers::SrvSketch,
        crate::servers::NetSketch,
        crate::servers::SrvHist,
        crate::servers::SrvCpu,
        crate::servers::SrvOffsets
    );
}

/// Names of the maps in the eBPF object, so userspace never spells them twice.
pub mod map_names {
    pub const CTL: &str = "CTL";
    pub const CPU_STATE: &str = "CPU_STATE";
    pub const CPU_SKETCH: &str = "CPU_SKETCH";
    pub const CPU_SHADOW0: &str = "CPU_SHADOW0";
    pub const CPU_SHADOW1: &str = "CPU_SHADOW1";
    pub const CPU_TRACE: &str = "CPU_TRACE";
    pub const THREAD_SKETCH: &str = "THREAD_SKETCH";
    pub const THREAD_SHADOW0: &str = "THREAD_SHADOW0";
    pub const THREAD_SHADOW1: &str = "THREAD_SHADOW1";
    pub const CG_SKETCH: &str = "CG_SKETCH";
    pub const CG_SHADOW0: &str = "CG_SHADOW0";
    pub const CG_SHADOW1: &str = "CG_SHADOW1";
    pub const LIFECYCLE: &str = "LIFECYCLE";
    pub const DROPS: &str = "DROPS";
    pub const QOS_PINS: &str = "QOS_PINS";
    pub const QOS_THREADS: &str = "QOS_THREADS";
    pub const QOS_SYS: &str = "QOS_SYS";
    pub const QOS_HIST: &str = "QOS_HIST";
    pub const QOS_HIST_IDX: &str = "QOS_HIST_IDX";
    pub const QOS_PIN: &str = "QOS_PIN";
    pub const QOS_PIN_STATE: &str = "QOS_PIN_STATE";
    pub const QOS_CPU: &str = "QOS_CPU";
    pub const QOS_CONNS: &str = "QOS_CONNS";
    pub const QOS_FDS: &str = "QOS_FDS";
    pub const QOS_PIN_BITS: &str = "QOS_PIN_BITS";
    pub const QOS_OPEN: &str = "QOS_OPEN";
    pub const QOS_STACKS: &str = "QOS_STACKS";
    pub const QOS_PORTS: &str = "QOS_PORTS";
    pub const QOS_RUNQ: &str = "QOS_RUNQ";
    pub const MEM_CPU: &str = "MEM_CPU";
    pub const MEM_SKETCH: &str = "MEM_SKETCH";
    pub const MEM_SHADOW0: &str = "MEM_SHADOW0";
    pub const MEM_SHADOW1: &str = "MEM_SHADOW1";
    pub const MEM_TRACE: &str = "MEM_TRACE";
    pub const WAIT_SKETCH: &str = "WAIT_SKETCH";
    pub const IO_SKETCH: &str = "IO_SKETCH";
    pub const PAIR_SKETCH: &str = "PAIR_SKETCH";
    pub const WAIT_THREADS: &str = "WAIT_THREADS";
    pub const WAIT_SHADOW0: &str = "WAIT_SHADOW0";
    pub const WAIT_SHADOW1: &str = "WAIT_SHADOW1";
    pub const IO_SHADOW0: &str = "IO_SHADOW0";
    pub const IO_SHADOW1: &str = "IO_SHADOW1";
    pub const SRV_SKETCH: &str = "SRV_SKETCH";
    pub const NET_SKETCH: &str = "NET_SKETCH";
    pub const SRV_HIST: &str = "SRV_HIST";
    pub const SRV_SLOT_OF: &str = "SRV_SLOT_OF";
    pub const SRV_CONNS: &str = "SRV_CONNS";
    pub const SRV_CONN_COUNT: &str = "SRV_CONN_COUNT";
    pub const SRV_PORTS: &str = "SRV_PORTS";
    pub const SRV_CPU: &str = "SRV_CPU";
}

/// Indices into the per-CPU `DROPS` value (one array of counters per CPU).
pub mod drops {
    /// Lifecycle events lost to a full ring buffer.
    pub const LIFECYCLE_LOST: u32 = 0;
    /// Trace records lost to a full ring buffer.
    pub const TRACE_LOST: u32 = 1;
    /// Runs of an eBPF program cut short by a failure: its `try_*` body returned `Err`, which
    /// today means a map lookup that cannot fail (an array at a fixed or masked index, checked
    /// only because the verifier demands it) did. Should stay 0; anything else is a bug.
    pub const PROG_ERRORS: u32 = 2;
    /// Number of counters.
    pub const LEN: u32 = 3;
}

/// Names of the programs in the eBPF object.
pub mod prog_names {
    pub const SCHED_SWITCH: &str = "sched_switch";
    pub const FLIP: &str = "flip";
    pub const CPU_FLIP: &str = "cpu_flip";
    pub const PROCESS_EXIT: &str = "sched_process_exit";
    pub const PROCESS_EXEC: &str = "sched_process_exec";
    pub const SYS_ENTER: &str = "sys_enter";
    pub const SYS_EXIT: &str = "sys_exit";
    /// tp_btf on `kmem/rss_stat`: the memory pipeline.
    pub const RSS_STAT: &str = "rss_stat";
    /// Empty programs on the same hooks, for the overhead benchmark's floor.
    pub const FLOOR_ENTER: &str = "floor_enter";
    pub const FLOOR_EXIT: &str = "floor_exit";
    /// An empty `sched_switch` program (the switch-cost benchmark's floor).
    pub const FLOOR_SWITCH: &str = "floor_switch";
    /// tp_btf on `sock/sock_recv_length`, `sock/sock_send_length` and
    /// `sock/inet_sock_set_state`: the servers pipeline.
    pub const SOCK_RECV: &str = "sock_recv";
    pub const SOCK_SEND: &str = "sock_send";
    pub const SOCK_STATE: &str = "sock_state";
    /// Empty programs on the socket tracepoints (the servers benchmark's floor).
    pub const FLOOR_RECV: &str = "floor_recv";
    pub const FLOOR_SEND: &str = "floor_send";
}

/// Names of the load-time globals (read-only data the verifier sees as constants).
pub mod global_names {
    /// `u32`: 1 to keep the exact per-process shadow beside the sketch.
    pub const SHADOW_ON: &str = "SHADOW_ON";
    /// `u32`: 1 to write every sketch update to the trace ring buffer (tests, benchmarks).
    pub const TRACE_ON: &str = "TRACE_ON";
    /// `u32`: byte offset of `tgid` in `struct task_struct`, read from the kernel's BTF.
    pub const TASK_TGID_OFF: &str = "TASK_TGID_OFF";
    pub const TASK_EXEC_START_OFF: &str = "TASK_EXEC_START_OFF";
    /// `u32`: byte offset of `pid` (the thread id) in `struct task_struct`.
    pub const TASK_PID_OFF: &str = "TASK_PID_OFF";
    /// [`crate::cgroup::CgOffsets`]: the task -> cgroup key load chain.
    pub const CG_OFFSETS: &str = "CG_OFFSETS";
    /// `u32`: 1 when the kernel's `sched_process_exit` tracepoint passes `group_dead`.
    pub const EXIT_HAS_GROUP_DEAD: &str = "EXIT_HAS_GROUP_DEAD";
    /// [`crate::qos::Offsets`]: kernel struct offsets for the request model, from BTF.
    pub const QOS_OFFSETS: &str = "QOS_OFFSETS";
    /// [`crate::mem::MemOffsets`]: `mm_struct` and `task_struct` offsets for `rss_stat`.
    pub const MEM_OFFSETS: &str = "MEM_OFFSETS";
    /// [`crate::wait::WaitOffsets`]: `task_struct` offsets for waits and disk I/O.
    pub const WAIT_OFFSETS: &str = "WAIT_OFFSETS";
    /// `servers::SrvOffsets`: `struct sock` offsets for the servers pipeline.
    pub const SRV_OFFSETS: &str = "SRV_OFFSETS";
}

/// The control block userspace shares with the programs (the one value of the `CTL` array).
pub mod ctl {
    /// Control words. `epoch` is written only by the `flip` program, with one atomic 8-byte
    /// exchange, so no reader sees half of it; the bin geometry is written by userspace and
    /// taken by each CPU when it opens its next interval (a CPU racing that write mis-bins at
    /// most one interval).
    #[repr(C)]
    #[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
    pub struct Ctl {
        /// `(flip_time_ns & !1) | parity`: the interval being written started at
        /// `flip_time_ns` (`CLOCK_MONOTONIC`) and goes to the buffers of `parity`.
        pub epoch: u64,
        /// Burst bin width of the next interval, see [`crate::cpu::BinCfg`].
        pub bin_width_ns: u64,
        /// Burst bin reciprocal, see [`crate::cpu::BinCfg`].
        pub bin_recip: u64,
        /// Burst lane unit shift, see [`crate::cpu::BinCfg`].
        pub bin_unit_shift: u64,
        /// Non-zero while the per-thread mode is on: `sched_switch` also charges each slice to
        /// its thread in the thread sketch. Written by userspace; read with the epoch, in the
        /// same cache line, so off costs one compare.
        pub threads: u64,
    }

    /// Parity (which of the two interval buffers is being written) of an epoch word.
    #[inline(always)]
    pub const fn parity(epoch: u64) -> u32 {
        (epoch & 1) as u32
    }

    /// Monotonic time (ns) at which the epoch word was written.
    #[inline(always)]
    pub const fn flip_ns(epoch: u64) -> u64 {
        epoch & !1
    }
}
