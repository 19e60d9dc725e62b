//! The QoS pipeline's kernel/userspace contract: pinned processes, per-thread syscall start
//! times, per-syscall statistics and latency histograms, and the request model's connection
//! state.
//!
//! Only pinned processes are followed. The `sys_enter` program stamps the start of each syscall
//! of a pinned thread in [`ThreadSlot`]; `sys_exit` turns it into a latency, counted per
//! process and syscall number ([`SysStat`]) and in a log-linear histogram ([`Hist`]). On the
//! socket receive/send syscalls `sys_exit` also runs the request model ([`Conn`],
//! [`PinStat`]). Interval data lives in two buffers chosen by the parity of the shared epoch
//! word, like the CPU pipeline, and is closed with a per-CPU sequence handshake ([`QosCpu`]).

/// Processes that can be pinned at once (a power of two).
pub const MAX_PINS: usize = 8;
/// Syscall numbers with their own statistics: 0..NR_SLOTS-1. Larger numbers (none exist on
/// x86-64 today) are counted under [`NR_OTHER`].
pub const NR_SLOTS: usize = 512;
/// The slot for syscall numbers at or beyond `NR_SLOTS` (unused by x86-64).
pub const NR_OTHER: usize = NR_SLOTS - 1;
/// Latency histograms per pinned process: index 0 takes the syscalls that found no free
/// histogram; 1.. are handed out to syscall numbers in the order the kernel first sees them.
pub const SYS_HISTS: usize = 32;
/// Per-thread start slots (a power of two); a thread uses slot `tid & (THREAD_SLOTS - 1)`.
pub const THREAD_SLOTS: u32 = 1 << 15;
/// Descriptors below this number keep their request-model state in a plain array per pin slot
/// (`QOS_FDS`, index `slot * FD_SLOTS + fd`): an inlined lookup, no helper call or hashing on
/// the socket calls of a pinned process. Larger descriptors use the LRU hash `QOS_CONNS`.
pub const FD_SLOTS: u32 = 1024;
/// Connections (process, fd >= FD_SLOTS) the request model can follow at once (LRU).
pub const CONN_ENTRIES: u32 = 16_384;
/// Bytes of the open-syscall filter `QOS_OPEN` (one value of [`OpenStacks`], a power of two).
pub const OPEN_SLOTS: usize = 1 << 15;

/// Which kernel stacks have had a pinned syscall: `sys_enter` sets byte
/// [`open_slot`]`(regs)` of a pinned thread (its `struct pt_regs` sits at the top of its
/// kernel stack, so the pointer names the thread without a helper call), and `sys_exit` of any
/// thread whose byte is 0 returns at once: no helper call, no pin check. A byte set by another
/// stack that hashes alike only sends that thread down the full check. Cleared by userspace
/// when the hooks are detached (the bytes of exited pinned threads stay set until then).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct OpenStacks {
    pub b: [u8; OPEN_SLOTS],
}

/// Byte of [`OpenStacks`] for the `struct pt_regs` address of a thread. Kernel stacks are
/// 16 KiB-aligned, so the low 14 bits carry nothing.
#[inline(always)]
pub const fn open_slot(regs: u64) -> usize {
    (((regs >> 14) ^ (regs >> 29)) as usize) & (OPEN_SLOTS - 1)
}

/// Entries of the unpinned-stack cache `QOS_STACKS` (a power of two).
pub const STACK_SLOTS: usize = 1 << 13;
/// Low bits of a [`StackCache`] entry that hold the pin generation. A `struct pt_regs`
/// address, less a fixed map address, keeps the bits above them: kernel stacks are 16 KiB
/// apart at least, so two live threads never share those.
pub const STACK_GEN_MASK: u64 = (1 << 14) - 1;

