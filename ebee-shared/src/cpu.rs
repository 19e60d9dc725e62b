//! The CPU pipeline's kernel/userspace contract: sketch slots, per-CPU state, burst bins.
//!
//! On every context switch the kernel charges the outgoing task's on-CPU time since the last
//! switch on that CPU to its process, in the sketch of the interval that CPU is writing. Time is
//! the scheduler's own task clock (`rq_clock_task`), which the scheduler has just stamped into
//! both switching tasks (`se.exec_start`), so the switch path reads no clock: a clock read was
//! half of its cost on these VMs. It is the clock `/proc/PID/schedstat` and top's CPU times
//! count in (IRQ and steal time left out).
//!
//! Intervals close per CPU, at a switch: userspace flips the global epoch word, then makes every
//! CPU switch by waking a thread of its own pinned there. The first switch a CPU makes after the
//! flip charges the outgoing slice to the old interval and opens the new one, exactly at that
//! switch, and publishes the new epoch in [`CpuState`]. Once every CPU shows the new epoch, the
//! old sketches are quiescent and userspace reads them. An idle CPU is left where it is when no
//! switch is under way there ([`CpuState::seq`]): nothing writes its old sketch any more, and
//! its next switch, out of idle, opens the new interval having charged nothing to the old one.
//! A CPU that does not switch in time is moved by `cpu_flip`, run on it by IPI (see its doc).
//! Every nanosecond lands in exactly one interval, with one atomic add in the switch path.

use crate::hashpipe;

/// Stages of the CPU HashPipe sketch.
pub const CPU_STAGES: usize = 4;
/// Slots per stage (a power of two).
pub const CPU_SLOTS: usize = 128;
/// Slots per stage of the thread sketch (same stages and update code, keyed by thread id;
/// only written while the per-thread mode is on, see `ctl::Ctl::threads`).
pub const THREAD_SLOTS: usize = 128;
/// Burst bins per interval (four 16-bit lanes in each of two `u64`).
pub const BURST_BINS: usize = 8;
/// The narrowest burst bin: 10 ms.
pub const BIN_NS: u64 = 10_000_000;
/// Capacity of each exact shadow map (one per interval parity).
pub const SHADOW_ENTRIES: u32 = 16_384;
/// Bytes of the update trace ring buffer (tests and benchmarks only).
pub const TRACE_BYTES: u32 = 1 << 22;

/// One slot of the CPU sketch: a process (or, in the thread sketch, a thread) and its on-CPU
/// time in this interval on this CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuSlot {
    /// The key: process id (tgid) in the process sketch, thread id in the thread sketch; 0
    /// marks an empty slot.
    pub tgid: u32,
    /// In the process sketch, the cgroup key (`crate::cgroup`) the process's threads had at
    /// their last charge here (0: cgroups off); in the thread sketch, the thread's process id.
    pub aux: u32,
    /// On-CPU nanoseconds.
    pub ns: u64,
    /// Burst bins: eight 16-bit lanes (bin `i` is lane `i % 4` of word `i / 4`), each the
    /// on-CPU time in that bin in units of `1 << unit_shift` ns (see [`BinCfg`]).
    pub bins: [u64; 2],
}

impl hashpipe::Slot for CpuSlot {
    #[inline(always)]
    fn key(&self) -> u32 {
        self.tgid
    }
    #[inline(always)]
    fn weight(&self) -> u64 {
        self.ns
    }
    #[inline(always)]
    fn merge(&mut self, other: &Self) {
        self.ns += other.ns;
        self.aux = other.aux;
        // Lane-wise add without carries between lanes: a lane holds at most one bin width of
        // one CPU's time, which `BinCfg` keeps below 2^15 units, so two lanes never overflow.
        self.bins[0] += other.bins[0];
        self.bins[1] += other.bins[1];
    }
}

/// `u64`s that pad a [`SketchOf`] to whole cache lines: its stages are whole lines for any
/// width (a slot is 32 bytes, four stages); its four counters and the flip charge fill the
/// line after them.
pub const SKETCH_PAD: usize = 0;

