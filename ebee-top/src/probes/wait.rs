//! Draining the waits and disk I/O pipeline. `sched_switch` writes its per-CPU sketches under
//! the CPU pipeline's epoch and parity, so once the CPU drain has seen every CPU switch to the
//! new interval, the closed sketches are quiescent: read them, merge per process across stages
//! and CPUs (a key in several is summed), and clear them for reuse.

use std::collections::HashMap;

use aya::{
    Ebpf,
    maps::{MapData, PerCpuHashMap},
};
use ebee_shared::hashpipe::Counted as _;
use ebee_shared::map_names;
use ebee_shared::wait::{IoSketch, PairSketch, WaitOffsets, WaitSketch};

use super::btf::Btf;
use super::mmap_array::SketchArray;
use super::{ProbeConfig, ProbeError, classify, take_map, take_sketch};

/// `task_struct` offsets for waits and disk I/O, from BTF. Each half is off (`*_valid` 0) when
/// the kernel lacks its fields: `sched_info` without CONFIG_SCHED_INFO, `ioac` without
/// CONFIG_TASK_IO_ACCOUNTING.
pub fn offsets(btf: &Btf) -> WaitOffsets {
    let get = |s: &str, m: &str| btf.member_offset(s, m).ok();
    let (Some(pid), Some(flags)) = (get("task_struct", "pid"), get("task_struct", "flags")) else {
        return WaitOffsets::default();
    };
    let run_delay = get("task_struct", "sched_info")
        .zip(get("sched_info", "run_delay"))
        .map(|(a, b)| a + b);
    let ioac = get("task_struct", "ioac");
    let read = ioac.zip(get("task_io_accounting", "read_bytes"));
    let write = ioac.zip(get("task_io_accounting", "write_bytes"));
    let (read_bytes, write_bytes, io_valid) = match (read, write) {
        (Some((a, r)), Some((b, w))) => (a + r, b + w, 1),
        _ => (0, 0, 0),
    };
    // `in_iowait` is a one-bit field: the byte that holds it, and the bit in that byte.
    let iowait = btf.member_bit_offset("task_struct", "in_iowait").ok();
    WaitOffsets {
        pid,
        flags,
        run_delay: run_delay.unwrap_or(0),
        read_bytes,
        write_bytes,
        wait_valid: u32::from(run_delay.is_some()),
        io_valid,
        in_iowait: iowait.map_or(0, |b| b / 8),
        iowait_mask: iowait.map_or(0, |b| 1 << (b % 8)),
        // The split needs the run-queue wait to take out of each gap.
        offcpu_valid: u32::from(iowait.is_some() && run_delay.is_some()),
    }
}

/// One process's run-queue wait and off-CPU time by reason in one interval (all its
/// threads, all CPUs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitCharge {
    pub tgid: u32,
    pub wait_ns: u64,
    pub io_ns: u64,
    pub blocked_ns: u64,
    pub sleep_ns: u64,
}

impl WaitCharge {
    fn add(&mut self, v: [u64; 4]) {
        self.wait_ns += v[0];
        self.io_ns += v[1];
        self.blocked_ns += v[2];
        self.sleep_ns += v[3];
    }
}

/// One process's disk bytes in one interval.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IoCharge {
    pub tgid: u32,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// One (victim, culprit) pair's run-queue wait in one interval, all CPUs: the wait of process
/// `victim` that process `culprit` ran through (or `CULPRIT_IDLE`: the CPU was idle, wakeup
/// latency; `CULPRIT_UNKNOWN`: nothing on that CPU explains it).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PairCharge {
    pub victim: u32,
    pub culprit: u32,
    pub wait_ns: u64,
}

