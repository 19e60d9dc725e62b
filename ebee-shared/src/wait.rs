//! The waits and disk I/O pipeline's kernel/userspace contract.
//!
//! The kernel already counts, per thread, the time it spent runnable but not running
//! (`task_struct.sched_info.run_delay`, the second field of /proc/PID/schedstat) and the bytes
//! it made the block layer read or write (`task_struct.ioac.read_bytes` / `write_bytes`, as
//! /proc/PID/io shows them). At each context switch `sched_switch` already has the outgoing
//! thread at hand: it charges that thread's growth of those counters since the last time it
//! switched out to its process, in two per-CPU HashPipe sketches of the interval the CPU is
//! writing (same epoch and parity as the CPU sketch, closed by the same switch). No clock read
//! and no helper call: the "last seen" values sit in a tagged array indexed by thread id.
//!
//! A thread's wait is charged when it leaves the CPU after the wait: `run_delay` grows when the
//! thread arrives on a CPU (`sched_info_arrive`), and the arrival happens after the switch
//! tracepoint, so the switch-out that follows is the first point both ends are known. The
//! same counter, read the same way, is what /proc/PID/schedstat shows.
//!
//! Off-CPU time by reason uses the same slot and the same charge point. At a switch-out the
//! thread's slot also keeps the monotonic time and the kind of state it leaves in (from the
//! tracepoint's `prev_state` and `task_struct.in_iowait`, see [`off_class`]); its next
//! switch-in stamps the slot with the time it got a CPU back. The gap between the two, less
//! the run-queue wait accrued in it, is time it was not runnable, of that kind. The wait in
//! the gap is only complete once the kernel has added the last stretch at the arrival (after
//! the tracepoint), so, as for the wait itself, the charge is made at the switch-out that
//! follows, where the growth of `run_delay` is exactly the wait in the gap.

use crate::hashpipe;

/// Stages of the wait sketch.
pub const WAIT_STAGES: usize = 4;
/// Slots per stage of the wait sketch (a power of two).
pub const WAIT_SLOTS: usize = 128;
/// Stages of the disk I/O sketch.
pub const IO_STAGES: usize = 4;
/// Slots per stage of the disk I/O sketch (a power of two): few processes do disk I/O in an
/// interval, and those that do are the ones that matter.
pub const IO_SLOTS: usize = 32;
/// Entries of the per-thread "last seen" array (a power of two), indexed by `tid & (N - 1)`.
/// Two live threads whose ids share the index take turns and lose the deltas the other
/// overwrote (counted as `thread_misses`).
pub const THREAD_SLOTS: usize = 32_768;
/// Capacity of each exact shadow map (one per interval parity).
pub const SHADOW_ENTRIES: u32 = 16_384;
/// `PF_EXITING` in `task_struct.flags`: the thread has begun exiting.
pub const PF_EXITING: u32 = 0x0000_0004;

/// `TASK_INTERRUPTIBLE` (include/linux/sched.h): a sleep any signal ends.
pub const TASK_INTERRUPTIBLE: u32 = 0x0001;
/// `TASK_UNINTERRUPTIBLE`: a wait in the kernel that signals do not end (the "D" state).
/// `TASK_KILLABLE` is this with `TASK_WAKEKILL` (0x100), so the bit is tested, not the value.
pub const TASK_UNINTERRUPTIBLE: u32 = 0x0002;
/// `TASK_NOLOAD`: with `TASK_UNINTERRUPTIBLE` it is `TASK_IDLE`, the state idle kernel
/// workers wait in (not counted in the load average, and not blocked on anything).
pub const TASK_NOLOAD: u32 = 0x0400;
/// `TASK_RTLOCK_WAIT`: a sleeping spinlock on PREEMPT_RT; a lock wait, so blocked.
pub const TASK_RTLOCK_WAIT: u32 = 0x1000;

/// Why a thread left its CPU, as kept in its slot until it is back (`ThreadSeen::class`).
/// Runnable: preempted, or about to sleep but woken first; its gap is run-queue wait only.
pub const OFF_RUNNABLE: u32 = 0;
/// Uninterruptible with `in_iowait` set (`io_schedule()`: block I/O, page cache reads).
pub const OFF_IO: u32 = 1;
/// Uninterruptible without `in_iowait`: mutexes, rwsems, page faults, NFS, vfork parents.
pub const OFF_BLOCKED: u32 = 2;
/// Interruptible (futexes, sockets, pipes, timers), `TASK_IDLE`, stopped, traced, parked,
/// frozen: waiting for something that is not the kernel's own work.
pub const OFF_SLEEP: u32 = 3;