/// Kernel stacks whose thread `sys_enter` found unpinned, so their later syscalls skip the
/// pin check (a helper call for the tgid and the bitmap): entry [`stack_slot`]`(d)` is
/// [`stack_entry`]`(d, gen)`, `d` the thread's `pt_regs` address less this value's address.
/// An entry counts only while `generation` is the one it was made under. Userspace writes a new
/// `generation` (never 0 in the low 14 bits) with all entries zeroed after every new pin table, so
/// a thread checks again once after each pin change; the exit of a thread zeroes its entry,
/// before its stack can go to a new thread. Only "unpinned" is cached: a pinned thread takes
/// the full check every time.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct StackCache {
    pub generation: u64,
    /// Keeps `generation` on a cache line of its own: entries are written by every CPU.
    pub pad: [u64; 7],
    pub e: [u64; STACK_SLOTS],
}

/// Entry of [`StackCache`] for the difference `d` of a thread's `pt_regs` and the cache's
/// address.
#[inline(always)]
pub const fn stack_slot(d: u64) -> usize {
    (((d >> 14) ^ (d >> 27)) as usize) & (STACK_SLOTS - 1)
}

/// The value of a thread's [`StackCache`] entry while generation `gen` lasts.
#[inline(always)]
pub const fn stack_entry(d: u64, gen_: u64) -> u64 {
    (d & !STACK_GEN_MASK) | (gen_ & STACK_GEN_MASK)
}

/// The generation that follows `gen_`, skipping those with 0 in the low bits (an entry of a
/// live thread is then never 0, the value of an empty entry).
pub const fn next_stack_gen(gen_: u64) -> u64 {
    let g = gen_.wrapping_add(1);
    if g & STACK_GEN_MASK == 0 { g + 1 } else { g }
}

/// Words of the pinned-process bitmap `QOS_PIN_BITS`, one bit per possible tgid: Linux's
/// `PID_MAX_LIMIT` on 64-bit is 2^22, so 65,536 words (512 KiB). The bitmap is the first,
/// cheap filter every syscall of every process goes through while something is pinned.
pub const PIN_BIT_WORDS: u32 = (1 << 22) / 64;
/// Words of the listening-port bitmap (one bit per TCP/UDP port).
pub const PORT_WORDS: u32 = 65_536 / 64;

/// Linear sub-buckets per power of two: 32, so a bucket spans at most 1/32 of its lower
/// bound and its midpoint is within 1/64 (1.6%) of any value in it.
pub const SUB_BITS: u32 = 5;
/// `1 << SUB_BITS`.
pub const SUB: u64 = 1 << SUB_BITS;
/// Buckets per histogram (a power of two, so an index is clamped with one AND).
pub const BUCKETS: usize = 1024;
/// The highest power of two with its own sub-buckets: values from `2^(MAX_EXP + 1)` ns
/// (about 68.7 s) up land in the last bucket (the exact maximum is kept beside).
pub const MAX_EXP: u32 = 35;

/// `floor(log2(v))` for `v > 0` (0 for 0), by constant shifts: BPF has no count-leading-zeros
/// instruction, and each step keeps the result's bounds visible to the verifier.
#[inline(always)]
pub const fn log2_floor(v: u64) -> u32 {
    let mut v = v;
    let mut e = 0;
    if v >= 1 << 32 {
        v >>= 32;
        e += 32;
    }
    if v >= 1 << 16 {
        v >>= 16;
        e += 16;
    }
    if v >= 1 << 8 {
        v >>= 8;
        e += 8;
    }
    if v >= 1 << 4 {
        v >>= 4;
        e += 4;
    }
    if v >= 1 << 2 {
        v >>= 2;
        e += 2;
    }
    if v >= 1 << 1 {
        e += 1;
    }
    e
}

/// Histogram bucket of a latency in ns. Values below 64 ns have one bucket per ns; above,
/// each power of two `[2^e, 2^(e+1))` has 32 equal buckets.
#[inline(always)]
pub const fn bucket(v: u64) -> usize {
    if v < SUB {
        return v as usize;
    }
    if v >= 1 << (MAX_EXP + 1) {
        return BUCKETS - 1;
    }
    let e = log2_floor(v);
    // e is in SUB_BITS..=MAX_EXP here; the masks keep every step in range for the verifier.
    let shift = (e - SUB_BITS) & 63;
    let sub = (v >> shift) & (SUB - 1);
    let idx = ((e - SUB_BITS + 1) as u64) * SUB + sub;
    (idx as usize) & (BUCKETS - 1)
}