/// Merge per-CPU pair sketches into one row per pair, heaviest first.
pub fn merge_pairs<'a>(sketches: impl IntoIterator<Item = &'a PairSketch>) -> Vec<PairCharge> {
    let mut by: HashMap<(u32, u32), u64> = HashMap::new();
    for sk in sketches {
        for s in sk.slots().filter(|s| s.victim != 0) {
            *by.entry((s.victim, s.culprit)).or_default() += s.wait_ns;
        }
    }
    let mut v: Vec<PairCharge> = by
        .into_iter()
        .map(|((victim, culprit), wait_ns)| PairCharge {
            victim,
            culprit,
            wait_ns,
        })
        .collect();
    v.sort_by(|a, b| {
        b.wait_ns
            .cmp(&a.wait_ns)
            .then(a.victim.cmp(&b.victim))
            .then(a.culprit.cmp(&b.culprit))
    });
    v
}

/// The waits and I/O part of one closed interval.
#[derive(Clone, Debug, Default)]
pub struct WaitRaw {
    /// Processes by wait, heaviest first (empty when the kernel has no `sched_info`).
    pub wait: Vec<WaitCharge>,
    /// Processes by read + written bytes, heaviest first (empty without task I/O accounting).
    pub io: Vec<IoCharge>,
    /// The exact shadows, when loaded with them.
    pub wait_exact: Option<Vec<WaitCharge>>,
    pub io_exact: Option<Vec<IoCharge>>,
    pub wait_evictions: u64,
    pub wait_evicted_ns: u64,
    /// Off-CPU time (I/O-blocked, blocked, sleeping) the evictions lost.
    pub wait_evicted_off_ns: u64,
    pub io_evictions: u64,
    pub io_evicted_bytes: u64,
    /// Waits and I/O charges recorded in the sketches.
    pub wait_updates: u64,
    pub io_updates: u64,
    /// Switch-outs of threads not found in the "last seen" array (nothing charged for them).
    pub thread_misses: u64,
    /// Charges the exact shadows could not store.
    pub shadow_full: u64,
    /// Waits by (victim, culprit), heaviest first (empty while the off-CPU split is off).
    pub pairs: Vec<PairCharge>,
    /// Wait charged to a culprit process, to the idle CPU (wakeup latency), and to nothing.
    pub attributed_ns: u64,
    pub idle_ns: u64,
    pub unknown_ns: u64,
    /// Pairs the sketch let go, and the wait they held.
    pub pair_evictions: u64,
    pub pair_evicted_ns: u64,
}

/// Merge per-CPU wait sketches into one row per process, by wait, heaviest first.
pub fn merge_wait<'a>(sketches: impl IntoIterator<Item = &'a WaitSketch>) -> Vec<WaitCharge> {
    let mut by: HashMap<u32, WaitCharge> = HashMap::new();
    for sk in sketches {
        for s in sk.slots().filter(|s| s.tgid != 0) {
            by.entry(s.tgid)
                .or_insert(WaitCharge {
                    tgid: s.tgid,
                    ..Default::default()
                })
                .add([s.wait_ns, s.io_ns, s.blocked_ns, s.sleep_ns]);
        }
    }
    wait_rows(by)
}

fn wait_rows(by: HashMap<u32, WaitCharge>) -> Vec<WaitCharge> {
    let mut v: Vec<WaitCharge> = by.into_values().collect();
    v.sort_by(|a, b| b.wait_ns.cmp(&a.wait_ns).then(a.tgid.cmp(&b.tgid)));
    v
}

/// Merge per-CPU I/O sketches into one row per process, heaviest first.
pub fn merge_io<'a>(sketches: impl IntoIterator<Item = &'a IoSketch>) -> Vec<IoCharge> {
    let mut by: HashMap<u32, (u64, u64)> = HashMap::new();
    for sk in sketches {
        for s in sk.slots().filter(|s| s.tgid != 0) {
            let e = by.entry(s.tgid).or_default();
            e.0 += s.read_bytes;
            e.1 += s.write_bytes;
        }
    }
    io_rows(by)
}

fn io_rows(by: HashMap<u32, (u64, u64)>) -> Vec<IoCharge> {
    let mut v: Vec<IoCharge> = by
        .into_iter()
        .map(|(tgid, (read_bytes, write_bytes))| IoCharge {
            tgid,
            read_bytes,
            write_bytes,
        })
        .collect();
    let w = |c: &IoCharge| c.read_bytes + c.write_bytes;
    v.sort_by(|a, b| w(b).cmp(&w(a)).then(a.tgid.cmp(&b.tgid)));
    v
}