/// The slice `cpu_flip` found running when it moved a CPU to the next interval, left in that
/// CPU's sketch of the closing interval for userspace to charge when it drains the sketch: to
/// the process (exactly, outside the stages), its cgroup, its thread and the exact shadows,
/// binned there with the interval's [`BinCfg`]. The program inserts into no sketch and bins
/// nothing: the verifier spent 58 ms of every start-up on its three inlined inserts (process,
/// thread, cgroup) and the binning loop, for one slice per CPU per interval at most, where
/// userspace adds it to sums it makes anyway.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlipCharge {
    /// The process (0: no charge).
    pub tgid: u32,
    /// Its cgroup key (0: cgroups off).
    pub cgroup: u32,
    /// The thread, while the per-thread mode is on (else 0).
    pub tid: u32,
    pub reserved: u32,
    /// The slice, in ns after the start of the CPU's bin 0 (as [`BinCfg::bins_of`] takes it).
    pub start: u64,
    pub end: u64,
}

impl FlipCharge {
    /// The charge as a sketch slot of the interval binned by `bins`.
    pub fn slot(&self, bins: &BinCfg) -> CpuSlot {
        CpuSlot {
            tgid: self.tgid,
            aux: self.cgroup,
            ns: self.end.saturating_sub(self.start),
            bins: bins.bins_of(self.start, self.end),
        }
    }
}

/// One interval's sketch on one CPU (an entry of a per-(CPU, parity) array: [`crate::cpu::sketch_entry`]), with `W`
/// slots per stage: [`CpuSketch`] by process, [`ThreadSketch`] by thread.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SketchOf<const W: usize> {
    pub stages: [[CpuSlot; W]; CPU_STAGES],
    /// Nanoseconds carried out of the last stage and lost.
    pub evicted_ns: u64,
    /// Entries carried out of the last stage.
    pub evictions: u64,
    /// Sketch updates (context switches charged) in this interval.
    pub updates: u64,
    /// Updates the exact shadow could not record (shadow map full).
    pub shadow_full: u64,
    /// The process sketch's: the slice `cpu_flip` left at the end of the interval, for
    /// userspace to charge (the thread sketch's is unused).
    pub flip: FlipCharge,
    /// Up to a whole number of cache lines: see [`crate::cache_lines`].
    pub pad: [u64; SKETCH_PAD],
}

/// The process sketch.
pub type CpuSketch = SketchOf<CPU_SLOTS>;
/// The thread sketch.
pub type ThreadSketch = SketchOf<THREAD_SLOTS>;

impl<const W: usize> Default for SketchOf<W> {
    fn default() -> Self {
        Self {
            stages: [[CpuSlot::default(); W]; CPU_STAGES],
            evicted_ns: 0,
            evictions: 0,
            updates: 0,
            shadow_full: 0,
            flip: FlipCharge::default(),
            pad: [0; SKETCH_PAD],
        }
    }
}

impl<const W: usize> SketchOf<W> {
    /// Insert one charge; count what falls out of the last stage.
    #[inline(always)]
    pub fn add(&mut self, slot: CpuSlot) {
        self.updates += 1;
        if let Some(out) = hashpipe::update(&mut self.stages, slot) {
            self.evicted_ns += out.ns;
            self.evictions += 1;
        }
    }
}