/// Lowest value (ns) of bucket `i`.
pub const fn bucket_low(i: usize) -> u64 {
    let i = i & (BUCKETS - 1);
    if i < 2 * SUB as usize {
        return i as u64;
    }
    let e = (i as u32 >> SUB_BITS) + SUB_BITS - 1;
    let sub = (i as u64) & (SUB - 1);
    (SUB + sub) << (e - SUB_BITS)
}

/// Width (ns) of bucket `i` (the last bucket is open-ended; its nominal width is returned).
pub const fn bucket_width(i: usize) -> u64 {
    let i = i & (BUCKETS - 1);
    if i < 2 * SUB as usize {
        return 1;
    }
    let e = (i as u32 >> SUB_BITS) + SUB_BITS - 1;
    1 << (e - SUB_BITS)
}

/// The value that stands for bucket `i`: its midpoint (exact for 1-ns buckets).
pub const fn bucket_mid(i: usize) -> u64 {
    bucket_low(i) + bucket_width(i) / 2
}

/// One entry of the pin table: `(generation << 32) | tgid`, 0 when free. The generation
/// changes every time a slot is given to a process, so state left by an earlier pin is
/// recognised and ignored.
pub const fn pin_entry(tgid: u32, gen_: u32) -> u64 {
    ((gen_ as u64) << 32) | tgid as u64
}

/// The pinned processes (the one value of `QOS_PINS`). Written by userspace as a whole.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinTable {
    pub pins: [u64; MAX_PINS],
}

/// Start of the syscall a pinned thread is in (`QOS_THREADS`, index `tid & (THREAD_SLOTS-1)`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadSlot {
    /// `CLOCK_MONOTONIC` ns at `sys_enter`.
    pub start_ns: u64,
    /// The thread that wrote the slot (two threads may share a slot).
    pub tid: u32,
    /// `(pin generation & 0xffff) << 16 | (syscall number + 1)`; 0 when no syscall is open.
    pub tag: u32,
}

/// Tag of an open syscall in a [`ThreadSlot`].
#[inline(always)]
pub const fn thread_tag(gen_: u32, nr: u32) -> u32 {
    ((gen_ & 0xffff) << 16) | ((nr & 0x7fff) + 1)
}

/// Syscall number of a [`ThreadSlot`] tag.
#[inline(always)]
pub const fn tag_nr(tag: u32) -> u32 {
    (tag & 0xffff).wrapping_sub(1) & 0x7fff
}

/// Pin generation bits of a [`ThreadSlot`] tag.
#[inline(always)]
pub const fn tag_gen(tag: u32) -> u32 {
    tag >> 16
}

/// One process's completed syscalls of one number in one interval.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SysStat {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
}

/// A latency histogram of [`BUCKETS`] log-linear buckets.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hist {
    pub buckets: [u32; BUCKETS],
}

impl Default for Hist {
    fn default() -> Self {
        Self {
            buckets: [0; BUCKETS],
        }
    }
}

/// One pinned process's syscalls in one interval, by number (`QOS_SYS`, index
/// `parity * MAX_PINS + slot`). Userspace reads it as `[SysStat; NR_SLOTS]`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SysTable {
    pub nr: [SysStat; NR_SLOTS],
}

/// One pinned process's syscall latency histograms in one interval (`QOS_HIST`, index
/// `parity * MAX_PINS + slot`). Userspace reads it as `[u32; SYS_HISTS * BUCKETS]`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HistTable {
    pub h: [Hist; SYS_HISTS],
}

/// Which histogram each syscall number of one pinned process uses, 0 for none yet
/// (`QOS_HIST_IDX`, index `slot`; kept across intervals, reset when the slot is reused).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct HistIdx {
    pub idx: [u64; NR_SLOTS],
}

