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

/// One slot of the wait sketch: a process and its threads' run-queue wait in the interval.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitSlot {
    /// Process id (tgid); 0 marks an empty slot.
    pub tgid: u32,
    /// Reserved, 0.
    pub flags: u32,
    /// Nanoseconds spent runnable but not running.
    pub wait_ns: u64,
}

impl hashpipe::Slot for WaitSlot {
    #[inline(always)]
    fn key(&self) -> u32 {
        self.tgid
    }
    #[inline(always)]
    fn weight(&self) -> u64 {
        self.wait_ns
    }
    #[inline(always)]
    fn merge(&mut self, other: &Self) {
        self.wait_ns += other.wait_ns;
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

/// One interval's wait sketch on one CPU (a `PerCpuArray` value; index = interval parity).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WaitSketch {
    pub stages: [[WaitSlot; WAIT_SLOTS]; WAIT_STAGES],
    /// Wait carried out of the last stage and lost.
    pub evicted_ns: u64,
    /// Entries carried out of the last stage.
    pub evictions: u64,
    /// Waits charged in this interval.
    pub updates: u64,
    /// Charges the exact shadow could not record (shadow map full).
    pub shadow_full: u64,
    /// Switch-outs whose thread was not in the "last seen" array (first sighting, or its slot
    /// taken by another thread): their deltas are unknown and not charged.
    pub thread_misses: u64,
}

/// One interval's disk I/O sketch on one CPU (a `PerCpuArray` value; index = parity).
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
}

impl Default for WaitSketch {
    fn default() -> Self {
        Self {
            stages: [[WaitSlot::default(); WAIT_SLOTS]; WAIT_STAGES],
            evicted_ns: 0,
            evictions: 0,
            updates: 0,
            shadow_full: 0,
            thread_misses: 0,
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
    /// Reserved, 0.
    pub flags: u32,
    pub run_delay: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
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
}

/// The growth of a thread's counters since it was last seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Deltas {
    pub wait_ns: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// One switch-out of a thread against its "last seen" slot. Returns the growth since the slot
/// was written for this same thread (None for a first sighting or a slot another thread had:
/// nothing is known, nothing is charged), and leaves the slot holding `now`, or free when the
/// thread is exiting (its id may come back as another thread, whose counters start at 0). A
/// counter that went backwards (a reused id the exit path missed) charges nothing.
#[inline(always)]
pub fn switch_out(seen: &mut ThreadSeen, now: &ThreadNow) -> Option<Deltas> {
    let known = seen.tid == now.tid;
    let d = Deltas {
        wait_ns: now.run_delay.saturating_sub(seen.run_delay),
        read_bytes: now.read_bytes.saturating_sub(seen.read_bytes),
        write_bytes: now.write_bytes.saturating_sub(seen.write_bytes),
    };
    if now.exiting {
        seen.tid = 0;
    } else {
        *seen = ThreadSeen {
            tid: now.tid,
            flags: 0,
            run_delay: now.run_delay,
            read_bytes: now.read_bytes,
            write_bytes: now.write_bytes,
        };
    }
    known.then_some(d)
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
    /// Reserved, 0.
    pub pad: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_have_no_padding() {
        assert_eq!(core::mem::size_of::<WaitSlot>(), 16);
        assert_eq!(core::mem::size_of::<IoSlot>(), 24);
        assert_eq!(core::mem::size_of::<ThreadSeen>(), 32);
        assert_eq!(core::mem::size_of::<WaitOffsets>(), 32);
        assert_eq!(
            core::mem::size_of::<WaitSketch>(),
            WAIT_STAGES * WAIT_SLOTS * 16 + 5 * 8
        );
        assert_eq!(
            core::mem::size_of::<IoSketch>(),
            IO_STAGES * IO_SLOTS * 24 + 4 * 8
        );
    }

    fn now(tid: u32, run_delay: u64, r: u64, w: u64) -> ThreadNow {
        ThreadNow {
            tid,
            run_delay,
            read_bytes: r,
            write_bytes: w,
            exiting: false,
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
}