/// Per-CPU bookkeeping of the `sched_switch` and `cpu_flip` programs (a one-entry
/// `PerCpuArray`). Only programs running on its own CPU with interrupts off write it.
/// Times are this CPU's scheduler task clock (ns).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuState {
    /// Epoch word of the interval this CPU writes (its parity picks the sketch).
    pub epoch: u64,
    /// Where this CPU's bin 0 starts, in its task clock: the switch that opened its interval,
    /// less how long after the flip that switch came.
    pub flip_ts: u64,
    /// Start of the running task's slice: the last switch (0: none seen yet).
    pub last_ts: u64,
    /// CLOCK_MONOTONIC less this CPU's task clock, read at a switch (0: not yet). It grows
    /// only by the steal and interrupt time the task clock leaves out, so it maps a flip's
    /// monotonic time into the task clock where no switch does (`cpu_flip`).
    pub clock_off: u64,
    /// Nonzero: `cpu_flip` moved this CPU, and its next switch reads `clock_off` again.
    pub off_stale: u32,
    /// The process the last switch on this CPU (or `cpu_flip`) found running there (0: the
    /// idle task). Userspace leaves an idle CPU where it is at a flip (see `seq`), or moves it
    /// by IPI when a switch is under way there, instead of waking a thread there to make it
    /// switch (two context switches).
    pub running: u32,
    /// Burst-bin geometry of the interval being written.
    pub bins: BinCfg,
    /// The last slices on this CPU, for the culprits of run-queue waits (written only while
    /// the off-CPU split is on).
    pub ring: crate::wait::SliceRing,
    /// This CPU's entry of each parity in the per-(CPU, parity) sketch arrays (see
    /// [`sketch_entry`]): written once by userspace before the programs are attached, so the
    /// switch path finds its entry with one load, no helper call.
    pub entry: [u32; 2],
    /// Odd while `sched_switch` runs on this CPU (counted up at its start, with a full
    /// barrier, and at its end). After a flip, userspace leaves an idle CPU (`running` 0,
    /// `last_ts` set) whose `seq` it reads even where it is: no run there read the old
    /// epoch and is still writing its interval, and the next switch there (out of idle,
    /// charging nothing to the old interval) opens the new one. That spares an IPI that
    /// woke an idle CPU and waited for it, every interval.
    pub seq: u64,
}

/// The entry of `cpu`'s sketch of `parity` in a sketch array of `2 * ncpus` entries: a
/// `BPF_F_MMAPABLE` plain array userspace maps once and reads in place, instead of a per-CPU
/// array copied out and cleared with bpf(2) every interval. Each parity's CPUs lie back to
/// back, so the closed interval is one run of `ncpus` values, read and zeroed in one piece.
/// A plain array's value may also exceed the 32 KiB a per-CPU value is limited to.
#[inline(always)]
pub const fn sketch_entry(parity: u32, cpu: u32, ncpus: u32) -> u32 {
    (parity & 1) * ncpus + cpu
}

/// What userspace passes to `cpu_flip` (the raw_tracepoint context of the test run): the
/// interval to move the CPU it runs on to.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuFlipArgs {
    /// Epoch word of the interval to open (from the global flip that preceded it).
    pub epoch: u64,
    /// Its burst-bin geometry.
    pub bins: BinCfg,
}

/// [`CpuTrace::flags`]: a charge `cpu_flip` left for userspace ([`FlipCharge`]), added to the
/// trace by userspace; not in the kernel's sketch stages.
pub const TRACE_FLIP: u32 = 1;

/// One update as the kernel applied it (trace ring buffer, tests and benchmarks only).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTrace {
    /// Epoch word the update was applied under (its parity picks the sketch).
    pub epoch: u64,
    /// CPU whose sketch took the update.
    pub cpu: u32,
    /// 0, or [`TRACE_FLIP`].
    pub flags: u32,
    /// The entry inserted.
    pub slot: CpuSlot,
}

/// Burst-bin geometry for one interval length, computed by userspace and taken by each CPU when
/// it opens an interval.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BinCfg {
    /// Width of one bin in ns: 10 ms, or wider when 8 bins of 10 ms cannot cover the interval.
    pub width_ns: u64,
    /// `ceil(2^32 / (width_ns >> 10))`: bin = `((offset >> 10) * recip) >> 32`.
    pub recip: u64,
    /// Lane unit: `1 << unit_shift` ns, chosen so one bin's width fits in 15 bits.
    pub unit_shift: u64,
}

impl BinCfg {
    /// Bins for an interval of `interval_ns`.
    pub const fn for_interval(interval_ns: u64) -> Self {
        let bins = BURST_BINS as u64;
        let mut width_ns = BIN_NS;
        if interval_ns > width_ns * bins {
            // Round up to a whole number of 10 ms bins.
            width_ns = interval_ns.div_ceil(bins).div_ceil(BIN_NS) * BIN_NS;
        }
        let units = width_ns >> 10;
        let recip = (1u64 << 32).div_ceil(units);
        let mut unit_shift = 10;
        while (width_ns >> unit_shift) >= (1 << 15) {
            unit_shift += 1;
        }
        Self {
            width_ns,
            recip,
            unit_shift,
        }
    }

