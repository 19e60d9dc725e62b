//! Draining the CPU pipeline: the handshake that closes an interval, the slice that runs across
//! each flip, and the merge of per-CPU sketch stages into one row per process.
//!
//! The kernel charges each context switch's slice from `max(last switch, flip)` to now, into the
//! sketch of the interval being written. The part of a slice before a flip belongs to the
//! interval that flip closed; userspace charges it here, exactly once, from `CpuState`:
//! - if the CPU has switched since the flip, the kernel recorded the crossing slice
//!   (`cross_*`, tagged with the flip's epoch);
//! - if it has not, the task in `cur_tgid` is still running since `last_ts`, and the state is
//!   stable, so two identical reads of it are a consistent snapshot.
//!
//! A crossing record that shows up later, tagged with a flip we already charged from a stable
//! snapshot, is ignored (it carries an older epoch than the one being resolved).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use aya::maps::{MapData, PerCpuArray, PerCpuHashMap, RingBuf};
use ebee_shared::{
    cpu::{BURST_BINS, BinCfg, CpuSketch, CpuSlot, CpuState, CpuTrace, bin_lane},
    ctl,
};

/// One process's on-CPU time in one interval.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuCharge {
    pub tgid: u32,
    pub ns: u64,
    /// On-CPU ns per burst bin (bin `i` covers `[start + i*w, start + (i+1)*w)`).
    pub bins: [u64; BURST_BINS],
}

/// One closed interval as read from the kernel, before any /proc lookup.
#[derive(Clone, Debug, Default)]
pub struct RawInterval {
    /// `CLOCK_MONOTONIC` ns of the flips that opened and closed the interval.
    pub start_ns: u64,
    pub end_ns: u64,
    /// Burst bin width in force during the interval.
    pub bin_width_ns: u64,
    /// Processes by on-CPU time (sketch plus crossing slices), heaviest first.
    pub rows: Vec<CpuCharge>,
    /// The exact shadow (plus the same crossing slices), when loaded with it.
    pub exact: Option<Vec<CpuCharge>>,
    /// Every sketch update of the interval, per CPU in order, when loaded with the trace.
    pub trace: Option<Vec<CpuTrace>>,
    /// The raw per-CPU sketches, when loaded with the trace (to check replays against).
    pub sketches: Option<Vec<CpuSketch>>,
    /// The crossing slices userspace charged (cpu, slot), when loaded with the trace.
    pub crossings: Option<Vec<(u32, CpuSlot)>>,
    /// Nanoseconds and entries that fell out of the last sketch stage.
    pub evicted_ns: u64,
    pub evictions: u64,
    /// Context switches charged in the interval (all CPUs).
    pub updates: u64,
    /// Updates the exact shadow could not store (map full).
    pub shadow_full: u64,
    /// CPUs whose crossing slice could not be resolved in time (their slice is lost).
    pub handshake_timeouts: u64,
    /// Process exec/exit events that arrived during the interval.
    pub lifecycle: Vec<ebee_shared::lifecycle::LifecycleEvent>,
    /// Cumulative events lost to full ring buffers since load.
    pub lifecycle_lost: u64,
    pub trace_lost: u64,
    /// Each pinned process's syscall and request data for the interval (QoS).
    pub qos: Vec<super::qos::QosRaw>,
    /// CPUs whose in-flight `sys_exit` run could not be waited for (cumulative).
    pub qos_handshake_timeouts: u64,
    /// The memory pipeline's part of the interval (None when it is not attached).
    pub mem: Option<super::mem::MemRaw>,
}

/// What userspace charges for one CPU at one flip: a slice `[start, end)` of process `tgid`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Crossing {
    pub tgid: u32,
    pub start: u64,
    pub end: u64,
}

/// Outcome of looking at one read of a CPU's state after flip `epoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Resolve {
    /// The slice to charge (or none: idle, or nothing ran across the flip).
    Done(Option<Crossing>),
    /// The program is running, or the state may be moving: read again.
    Again,
}

/// Resolve the crossing slice of one CPU for the flip to `epoch`, which closed the interval
/// that started at `prev_flip`. `prev_read` is the previous read of the same CPU in this drain.
pub fn resolve(st: &CpuState, prev_read: Option<&CpuState>, epoch: u64, prev_flip: u64) -> Resolve {
    let flip = ctl::flip_ns(epoch);
    let slice = |tgid: u32, start: u64| {
        let start = start.max(prev_flip);
        (tgid != 0 && start != 0 && start < flip).then_some(Crossing {
            tgid,
            start,
            end: flip,
        })
    };
    if st.seq % 2 == 1 {
        return Resolve::Again;
    }
    if st.epoch_seen == epoch {
        // The CPU switched after the flip: the kernel recorded the slice that crossed it.
        return if st.cross_epoch == epoch {
            Resolve::Done(slice(st.cross_tgid, st.cross_start))
        } else {
            // Nothing had run before on this CPU (no `last_ts`), so nothing crossed.
            Resolve::Done(None)
        };
    }
    // No switch since the flip: `cur_tgid` still runs. Trust it once two reads agree.
    match prev_read {
        Some(p) if p == st => Resolve::Done(slice(st.cur_tgid, st.last_ts)),
        _ => Resolve::Again,
    }
}