/// The pipeline's maps (the shadows only when `cfg` asks for them).
pub(super) struct WaitMaps {
    wait: SketchArray<WaitSketch>,
    io: SketchArray<IoSketch>,
    /// Only while the off-CPU split is on (nothing writes it otherwise).
    pair: Option<SketchArray<PairSketch>>,
    wait_shadow: Option<[PerCpuHashMap<MapData, u32, [u64; 4]>; 2]>,
    io_shadow: Option<[PerCpuHashMap<MapData, u32, [u64; 2]>; 2]>,
}

impl WaitMaps {
    pub(super) fn take(
        ebpf: &mut Ebpf,
        cfg: ProbeConfig,
        culprits: bool,
        ncpus: usize,
    ) -> Result<Self, ProbeError> {
        let (wait_shadow, io_shadow) = if cfg.shadow {
            (
                Some([
                    take_map(ebpf, map_names::WAIT_SHADOW0, PerCpuHashMap::try_from)?,
                    take_map(ebpf, map_names::WAIT_SHADOW1, PerCpuHashMap::try_from)?,
                ]),
                Some([
                    take_map(ebpf, map_names::IO_SHADOW0, PerCpuHashMap::try_from)?,
                    take_map(ebpf, map_names::IO_SHADOW1, PerCpuHashMap::try_from)?,
                ]),
            )
        } else {
            (None, None)
        };
        Ok(Self {
            wait: take_sketch(ebpf, map_names::WAIT_SKETCH, ncpus)?,
            io: take_sketch(ebpf, map_names::IO_SKETCH, ncpus)?,
            pair: if culprits {
                Some(take_sketch(ebpf, map_names::PAIR_SKETCH, ncpus)?)
            } else {
                None
            },
            wait_shadow,
            io_shadow,
        })
    }
}

/// Userspace state of the pipeline between drains.
pub(super) struct WaitDrain {
    maps: WaitMaps,
}

impl WaitDrain {
    pub(super) fn new(maps: WaitMaps) -> Self {
        Self { maps }
    }