/// The kind of off-CPU time a switch-out starts: `preempt` and `prev_state` are the
/// tracepoint's arguments (a preempted thread stays runnable whatever its state word says),
/// `in_iowait` the task's flag. `prev_state` is tested as bits: killable, idle and freezable
/// sleeps carry extra ones.
#[inline(always)]
pub fn off_class(preempt: bool, prev_state: u32, in_iowait: bool) -> u32 {
    if preempt || prev_state == 0 {
        OFF_RUNNABLE
    } else if prev_state & TASK_NOLOAD != 0 {
        // TASK_IDLE: a kernel worker with nothing to do. Counted as sleep, so it never
        // tops a list of blocked processes.
        OFF_SLEEP
    } else if prev_state & TASK_UNINTERRUPTIBLE != 0 {
        if in_iowait { OFF_IO } else { OFF_BLOCKED }
    } else if prev_state & TASK_RTLOCK_WAIT != 0 {
        OFF_BLOCKED
    } else {
        OFF_SLEEP
    }
}

/// One slot of the wait sketch: a process and its threads' run-queue wait and off-CPU time
/// by reason in the interval.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitSlot {
    /// Process id (tgid); 0 marks an empty slot.
    pub tgid: u32,
    /// Reserved, 0.
    pub flags: u32,
    /// Nanoseconds spent runnable but not running.
    pub wait_ns: u64,
    /// Nanoseconds blocked on I/O ([`OFF_IO`]).
    pub io_ns: u64,
    /// Nanoseconds blocked otherwise ([`OFF_BLOCKED`]).
    pub blocked_ns: u64,
    /// Nanoseconds sleeping ([`OFF_SLEEP`]).
    pub sleep_ns: u64,
}

impl hashpipe::Slot for WaitSlot {
    #[inline(always)]
    fn key(&self) -> u32 {
        self.tgid
    }
    /// Ranked by the time it was held up: waiting for a CPU or blocked in the kernel. Sleep
    /// is carried but not weighed: nearly every process sleeps nearly all the time, and
    /// weighing it would let idle daemons push the waiters out of the sketch.
    #[inline(always)]
    fn weight(&self) -> u64 {
        self.wait_ns
            .saturating_add(self.io_ns)
            .saturating_add(self.blocked_ns)
    }
    #[inline(always)]
    fn merge(&mut self, other: &Self) {
        self.wait_ns += other.wait_ns;
        self.io_ns += other.io_ns;
        self.blocked_ns += other.blocked_ns;
        self.sleep_ns += other.sleep_ns;
    }
}

/// One slot of the disk I/O sketch: a process and the bytes its threads read and wrote.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoSlot {
    /// Process id (tgid); 0 marks an empty slot.
    pub tgid: u32,
    /// Reserved, 0.
    pub flags: u32,
    /// Bytes the block layer was asked to read (`read_bytes`).
    pub read_bytes: u64,
    /// Bytes written, counted when dirtied or submitted (`write_bytes`).
    pub write_bytes: u64,
}

impl hashpipe::Slot for IoSlot {
    #[inline(always)]
    fn key(&self) -> u32 {
        self.tgid
    }
    #[inline(always)]
    fn weight(&self) -> u64 {
        self.read_bytes.saturating_add(self.write_bytes)
    }
    #[inline(always)]
    fn merge(&mut self, other: &Self) {
        self.read_bytes += other.read_bytes;
        self.write_bytes += other.write_bytes;
    }
}

/// `u64`s that pad [`WaitSketch`] to whole cache lines.
pub const WAIT_PAD: usize =
    crate::pad_words(core::mem::size_of::<[[WaitSlot; WAIT_SLOTS]; WAIT_STAGES]>() + 6 * 8);