/// Give up on a CPU's crossing slice after this long (counted as a handshake timeout).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(20);

/// Merges charges by process.
#[derive(Default)]
struct Merge {
    by_tgid: HashMap<u32, (u64, [u64; BURST_BINS])>,
}

impl Merge {
    fn add(&mut self, slot: &CpuSlot, unit_ns: u64) {
        if slot.tgid == 0 {
            return;
        }
        let e = self.by_tgid.entry(slot.tgid).or_default();
        e.0 += slot.ns;
        for (i, b) in e.1.iter_mut().enumerate() {
            *b += bin_lane(&slot.bins, i) * unit_ns;
        }
    }

    fn add_ns(&mut self, tgid: u32, ns: u64) {
        if tgid != 0 {
            self.by_tgid.entry(tgid).or_default().0 += ns;
        }
    }

    fn into_rows(self) -> Vec<CpuCharge> {
        let mut rows: Vec<CpuCharge> = self
            .by_tgid
            .into_iter()
            .map(|(tgid, (ns, bins))| CpuCharge { tgid, ns, bins })
            .collect();
        rows.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tgid.cmp(&b.tgid)));
        rows
    }
}

/// Merge per-CPU sketches into one row per process (keys found in several stages or CPUs are
/// summed), plus crossing slices. Used for the kernel's sketches and for userspace replays.
pub fn merge_sketches<'a>(
    sketches: impl IntoIterator<Item = &'a CpuSketch>,
    crossings: impl IntoIterator<Item = &'a CpuSlot>,
    bins: BinCfg,
) -> Vec<CpuCharge> {
    let unit = 1u64 << bins.unit_shift;
    let mut m = Merge::default();
    for sk in sketches {
        for slot in sk.stages.iter().flatten() {
            m.add(slot, unit);
        }
    }
    for c in crossings {
        m.add(c, unit);
    }
    m.into_rows()
}

/// Userspace state of the CPU pipeline between drains.
pub(super) struct CpuDrain {
    state: PerCpuArray<MapData, CpuState>,
    sketch: PerCpuArray<MapData, CpuSketch>,
    shadow: Option<[PerCpuHashMap<MapData, u32, u64>; 2]>,
    trace: Option<RingBuf<MapData>>,
    pending_trace: Vec<CpuTrace>,
    ncpus: usize,
    /// Epoch word of the interval being written.
    epoch: u64,
    /// Bin geometry of the interval being written.
    bins: BinCfg,
}

impl CpuDrain {
    pub(super) fn new(
        state: PerCpuArray<MapData, CpuState>,
        sketch: PerCpuArray<MapData, CpuSketch>,
        shadow: Option<[PerCpuHashMap<MapData, u32, u64>; 2]>,
        trace: Option<RingBuf<MapData>>,
        ncpus: usize,
        epoch: u64,
        bins: BinCfg,
    ) -> Self {
        Self {
            state,
            sketch,
            shadow,
            trace,
            pending_trace: Vec::new(),
            ncpus,
            epoch,
            bins,
        }
    }

    /// Before attaching: every CPU's current slice starts at the first flip, so the first
    /// switch on each CPU charges the outgoing task from there (not from boot).
    pub(super) fn prime(&mut self) -> Result<(), aya::maps::MapError> {
        let st = CpuState {
            epoch_seen: self.epoch,
            last_ts: ctl::flip_ns(self.epoch),
            ..Default::default()
        };
        let values = aya::maps::PerCpuValues::try_from(vec![st; self.ncpus])
            .map_err(aya::maps::MapError::from)?;
        self.state.set(0, values, 0)
    }

    /// Set the bin geometry for the interval that starts at the next flip.
    pub(super) fn set_bins(&mut self, bins: BinCfg) {
        self.bins = bins;
    }

