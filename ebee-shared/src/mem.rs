//! The memory pipeline's kernel/userspace contract: resident memory (RSS) per process from the
//! `kmem/rss_stat` tracepoint, kept in per-CPU HashPipe sketches by interval parity.
//!
//! RSS is a gauge, not a counter, so the HashPipe of [`crate::hashpipe`] is used with these
//! semantics:
//! - the key is the process (tgid of `mm->owner`); the value is the latest RSS reading of its
//!   `mm` with the time it was read;
//! - two entries of one key merge *newest wins* for the reading, and the *peak* (largest reading
//!   seen in the interval) is the maximum of both;
//! - the weight HashPipe compares to decide which entry stays is the peak: a process that held
//!   a lot of memory at any time in the interval is kept over one that never did, so a large
//!   process that shrinks, or a small one that grows fast, stays in the sketch while it matters
//!   for a top-k by RSS or by growth;
//! - userspace merges every slot of every stage and CPU newest-wins too, applies the result to
//!   its table of last-known RSS (seeded once from /proc), and computes growth against that
//!   table. A process whose memory does not change sends nothing and keeps its known value.
//!
//! What an eviction costs: the evicted entry's reading is lost for this interval, so userspace
//! keeps the previous value of that process until its next change. Evictions, and the largest
//! peak evicted, are counted per interval so a consumer can tell whether the top-k could have
//! been touched.

use crate::hashpipe;

/// Stages of the memory HashPipe sketch.
pub const MEM_STAGES: usize = 4;
/// Slots per stage (a power of two).
pub const MEM_SLOTS: usize = 64;
/// Capacity of each exact shadow map (one per interval parity).
pub const MEM_SHADOW_ENTRIES: u32 = 16_384;

/// One slot of the memory sketch: a process's latest RSS reading in this interval on this CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemSlot {
    /// Process id (tgid); 0 marks an empty slot.
    pub tgid: u32,
    /// Resident pages (file + anon + shmem) at the latest reading.
    pub pages: u32,
    /// Largest reading seen in the interval: the HashPipe weight.
    pub peak: u32,
    /// Reserved, 0.
    pub flags: u32,
    /// `CLOCK_MONOTONIC` ns of the latest reading.
    pub ts: u64,
}

impl MemSlot {
    /// A fresh reading.
    #[inline(always)]
    pub const fn reading(tgid: u32, pages: u32, ts: u64) -> Self {
        Self {
            tgid,
            pages,
            peak: pages,
            flags: 0,
            ts,
        }
    }

    /// Fold another reading of the same process in: newest wins, peaks take the maximum.
    #[inline(always)]
    pub fn merge_reading(&mut self, other: &Self) {
        if other.ts >= self.ts {
            self.pages = other.pages;
            self.ts = other.ts;
        }
        if other.peak > self.peak {
            self.peak = other.peak;
        }
    }
}

impl hashpipe::Slot for MemSlot {
    #[inline(always)]
    fn key(&self) -> u32 {
        self.tgid
    }
    #[inline(always)]
    fn weight(&self) -> u64 {
        self.peak as u64
    }
    #[inline(always)]
    fn merge(&mut self, other: &Self) {
        self.merge_reading(other);
    }
}

/// `u64`s that pad [`MemSketch`] to whole cache lines.
pub const MEM_PAD: usize =
    crate::pad_words(core::mem::size_of::<[[MemSlot; MEM_SLOTS]; MEM_STAGES]>() + 5 * 8);

/// One interval's memory sketch on one CPU (an entry of a per-(CPU, parity) array: [`crate::cpu::sketch_entry`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct MemSketch {
    pub stages: [[MemSlot; MEM_SLOTS]; MEM_STAGES],
    /// rss_stat events that updated the sketch in this interval.
    pub updates: u64,
    /// Entries carried out of the last stage (their reading is lost for this interval).
    pub evictions: u64,
    /// Largest peak (pages) among the evicted entries.
    pub evicted_max_pages: u64,
    /// Events whose `mm` had no owner and was not `current`'s (an exiting process's
    /// teardown): not attributed to anyone.
    pub unattributed: u64,
    /// Readings the exact shadow could not store (shadow map full).
    pub shadow_full: u64,
    /// Up to a whole number of cache lines: see [`crate::cache_lines`].
    pub pad: [u64; MEM_PAD],
}