    /// Read and clear the interval of parity `old_parity`. Only after the CPU drain has seen
    /// every CPU move past it.
    pub(super) fn drain(&mut self, old_parity: u32) -> Result<WaitRaw, ProbeError> {
        let p = old_parity & 1;
        let m = &mut self.maps;
        // SAFETY: `sched_switch` writes these under the CPU pipeline's epoch, and the CPU drain
        // has seen every CPU move past parity `p`; none writes it again before the flip after
        // next (the same for each `closed` and `clear` below).
        let wait = unsafe { m.wait.closed(p) };
        let mut raw = WaitRaw {
            wait: merge_wait(wait),
            ..Default::default()
        };
        for s in wait {
            raw.wait_evictions += s.evictions;
            raw.wait_evicted_ns += s.evicted_ns;
            raw.wait_evicted_off_ns += s.evicted_off_ns;
            raw.wait_updates += s.updates;
            raw.thread_misses += s.thread_misses;
            raw.shadow_full += s.shadow_full;
        }
        // SAFETY: as above.
        unsafe { m.wait.clear(p) };
        // SAFETY: as above.
        let io = unsafe { m.io.closed(p) };
        raw.io = merge_io(io);
        for s in io {
            raw.io_evictions += s.evictions;
            raw.io_evicted_bytes += s.evicted_bytes;
            raw.io_updates += s.updates;
            raw.shadow_full += s.shadow_full;
        }
        // SAFETY: as above.
        unsafe { m.io.clear(p) };
        if let Some(pair) = m.pair.as_mut() {
            // SAFETY: as above.
            let sk = unsafe { pair.closed(p) };
            raw.pairs = merge_pairs(sk);
            for s in sk {
                raw.attributed_ns += s.attributed_ns;
                raw.idle_ns += s.idle_ns;
                raw.unknown_ns += s.unknown_ns;
                raw.pair_evictions += s.evictions;
                raw.pair_evicted_ns += s.evicted_ns;
            }
            // SAFETY: as above.
            unsafe { pair.clear(p) };
        }
        if let Some(sh) = m.wait_shadow.as_mut() {
            let map = &mut sh[p as usize];
            let keys: Vec<u32> = map
                .keys()
                .collect::<Result<_, _>>()
                .map_err(classify("reading WAIT_SHADOW"))?;
            let mut by = HashMap::with_capacity(keys.len());
            for k in keys {
                let v = map.get(&k, 0).map_err(classify("reading WAIT_SHADOW"))?;
                let e = by.entry(k).or_insert(WaitCharge {
                    tgid: k,
                    ..Default::default()
                });
                for per_cpu in v.iter() {
                    e.add(*per_cpu);
                }
                map.remove(&k).map_err(classify("clearing WAIT_SHADOW"))?;
            }
            raw.wait_exact = Some(wait_rows(by));
        }
        if let Some(sh) = m.io_shadow.as_mut() {
            let map = &mut sh[p as usize];
            let keys: Vec<u32> = map
                .keys()
                .collect::<Result<_, _>>()
                .map_err(classify("reading IO_SHADOW"))?;
            let mut by = HashMap::new();
            for k in keys {
                let v = map.get(&k, 0).map_err(classify("reading IO_SHADOW"))?;
                let e: &mut (u64, u64) = by.entry(k).or_default();
                for [r, w] in v.iter() {
                    e.0 += r;
                    e.1 += w;
                }
                map.remove(&k).map_err(classify("clearing IO_SHADOW"))?;
            }
            raw.io_exact = Some(io_rows(by));
        }
        Ok(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ebee_shared::wait::{IoSlot, WaitSlot};

    #[test]
    fn a_process_in_several_stages_and_cpus_is_summed() {
        let mut a = WaitSketch::default();
        let mut b = WaitSketch::default();
        let slot = |tgid, wait_ns, io_ns, sleep_ns| WaitSlot {
            tgid,
            wait_ns,
            io_ns,
            sleep_ns,
            ..Default::default()
        };
        a.stages[0][3] = slot(5, 100, 7, 1);
        a.stages[2][9] = slot(5, 50, 3, 0);
        b.stages[1][0] = slot(7, 120, 0, 9);
        // What `add` would have counted: the merge reads only sketches with inserts.
        (a.updates, b.updates) = (2, 1);
        let rows = merge_wait([&a, &b]);
        assert_eq!(
            rows,
            vec![
                WaitCharge {
                    tgid: 5,
                    wait_ns: 150,
                    io_ns: 10,
                    blocked_ns: 0,
                    sleep_ns: 1,
                },
                WaitCharge {
                    tgid: 7,
                    wait_ns: 120,
                    io_ns: 0,
                    blocked_ns: 0,
                    sleep_ns: 9,
                }
            ]
        );
        let mut io = IoSketch::default();
        io.stages[0][1] = IoSlot {
            tgid: 9,
            flags: 0,
            read_bytes: 0,
            write_bytes: 1 << 20,
        };
        io.stages[3][1] = IoSlot {
            tgid: 8,
            flags: 0,
            read_bytes: 4096,
            write_bytes: 0,
        };
        io.updates = 2;
        let rows = merge_io([&io]);
        assert_eq!((rows[0].tgid, rows[1].tgid), (9, 8), "heaviest first");
    }

    #[test]
    fn a_sketch_with_no_insert_counted_is_not_read() {
        // Only `add` writes the stages, and counts it: with the count at 0 they are as they
        // were cleared, and the merge (and the clear) leave them unread.
        let mut a = WaitSketch::default();
        a.stages[0][3] = WaitSlot {
            tgid: 5,
            wait_ns: 100,
            ..Default::default()
        };
        assert!(merge_wait([&a]).is_empty());
        let mut b = WaitSketch::default();
        b.add(WaitSlot {
            tgid: 5,
            wait_ns: 100,
            ..Default::default()
        });
        assert_eq!(b.updates, 1);
        assert_eq!(merge_wait([&b])[0].wait_ns, 100);
    }
}
