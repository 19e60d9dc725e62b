//! Draining the CPU pipeline: closing every CPU's interval, and the merge of per-CPU sketch
//! stages into one row per process.
//!
//! The kernel charges each context switch's slice to the interval its CPU is writing, and a
//! CPU moves to the next interval at its first switch after the global flip (see
//! `ebee_shared::cpu`). To close an interval, userspace flips, wakes its thread on every CPU so
//! each one switches at once, and waits until every CPU's state shows the new epoch: from then
//! on no CPU writes the old buffers. A CPU that has not switched by the deadline is moved by
//! `cpu_flip`, run there by IPI. Neither can interrupt the other on one CPU, so no atomics and
//! no retries are needed, and every nanosecond is in exactly one interval.

use std::time::{Duration, Instant};

use aya::{
    Ebpf,
    maps::{MapData, PerCpuHashMap, RingBuf},
};
use ebee_shared::hashpipe::Counted as _;
use ebee_shared::{
    cpu::{
        BURST_BINS, BinCfg, CpuFlipArgs, CpuSketch, CpuSlot, CpuState, CpuTrace, TRACE_FLIP,
        bin_lane, sketch_entry,
    },
    ctl, map_names,
};
// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::HashMap;

use super::flip::Flipper;
use super::kick::Kickers;
use super::mmap_array::SketchArray;
use super::raw_array::PerCpuValue;
use super::{ProbeConfig, ProbeError, take_map};

/// Kick a CPU's thread again after this long without a switch there.
const KICK_AGAIN: Duration = Duration::from_millis(2);
/// Move a CPU that has not switched after this long by IPI (counted).
const SWITCH_DEADLINE: Duration = Duration::from_millis(20);

/// One process's (or, from the thread sketch, one thread's) on-CPU time in one interval.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuCharge {
    /// Process id; the thread id in thread rows.
    pub tgid: u32,
    /// The slot's `aux` word from the CPU with the most of this key's time: the cgroup key
    /// (0: unknown) in process rows, the process id in thread rows.
    pub aux: u32,
    pub ns: u64,
    /// On-CPU ns per burst bin (bin `i` covers `[start + i*w, start + (i+1)*w)`).
    pub bins: [u64; BURST_BINS],
}

impl CpuCharge {
    /// The first `n` bins (those the interval covers), with any time in later ones added to
    /// the last of them: a slice still running when the interval closed ends at that CPU's
    /// first switch after the flip, a little past the interval's end.
    pub fn bins_upto(&self, n: usize) -> Vec<u64> {
        let n = n.clamp(1, BURST_BINS);
        let mut v = self.bins[..n].to_vec();
        v[n - 1] += self.bins[n..].iter().sum::<u64>();
        v
    }
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
    /// Every sketch update of the interval, per CPU in order, when loaded with the trace;
    /// then the charges `cpu_flip` left (flagged [`TRACE_FLIP`], not in the sketch stages).
    pub trace: Option<Vec<CpuTrace>>,
    /// The slices `cpu_flip` left in the closed sketches ([`ebee_shared::cpu::FlipCharge`]):
    /// in `rows` and `exact` already, for the cgroup and thread drains to charge.
    pub flips: Vec<Flipped>,
    /// The raw per-CPU sketches, when loaded with the trace (to check replays against).
    pub sketches: Option<Vec<CpuSketch>>,
    /// Nanoseconds and entries that fell out of the last sketch stage.
    pub evicted_ns: u64,
    pub evictions: u64,
    /// Context switches charged in the interval (all CPUs).
    pub updates: u64,
    /// Updates the exact shadow could not store (map full).
    pub shadow_full: u64,
    /// CPUs that did not switch by the deadline and were moved to the next interval by IPI
    /// (their running slice goes wholly to the next interval), or could not be moved at all.
    pub handshake_timeouts: u64,
    /// CPUs that were idle at the flip, and the one the drain ran on, moved to the next
    /// interval by `cpu_flip` without a kick (not a failure).
    pub idle_moved: u64,
    /// CPUs idle at the flip and left there: their next switch opens the new interval.
    pub idle_left: u64,
    /// Process exec/exit events that arrived during the interval.
    pub lifecycle: Vec<ebee_shared::lifecycle::LifecycleEvent>,
    /// Cumulative events lost to full ring buffers since load.
    pub lifecycle_lost: u64,
    pub trace_lost: u64,
    /// Cumulative program runs cut short by a lookup that cannot fail, since load.
    pub prog_errors: u64,
    /// Each pinned process's syscall and request data for the interval (QoS).
    pub qos: Vec<super::qos::QosRaw>,
    /// CPUs whose in-flight `sys_exit` run could not be waited for (cumulative).
    pub qos_handshake_timeouts: u64,
    /// The memory pipeline's part of the interval (None when it is not attached).
    pub mem: Option<super::mem::MemRaw>,
    /// Waits and disk I/O (read once every CPU has moved past the interval).
    pub waits: super::wait::WaitRaw,
    /// Servers and network bytes (None when the pipeline is off).
    pub servers: Option<super::servers::ServersRaw>,
    /// Cgroups, and threads in the per-thread mode.
    pub cgroups: super::cgroup::CgRaw,
}