/// Per pinned process per interval: the request model and what was lost (`QOS_PIN`, index
/// `parity * MAX_PINS + slot`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinStat {
    /// Completed requests (a send that closed an open request on a server-side socket).
    pub requests: u64,
    pub req_total_ns: u64,
    pub req_max_ns: u64,
    /// Receives with data on server-side sockets (one request may take several).
    pub recvs: u64,
    /// Sends on server-side sockets with no request open (streamed or pushed data).
    pub sends_idle: u64,
    /// Receive/send calls with data on sockets that are not server-side.
    pub other_sock_io: u64,
    /// Connections the process accepted in the interval.
    pub accepts: u64,
    /// Syscall exits without a usable start (the thread's slot held another thread's
    /// syscall, or the syscall began before the pin).
    pub unmatched: u64,
    /// Syscalls counted in histogram 0 because every histogram of the process was taken.
    pub hist_full: u64,
    /// Request-model updates lost because the connection map had no room.
    pub conn_full: u64,
    /// Request latency histogram.
    pub req_hist: Hist,
}

/// Per pinned process per interval: its threads' run-queue waits, one for each time a thread
/// got a CPU (`QOS_RUNQ`, index `parity * MAX_PINS + slot`). Written by `sched_switch` on
/// whichever CPU the thread leaves (see `ebee_shared::wait`), so with atomic adds.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct RunqStat {
    pub count: u64,
    pub total_ns: u64,
    pub max_ns: u64,
    pub hist: Hist,
}

/// Per pinned process, across intervals (`QOS_PIN_STATE`, index `slot`): the next free
/// histogram, and the descriptor epoch. Reset by userspace whenever the slot is given to a
/// process.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PinState {
    pub next_hist: u64,
    /// Bumped when the process may have closed descriptors without a `close` the programs
    /// saw (`close_range`, a successful `execve` closing close-on-exec descriptors): request
    /// state made under an older epoch is checked against the descriptor table again.
    pub fd_epoch: u64,
}

/// Per-CPU sequence of the QoS programs (`QOS_CPU`): odd while a `sys_exit` run of a pinned
/// thread is writing interval data on this CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QosCpu {
    pub seq: u64,
}

/// Role of a connection in the request model.
pub const ROLE_NOT_SOCKET: u32 = 1;
/// A socket on the server side: accepted while pinned, or a TCP/UDP socket whose local port
/// is one the process listens on.
pub const ROLE_SERVER: u32 = 2;
/// Any other socket (client side, or a role we cannot tell).
pub const ROLE_OTHER: u32 = 3;
/// Mask of the role bits in [`Conn::flags`].
pub const ROLE_MASK: u32 = 3;
/// A request is open on the connection (received, not yet answered).
pub const CONN_IN_REQUEST: u32 = 4;
/// The descriptor is a duplicate of another one of the same open file (`dup`, `dup2`,
/// `dup3`, `fcntl(F_DUPFD)`, or found sharing its `struct file`): its request state lives in
/// that descriptor's entry, whose number [`Conn::start_ns`] then holds. So a request read on
/// one descriptor and answered on its duplicate is one request, as the servers pipeline
/// (keyed by socket) sees it, with no extra lookup for descriptors that are not duplicates.
pub const CONN_ALIAS: u32 = 8;
/// [`Conn::flags`] keeps the low 16 bits of [`PinState::fd_epoch`] from this bit up.
pub const CONN_EPOCH_SHIFT: u32 = 16;