    /// Bin of a point `offset_ns` after the interval start, clamped to the last bin.
    #[inline(always)]
    pub const fn bin_of(&self, offset_ns: u64) -> usize {
        // Clamp both factors so the product fits in 64 bits (no 128-bit maths in BPF): offsets
        // past 2^31 units (36 minutes) land in the last bin anyway.
        let units = if (offset_ns >> 10) > (1 << 31) {
            1 << 31
        } else {
            offset_ns >> 10
        };
        let recip = if self.recip > (1 << 32) {
            1 << 32
        } else {
            self.recip
        };
        let b = units.wrapping_mul(recip) >> 32;
        if b >= BURST_BINS as u64 {
            BURST_BINS - 1
        } else {
            b as usize
        }
    }

    /// Bins of the slice `[start, end)` (ns after the interval start). A slice within one bin
    /// (nearly every slice: they last microseconds to a few ms) is one lane, placed without a
    /// branch; a longer one is split at the bin edges `i * width_ns` (the last bin takes all
    /// after its start). Written for the verifier as much as for speed: no index, shift or
    /// bound depends on a value it must keep exact, so it passes each branch once, where a
    /// loop that indexed the lanes by a computed bin cost it 27 ms at every start-up.
    #[inline(always)]
    pub fn bins_of(&self, start: u64, end: u64) -> [u64; 2] {
        if end <= start {
            return [0, 0];
        }
        let first = self.bin_of(start);
        if first == self.bin_of(end - 1) {
            return lane_at(first, ((end - start) >> self.unit_shift) & 0x7fff);
        }
        let mut bins = [0u64; 2];
        let mut lo = 0u64;
        let mut i = 0;
        while i < BURST_BINS {
            let hi = if i == BURST_BINS - 1 {
                u64::MAX
            } else {
                lo.saturating_add(self.width_ns)
            };
            let a = if start > lo { start } else { lo };
            let z = if end < hi { end } else { hi };
            if z > a {
                bins[i / 4] += (((z - a) >> self.unit_shift) & 0x7fff) << (16 * (i % 4));
            }
            lo = hi;
            i += 1;
        }
        bins
    }
}

/// Packed bins holding `units` in lane `bin` (below [`BURST_BINS`]) and nothing elsewhere.
#[inline(always)]
const fn lane_at(bin: usize, units: u64) -> [u64; 2] {
    let v = units << (16 * (bin as u64 & 3));
    let word = (bin as u64 >> 2) & 1;
    [v * (word ^ 1), v * word]
}

/// Lane `i` of packed burst bins.
#[inline(always)]
pub const fn bin_lane(bins: &[u64; 2], i: usize) -> u64 {
    (bins[(i / 4) & 1] >> (16 * (i % 4))) & 0xffff
}