impl Default for MemSketch {
    fn default() -> Self {
        Self {
            stages: [[MemSlot::default(); MEM_SLOTS]; MEM_STAGES],
            updates: 0,
            evictions: 0,
            evicted_max_pages: 0,
            unattributed: 0,
            shadow_full: 0,
            pad: [0; MEM_PAD],
        }
    }
}

impl MemSketch {
    /// Insert one reading; count what falls out of the last stage.
    #[inline(always)]
    pub fn add(&mut self, slot: MemSlot) {
        self.updates += 1;
        if let Some(out) = hashpipe::update(&mut self.stages, slot) {
            self.evictions += 1;
            if out.peak as u64 > self.evicted_max_pages {
                self.evicted_max_pages = out.peak as u64;
            }
        }
    }
}

/// Per-CPU state of the `rss_stat` program (a one-entry `PerCpuArray`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemCpu {
    /// Odd while the program runs on this CPU; userspace waits for it to move before reading
    /// the interval it just closed (the same handshake as the CPU pipeline's `seq`).
    pub seq: u64,
    /// rss_stat events seen on this CPU since load.
    pub events: u64,
    /// Events skipped because they repeated this CPU's previous reading (same epoch, same mm,
    /// same resident pages): the approximate global count moves only once per percpu batch
    /// (32 pages or more), so most page faults leave it as it was.
    pub repeats: u64,
    /// Epoch word, `mm` address and resident pages of this CPU's previous recorded reading.
    pub last_epoch: u64,
    pub last_mm: u64,
    pub last_pages: u64,
    /// This CPU's entry of each parity in `MEM_SKETCH` (`crate::cpu::sketch_entry`), written
    /// by userspace before the program is attached.
    pub entry: [u32; 2],
}

impl MemCpu {
    /// True when a reading adds nothing to what this CPU already recorded in this interval:
    /// the sketch (or its shadow) already holds this very value for this process.
    #[inline(always)]
    pub const fn repeats(&self, epoch: u64, mm: u64, pages: u64) -> bool {
        self.last_mm == mm && self.last_pages == pages && self.last_epoch == epoch
    }
}

/// Value of the exact shadow (a per-CPU hash keyed by tgid): the latest reading on that CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemShadow {
    /// Resident pages at the reading.
    pub pages: u64,
    /// `CLOCK_MONOTONIC` ns of the reading.
    pub ts: u64,
}

/// One sketch update as the kernel applied it (trace ring buffer, tests and benchmarks only).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemTrace {
    /// Epoch word the update was applied under (its parity picks the sketch).
    pub epoch: u64,
    /// CPU whose sketch took the update.
    pub cpu: u32,
    /// Reserved, 0.
    pub flags: u32,
    /// The reading inserted.
    pub slot: MemSlot,
}

/// Bytes of the memory update trace ring buffer (tests and benchmarks only).
pub const MEM_TRACE_BYTES: u32 = 1 << 22;

/// Kernel struct offsets and enum values for the `rss_stat` program, from the kernel's BTF.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemOffsets {
    /// Offset of `mm_struct.rss_stat` plus `percpu_counter.count` (the count of entry 0).
    pub rss_count: u32,
    /// `sizeof(struct percpu_counter)`: the stride of `rss_stat[]`.
    pub counter_size: u32,
    /// `MM_FILEPAGES`, `MM_ANONPAGES`, `MM_SHMEMPAGES`, `MM_SWAPENTS` (enum `mm_counters`).
    pub file: u32,
    pub anon: u32,
    pub shmem: u32,
    pub swap: u32,
    /// Offset of `mm_struct.owner` (CONFIG_MEMCG); only read when `has_owner` is 1.
    pub mm_owner: u32,
    pub has_owner: u32,
    /// Offset of `task_struct.mm`.
    pub task_mm: u32,
    /// 1 when every offset above was found (the program is not attached otherwise).
    pub valid: u32,
}