/// One interval's wait sketch on one CPU (an entry of a per-(CPU, parity) array: [`crate::cpu::sketch_entry`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WaitSketch {
    pub stages: [[WaitSlot; WAIT_SLOTS]; WAIT_STAGES],
    /// Wait carried out of the last stage and lost.
    pub evicted_ns: u64,
    /// Off-CPU time (I/O + blocked + sleep) carried out of the last stage and lost.
    pub evicted_off_ns: u64,
    /// Entries carried out of the last stage.
    pub evictions: u64,
    /// Waits charged in this interval.
    pub updates: u64,
    /// Charges the exact shadow could not record (shadow map full).
    pub shadow_full: u64,
    /// Switch-outs whose thread was not in the "last seen" array (first sighting, or its slot
    /// taken by another thread): their deltas are unknown and not charged.
    pub thread_misses: u64,
    /// Up to a whole number of cache lines: see [`crate::cache_lines`].
    pub pad: [u64; WAIT_PAD],
}

/// `u64`s that pad [`IoSketch`] to whole cache lines.
pub const IO_PAD: usize =
    crate::pad_words(core::mem::size_of::<[[IoSlot; IO_SLOTS]; IO_STAGES]>() + 4 * 8);

/// One interval's disk I/O sketch on one CPU (an entry of a per-(CPU, parity) array: [`crate::cpu::sketch_entry`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct IoSketch {
    pub stages: [[IoSlot; IO_SLOTS]; IO_STAGES],
    /// Bytes carried out of the last stage and lost.
    pub evicted_bytes: u64,
    /// Entries carried out of the last stage.
    pub evictions: u64,
    /// I/O charges in this interval.
    pub updates: u64,
    /// Charges the exact shadow could not record (shadow map full).
    pub shadow_full: u64,
    /// Up to a whole number of cache lines: see [`crate::cache_lines`].
    pub pad: [u64; IO_PAD],
}

impl Default for WaitSketch {
    fn default() -> Self {
        Self {
            stages: [[WaitSlot::default(); WAIT_SLOTS]; WAIT_STAGES],
            evicted_ns: 0,
            evicted_off_ns: 0,
            evictions: 0,
            updates: 0,
            shadow_full: 0,
            thread_misses: 0,
            pad: [0; WAIT_PAD],
        }
    }
}

impl Default for IoSketch {
    fn default() -> Self {
        Self {
            stages: [[IoSlot::default(); IO_SLOTS]; IO_STAGES],
            evicted_bytes: 0,
            evictions: 0,
            updates: 0,
            shadow_full: 0,
            pad: [0; IO_PAD],
        }
    }
}

impl WaitSketch {
    /// Insert one charge; count what falls out of the last stage.
    #[inline(always)]
    pub fn add(&mut self, slot: WaitSlot) {
        self.updates += 1;
        if let Some(out) = hashpipe::update(&mut self.stages, slot) {
            self.evicted_ns += out.wait_ns;
            self.evicted_off_ns += out.io_ns + out.blocked_ns + out.sleep_ns;
            self.evictions += 1;
        }
    }
}

impl IoSketch {
    /// Insert one charge; count what falls out of the last stage.
    #[inline(always)]
    pub fn add(&mut self, slot: IoSlot) {
        self.updates += 1;
        if let Some(out) = hashpipe::update(&mut self.stages, slot) {
            self.evicted_bytes += out.read_bytes + out.write_bytes;
            self.evictions += 1;
        }
    }
}

/// The counters of one thread as last seen at a switch-out (the "last seen" array's value).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadSeen {
    /// Thread id whose values these are; 0 when the slot is free.
    pub tid: u32,
    /// The `OFF_*` class of the state it left its CPU in at `out_ns`.
    pub class: u32,
    pub run_delay: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Monotonic time of that switch-out; 0 when unknown (the off-CPU split is off).
    pub out_ns: u64,
    /// Monotonic time of its switch-in since; 0 until then.
    pub in_ns: u64,
}

/// What a switch-out reads of the outgoing thread.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ThreadNow {
    pub tid: u32,
    pub run_delay: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// `PF_EXITING` is set: this is one of its last switches.
    pub exiting: bool,
    /// Monotonic time of this switch-out (0: the off-CPU split is off).
    pub now_ns: u64,
    /// The `OFF_*` class of the state it leaves in.
    pub class: u32,
}

/// The growth of a thread's counters since it was last seen, and its off-CPU time in the gap
/// before this slice, by reason.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Deltas {
    pub wait_ns: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub io_ns: u64,
    pub blocked_ns: u64,
    pub sleep_ns: u64,
    /// Monotonic time of the switch-in that ended the gap (0: unknown), where the wait in
    /// `wait_ns` ended.
    pub in_ns: u64,
}

