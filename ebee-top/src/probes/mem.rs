//! Draining the memory pipeline: after each flip, wait until no CPU is still in `rss_stat` for
//! the closed interval, read that interval's per-CPU sketches (and exact shadow), merge them
//! newest-wins per process, and clear them for reuse. The live source folds the readings into
//! the last-known RSS of every process (`source::live::mem`).

use std::time::{Duration, Instant};

use aya::{
    Ebpf,
    maps::{MapData, PerCpuHashMap, RingBuf},
};
use ebee_shared::hashpipe::Counted as _;
use ebee_shared::mem::{MemCpu, MemOffsets, MemShadow, MemSketch, MemSlot, MemTrace};
use ebee_shared::{cpu::sketch_entry, ctl, map_names};
// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::{HashMap, HashMapExt as _};

use super::btf::Btf;
use super::mmap_array::SketchArray;
use super::raw_array::PerCpuValue;
use super::{ProbeConfig, ProbeError, take_map, take_sketch};

/// `mm_struct`/`task_struct` offsets and `mm_counters` values for `rss_stat`, from BTF.
/// `valid` is 0 when something is missing (the memory pipeline is then not attached).
pub fn offsets(btf: &Btf) -> MemOffsets {
    let get = || -> Result<MemOffsets, super::btf::BtfError> {
        let en = |n: &str| btf.enum_value(n).map(|v| v as u32);
        let owner = btf.member_offset("mm_struct", "owner").ok();
        Ok(MemOffsets {
            rss_count: btf.member_offset("mm_struct", "rss_stat")?
                + btf.member_offset("percpu_counter", "count")?,
            counter_size: btf.struct_size("percpu_counter")?,
            file: en("MM_FILEPAGES")?,
            anon: en("MM_ANONPAGES")?,
            shmem: en("MM_SHMEMPAGES")?,
            swap: en("MM_SWAPENTS")?,
            mm_owner: owner.unwrap_or(0),
            has_owner: u32::from(owner.is_some()),
            task_mm: btf.member_offset("task_struct", "mm")?,
            valid: 1,
        })
    };
    let o = get().unwrap_or_default();
    // The program indexes `rss_stat[member & 3]`: anything else is a layout we do not know.
    if o.file > 3 || o.anon > 3 || o.shmem > 3 || o.counter_size == 0 {
        return MemOffsets::default();
    }
    o
}

/// One process's latest RSS reading in an interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemReading {
    pub tgid: u32,
    /// Resident pages (file + anon + shmem).
    pub pages: u64,
    /// Largest reading in the interval (sketch only; the shadow keeps the latest).
    pub peak: u64,
    /// `CLOCK_MONOTONIC` ns of the reading.
    pub ts: u64,
}

/// The memory part of one closed interval.
#[derive(Clone, Debug, Default)]
pub struct MemRaw {
    /// Latest reading per process from the sketch, in pid order.
    pub readings: Vec<MemReading>,
    /// Latest reading per process from the exact shadow, when loaded with it.
    pub exact: Option<Vec<MemReading>>,
    /// rss_stat events seen in the interval (all CPUs), and those skipped as repeats of the
    /// CPU's previous reading.
    pub events: u64,
    pub repeats: u64,
    /// Readings recorded in the sketch, entries evicted, the largest peak evicted (pages).
    pub updates: u64,
    pub evictions: u64,
    pub evicted_max_pages: u64,
    /// Events whose mm had neither an owner nor was `current`'s.
    pub unattributed: u64,
    /// Readings the exact shadow could not store.
    pub shadow_full: u64,
    /// CPUs still inside `rss_stat` for the closed interval when the wait timed out.
    pub handshake_timeouts: u64,
    /// Every sketch update of the interval, per CPU in order, when loaded with the trace.
    pub trace: Option<Vec<MemTrace>>,
    /// The raw per-CPU sketches, when loaded with the trace (to check replays against).
    pub sketches: Option<Vec<MemSketch>>,
}