/// Request-model state of one file descriptor of a pinned process (`QOS_FDS` for descriptors
/// below [`FD_SLOTS`], else `QOS_CONNS`, an LRU hash keyed by `(tgid << 32) | fd`).
///
/// `QOS_CONNS` also holds, keyed by the `struct file` address (a kernel address: its top bit
/// is set, which no `(tgid << 32) | fd` key has), which descriptor of which pin keeps the state
/// of that open file ([`file_owner`]). Only descriptors first seen by a receive or send (open
/// before the pin, or after a `close_range` or `execve`) are entered there: it is how two
/// duplicates made before the pin find each other. Duplicates made while pinned are followed
/// at the `dup` call itself.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Conn {
    /// Address of the `struct file` the fd referred to when this state was made. The state
    /// is dropped when the descriptor is closed (`close`, `dup2`/`dup3` over it) and
    /// rechecked against the descriptor table after a `close_range` or `execve`
    /// ([`PinState::fd_epoch`]), so the hot path need not walk the table on every call.
    pub file: u64,
    /// End of the receive that opened the current request; with [`CONN_ALIAS`], the
    /// descriptor that keeps the request state instead.
    pub start_ns: u64,
    /// Pin generation that made the state (0: none; generations start at 1).
    pub gen_: u32,
    /// Role, [`CONN_IN_REQUEST`], [`CONN_ALIAS`] and the descriptor epoch
    /// ([`CONN_EPOCH_SHIFT`]).
    pub flags: u32,
}

/// A `QOS_CONNS` entry keyed by a `struct file` address instead of a descriptor: the
/// descriptor `fd` of the process in pin slot `slot` (generation `gen_`) keeps the request
/// state of that open file. Trusted only while that descriptor's own entry is valid and names
/// the same file. Stored as a [`Conn`] (same map): `file` is the key, `start_ns` the fd,
/// `flags` the slot.
#[inline(always)]
pub const fn file_owner(file: u64, fd: u32, slot: u32, gen_: u32) -> Conn {
    Conn {
        file,
        start_ns: fd as u64,
        gen_,
        flags: slot,
    }
}

/// Whether `key` of `QOS_CONNS` is a `struct file` address ([`file_owner`]) rather than a
/// `(tgid << 32) | fd` key (tgids are below 2^22).
#[inline(always)]
pub const fn is_file_key(key: u64) -> bool {
    key >> 63 != 0
}

/// `fcntl` commands that duplicate a descriptor.
pub const F_DUPFD: u64 = 0;
pub const F_DUPFD_CLOEXEC: u64 = 1030;

/// x86-64 syscall numbers the programs treat specially.
pub mod nr {
    pub const READ: u32 = 0;
    pub const WRITE: u32 = 1;
    pub const CLOSE: u32 = 3;
    pub const DUP: u32 = 32;
    pub const DUP2: u32 = 33;
    pub const FCNTL: u32 = 72;
    pub const EXECVE: u32 = 59;
    pub const DUP3: u32 = 292;
    pub const EXECVEAT: u32 = 322;
    pub const CLOSE_RANGE: u32 = 436;
    pub const READV: u32 = 19;
    pub const WRITEV: u32 = 20;
    pub const SENDFILE: u32 = 40;
    pub const CONNECT: u32 = 42;
    pub const ACCEPT: u32 = 43;
    pub const SENDTO: u32 = 44;
    pub const RECVFROM: u32 = 45;
    pub const SENDMSG: u32 = 46;
    pub const RECVMSG: u32 = 47;
    pub const LISTEN: u32 = 50;
    pub const EXIT: u32 = 60;
    pub const EXIT_GROUP: u32 = 231;
    pub const ACCEPT4: u32 = 288;
    pub const RECVMMSG: u32 = 299;
    pub const SENDMMSG: u32 = 307;
}

