//! Draining the cgroups and threads parts of the context switch. `sched_switch` writes the
//! cgroup sketch and (in the per-thread mode) the thread sketch under the CPU pipeline's epoch
//! and parity, so once the CPU drain has seen every CPU move to the new interval they are
//! quiescent: read, merge across stages and CPUs, clear.

use aya::{
    Ebpf,
    maps::{MapData, PerCpuHashMap},
};
use ebee_shared::hashpipe::Counted as _;
use ebee_shared::{
    cgroup::{CgOffsets, CgSketch},
    cpu::{BinCfg, CpuSlot, ThreadSketch},
    map_names,
};
// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::{HashMap, HashMapExt as _};

use super::btf::Btf;
use super::cpu::{CpuCharge, Flipped, Merge};
use super::mmap_array::SketchArray;
use super::{ProbeConfig, ProbeError, classify, take_map, take_sketch};
use crate::os::cgroup::{CgroupFs, Kind};

/// The load chain task -> cgroup key for the hierarchy `fs` (off when None, or when the kernel
/// lacks a field or, for v1, the controller).
pub fn offsets(btf: &Btf, fs: Option<&CgroupFs>) -> CgOffsets {
    let Some(fs) = fs else {
        return CgOffsets::default();
    };
    let get = |s: &str, m: &str| btf.member_offset(s, m).ok();
    let css_cgroup = get("cgroup_subsys_state", "cgroup");
    let (css, css_cgroup) = match &fs.kind {
        // A `struct cgroup` begins with its own css (`self`), whose `cgroup` points back at it.
        Kind::V2 => (
            get("css_set", "dfl_cgrp"),
            get("cgroup", "self").zip(css_cgroup).map(|(a, b)| a + b),
        ),
        Kind::V1 { controller } => {
            let ssid = btf
                .enum_value(&format!("{controller}_cgrp_id"))
                .ok()
                .and_then(|v| u32::try_from(v).ok());
            (
                get("css_set", "subsys")
                    .zip(ssid)
                    .map(|(subsys, i)| subsys + 8 * i),
                css_cgroup,
            )
        }
    };
    let (Some(task_cgroups), Some(css), Some(css_cgroup), Some(cgroup_kn), Some(kn_id)) = (
        get("task_struct", "cgroups"),
        css,
        css_cgroup,
        get("cgroup", "kn"),
        get("kernfs_node", "id"),
    ) else {
        return CgOffsets::default();
    };
    CgOffsets {
        task_cgroups,
        css,
        css_cgroup,
        cgroup_kn,
        kn_id,
        on: 1,
    }
}

/// One cgroup's CPU time and run-queue wait in one interval (all CPUs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgCharge {
    pub key: u32,
    pub cpu_ns: u64,
    pub wait_ns: u64,
}

/// The cgroups and threads part of one closed interval.
#[derive(Clone, Debug, Default)]
pub struct CgRaw {
    /// Cgroups by CPU time, heaviest first (empty when off).
    pub cgroups: Vec<CgCharge>,
    /// The exact shadow, when loaded with it.
    pub cgroups_exact: Option<Vec<CgCharge>>,
    pub evictions: u64,
    pub evicted_ns: u64,
    pub updates: u64,
    pub shadow_full: u64,
    /// Threads by on-CPU time (`tgid` is the thread id, `aux` its process), when the
    /// per-thread mode was on for the whole interval.
    pub threads: Option<Vec<CpuCharge>>,
    pub threads_exact: Option<Vec<CpuCharge>>,
    pub thread_evictions: u64,
    pub thread_evicted_ns: u64,
}

/// The maps, taken out of the object.
pub(super) struct CgMaps {
    sketch: SketchArray<CgSketch>,
    shadow: Option<[PerCpuHashMap<MapData, u32, [u64; 2]>; 2]>,
    threads: SketchArray<ThreadSketch>,
    thread_shadow: Option<[PerCpuHashMap<MapData, u32, u64>; 2]>,
}

impl CgMaps {
    pub(super) fn take(
        ebpf: &mut Ebpf,
        cfg: ProbeConfig,
        ncpus: usize,
    ) -> Result<Self, ProbeError> {
        let (shadow, thread_shadow) = if cfg.shadow {
            (
                Some([
                    take_map(ebpf, map_names::CG_SHADOW0, PerCpuHashMap::try_from)?,
                    take_map(ebpf, map_names::CG_SHADOW1, PerCpuHashMap::try_from)?,
                ]),
                Some([
                    take_map(ebpf, map_names::THREAD_SHADOW0, PerCpuHashMap::try_from)?,
                    take_map(ebpf, map_names::THREAD_SHADOW1, PerCpuHashMap::try_from)?,
                ]),
            )
        } else {
            (None, None)
        };
        Ok(Self {
            sketch: take_sketch(ebpf, map_names::CG_SKETCH, ncpus)?,
            shadow,
            threads: take_sketch(ebpf, map_names::THREAD_SKETCH, ncpus)?,
            thread_shadow,
        })
    }
}

/// Userspace state of the cgroups and threads parts between drains.
pub(super) struct CgDrain {
    maps: CgMaps,
    /// Drains left that may find the thread sketch written: set while the per-thread mode is
    /// asked for, counted down after (the slot written last is drained within two).
    threads_dirty: u8,
    on: bool,
    /// The per-thread mode: asked for, and on since the start of the interval being written
    /// (a drain reports threads only for an interval they were on for the whole of).
    threads_want: bool,
    threads_whole: bool,
}

impl CgDrain {
    pub(super) fn new(maps: CgMaps, on: bool) -> Self {
        Self {
            maps,
            threads_dirty: 0,
            on,
            threads_want: false,
            threads_whole: false,
        }
    }