/// A charge `cpu_flip` left in a CPU's closed sketch ([`ebee_shared::cpu::FlipCharge`]), binned.
#[derive(Clone, Copy, Debug, Default)]
pub struct Flipped {
    pub cpu: u32,
    /// Keyed by process, `aux` its cgroup.
    pub slot: CpuSlot,
    /// The thread, while the per-thread mode is on (else 0).
    pub tid: u32,
}

/// The charges `cpu_flip` left in `sketches` (one per CPU at most), binned by `bins`.
pub fn flips_of(sketches: &[CpuSketch], bins: &BinCfg) -> Vec<Flipped> {
    sketches
        .iter()
        .enumerate()
        .filter(|(_, sk)| sk.flip.tgid != 0)
        .map(|(cpu, sk)| Flipped {
            cpu: cpu as u32,
            slot: sk.flip.slot(bins),
            tid: sk.flip.tid,
        })
        .collect()
}

/// What [`Merge`] keeps per key: total ns, bins, and the `aux` of its heaviest slot.
#[derive(Default)]
struct Merged {
    ns: u64,
    bins: [u64; BURST_BINS],
    aux: u32,
    aux_ns: u64,
}

/// Merges charges by key (process, or thread).
#[derive(Default)]
pub(super) struct Merge {
    by_tgid: HashMap<u32, Merged>,
}

impl Merge {
    pub(super) fn add(&mut self, slot: &CpuSlot, unit_ns: u64) {
        if slot.tgid == 0 {
            return;
        }
        let e = self.by_tgid.entry(slot.tgid).or_default();
        e.ns += slot.ns;
        if slot.ns >= e.aux_ns {
            e.aux = slot.aux;
            e.aux_ns = slot.ns;
        }
        for (i, b) in e.bins.iter_mut().enumerate() {
            *b += bin_lane(&slot.bins, i) * unit_ns;
        }
    }

    pub(super) fn add_ns(&mut self, tgid: u32, ns: u64) {
        if tgid != 0 {
            self.by_tgid.entry(tgid).or_default().ns += ns;
        }
    }

    pub(super) fn into_rows(self) -> Vec<CpuCharge> {
        let mut rows: Vec<CpuCharge> = self
            .by_tgid
            .into_iter()
            .map(|(tgid, m)| CpuCharge {
                tgid,
                aux: m.aux,
                ns: m.ns,
                bins: m.bins,
            })
            .collect();
        rows.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.tgid.cmp(&b.tgid)));
        rows
    }
}

/// Merge per-CPU sketches into one row per process (keys found in several stages or CPUs are
/// summed), with the charges `cpu_flip` left in them ([`flips_of`]).
pub fn merge_sketches<'a>(
    sketches: impl IntoIterator<Item = &'a CpuSketch>,
    flips: &[Flipped],
    bins: BinCfg,
) -> Vec<CpuCharge> {
    let unit = 1u64 << bins.unit_shift;
    let mut m = Merge::default();
    for sk in sketches {
        for slot in sk.slots() {
            m.add(slot, unit);
        }
    }
    for f in flips {
        m.add(&f.slot, unit);
    }
    m.into_rows()
}

/// Which CPUs did not switch when kicked. A CPU whose thread cannot run there (a real-time
/// task hogs it, or its CPU set changed) would cost every drain the whole deadline; after a few
/// misses in a row it goes straight to the IPI, and is tried with a kick again now and then.
#[derive(Debug)]
struct Stragglers {
    misses: Vec<u32>,
    drains: u64,
}