/// The switch-in of a thread whose slot is `seen`, at monotonic `now_ns`: stamp the end of
/// its gap. A slot holding another thread, or no switch-out time, is left alone.
#[inline(always)]
pub fn switch_in(seen: &mut ThreadSeen, tid: u32, now_ns: u64) {
    if seen.tid == tid && seen.out_ns != 0 && seen.in_ns == 0 {
        seen.in_ns = now_ns;
    }
}

/// One switch-out of a thread against its "last seen" slot. Returns the growth since the slot
/// was written for this same thread (None for a first sighting or a slot another thread had:
/// nothing is known, nothing is charged), and leaves the slot holding `now`, or free when the
/// thread is exiting (its id may come back as another thread, whose counters start at 0). A
/// counter that went backwards (a reused id the exit path missed) charges nothing.
#[inline(always)]
pub fn switch_out(seen: &mut ThreadSeen, now: &ThreadNow) -> Option<Deltas> {
    let known = seen.tid == now.tid;
    let mut d = Deltas {
        wait_ns: now.run_delay.saturating_sub(seen.run_delay),
        read_bytes: now.read_bytes.saturating_sub(seen.read_bytes),
        write_bytes: now.write_bytes.saturating_sub(seen.write_bytes),
        ..Deltas::default()
    };
    // The gap before this slice, less the run-queue wait in it (the growth of `run_delay`
    // since the last switch-out is all of it: a thread accrues no wait while it runs). No
    // switch-in stamp (missed, or the split is off) or a stamp out of order: nothing.
    if seen.out_ns != 0 && seen.in_ns > seen.out_ns {
        d.in_ns = seen.in_ns;
        let off = (seen.in_ns - seen.out_ns).saturating_sub(d.wait_ns);
        match seen.class {
            OFF_IO => d.io_ns = off,
            OFF_BLOCKED => d.blocked_ns = off,
            OFF_SLEEP => d.sleep_ns = off,
            // Runnable: the gap was all wait, and the rest is the two clocks' jitter.
            _ => {}
        }
    }
    if now.exiting {
        seen.tid = 0;
    } else {
        *seen = ThreadSeen {
            tid: now.tid,
            class: now.class,
            run_delay: now.run_delay,
            read_bytes: now.read_bytes,
            write_bytes: now.write_bytes,
            out_ns: now.now_ns,
            in_ns: 0,
        };
    }
    known.then_some(d)
}

/// Slice ends each CPU keeps for the culprits of run-queue waits (a power of two, more than
/// [`CULPRITS`]).
pub const RING: usize = 8;
/// Slices a wait is charged to at most (the last ones before it ended; the sketch sums a
/// culprit met twice); the rest of it is unattributed.
pub const CULPRITS: usize = 4;
/// The culprit of the part of a wait the CPU spent idle: wakeup latency (the idle task).
pub const CULPRIT_IDLE: u32 = 0;
/// The culprit of the part of a wait no slice on this CPU explains (older than the ring, spent
/// queued on another CPU before a migration, or beyond `CULPRITS`).
pub const CULPRIT_UNKNOWN: u32 = u32::MAX;
/// Stages of the (victim, culprit) sketch.
pub const PAIR_STAGES: usize = 4;
/// Slots per stage of the (victim, culprit) sketch (a power of two).
pub const PAIR_SLOTS: usize = 256;

/// The end of one slice on a CPU: who ran, and when it left (monotonic ns). Its start is the
/// end of the entry before it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SliceEnd {
    /// Process that ran (0: the CPU was idle).
    pub tgid: u32,
    pub _pad: u32,
    pub end_ns: u64,
}

/// The last [`RING`] slice ends on one CPU (in its `CpuState`), appended at every switch.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SliceRing {
    /// Entries written so far; the newest is at `(head - 1) % RING`.
    pub head: u64,
    pub ent: [SliceEnd; RING],
}

impl SliceRing {
    /// A switch at monotonic `end_ns` ended a slice of `tgid` (0: idle).
    #[inline(always)]
    pub fn push(&mut self, tgid: u32, end_ns: u64) {
        let i = (self.head as usize) & (RING - 1);
        self.ent[i] = SliceEnd {
            tgid,
            _pad: 0,
            end_ns,
        };
        self.head += 1;
    }

