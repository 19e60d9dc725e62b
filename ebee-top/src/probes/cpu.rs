//! Draining the CPU pipeline: closing each CPU's interval with `cpu_flip`, and the merge of
//! per-CPU sketch stages into one row per process.
//!
//! The kernel charges each context switch's slice from the CPU's last switch (or last flip) to
//! now, into the sketch of the interval that CPU is writing. To close an interval, userspace
//! runs `cpu_flip` on every CPU in turn (BPF_PROG_TEST_RUN on that CPU: an IPI). It charges the
//! running task's slice up to the flip to the old interval and opens the new one. Neither it nor
//! `sched_switch` can interrupt the other on one CPU (the scheduler runs its tracepoint with
//! interrupts off; the IPI handler runs with them off too), so when the last call returns, no
//! CPU writes the old interval any more and every nanosecond is in exactly one interval, with no
//! atomics in the switch path and no waiting.
use std::collections::HashMap;

use aya::maps::{MapData, PerCpuArray, PerCpuHashMap, RingBuf};
use ebee_shared::{
    cpu::{BURST_BINS, BinCfg, CpuFlipArgs, CpuSketch, CpuSlot, CpuState, CpuTrace, bin_lane},
    ctl,
};

use super::flip::Flipper;

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
    /// Processes by on-CPU time, heaviest first.
    pub rows: Vec<CpuCharge>,
    /// The exact shadow, when loaded with it.
    pub exact: Option<Vec<CpuCharge>>,
    /// Every sketch update of the interval, per CPU in order, when loaded with the trace.
    pub trace: Option<Vec<CpuTrace>>,
    /// The raw per-CPU sketches, when loaded with the trace (to check replays against).
    pub sketches: Option<Vec<CpuSketch>>,
    /// Nanoseconds and entries that fell out of the last sketch stage.
    pub evicted_ns: u64,
    pub evictions: u64,
    /// Context switches charged in the interval (all CPUs).
    pub updates: u64,
    /// Updates the exact shadow could not store (map full).
    pub shadow_full: u64,
    /// CPUs whose interval could not be closed (`cpu_flip` failed there): their time since
    /// the previous flip lands in a later interval.
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
/// summed).
pub fn merge_sketches<'a>(
    sketches: impl IntoIterator<Item = &'a CpuSketch>,
    bins: BinCfg,
) -> Vec<CpuCharge> {
    let unit = 1u64 << bins.unit_shift;
    let mut m = Merge::default();
    for sk in sketches {
        for slot in sk.stages.iter().flatten() {
            m.add(slot, unit);
        }
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
    /// Runs `cpu_flip` on one CPU.
    flipper: Flipper,
    ncpus: usize,
    /// Epoch word of the interval being written.
    epoch: u64,
    /// Bin geometry of the interval being written, and of the next one.
    bins: BinCfg,
    next_bins: BinCfg,
}

/// The pieces [`CpuDrain::new`] takes over.
pub(super) struct CpuMaps {
    pub state: PerCpuArray<MapData, CpuState>,
    pub sketch: PerCpuArray<MapData, CpuSketch>,
    pub shadow: Option<[PerCpuHashMap<MapData, u32, u64>; 2]>,
    pub trace: Option<RingBuf<MapData>>,
}

impl CpuDrain {
    pub(super) fn new(
        maps: CpuMaps,
        flipper: Flipper,
        ncpus: usize,
        epoch: u64,
        bins: BinCfg,
    ) -> Self {
        Self {
            state: maps.state,
            sketch: maps.sketch,
            shadow: maps.shadow,
            trace: maps.trace,
            pending_trace: Vec::new(),
            flipper,
            ncpus,
            epoch,
            bins,
            next_bins: bins,
        }
    }

    /// Before attaching: every CPU writes interval `epoch`, and its running slice starts at
    /// that flip, so the first switch on each CPU charges the outgoing task from there (not
    /// from boot).
    pub(super) fn prime(&mut self) -> Result<(), aya::maps::MapError> {
        let st = CpuState {
            epoch: self.epoch,
            flip_ts: ctl::flip_ns(self.epoch),
            last_ts: ctl::flip_ns(self.epoch),
            bins: self.bins,
        };
        let values = aya::maps::PerCpuValues::try_from(vec![st; self.ncpus])
            .map_err(aya::maps::MapError::from)?;
        self.state.set(0, values, 0)
    }

    /// Set the bin geometry for the interval that starts at the next flip.
    pub(super) fn set_bins(&mut self, bins: BinCfg) {
        self.next_bins = bins;
    }

    /// The global flip to `new_epoch` has just happened: close every CPU's interval and
    /// collect the interval that closed.
    pub(super) fn drain(&mut self, new_epoch: u64) -> Result<RawInterval, aya::maps::MapError> {
        let old_epoch = std::mem::replace(&mut self.epoch, new_epoch);
        let bins = std::mem::replace(&mut self.bins, self.next_bins);
        let start_ns = ctl::flip_ns(old_epoch);
        let end_ns = ctl::flip_ns(new_epoch);
        let old_parity = ctl::parity(old_epoch);

        // 1. Close the interval on every CPU. A CPU that is offline runs no programs; one
        //    whose flip fails keeps writing the old parity and is counted.
        let args = CpuFlipArgs {
            epoch: new_epoch,
            bins: self.bins,
        };
        let mut failed = 0;
        for cpu in 0..self.ncpus {
            match self.flipper.run_on_cpu(cpu as u32, &args) {
                Ok(()) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENXIO) => {}
                Err(_) => failed += 1,
            }
        }

        // 2. The closed interval's sketches, then clear them for reuse two flips from now.
        let sketches: Vec<CpuSketch> = self.sketch.get(&old_parity, 0)?.iter().copied().collect();
        self.sketch.set(old_parity, super::zeroed(self.ncpus)?, 0)?;

        let mut raw = RawInterval {
            start_ns,
            end_ns,
            bin_width_ns: bins.width_ns,
            handshake_timeouts: failed,
            ..Default::default()
        };
        for sk in &sketches {
            raw.evicted_ns += sk.evicted_ns;
            raw.evictions += sk.evictions;
            raw.updates += sk.updates;
            raw.shadow_full += sk.shadow_full;
        }
        raw.rows = merge_sketches(&sketches, bins);

        // 3. The exact shadow.
        if let Some(shadow) = self.shadow.as_mut() {
            let map = &mut shadow[old_parity as usize & 1];
            let keys: Vec<u32> = map.keys().collect::<Result<_, _>>()?;
            let mut m = Merge::default();
            for k in keys {
                let ns: u64 = map.get(&k, 0)?.iter().sum();
                m.add_ns(k, ns);
                map.remove(&k)?;
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
        }
        Ok(raw)
    }
}