/// Misses in a row after which a CPU is no longer waited for.
const GIVE_UP_AFTER: u32 = 3;
/// Every this many drains, a CPU given up on is waited for again.
const RETRY_EVERY: u64 = 100;

impl Stragglers {
    fn new(ncpus: usize) -> Self {
        Self {
            misses: vec![0; ncpus],
            drains: 0,
        }
    }

    fn start_drain(&mut self) {
        self.drains += 1;
    }

    /// Whether to kick `cpu` and wait for its switch in this drain.
    fn wait_for(&self, cpu: usize) -> bool {
        self.misses.get(cpu).is_none_or(|&m| m < GIVE_UP_AFTER)
            || self.drains.is_multiple_of(RETRY_EVERY)
    }

    fn switched(&mut self, cpu: usize) {
        if let Some(m) = self.misses.get_mut(cpu) {
            *m = 0;
        }
    }

    fn missed(&mut self, cpu: usize) {
        if let Some(m) = self.misses.get_mut(cpu) {
            *m = m.saturating_add(1);
        }
    }
}

/// Userspace state of the CPU pipeline between drains.
pub(super) struct CpuDrain {
    state: PerCpuValue<CpuState>,
    /// Every CPU's sketch of each parity, mapped: the closed ones are read in place.
    sketch: SketchArray<CpuSketch>,
    shadow: Option<[PerCpuHashMap<MapData, u32, u64>; 2]>,
    trace: Option<RingBuf<MapData>>,
    pending_trace: Vec<CpuTrace>,
    /// Runs `cpu_flip` on one CPU.
    flipper: Flipper,
    /// A thread on each CPU, woken to make it switch.
    kickers: Kickers,
    /// CPUs whose thread did not make them switch lately.
    stragglers: Stragglers,
    ncpus: usize,
    /// Epoch word of the interval being written.
    epoch: u64,
    /// Bin geometry of the interval being written, and of the next one.
    bins: BinCfg,
    next_bins: BinCfg,
    /// Bin geometry of the interval the last drain closed.
    closed_bins: BinCfg,
}

/// The pieces [`CpuDrain::new`] takes over.
pub(super) struct CpuMaps {
    pub state: PerCpuValue<CpuState>,
    pub sketch: SketchArray<CpuSketch>,
    pub shadow: Option<[PerCpuHashMap<MapData, u32, u64>; 2]>,
    pub trace: Option<RingBuf<MapData>>,
}