    /// The culprits of a run-queue wait of `wait_ns` that ended at `in_ns` with a switch-in on
    /// this CPU (before that switch's own slice end is pushed): each slice overlapping
    /// `[in_ns - wait_ns, in_ns]`, newest first, is passed to `charge` with its overlap, at
    /// most [`CULPRITS`] of them. Returns the part of the wait no slice explained. A ring whose
    /// newest end is not `in_ns` did not see that switch-in: all of it is unexplained.
    #[inline(always)]
    pub fn blame(&self, in_ns: u64, wait_ns: u64, mut charge: impl FnMut(u32, u64)) -> u64 {
        let head = self.head as usize;
        if head < CULPRITS + 1 || self.ent[(head - 1) & (RING - 1)].end_ns != in_ns {
            return wait_ns;
        }
        let lo = in_ns.saturating_sub(wait_ns);
        let mut left = wait_ns;
        // Written out slice by slice, not as a loop: the verifier then walks each charge once
        // instead of once per iteration and path (a loop around the sketch's insert exceeded
        // its million instructions).
        macro_rules! slice {
            ($k:expr) => {{
                let end = self.ent[(head - 1 - $k) & (RING - 1)].end_ns;
                let start = self.ent[(head - 2 - $k) & (RING - 1)].end_ns;
                if start == 0 || start > end {
                    return left;
                }
                let ov = end.saturating_sub(if start > lo { start } else { lo });
                if ov > 0 {
                    charge(self.ent[(head - 1 - $k) & (RING - 1)].tgid, ov);
                    left = left.saturating_sub(ov);
                }
                if start <= lo {
                    return left;
                }
            }};
        }
        slice!(0);
        slice!(1);
        slice!(2);
        slice!(3);
        left
    }
}

/// One slot of the (victim, culprit) sketch: the run-queue wait of process `victim` charged to
/// process `culprit` (or [`CULPRIT_IDLE`], [`CULPRIT_UNKNOWN`]) in the interval.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairSlot {
    /// The waiting process; 0 marks an empty slot.
    pub victim: u32,
    pub culprit: u32,
    pub wait_ns: u64,
}

impl hashpipe::Slot for PairSlot {
    /// A hash of the pair, never 0 for a used slot: only where the slot goes, the pair itself
    /// is compared by [`hashpipe::Slot::same`].
    #[inline(always)]
    fn key(&self) -> u32 {
        if self.victim == 0 {
            0
        } else {
            (self.victim.wrapping_mul(0x9E37_79B1) ^ self.culprit.wrapping_mul(0x85EB_CA77)) | 1
        }
    }
    #[inline(always)]
    fn weight(&self) -> u64 {
        self.wait_ns
    }
    #[inline(always)]
    fn merge(&mut self, other: &Self) {
        self.wait_ns += other.wait_ns;
    }
    #[inline(always)]
    fn same(&self, other: &Self) -> bool {
        self.victim == other.victim && self.culprit == other.culprit
    }
}

/// `u64`s that pad [`PairSketch`] to whole cache lines.
pub const PAIR_PAD: usize =
    crate::pad_words(core::mem::size_of::<[[PairSlot; PAIR_SLOTS]; PAIR_STAGES]>() + 6 * 8);

/// One interval's (victim, culprit) sketch on one CPU (an entry of a per-(CPU, parity) array:
/// [`crate::cpu::sketch_entry`]), and the totals of what was charged.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct PairSketch {
    pub stages: [[PairSlot; PAIR_SLOTS]; PAIR_STAGES],
    /// Wait charged to another process (or the same one's other threads).
    pub attributed_ns: u64,
    /// Wait the CPU spent idle before the switch-in (wakeup latency).
    pub idle_ns: u64,
    /// Wait no slice explains.
    pub unknown_ns: u64,
    /// Wait that fell out of the sketch (its pairs are lost, the totals above are not).
    pub evicted_ns: u64,
    pub evictions: u64,
    pub updates: u64,
    /// Up to a whole number of cache lines: see [`crate::cache_lines`].
    pub pad: [u64; PAIR_PAD],
}