// The thread sketch is the same type while THREAD_SLOTS is CPU_SLOTS (it then needs its own).
crate::counted_by!(CpuSketch, CpuSlot, CPU_SLOTS, CPU_STAGES, updates);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_has_no_padding() {
        assert_eq!(core::mem::size_of::<CpuSlot>(), 32);
        assert_eq!(
            core::mem::size_of::<CpuState>(),
            64 + core::mem::size_of::<crate::wait::SliceRing>() + 16
        );
        assert_eq!(core::mem::size_of::<CpuFlipArgs>(), 32);
        assert_eq!(core::mem::size_of::<CpuTrace>(), 48);
        assert_eq!(
            core::mem::size_of::<CpuSketch>(),
            32 * CPU_SLOTS * CPU_STAGES + 64
        );
        assert_eq!(core::mem::size_of::<FlipCharge>(), 32);
        // A per-CPU map value may not exceed 32 KiB.
        assert!(core::mem::size_of::<CpuSketch>() <= 32 * 1024);
        assert!(core::mem::size_of::<ThreadSketch>() <= 32 * 1024);
    }

    #[test]
    fn sketch_entries_are_distinct_and_each_parity_is_one_run() {
        let n = 3;
        let mut all: [u32; 6] = [0; 6];
        for cpu in 0..n {
            all[cpu as usize] = sketch_entry(0, cpu, n);
            all[(n + cpu) as usize] = sketch_entry(1, cpu, n);
        }
        assert_eq!(all, [0, 1, 2, 3, 4, 5]);
        // Only the low bit of the parity counts.
        assert_eq!(sketch_entry(3, 1, n), sketch_entry(1, 1, n));
    }

    #[test]
    fn bins_default_interval_is_ten_ms() {
        let c = BinCfg::for_interval(50_000_000);
        assert_eq!(c.width_ns, BIN_NS);
        assert_eq!(c.bin_of(0), 0);
        assert_eq!(c.bin_of(9_990_000), 0);
        assert_eq!(c.bin_of(10_020_000), 1);
        assert_eq!(c.bin_of(49_000_000), 4);
        assert_eq!(c.bin_of(10_000_000_000), BURST_BINS - 1);
    }

    #[test]
    fn long_intervals_widen_bins_and_lanes_fit() {
        let c = BinCfg::for_interval(2_000_000_000);
        assert_eq!(c.width_ns, 250_000_000);
        assert!((c.width_ns >> c.unit_shift) < (1 << 15));
        assert_eq!(c.bin_of(1_999_000_000), 7);
        assert_eq!(c.bin_of(260_000_000), 1);
    }

    /// The bins of a slice, from its exact overlap with each bin (the reference).
    fn exact_bins(c: &BinCfg, start: u64, end: u64) -> [u64; BURST_BINS] {
        let mut out = [0; BURST_BINS];
        for (i, o) in out.iter_mut().enumerate() {
            let lo = i as u64 * c.width_ns;
            let hi = if i == BURST_BINS - 1 {
                u64::MAX
            } else {
                lo + c.width_ns
            };
            let (a, z) = (start.max(lo), end.min(hi));
            if z > a {
                // A lane holds 15 bits: the last bin of a slice running past the interval's
                // bins keeps its low bits, as the kernel's does.
                *o = ((z - a) >> c.unit_shift) & 0x7fff;
            }
        }
        out
    }

    #[test]
    fn every_slice_lands_in_its_bins() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for interval in [
            10_000_000,
            50_000_000,
            100_000_000,
            1_000_000_000,
            3_000_000_000,
        ] {
            let c = BinCfg::for_interval(interval);
            let unit = 1u64 << c.unit_shift;
            // bin_of works in 1,024 ns units with a reciprocal rounded up: it may place an
            // offset just before an edge in the next bin (by up to the offset times the
            // reciprocal's excess), and a slice in one bin by bin_of goes there whole.
            let units = c.width_ns >> 10;
            let excess = c.recip * units - (1 << 32);
            let early_ns = ((((c.width_ns * 9) >> 10) * excess) >> 32) * 1024 + 1024;
            let slack = early_ns.div_ceil(unit) + 1;
            for _ in 0..20_000 {
                let start = next() % (c.width_ns * 9);
                let len = match next() % 4 {
                    0 => next() % 50_000,
                    1 => next() % c.width_ns,
                    _ => next() % (c.width_ns * 3),
                };
                let b = c.bins_of(start, start + len);
                let want = exact_bins(&c, start, start + len);
                let mut sum = 0;
                for (i, w) in want.iter().enumerate() {
                    let got = bin_lane(&b, i);
                    sum += got;
                    assert!(
                        got.abs_diff(*w) <= slack,
                        "{interval} ns, [{start}, +{len}): bin {i} {got} units, want {w}"
                    );
                }
                if start + len <= c.width_ns * BURST_BINS as u64 {
                    assert!(sum * unit <= len && len - sum * unit <= BURST_BINS as u64 * unit);
                }
            }
            assert_eq!(c.bins_of(5, 5), [0, 0]);
            assert_eq!(c.bins_of(9, 5), [0, 0]);
        }
    }

    #[test]
    fn a_slice_is_split_across_bins() {
        let c = BinCfg::for_interval(50_000_000);
        // 5 ms .. 25 ms: 5 ms in bin 0, 10 ms in bin 1, 5 ms in bin 2 (within rounding).
        let b = c.bins_of(5_000_000, 25_000_000);
        let unit = 1u64 << c.unit_shift;
        let ms = |lane: u64| lane * unit / 100_000;
        assert!((ms(bin_lane(&b, 0)) as i64 - 50).abs() <= 1);
        assert!((ms(bin_lane(&b, 1)) as i64 - 100).abs() <= 1);
        assert!((ms(bin_lane(&b, 2)) as i64 - 50).abs() <= 1);
        assert_eq!(bin_lane(&b, 3), 0);
    }
}