    /// The flip to `new_epoch` has just happened: collect the interval it closed.
    pub(super) fn drain(&mut self, new_epoch: u64) -> Result<RawInterval, aya::maps::MapError> {
        let old_epoch = std::mem::replace(&mut self.epoch, new_epoch);
        let bins = self.bins;
        let start_ns = ctl::flip_ns(old_epoch);
        let end_ns = ctl::flip_ns(new_epoch);
        let old_parity = ctl::parity(old_epoch);

        // 1. Handshake: every CPU has finished writing the old interval, and its crossing
        //    slice is known.
        let mut crossings: Vec<(u32, CpuSlot)> = Vec::new();
        let mut unresolved: Vec<Option<Option<CpuState>>> = vec![Some(None); self.ncpus];
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        let mut timeouts = 0;
        loop {
            let states = self.state.get(&0, 0)?;
            let mut left = 0;
            for (cpu, st) in states.iter().enumerate() {
                let Some(slot) = unresolved.get_mut(cpu) else {
                    continue;
                };
                let Some(prev) = slot else { continue };
                match resolve(st, prev.as_ref(), new_epoch, start_ns) {
                    Resolve::Done(c) => {
                        if let Some(c) = c {
                            crossings.push((
                                cpu as u32,
                                CpuSlot {
                                    tgid: c.tgid,
                                    flags: 0,
                                    ns: c.end - c.start,
                                    bins: bins.bins_of(c.start - start_ns, c.end - start_ns),
                                },
                            ));
                        }
                        *slot = None;
                    }
                    Resolve::Again => {
                        *prev = Some(*st);
                        left += 1;
                    }
                }
            }
            if left == 0 {
                break;
            }
            if Instant::now() > deadline {
                timeouts = left as u64;
                break;
            }
            std::thread::yield_now();
        }

        // 2. The closed interval's sketches, then clear them for reuse two flips from now.
        let sketches: Vec<CpuSketch> = self.sketch.get(&old_parity, 0)?.iter().copied().collect();
        self.sketch.set(old_parity, super::zeroed(self.ncpus)?, 0)?;

        let mut raw = RawInterval {
            start_ns,
            end_ns,
            bin_width_ns: bins.width_ns,
            handshake_timeouts: timeouts,
            ..Default::default()
        };
        for sk in &sketches {
            raw.evicted_ns += sk.evicted_ns;
            raw.evictions += sk.evictions;
            raw.updates += sk.updates;
            raw.shadow_full += sk.shadow_full;
        }
        raw.rows = merge_sketches(&sketches, crossings.iter().map(|(_, s)| s), bins);

        // 3. The exact shadow, with the same crossing slices.
        if let Some(shadow) = self.shadow.as_mut() {
            let map = &mut shadow[old_parity as usize & 1];
            let keys: Vec<u32> = map.keys().collect::<Result<_, _>>()?;
            let mut m = Merge::default();
            for k in keys {
                let ns: u64 = map.get(&k, 0)?.iter().sum();
                m.add_ns(k, ns);
                map.remove(&k)?;
            }
            for (_, c) in &crossings {
                m.add_ns(c.tgid, c.ns);
            }
            raw.exact = Some(m.into_rows());
        }

        // 4. The update trace: records of the closed epoch; later ones wait for their drain.
        if let Some(ring) = self.trace.as_mut() {
            raw.trace = Some(super::take_trace(
                ring,
                &mut self.pending_trace,
                old_epoch,
                |r| r.epoch,
            ));
            raw.sketches = Some(sketches);
            raw.crossings = Some(crossings);
        }
        Ok(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const E1: u64 = 1_000_000_000; // parity 0, flip at 1 s
    const E2: u64 = 1_050_000_001; // parity 1, flip at 1.05 s

    fn st(seq: u64, epoch_seen: u64, last_ts: u64, cur: u32) -> CpuState {
        CpuState {
            seq,
            epoch_seen,
            last_ts,
            cur_tgid: cur,
            ..Default::default()
        }
    }

    #[test]
    fn running_task_needs_two_identical_reads() {
        let s = st(10, E1, 1_010_000_000, 42);
        assert_eq!(resolve(&s, None, E2, 1_000_000_000), Resolve::Again);
        assert_eq!(
            resolve(&s, Some(&s), E2, 1_000_000_000),
            Resolve::Done(Some(Crossing {
                tgid: 42,
                start: 1_010_000_000,
                end: 1_050_000_000
            }))
        );
        // A task running since before the interval is charged from the interval start only.
        let s = st(10, E1, 900_000_000, 42);
        assert_eq!(
            resolve(&s, Some(&s), E2, 1_000_000_000),
            Resolve::Done(Some(Crossing {
                tgid: 42,
                start: 1_000_000_000,
                end: 1_050_000_000
            }))
        );
    }

    #[test]
    fn program_in_flight_is_waited_for() {
        let s = st(11, E1, 1_010_000_000, 42);
        assert_eq!(resolve(&s, Some(&s), E2, 1_000_000_000), Resolve::Again);
    }

    #[test]
    fn switch_after_flip_uses_the_kernel_record() {
        let mut s = st(12, E2, 1_051_000_000, 7);
        s.cross_epoch = E2;
        s.cross_start = 1_020_000_000;
        s.cross_tgid = 42;
        assert_eq!(
            resolve(&s, None, E2, 1_000_000_000),
            Resolve::Done(Some(Crossing {
                tgid: 42,
                start: 1_020_000_000,
                end: 1_050_000_000
            }))
        );
    }

    #[test]
    fn idle_and_moving_states() {
        let s = st(10, E1, 1_010_000_000, 0);
        assert_eq!(
            resolve(&s, Some(&s), E2, 1_000_000_000),
            Resolve::Done(None)
        );
        let a = st(10, E1, 1_010_000_000, 5);
        let b = st(12, E1, 1_020_000_000, 6);
        assert_eq!(resolve(&b, Some(&a), E2, 1_000_000_000), Resolve::Again);
    }
}