impl Default for PairSketch {
    fn default() -> Self {
        Self {
            stages: [[PairSlot::default(); PAIR_SLOTS]; PAIR_STAGES],
            attributed_ns: 0,
            idle_ns: 0,
            unknown_ns: 0,
            evicted_ns: 0,
            evictions: 0,
            updates: 0,
            pad: [0; PAIR_PAD],
        }
    }
}

impl PairSketch {
    /// Charge `ns` of `victim`'s wait to `culprit`; what the sketch lets go is counted.
    #[inline(always)]
    pub fn add(&mut self, victim: u32, culprit: u32, ns: u64) {
        match culprit {
            CULPRIT_IDLE => self.idle_ns += ns,
            CULPRIT_UNKNOWN => self.unknown_ns += ns,
            _ => self.attributed_ns += ns,
        }
        self.updates += 1;
        let slot = PairSlot {
            victim,
            culprit,
            wait_ns: ns,
        };
        if let Some(out) = hashpipe::update(&mut self.stages, slot) {
            self.evicted_ns += out.wait_ns;
            self.evictions += 1;
        }
    }
}

/// Kernel struct offsets the pipeline reads, from BTF; a `*_valid` of 0 turns that half off
/// (a kernel without schedstats' `sched_info`, or without task I/O accounting).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitOffsets {
    /// `task_struct.pid` (the thread id).
    pub pid: u32,
    /// `task_struct.flags`.
    pub flags: u32,
    /// `task_struct.sched_info.run_delay`.
    pub run_delay: u32,
    /// `task_struct.ioac.read_bytes`.
    pub read_bytes: u32,
    /// `task_struct.ioac.write_bytes`.
    pub write_bytes: u32,
    /// 1 when `run_delay` was found.
    pub wait_valid: u32,
    /// 1 when `read_bytes` and `write_bytes` were found.
    pub io_valid: u32,
    /// Byte offset in `task_struct` of the byte holding the `in_iowait` bit field.
    pub in_iowait: u32,
    /// The `in_iowait` bit within that byte (a mask).
    pub iowait_mask: u32,
    /// 1 when the off-CPU split is on (`in_iowait` and `run_delay` found, and not switched
    /// off with `--no-culprits`): the loader's constant, so the verifier drops the code when 0.
    pub offcpu_valid: u32,
}

crate::counted_by!(WaitSketch, WaitSlot, WAIT_SLOTS, WAIT_STAGES, updates);
crate::counted_by!(IoSketch, IoSlot, IO_SLOTS, IO_STAGES, updates);
crate::counted_by!(PairSketch, PairSlot, PAIR_SLOTS, PAIR_STAGES, updates);

#[cfg(test)]
mod tests {
    use super::*;

    fn ring(slices: &[(u32, u64)]) -> SliceRing {
        let mut r = SliceRing::default();
        for &(t, end) in slices {
            r.push(t, end);
        }
        r
    }

    fn blame(r: &SliceRing, in_ns: u64, wait_ns: u64) -> (Vec<(u32, u64)>, u64) {
        let mut v = Vec::new();
        let left = r.blame(in_ns, wait_ns, |t, ns| v.push((t, ns)));
        (v, left)
    }

    #[test]
    fn a_wait_is_charged_to_what_ran_in_it_by_overlap() {
        // Idle until 1000, then 7 to 1600, 8 to 1900, 7 to 2000; the waiter got the CPU at
        // 2000 after waiting 1500 (since 500).
        let r = ring(&[
            (9, 50),
            (5, 100),
            (0, 1000),
            (7, 1600),
            (8, 1900),
            (7, 2000),
        ]);
        assert_eq!(
            blame(&r, 2000, 1500),
            (vec![(7, 100), (8, 300), (7, 600), (0, 500)], 0)
        );
        // A wait longer than the slices known: the rest is unexplained.
        assert_eq!(
            blame(&r, 2000, 5000),
            (vec![(7, 100), (8, 300), (7, 600), (0, 900)], 5000 - 1900)
        );
        // A fifth slice is not walked: unexplained.
        let r = ring(&[
            (1, 0x10),
            (2, 1000),
            (3, 1100),
            (4, 1200),
            (5, 1300),
            (6, 1400),
        ]);
        assert_eq!(
            blame(&r, 1400, 500),
            (vec![(6, 100), (5, 100), (4, 100), (3, 100)], 100)
        );
        // A switch-in this ring did not see, or too few slices: all unexplained.
        assert_eq!(blame(&r, 1250, 100), (vec![], 100));
        assert_eq!(blame(&ring(&[(3, 50)]), 50, 10), (vec![], 10));
    }