    /// Turn the per-thread mode on or off (the caller writes the control word).
    pub(super) fn set_threads(&mut self, on: bool) {
        if on != self.threads_want {
            self.threads_want = on;
            self.threads_whole = false;
        }
    }

    pub(super) fn threads(&self) -> bool {
        self.threads_want
    }

    /// Read and clear the closed interval of `parity` (every CPU has moved past it), and charge
    /// the slices `cpu_flip` left in the CPU sketches (`flips`) to their cgroups and threads.
    pub(super) fn drain(
        &mut self,
        parity: u32,
        bins: BinCfg,
        flips: &[Flipped],
    ) -> Result<CgRaw, ProbeError> {
        let p = parity & 1;
        let mut raw = CgRaw::default();
        if self.on {
            // SAFETY: `sched_switch` writes these under the CPU pipeline's epoch, and the CPU
            // drain has seen every CPU move past parity `p`; none writes it again before the
            // flip after next (the same for each `closed` and `clear` below).
            let sk = unsafe { self.maps.sketch.closed(p) };
            let mut by: HashMap<u32, (u64, u64)> = HashMap::new();
            for s in sk {
                raw.evictions += s.evictions;
                raw.evicted_ns += s.evicted_ns;
                raw.updates += s.updates;
                raw.shadow_full += s.shadow_full;
                for slot in s.slots().filter(|s| s.key != 0) {
                    let e = by.entry(slot.key).or_default();
                    e.0 += slot.cpu_ns;
                    e.1 += slot.wait_ns;
                }
            }
            let flipped = || flips.iter().map(|f| f.slot).filter(|s| s.aux != 0);
            for f in flipped() {
                by.entry(f.aux).or_default().0 += f.ns;
            }
            raw.cgroups = rows(by);
            // SAFETY: as above.
            unsafe { self.maps.sketch.clear(p) };
            if let Some(sh) = self.maps.shadow.as_mut() {
                let map = &mut sh[p as usize];
                let keys: Vec<u32> = map
                    .keys()
                    .collect::<Result<_, _>>()
                    .map_err(classify("reading CG_SHADOW"))?;
                let mut by = HashMap::new();
                for k in keys {
                    let v = map.get(&k, 0).map_err(classify("reading CG_SHADOW"))?;
                    let e: &mut (u64, u64) = by.entry(k).or_default();
                    for x in v.iter() {
                        e.0 += x[0];
                        e.1 += x[1];
                    }
                    map.remove(&k).map_err(classify("clearing CG_SHADOW"))?;
                }
                for f in flipped() {
                    by.entry(f.aux).or_default().0 += f.ns;
                }
                raw.cgroups_exact = Some(rows(by));
            }
        }
        // Threads: the sketch of an interval the mode was on for the whole of; one it was
        // turned on or off in is cleared unreported.
        let report = self.threads_whole && self.threads_want;
        self.threads_whole = self.threads_want;
        // The thread sketch is read only while the mode may have written it: off, it costs
        // nothing per interval.
        if self.threads_want {
            self.threads_dirty = 3;
        }
        if self.threads_dirty > 0 {
            self.threads_dirty -= 1;
            // SAFETY: as above.
            let ts = unsafe { self.maps.threads.closed(p) };
            if report {
                let unit = 1u64 << bins.unit_shift;
                let mut m = Merge::default();
                for s in ts {
                    raw.thread_evictions += s.evictions;
                    raw.thread_evicted_ns += s.evicted_ns;
                    for slot in s.slots() {
                        m.add(slot, unit);
                    }
                }
                for f in thread_flips(flips) {
                    m.add(&f, unit);
                }
                raw.threads = Some(m.into_rows());
            }
            // SAFETY: as above. (A CPU's sketch the mode did not write is left as it is but
            // for its counters: see `SketchArray::clear`.)
            unsafe { self.maps.threads.clear(p) };
        }
        if let Some(sh) = self.maps.thread_shadow.as_mut() {
            let map = &mut sh[p as usize];
            let keys: Vec<u32> = map
                .keys()
                .collect::<Result<_, _>>()
                .map_err(classify("reading THREAD_SHADOW"))?;
            let mut m = Merge::default();
            for k in keys {
                let ns: u64 = map
                    .get(&k, 0)
                    .map_err(classify("reading THREAD_SHADOW"))?
                    .iter()
                    .sum();
                m.add_ns(k, ns);
                map.remove(&k).map_err(classify("clearing THREAD_SHADOW"))?;
            }
            for f in thread_flips(flips) {
                m.add_ns(f.tgid, f.ns);
            }
            if report {
                raw.threads_exact = Some(m.into_rows());
            }
        }
        Ok(raw)
    }
}

/// The flip charges of threads (the per-thread mode was on), as thread-sketch slots: keyed by
/// thread, `aux` the process.
fn thread_flips(flips: &[Flipped]) -> impl Iterator<Item = CpuSlot> + '_ {
    flips.iter().filter(|f| f.tid != 0).map(|f| CpuSlot {
        tgid: f.tid,
        aux: f.slot.tgid,
        ns: f.slot.ns,
        bins: f.slot.bins,
    })
}

fn rows(by: HashMap<u32, (u64, u64)>) -> Vec<CgCharge> {
    let mut v: Vec<CgCharge> = by
        .into_iter()
        .map(|(key, (cpu_ns, wait_ns))| CgCharge {
            key,
            cpu_ns,
            wait_ns,
        })
        .collect();
    v.sort_by(|a, b| b.cpu_ns.cmp(&a.cpu_ns).then(a.key.cmp(&b.key)));
    v
}