/// Pages to bytes with the kernel's page size.
#[inline(always)]
pub const fn pages_to_bytes(pages: u64, page_size: u64) -> u64 {
    pages.saturating_mul(page_size)
}

crate::counted_by!(MemSketch, MemSlot, MEM_SLOTS, MEM_STAGES, updates);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_has_no_padding() {
        assert_eq!(core::mem::size_of::<MemSlot>(), 24);
        assert_eq!(core::mem::size_of::<MemCpu>(), 56);
        assert_eq!(core::mem::size_of::<MemShadow>(), 16);
        assert_eq!(core::mem::size_of::<MemOffsets>(), 40);
        assert_eq!(core::mem::size_of::<MemTrace>(), 40);
        assert_eq!(
            core::mem::size_of::<MemSketch>(),
            crate::cache_lines(24 * MEM_SLOTS * MEM_STAGES + 40)
        );
        assert!(core::mem::size_of::<MemSketch>() <= 32 * 1024);
    }

    fn est<const D: usize, const W: usize>(s: &[[MemSlot; W]; D], k: u32) -> Option<MemSlot> {
        let mut out: Option<MemSlot> = None;
        for x in s.iter().flatten().filter(|x| x.tgid == k) {
            match out.as_mut() {
                Some(o) => o.merge_reading(x),
                None => out = Some(*x),
            }
        }
        out
    }

    #[test]
    fn same_key_keeps_the_newest_reading_and_the_peak() {
        let mut s = [[MemSlot::default(); 8]; 2];
        let _ = hashpipe::update(&mut s, MemSlot::reading(7, 100, 1));
        let _ = hashpipe::update(&mut s, MemSlot::reading(7, 900, 2));
        let _ = hashpipe::update(&mut s, MemSlot::reading(7, 50, 3));
        let e = est(&s, 7).unwrap();
        assert_eq!(
            (e.pages, e.peak, e.ts),
            (50, 900, 3),
            "a gauge goes down too"
        );
    }

    #[test]
    fn an_older_reading_never_overwrites_a_newer_one() {
        // Per-CPU copies merge in any order: the newest reading wins whatever the order.
        let mut a = MemSlot::reading(7, 10, 5);
        a.merge_reading(&MemSlot::reading(7, 99, 4));
        assert_eq!((a.pages, a.ts, a.peak), (10, 5, 99));
        let mut b = MemSlot::reading(7, 99, 4);
        b.merge_reading(&MemSlot::reading(7, 10, 5));
        assert_eq!(a, b);
    }

    #[test]
    fn a_process_that_held_much_stays_over_small_ones_after_it_shrinks() {
        // One slot per stage: everyone collides. The big process is read at 1000 pages, then
        // shrinks to 1; small processes (peak 5) come and go. Its latest reading must survive
        // (weight is the peak, not the current value) so userspace learns it shrank.
        let mut s = [[MemSlot::default(); 1]; 3];
        let _ = hashpipe::update(&mut s, MemSlot::reading(1, 1000, 1));
        let _ = hashpipe::update(&mut s, MemSlot::reading(1, 1, 2));
        for k in 2..50u32 {
            let _ = hashpipe::update(&mut s, MemSlot::reading(k, 5, u64::from(k) + 1));
        }
        let e = est(&s, 1).expect("big process evicted by small ones");
        assert_eq!((e.pages, e.peak), (1, 1000));
    }

    #[test]
    fn a_repeat_is_only_the_same_value_of_the_same_mm_in_the_same_interval() {
        let c = MemCpu {
            last_epoch: 11,
            last_mm: 0xffff_1000,
            last_pages: 500,
            ..Default::default()
        };
        assert!(c.repeats(11, 0xffff_1000, 500));
        assert!(
            !c.repeats(12, 0xffff_1000, 500),
            "a new interval records again"
        );
        assert!(!c.repeats(11, 0xffff_2000, 500), "another process");
        assert!(!c.repeats(11, 0xffff_1000, 501), "a changed value");
    }

    #[test]
    fn evictions_are_counted_with_their_peak() {
        let mut sk = MemSketch::default();
        // More distinct keys than slots: some must fall out, and the heaviest evicted peak is
        // at most the heaviest reading inserted.
        for k in 1..=(MEM_SLOTS * MEM_STAGES * 2) as u32 {
            sk.add(MemSlot::reading(k, k, u64::from(k)));
        }
        assert_eq!(sk.updates, (MEM_SLOTS * MEM_STAGES * 2) as u64);
        assert!(sk.evictions >= (MEM_SLOTS * MEM_STAGES) as u64);
        assert!(sk.evicted_max_pages > 0);
        assert!(sk.evicted_max_pages <= (MEM_SLOTS * MEM_STAGES * 2) as u64);
        let kept = sk.stages.iter().flatten().filter(|s| s.tgid != 0).count() as u64;
        assert_eq!(kept + sk.evictions, sk.updates);
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    /// Readings (pid, pages) over a small key space, timestamps in stream order.
    fn streams(keys: u32) -> impl Strategy<Value = Vec<(u32, u32)>> {
        prop::collection::vec((1..=keys, 0u32..1_000_000), 0..600)
    }

    proptest! {
        #[test]
        fn every_kept_reading_is_a_real_latest_or_older_one_never_invented(stream in streams(64)) {
            let mut s = [[MemSlot::default(); 8]; 3];
            for (i, &(k, p)) in stream.iter().enumerate() {
                let _ = hashpipe::update(&mut s, MemSlot::reading(k, p, i as u64 + 1));
            }
            for k in 1..=64u32 {
                let mine: Vec<(usize, u32)> = stream.iter().enumerate()
                    .filter(|(_, (x, _))| *x == k).map(|(i, (_, p))| (i, *p)).collect();
                let mut got: Option<MemSlot> = None;
                for x in s.iter().flatten().filter(|x| x.tgid == k) {
                    match got.as_mut() { Some(g) => g.merge_reading(x), None => got = Some(*x) }
                }
                if let Some(g) = got {
                    // The reading is one the process really had, at the time it had it, and
                    // the peak is at most its true peak.
                    let at = (g.ts - 1) as usize;
                    prop_assert_eq!(stream[at], (k, g.pages));
                    let true_peak = mine.iter().map(|(_, p)| *p).max().unwrap_or(0);
                    prop_assert!(g.peak <= true_peak);
                    prop_assert!(g.peak >= g.pages);
                }
            }
        }

        #[test]
        fn exact_when_keys_fit_in_the_first_stage(stream in streams(1000)) {
            let mut s = [[MemSlot::default(); 4096]; 2];
            for (i, &(k, p)) in stream.iter().enumerate() {
                let _ = hashpipe::update(&mut s, MemSlot::reading(k, p, i as u64 + 1));
            }
            let mut keys: Vec<u32> = stream.iter().map(|(k, _)| *k).collect();
            keys.sort_unstable();
            keys.dedup();
            let idx: std::collections::HashSet<usize> =
                keys.iter().map(|k| hashpipe::index(*k, 0, 4096)).collect();
            prop_assume!(idx.len() == keys.len());
            for k in keys {
                let last = stream.iter().rev().find(|(x, _)| *x == k).map(|(_, p)| *p);
                let peak = stream.iter().filter(|(x, _)| *x == k).map(|(_, p)| *p).max();
                let got = s[0][hashpipe::index(k, 0, 4096)];
                prop_assert_eq!(Some(got.pages), last);
                prop_assert_eq!(Some(got.peak), peak);
            }
        }
    }
}