/// Kernel struct offsets the request model reads, from the running kernel's BTF (the `.rodata`
/// value `QOS_OFFSETS`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offsets {
    pub regs_di: u32,
    /// `struct pt_regs` member of the second argument (fcntl's command).
    pub regs_si: u32,
    pub task_files: u32,
    pub files_fdt: u32,
    pub fdt_max_fds: u32,
    pub fdt_fd: u32,
    pub file_inode: u32,
    pub file_private: u32,
    pub inode_mode: u32,
    pub socket_sk: u32,
    pub sk_family: u32,
    pub sk_num: u32,
    /// 1 when every offset above was found (the request model is off otherwise).
    pub valid: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_has_no_padding() {
        assert_eq!(core::mem::size_of::<ThreadSlot>(), 16);
        assert_eq!(core::mem::size_of::<SysStat>(), 24);
        assert_eq!(core::mem::size_of::<Hist>(), 4 * BUCKETS);
        assert_eq!(core::mem::size_of::<PinStat>(), 80 + 4 * BUCKETS);
        assert_eq!(core::mem::size_of::<Conn>(), 24);
        assert_eq!(core::mem::size_of::<PinTable>(), 8 * MAX_PINS);
        assert_eq!(core::mem::size_of::<Offsets>(), 52);
        assert_eq!(core::mem::size_of::<OpenStacks>(), OPEN_SLOTS);
        assert_eq!(core::mem::size_of::<StackCache>(), 64 + 8 * STACK_SLOTS);
        assert!(STACK_SLOTS.is_power_of_two());
        assert!(OPEN_SLOTS.is_power_of_two());
        assert_eq!(core::mem::size_of::<SysTable>(), 24 * NR_SLOTS);
        assert_eq!(core::mem::size_of::<HistTable>(), 4 * BUCKETS * SYS_HISTS);
        assert_eq!(core::mem::size_of::<HistIdx>(), 8 * NR_SLOTS);
        assert!(NR_SLOTS.is_power_of_two() && SYS_HISTS.is_power_of_two());
        assert!(THREAD_SLOTS.is_power_of_two());
    }

    #[test]
    fn stack_entries_are_never_empty_and_tell_stacks_and_generations_apart() {
        let mut g = 0;
        for _ in 0..3 * (STACK_GEN_MASK + 1) {
            g = next_stack_gen(g);
            assert_ne!(g & STACK_GEN_MASK, 0);
        }
        // Two stacks 16 KiB apart (the closest two can be), same offset in each.
        let (a, b) = (0xffff_c900_0123_7f58u64, 0xffff_c900_0123_bf58u64);
        for d in [a, b, a.wrapping_sub(0xffff_8880_0000_0000)] {
            assert_ne!(stack_entry(d, 1), 0);
        }
        assert_ne!(stack_entry(a, 1), stack_entry(b, 1));
        assert_ne!(stack_entry(a, 1), stack_entry(a, next_stack_gen(1)));
        assert_ne!(stack_slot(a), stack_slot(b));
    }

    #[test]
    fn log2_matches_leading_zeros() {
        for v in (1u64..5000).chain([u64::MAX, 1 << 40, (1 << 40) - 1, 12345678901]) {
            assert_eq!(log2_floor(v), 63 - v.leading_zeros(), "{v}");
        }
    }

    #[test]
    fn buckets_are_contiguous_and_monotonic() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(63), 63);
        assert_eq!(bucket(64), 64);
        assert_eq!(
            bucket_low(BUCKETS - 1) + bucket_width(BUCKETS - 1),
            1 << (MAX_EXP + 1)
        );
        for i in 0..BUCKETS - 1 {
            assert_eq!(
                bucket_low(i) + bucket_width(i),
                bucket_low(i + 1),
                "bucket {i}"
            );
            assert_eq!(bucket(bucket_low(i)), i);
            assert_eq!(bucket(bucket_low(i + 1) - 1), i);
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
        assert_eq!(bucket(1 << (MAX_EXP + 1)), BUCKETS - 1);
    }

    #[test]
    fn midpoints_are_within_two_percent() {
        // The issue asks for at most 3%; 32 sub-buckets give 1/64.
        let mut v = 1u64;
        while v < 1 << (MAX_EXP + 1) {
            let m = bucket_mid(bucket(v)) as f64;
            let err = (m - v as f64).abs() / v as f64;
            assert!(err <= 1.0 / 64.0 + 1e-12, "{v}: midpoint {m}, error {err}");
            v = v + 1 + v / 7;
        }
    }

    #[test]
    fn tags_round_trip() {
        for (g, n) in [(0u32, 0u32), (7, 1), (0xffff, 511), (0x1_0001, 231)] {
            let t = thread_tag(g, n);
            assert_ne!(t, 0);
            assert_eq!(tag_nr(t), n);
            assert_eq!(tag_gen(t), g & 0xffff);
        }
    }
}