    #[test]
    fn the_ring_keeps_the_last_slices_only() {
        let mut r = SliceRing::default();
        for i in 1..=40u64 {
            r.push(7, i * 100);
        }
        let (v, left) = blame(&r, 4000, 150);
        assert_eq!((v, left), (vec![(7, 100), (7, 50)], 0));
        let (v, left) = blame(&r, 4000, 1000);
        assert_eq!(v.len(), 4);
        assert_eq!(left, 600);
    }

    #[test]
    fn pairs_are_kept_apart_and_totals_by_kind() {
        let mut s = PairSketch::default();
        s.add(10, 20, 100);
        s.add(10, 21, 50);
        s.add(20, 10, 7);
        s.add(10, 20, 1);
        s.add(10, CULPRIT_IDLE, 3);
        s.add(10, CULPRIT_UNKNOWN, 4);
        let mut got: Vec<(u32, u32, u64)> = s
            .stages
            .iter()
            .flatten()
            .filter(|p| p.victim != 0)
            .map(|p| (p.victim, p.culprit, p.wait_ns))
            .collect();
        got.sort();
        assert_eq!(
            got,
            [
                (10, CULPRIT_IDLE, 3),
                (10, 20, 101),
                (10, 21, 50),
                (10, CULPRIT_UNKNOWN, 4),
                (20, 10, 7)
            ]
        );
        assert_eq!((s.attributed_ns, s.idle_ns, s.unknown_ns), (158, 3, 4));
    }

    #[test]
    fn layouts_have_no_padding() {
        assert_eq!(core::mem::size_of::<PairSlot>(), 16);
        assert_eq!(core::mem::size_of::<SliceRing>(), 8 + RING * 16);
        assert_eq!(
            core::mem::size_of::<PairSketch>(),
            crate::cache_lines(PAIR_STAGES * PAIR_SLOTS * 16 + 6 * 8)
        );
        assert_eq!(core::mem::size_of::<WaitSlot>(), 40);
        assert_eq!(core::mem::size_of::<IoSlot>(), 24);
        assert_eq!(core::mem::size_of::<ThreadSeen>(), 48);
        assert_eq!(core::mem::size_of::<WaitOffsets>(), 40);
        assert_eq!(
            core::mem::size_of::<WaitSketch>(),
            crate::cache_lines(WAIT_STAGES * WAIT_SLOTS * 40 + 6 * 8)
        );
        assert_eq!(
            core::mem::size_of::<IoSketch>(),
            crate::cache_lines(IO_STAGES * IO_SLOTS * 24 + 4 * 8)
        );
    }

    fn now(tid: u32, run_delay: u64, r: u64, w: u64) -> ThreadNow {
        ThreadNow {
            tid,
            run_delay,
            read_bytes: r,
            write_bytes: w,
            exiting: false,
            now_ns: 0,
            class: OFF_RUNNABLE,
        }
    }

    #[test]
    fn growth_since_the_last_switch_out_of_the_same_thread() {
        let mut s = ThreadSeen::default();
        assert_eq!(
            switch_out(&mut s, &now(7, 1000, 10, 20)),
            None,
            "first sighting"
        );
        let d = switch_out(&mut s, &now(7, 1500, 10, 4116)).unwrap();
        assert_eq!((d.wait_ns, d.read_bytes, d.write_bytes), (500, 0, 4096));
        // Another thread with the same index takes the slot; the first one's next switch-out
        // knows nothing.
        assert_eq!(switch_out(&mut s, &now(32_775, 5, 0, 0)), None);
        assert_eq!(switch_out(&mut s, &now(7, 2000, 10, 4116)), None);
        assert_eq!(
            switch_out(&mut s, &now(7, 2600, 10, 4116)).map(|d| d.wait_ns),
            Some(600)
        );
    }