/// Merge slots (any stages, any CPUs) into one reading per process: the newest reading wins,
/// the peak is the largest. Used on the kernel's sketches and on userspace replays.
pub fn merge_slots<'a>(slots: impl IntoIterator<Item = &'a MemSlot>) -> Vec<MemReading> {
    let mut by: HashMap<u32, MemSlot> = HashMap::new();
    for s in slots {
        if s.tgid == 0 {
            continue;
        }
        by.entry(s.tgid)
            .and_modify(|e| e.merge_reading(s))
            .or_insert(*s);
    }
    let mut v: Vec<MemReading> = by
        .into_values()
        .map(|s| MemReading {
            tgid: s.tgid,
            pages: u64::from(s.pages),
            peak: u64::from(s.peak),
            ts: s.ts,
        })
        .collect();
    v.sort_unstable_by_key(|r| r.tgid);
    v
}

/// Give up waiting for a CPU still inside `rss_stat` after this long.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(20);

/// True when a CPU whose `seq` read `first` right after the flip may still be writing the
/// closed interval, given its value `now`.
pub fn still_writing(first: u64, now: u64) -> bool {
    // Even: not inside the program, and any later run sees the new epoch (its busy mark is
    // a full barrier ordered after our read, which is after the flip). Odd: wait until it moves.
    first % 2 == 1 && now == first
}

pub(super) struct MemDrain {
    cpu: PerCpuValue<MemCpu>,
    /// Every CPU's sketch of each parity, mapped: the closed ones are read in place.
    sketch: SketchArray<MemSketch>,
    shadow: Option<[PerCpuHashMap<MapData, u32, MemShadow>; 2]>,
    trace: Option<RingBuf<MapData>>,
    pending_trace: Vec<MemTrace>,
    /// Cumulative (events, repeats) at the last drain.
    totals: (u64, u64),
    /// Epoch word of the interval being written.
    epoch: u64,
}

/// The maps [`MemDrain::new`] takes over.
pub(super) struct MemMaps {
    cpu: PerCpuValue<MemCpu>,
    sketch: SketchArray<MemSketch>,
    shadow: Option<[PerCpuHashMap<MapData, u32, MemShadow>; 2]>,
    trace: Option<RingBuf<MapData>>,
}

impl MemMaps {
    /// Take the memory pipeline's maps out of the object (the shadow and the trace only when
    /// `cfg` asks for them), for `ncpus` possible CPUs.
    pub(super) fn take(
        ebpf: &mut Ebpf,
        cfg: ProbeConfig,
        ncpus: usize,
    ) -> Result<Self, ProbeError> {
        let shadow = if cfg.shadow {
            Some([
                take_map(ebpf, map_names::MEM_SHADOW0, PerCpuHashMap::try_from)?,
                take_map(ebpf, map_names::MEM_SHADOW1, PerCpuHashMap::try_from)?,
            ])
        } else {
            None
        };
        let trace = if cfg.trace {
            Some(take_map(ebpf, map_names::MEM_TRACE, RingBuf::try_from)?)
        } else {
            None
        };
        Ok(Self {
            cpu: take_map(ebpf, map_names::MEM_CPU, |m| {
                PerCpuValue::new(m, map_names::MEM_CPU, ncpus)
            })?,
            sketch: take_sketch(ebpf, map_names::MEM_SKETCH, ncpus)?,
            shadow,
            trace,
        })
    }
}

impl MemDrain {
    /// Before attaching: each CPU learns its entries in the sketch array.
    pub(super) fn new(
        maps: MemMaps,
        ncpus: usize,
        epoch: u64,
    ) -> Result<Self, aya::maps::MapError> {
        let n = ncpus as u32;
        let states: Vec<MemCpu> = (0..n)
            .map(|cpu| MemCpu {
                entry: [sketch_entry(0, cpu, n), sketch_entry(1, cpu, n)],
                ..Default::default()
            })
            .collect();
        maps.cpu.write(&states)?;
        Ok(Self {
            cpu: maps.cpu,
            sketch: maps.sketch,
            shadow: maps.shadow,
            trace: maps.trace,
            pending_trace: Vec::new(),
            totals: (0, 0),
            epoch,
        })
    }