impl CpuMaps {
    /// Take the CPU pipeline's maps out of the object (the shadow and the trace only when
    /// `cfg` asks for them), for `ncpus` possible CPUs.
    pub(super) fn take(
        ebpf: &mut Ebpf,
        cfg: ProbeConfig,
        ncpus: usize,
    ) -> Result<Self, ProbeError> {
        let shadow = if cfg.shadow {
            Some([
                take_map(ebpf, map_names::CPU_SHADOW0, PerCpuHashMap::try_from)?,
                take_map(ebpf, map_names::CPU_SHADOW1, PerCpuHashMap::try_from)?,
            ])
        } else {
            None
        };
        let trace = if cfg.trace {
            Some(take_map(ebpf, map_names::CPU_TRACE, RingBuf::try_from)?)
        } else {
            None
        };
        Ok(Self {
            state: take_map(ebpf, map_names::CPU_STATE, |m| {
                PerCpuValue::new(m, map_names::CPU_STATE, ncpus)
            })?,
            sketch: super::take_sketch(ebpf, map_names::CPU_SKETCH, ncpus)?,
            shadow,
            trace,
        })
    }
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
            kickers: Kickers::start(ncpus),
            stragglers: Stragglers::new(ncpus),
            ncpus,
            epoch,
            bins,
            next_bins: bins,
            closed_bins: bins,
        }
    }

    /// Before attaching: every CPU writes interval `epoch`. No slice is known yet (`last_ts`
    /// 0), so each CPU's first switch only starts the clock; a kick makes it happen at once.
    /// Each CPU learns its entries in the sketch arrays here.
    pub(super) fn prime(&mut self) -> Result<(), aya::maps::MapError> {
        let n = self.ncpus as u32;
        let states: Vec<CpuState> = (0..n)
            .map(|cpu| CpuState {
                epoch: self.epoch,
                bins: self.bins,
                entry: [sketch_entry(0, cpu, n), sketch_entry(1, cpu, n)],
                ..Default::default()
            })
            .collect();
        Ok(self.state.write(&states)?)
    }

    /// Make every CPU switch (the first kick after attaching starts each CPU's clock).
    pub(super) fn kick_all(&self) {
        for cpu in 0..self.ncpus {
            self.kickers.kick(cpu);
        }
    }

    /// Wait until every CPU writes interval `epoch` or is idle with nothing writing its
    /// closed interval; returns how many had to be moved by IPI (or could not be moved), how
    /// many idle CPUs (or this one) were moved by `cpu_flip`, and how many were left idle.
    fn close_all(&mut self, epoch: u64) -> Result<(u64, u64, u64), aya::maps::MapError> {
        let start = Instant::now();
        self.stragglers.start_drain();
        let args = CpuFlipArgs {
            epoch,
            bins: self.bins,
        };
        // An idle CPU (its last switch brought in the idle task) has no task to charge: the
        // IPI moves it exactly, where waking its thread would cost two context switches there
        // and polling here. A CPU that is busy is kicked, so its interval ends at a switch.
        //
        // The CPU this thread runs on is moved the same way, without an IPI (the program runs
        // here, in our own system call): kicking it would wake its thread, switch to it and
        // back, and poll. The slice of ours it charges ends at our last scheduler update (a
        // tick at most); the rest goes to the new interval, as a straggler's does.
        // SAFETY: no arguments; -1 on failure.
        let here = unsafe { libc::sched_getcpu() };
        // Read after the flip (its atomic exchange is a full barrier): see `CpuState::seq`.
        let states = self.state.read()?;
        let mut idle = 0;
        let mut left_idle = 0;
        let mut rest = Vec::with_capacity(self.ncpus);
        for cpu in 0..self.ncpus {
            let Some(s) = states.get(cpu) else {
                rest.push(cpu);
                continue;
            };
            // `last_ts` 0: no switch seen yet, so no clock to move it by; its kick starts it.
            let behind = s.epoch != epoch && s.last_ts != 0;
            if behind && s.running == 0 && cpu as i32 != here && s.seq % 2 == 0 {
                // Idle, and no switch there is under way: nothing writes its closed interval
                // any more, and the switch out of idle opens the new one.
                left_idle += 1;
                continue;
            }
            let move_now = behind && (s.running == 0 || cpu as i32 == here);
            if move_now && self.flipper.run_on_cpu(cpu as u32, &args).is_ok() {
                idle += 1;
            } else {
                rest.push(cpu);
            }
        }
        // CPUs we wait for (kicked); the others go straight to the IPI.
        let (mut left, now_by_ipi): (Vec<usize>, Vec<usize>) = rest
            .into_iter()
            .partition(|&cpu| self.kickers.has(cpu) && self.stragglers.wait_for(cpu));
        for &cpu in &left {
            self.kickers.kick(cpu);
        }
        let mut moved = 0;
        for cpu in now_by_ipi {
            moved += self.move_by_ipi(cpu, &args);
        }
        let mut last_kick = start;
        while !left.is_empty() {
            let states = self.state.read()?;
            let stragglers = &mut self.stragglers;
            left.retain(|&cpu| {
                let flipped = states.get(cpu).is_none_or(|s| s.epoch == epoch);
                if flipped {
                    stragglers.switched(cpu);
                }
                !flipped
            });
            let now = Instant::now();
            if now.duration_since(start) > SWITCH_DEADLINE {
                for cpu in std::mem::take(&mut left) {
                    self.stragglers.missed(cpu);
                    moved += self.move_by_ipi(cpu, &args);
                }
            } else if !left.is_empty() {
                if now.duration_since(last_kick) > KICK_AGAIN {
                    // A thread that was still awake from the last round took the kick without
                    // switching; kick again.
                    for &cpu in &left {
                        self.kickers.kick(cpu);
                    }
                    last_kick = now;
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        }
        Ok((moved, idle, left_idle))
    }

    /// Move `cpu` to the interval in `args` by IPI; 1 if that counts as a CPU that did not
    /// switch in time, else 0.
    fn move_by_ipi(&self, cpu: usize, args: &CpuFlipArgs) -> u64 {
        match self.flipper.run_on_cpu(cpu as u32, args) {
            // Offline: it runs no programs and writes nothing.
            Err(e) if e.raw_os_error() == Some(libc::ENXIO) => 0,
            // The usual way for a CPU we cannot place a thread on.
            Ok(()) if !self.kickers.has(cpu) => 0,
            // It has a thread but did not switch, or could not be moved at all.
            _ => 1,
        }
    }

    /// Bin geometry of the interval the last drain closed.
    pub(super) fn closed_bins(&self) -> BinCfg {
        self.closed_bins
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
        self.closed_bins = bins;
        let start_ns = ctl::flip_ns(old_epoch);
        let end_ns = ctl::flip_ns(new_epoch);
        let old_parity = ctl::parity(old_epoch);

        // 1. Every CPU switches to the new interval: kicked to switch now, moved by IPI if it
        //    has not by the deadline.
        let (failed, idle_moved, idle_left) = self.close_all(new_epoch)?;

        // 2. The closed interval's sketches, then clear them for reuse two flips from now.
        // SAFETY: every CPU has moved to the new interval (`close_all`), so none writes the
        // old parity's sketches until the flip after next, long after this drain.
        let sketches = unsafe { self.sketch.closed(old_parity) };

        let mut raw = RawInterval {
            start_ns,
            end_ns,
            bin_width_ns: bins.width_ns,
            handshake_timeouts: failed,
            idle_moved,
            idle_left,
            ..Default::default()
        };
        for sk in sketches {
            raw.evicted_ns += sk.evicted_ns;
            raw.evictions += sk.evictions;
            raw.updates += sk.updates;
            raw.shadow_full += sk.shadow_full;
        }
        raw.flips = flips_of(sketches, &bins);
        raw.rows = merge_sketches(sketches, &raw.flips, bins);
        let kept = self.trace.is_some().then(|| sketches.to_vec());
        // SAFETY: as for `closed`; the borrow of the sketches has ended.
        unsafe { self.sketch.clear(old_parity) };

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
            for f in &raw.flips {
                m.add_ns(f.slot.tgid, f.slot.ns);
            }
            raw.exact = Some(m.into_rows());
        }

        // 4. The update trace: records of the closed epoch; later ones wait for their drain.
        if let Some(ring) = self.trace.as_mut() {
            let mut trace =
                super::take_trace(ring, &mut self.pending_trace, old_epoch, |r| r.epoch);
            trace.extend(raw.flips.iter().map(|f| CpuTrace {
                epoch: old_epoch,
                cpu: f.cpu,
                flags: TRACE_FLIP,
                slot: f.slot,
            }));
            raw.trace = Some(trace);
            raw.sketches = kept;
        }
        Ok(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_past_the_interval_fold_into_its_last_bin() {
        let mut c = CpuCharge::default();
        c.bins[..7].copy_from_slice(&[1, 2, 3, 4, 5, 6, 7]);
        assert_eq!(c.bins_upto(5), vec![1, 2, 3, 4, 5 + 6 + 7]);
        assert_eq!(c.bins_upto(BURST_BINS), c.bins.to_vec());
        // Never empty, never past the array.
        assert_eq!(c.bins_upto(0), vec![28]);
        assert_eq!(c.bins_upto(99).len(), BURST_BINS);
    }

    #[test]
    fn a_cpu_that_keeps_missing_is_given_up_on_and_retried() {
        let mut s = Stragglers::new(2);
        for _ in 0..GIVE_UP_AFTER {
            s.start_drain();
            assert!(s.wait_for(1));
            s.missed(1);
        }
        s.start_drain();
        assert!(
            !s.wait_for(1),
            "waited for a CPU that missed {GIVE_UP_AFTER} times"
        );
        assert!(s.wait_for(0), "the other CPU is unaffected");
        // Tried again every RETRY_EVERY drains; one switch makes it a normal CPU again.
        while !s.drains.is_multiple_of(RETRY_EVERY) {
            s.start_drain();
        }
        assert!(s.wait_for(1));
        s.switched(1);
        s.start_drain();
        assert!(s.wait_for(1));
    }
}