    #[test]
    fn an_exiting_thread_frees_its_slot_and_a_reused_id_starts_afresh() {
        let mut s = ThreadSeen::default();
        switch_out(&mut s, &now(9, 100, 0, 0));
        let last = ThreadNow {
            exiting: true,
            ..now(9, 300, 0, 8192)
        };
        let d = switch_out(&mut s, &last).unwrap();
        assert_eq!((d.wait_ns, d.write_bytes), (200, 8192));
        assert_eq!(s.tid, 0);
        // Later switches of the dying thread, and a new thread with the same id, charge
        // nothing until seen once.
        assert_eq!(switch_out(&mut s, &last), None);
        assert_eq!(switch_out(&mut s, &now(9, 0, 0, 0)), None);
        assert_eq!(
            switch_out(&mut s, &now(9, 50, 0, 0)).map(|d| d.wait_ns),
            Some(50)
        );
    }

    #[test]
    fn counters_going_backwards_charge_nothing() {
        let mut s = ThreadSeen::default();
        switch_out(&mut s, &now(3, 1_000_000, 4096, 4096));
        let d = switch_out(&mut s, &now(3, 10, 0, 0)).unwrap();
        assert_eq!(d, Deltas::default());
    }

    #[test]
    fn states_are_tested_as_bits() {
        const WAKEKILL: u32 = 0x100;
        const FREEZABLE: u32 = 0x2000;
        assert_eq!(off_class(false, 0, false), OFF_RUNNABLE);
        assert_eq!(
            off_class(true, TASK_UNINTERRUPTIBLE, true),
            OFF_RUNNABLE,
            "preempted"
        );
        assert_eq!(off_class(false, TASK_INTERRUPTIBLE, false), OFF_SLEEP);
        assert_eq!(
            off_class(false, TASK_INTERRUPTIBLE | FREEZABLE, false),
            OFF_SLEEP
        );
        assert_eq!(off_class(false, TASK_UNINTERRUPTIBLE, false), OFF_BLOCKED);
        assert_eq!(off_class(false, TASK_UNINTERRUPTIBLE, true), OFF_IO);
        assert_eq!(
            off_class(false, TASK_UNINTERRUPTIBLE | WAKEKILL, false),
            OFF_BLOCKED,
            "killable"
        );
        assert_eq!(
            off_class(false, TASK_UNINTERRUPTIBLE | TASK_NOLOAD, false),
            OFF_SLEEP,
            "TASK_IDLE is not blocked"
        );
        assert_eq!(off_class(false, TASK_RTLOCK_WAIT, false), OFF_BLOCKED);
        assert_eq!(off_class(false, 0x4, false), OFF_SLEEP, "stopped");
    }

    #[test]
    fn the_gap_less_its_wait_goes_to_the_class_it_left_in() {
        let mut s = ThreadSeen::default();
        let out = |t: u32, rd: u64, at: u64, class: u32| ThreadNow {
            now_ns: at,
            class,
            ..now(t, rd, 0, 0)
        };
        assert_eq!(switch_out(&mut s, &out(4, 100, 1_000, OFF_IO)), None);
        // Back on a CPU at 11_000; 300 ns of it was spent in the run queue (added to
        // run_delay at the arrival, seen at the next switch-out).
        switch_in(&mut s, 4, 11_000);
        switch_in(&mut s, 4, 12_000);
        let d = switch_out(&mut s, &out(4, 400, 15_000, OFF_SLEEP)).unwrap();
        assert_eq!(
            (d.wait_ns, d.io_ns, d.blocked_ns, d.sleep_ns),
            (300, 9_700, 0, 0)
        );
        switch_in(&mut s, 4, 20_000);
        let d = switch_out(&mut s, &out(4, 400, 21_000, OFF_BLOCKED)).unwrap();
        assert_eq!((d.sleep_ns, d.io_ns), (5_000, 0));
        switch_in(&mut s, 4, 21_500);
        let d = switch_out(&mut s, &out(4, 500, 22_000, OFF_RUNNABLE)).unwrap();
        assert_eq!((d.wait_ns, d.blocked_ns), (100, 400));
        // Preempted: the gap is all wait; nothing off-CPU, even with clock jitter.
        switch_in(&mut s, 4, 23_000);
        let d = switch_out(&mut s, &out(4, 1_490, 24_000, OFF_SLEEP)).unwrap();
        assert_eq!((d.io_ns, d.blocked_ns, d.sleep_ns), (0, 0, 0));
        // A switch-in missed (another thread took the slot): no split.
        switch_in(&mut s, 5, 30_000);
        let d = switch_out(&mut s, &out(4, 1_490, 31_000, OFF_SLEEP)).unwrap();
        assert_eq!(d.sleep_ns, 0);
    }
}