    /// The flip to `new_epoch` has just closed the interval being written: collect it.
    pub(super) fn drain(&mut self, new_epoch: u64) -> Result<MemRaw, aya::maps::MapError> {
        let old_epoch = std::mem::replace(&mut self.epoch, new_epoch);
        let old_parity = ctl::parity(old_epoch);
        let mut raw = MemRaw::default();
        let states = self.cpu.read()?;
        let first: Vec<u64> = states.iter().map(|c| c.seq).collect();
        // Counted at the flip: a run in flight lands in the next interval's count, which is
        // fine for a rate.
        let totals = states
            .iter()
            .fold((0, 0), |(e, r), c| (e + c.events, r + c.repeats));
        raw.events = totals.0.saturating_sub(self.totals.0);
        raw.repeats = totals.1.saturating_sub(self.totals.1);
        self.totals = totals;
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        let left = |now: &[u64]| {
            first
                .iter()
                .zip(now)
                .filter(|(f, n)| still_writing(**f, **n))
                .count()
        };
        // Usually no CPU is inside `rss_stat` at the flip (every `seq` even): nothing to wait
        // for, and no second read of the map.
        let mut waiting = left(&first);
        while waiting > 0 {
            if Instant::now() > deadline {
                raw.handshake_timeouts = waiting as u64;
                break;
            }
            std::thread::yield_now();
            let now: Vec<u64> = self.cpu.read()?.iter().map(|c| c.seq).collect();
            waiting = left(&now);
        }

        let parity = old_parity & 1;
        // SAFETY: after the flip, every CPU either is not inside `rss_stat` or has left the
        // run it was in (the `seq` handshake above), and any later run writes the new parity;
        // none writes this one before the flip after next. (A CPU the handshake timed out on
        // is counted in `handshake_timeouts`, as before.)
        let sketches = unsafe { self.sketch.closed(parity) };
        for sk in sketches {
            raw.updates += sk.updates;
            raw.evictions += sk.evictions;
            raw.evicted_max_pages = raw.evicted_max_pages.max(sk.evicted_max_pages);
            raw.unattributed += sk.unattributed;
            raw.shadow_full += sk.shadow_full;
        }
        raw.readings = merge_slots(sketches.iter().flat_map(|s| s.slots()));
        let kept = self.trace.is_some().then(|| sketches.to_vec());
        // SAFETY: as for `closed`; the borrow of the sketches has ended.
        unsafe { self.sketch.clear(parity) };

        if let Some(shadow) = self.shadow.as_mut() {
            let map = &mut shadow[parity as usize];
            let keys: Vec<u32> = map.keys().collect::<Result<_, _>>()?;
            let mut out = Vec::with_capacity(keys.len());
            for k in keys {
                let vals = map.get(&k, 0)?;
                // Per-CPU copies: the newest reading wins (a zero ts is a CPU that never saw k).
                if let Some(v) = vals.iter().filter(|v| v.ts != 0).max_by_key(|v| v.ts) {
                    out.push(MemReading {
                        tgid: k,
                        pages: v.pages,
                        peak: v.pages,
                        ts: v.ts,
                    });
                }
                map.remove(&k)?;
            }
            out.sort_unstable_by_key(|r| r.tgid);
            raw.exact = Some(out);
        }

        // The update trace: records of the closed epoch; later ones wait for their drain.
        if let Some(ring) = self.trace.as_mut() {
            raw.trace = Some(super::take_trace(
                ring,
                &mut self.pending_trace,
                old_epoch,
                |r| r.epoch,
            ));
            raw.sketches = kept;
        }
        Ok(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_is_newest_wins_across_cpus_and_stages() {
        let a = [
            MemSlot::reading(5, 100, 10),
            MemSlot::reading(5, 300, 30),
            MemSlot::reading(9, 1, 1),
            MemSlot::default(),
        ];
        let b = [MemSlot::reading(5, 200, 20)];
        let m = merge_slots(a.iter().chain(b.iter()));
        assert_eq!(m.len(), 2);
        assert_eq!(
            (m[0].tgid, m[0].pages, m[0].peak, m[0].ts),
            (5, 300, 300, 30)
        );
        let m2 = merge_slots(b.iter().chain(a.iter()));
        assert_eq!(m, m2, "order of CPUs does not matter");
    }

    #[test]
    fn handshake_waits_only_for_a_run_in_flight() {
        assert!(!still_writing(4, 4));
        assert!(still_writing(5, 5));
        assert!(!still_writing(5, 6));
        assert!(!still_writing(5, 7));
    }
}
