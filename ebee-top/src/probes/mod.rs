//! Loading, attaching and draining the eBPF programs: everything that touches aya lives here.
//!
//! [`Probes::load`] loads the object embedded at build time, resolves kernel struct offsets from
//! BTF, attaches the programs and returns a handle; [`Probes::drain`] closes the interval being
//! written and returns it as a [`RawInterval`]. Dropping `Probes` detaches every program and
//! closes every map: nothing is pinned, so nothing outlives the process.
//!
//! `layout` and `load` are the steps of loading; each pipeline (`cpu`, `mem`, `qos`,
//! `lifecycle`) takes its own maps and drains them; `flip` and `kick` close intervals; `sys`
//! (the one raw bpf(2) call), `raw_array` and `mmap_array` (the sketches, read in place)
//! serve them; `maps` reports map memory; `bench` holds the benchmark-only floor programs.

mod bench;
pub mod btf;
pub mod cgroup;
pub mod cpu;
mod flip;
mod kick;
mod layout;
pub mod lifecycle;
mod load;
mod loader;
mod maps;
pub mod mem;
mod mmap_array;
pub mod pipelines;
pub mod preflight;
pub mod qos;
mod raw_array;
pub mod servers;
mod sys;
pub mod wait;

use std::time::Duration;

use aya::{
    Ebpf,
    maps::{Array, Map, MapData},
};
use ebee_shared::{cpu::BinCfg, ctl::Ctl, drops};
use thiserror::Error;

pub use bench::SwitchFloor;
pub use cpu::{CpuCharge, RawInterval};
pub use maps::MapMem;
pub use pipelines::PipelineOff;

/// The eBPF object built by build.rs.
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/ebee-top-ebpf"));

/// Why the probes could not be set up. The cases callers must tell apart get their own variant.
#[derive(Debug, Error)]
pub enum ProbeError {
    #[error(
        "permission denied loading eBPF: ebee-top needs CAP_BPF and CAP_PERFMON (or root); \
         run it with sudo, or grant them with: sudo setcap cap_bpf,cap_perfmon+ep <binary>"
    )]
    Permission,
    #[error("this kernel does not support what ebee-top needs: {0}")]
    Unsupported(String),
    #[error("this binary was built without its eBPF object (AYA_BUILD_SKIP); rebuild without it")]
    NoObject,
    #[error(transparent)]
    Pin(#[from] qos::PinError),
    #[error("{0}")]
    Other(String),
}

/// Load-time options.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProbeConfig {
    /// Keep the exact per-process shadow beside the sketch (tests, precision benchmark).
    pub shadow: bool,
    /// Record every sketch update in a ring buffer (replay tests, precision sweeps).
    pub trace: bool,
    /// Turn on the kernel's BPF run-time statistics while loaded, to report our programs'
    /// own cost (adds two clock reads to every program run).
    pub bpf_stats: bool,
    /// Leave the servers pipeline (socket tracepoints) off (`--no-servers`).
    pub no_servers: bool,
    /// With `bpf_stats`: keep the statistics on only 1 s in every 10 ([`STATS_ON`] of
    /// [`STATS_PERIOD`]; two intervals in every 20 at long intervals, [`stats_period`]), so
    /// their clock reads tax every program run about a tenth of the time.
    pub stats_sampled: bool,
    /// Which cgroup hierarchy to follow (`--cgroups`).
    pub cgroups: crate::os::cgroup::Want,
    /// Leave the off-CPU split (and the wait culprits) off (`--no-culprits`): the
    /// `sched_switch` code for them is dropped by the verifier, so it costs nothing.
    pub no_culprits: bool,
    /// Load the syscall programs at start (processes are pinned from the command line).
    /// Otherwise they are loaded at the first pin: the verifier takes about 20 ms over them,
    /// which every start would pay for a feature most runs never use.
    pub syscalls_now: bool,
}

/// The sampling window of the BPF run-time statistics, and the period it repeats with.
pub const STATS_ON: Duration = Duration::from_secs(1);
pub const STATS_PERIOD: Duration = Duration::from_secs(10);
/// The period is at least this many intervals: the window is two drains at least, so at
/// long intervals a 10 s period kept the statistics on for more than a tenth of the time
/// (2 s in 10 at `-d 1`, as `serve` runs) and turned them on and off more often than the
/// estimate needs (each turn patches kernel text on every CPU).
pub const STATS_PERIOD_INTERVALS: u32 = 20;

/// The sampling period of the BPF run-time statistics at `interval`: [`STATS_PERIOD`], or
/// [`STATS_PERIOD_INTERVALS`] intervals when that is longer, so the window is about a tenth
/// of it at any interval.
pub fn stats_period(interval: Duration) -> Duration {
    STATS_PERIOD.max(interval.saturating_mul(STATS_PERIOD_INTERVALS))
}

/// One program's cumulative run time (kernel BPF stats, when enabled).
#[derive(Clone, Copy, Debug, Default)]
pub struct ProgStats {
    /// Whether the kernel is collecting them for us.
    pub enabled: bool,
    pub run_ns: u64,
    pub run_count: u64,
}

/// The loaded and attached programs with their maps.
pub struct Probes {
    // Kept alive: dropping it detaches the programs.
    _ebpf: Ebpf,
    flip: flip::Flipper,
    ctl: Array<MapData, Ctl>,
    /// The same control block mapped, to read the epoch after a flip without a system call.
    ctl_view: mmap_array::MappedValue<Ctl>,
    drops: raw_array::PerCpuValue<[u64; drops::LEN as usize]>,
    cpu: cpu::CpuDrain,
    lifecycle: lifecycle::LifecycleReader,
    qos: qos::QosProbes,
    /// The overhead benchmark's empty syscall programs, while attached.
    floor: bench::SyscallFloor,
    /// The memory pipeline; None when the kernel lacks rss_stat or the layout it reads.
    mem: Option<mem::MemDrain>,
    /// Waits and disk I/O, from the context switch.
    wait: wait::WaitDrain,
    wait_offsets: ebee_shared::wait::WaitOffsets,
    /// Cgroups and threads, from the context switch.
    cgroups: cgroup::CgDrain,
    /// The cgroup hierarchy followed (None: cgroups off).
    cgroup_fs: Option<crate::os::cgroup::CgroupFs>,
    /// Servers and network bytes, from the socket layer; None when off or not supported.
    servers: Option<servers::ServerDrain>,
    page_size: u64,
    ncpus: usize,
    bins: BinCfg,
    /// Held open while BPF run-time statistics should stay on.
    stats: Option<std::os::fd::OwnedFd>,
    /// Whether the caller asked for BPF run-time statistics.
    want_stats: bool,
    /// Whether they are sampled (see [`ProbeConfig::stats_sampled`]), from when.
    stats_sampled: bool,
    loaded: std::time::Instant,
    /// Drains since the statistics were last turned on.
    window_drains: u32,
    /// [`stats_period`] of the current interval.
    stats_period: Duration,
    /// The optional pipelines that are off in this run, and why.
    off: Vec<PipelineOff>,
}

/// True when `e` (or anything it wraps) is an EPERM/EACCES from the kernel.
fn is_permission(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        // A program the verifier refused is EACCES too, with the verifier's reasons: that is
        // no missing privilege, and its log is the message.
        if let Some(aya::programs::ProgramError::LoadError { verifier_log, .. }) =
            err.downcast_ref::<aya::programs::ProgramError>()
            && !verifier_log.to_string().trim().is_empty()
        {
            return false;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if matches!(io.raw_os_error(), Some(libc::EPERM) | Some(libc::EACCES)) {
                return true;
            }
        }
        cur = err.source();
    }
    false
}

/// An error from aya as a [`ProbeError`] with `what` we were doing: a permission refusal
/// becomes [`ProbeError::Permission`], whose message says how to fix it.
fn classify<E: std::error::Error + 'static>(what: &str) -> impl FnOnce(E) -> ProbeError + '_ {
    move |e| {
        if is_permission(&e) {
            ProbeError::Permission
        } else {
            let mut msg = format!("{what}: {e}");
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            ProbeError::Other(msg)
        }
    }
}

impl Probes {
    /// Number of possible CPUs (the width of every per-CPU map).
    pub fn ncpus(&self) -> usize {
        self.ncpus
    }

    /// Change the burst-bin geometry for a new interval length (takes effect at the next flip).
    pub fn set_interval(&mut self, interval: Duration) -> Result<(), ProbeError> {
        self.bins = BinCfg::for_interval(interval.as_nanos() as u64);
        self.stats_period = stats_period(interval);
        self.cpu.set_bins(self.bins);
        write_bins(&mut self.ctl, self.bins).map_err(classify("writing CTL"))
    }

    /// Close the interval being written and return it.
    pub fn drain(&mut self) -> Result<RawInterval, ProbeError> {
        let epoch = self.flip.flip(&self.ctl_view).map_err(classify("flip"))?;
        let mut raw = self
            .cpu
            .drain(epoch)
            .map_err(classify("draining CPU maps"))?;
        if let Some(m) = self.mem.as_mut() {
            raw.mem = Some(m.drain(epoch).map_err(classify("draining memory maps"))?);
        }
        raw.waits = self.wait.drain(ebee_shared::ctl::parity(epoch) ^ 1)?;
        raw.cgroups = self.cgroups.drain(
            ebee_shared::ctl::parity(epoch) ^ 1,
            self.cpu.closed_bins(),
            &raw.flips,
        )?;
        raw.lifecycle = self.lifecycle.read();
        if let Some(s) = self.servers.as_mut() {
            let exited: foldhash::HashSet<u32> = raw
                .lifecycle
                .iter()
                .filter(|e| e.kind == ebee_shared::lifecycle::EVENT_EXIT)
                .map(|e| e.tgid)
                .collect();
            let ipi = raw.handshake_timeouts > 0 || raw.idle_moved > 0;
            raw.servers = Some(s.drain(ebee_shared::ctl::parity(epoch) ^ 1, &exited, ipi)?);
        }
        // Pinned processes that ended: reported once more with their last numbers, then
        // dropped from the kernel's pin table.
        let pinned = self.qos.pinned();
        for ev in &raw.lifecycle {
            if ev.kind == ebee_shared::lifecycle::EVENT_EXIT && pinned.contains(&ev.tgid) {
                self.qos.on_exit(&mut self._ebpf, ev.tgid, ev.ts)?;
            }
        }
        self.sync_stats();
        raw.qos = self
            .qos
            .drain(ebee_shared::ctl::parity(epoch) ^ 1, raw.end_ns)?;
        raw.qos_handshake_timeouts = self.qos.handshake_timeouts;
        let lost = self
            .drops_total()
            .map_err(classify("reading drop counters"))?;
        raw.lifecycle_lost = lost[drops::LIFECYCLE_LOST as usize];
        raw.trace_lost = lost[drops::TRACE_LOST as usize];
        raw.prog_errors = lost[drops::PROG_ERRORS as usize];
        Ok(raw)
    }

    /// Make `pids` the pinned set (QoS): the syscall programs are attached while it is not
    /// empty. A pid that does not exist is refused and nothing changes.
    pub fn set_pins(&mut self, pids: &[u32]) -> Result<(), ProbeError> {
        self.qos.set_pins(&mut self._ebpf, pids)?;
        self.sync_stats();
        Ok(())
    }

    /// BPF run-time statistics are a kernel-wide switch that adds two clock reads to every
    /// program run: with the syscall programs attached that taxes every syscall of every
    /// process, so they are off while anything is pinned (own eBPF cost shows as unknown).
    ///
    /// Sampled, they are on from the start of each period for [`STATS_ON`], and at least two
    /// drains, so even a long interval gets a window with a complete interval in it: the
    /// drain that turns them on reads them off (its interval is not in the window), the next
    /// one closes an interval that had them on throughout, and the one after turns them off.
    /// (It was four drains: at `-d 1`, as `serve` runs, that kept them on 4 s of every 10,
    /// taxing every program run on the machine four times as long as the window needs.)
    fn sync_stats(&mut self) {
        if self.qos.attached() || !self.want_stats {
            self.stats = None;
            return;
        }
        if !self.stats_sampled {
            if self.stats.is_none() {
                self.stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).ok();
            }
            return;
        }
        let phase = self.loaded.elapsed().as_millis() % self.stats_period.as_millis();
        if self.stats.is_some() {
            self.window_drains += 1;
            if self.window_drains >= 2 && phase >= STATS_ON.as_millis() {
                self.stats = None;
            }
        } else if phase < STATS_ON.as_millis() {
            self.stats = aya::sys::enable_stats(aya::sys::Stats::RunTime).ok();
            self.window_drains = 0;
        }
    }

    /// True when the BPF statistics are sampled rather than kept on.
    pub fn stats_sampled(&self) -> bool {
        self.want_stats && self.stats_sampled
    }

    /// The pinned processes.
    pub fn pinned(&self) -> Vec<u32> {
        self.qos.pinned()
    }

    /// True while the syscall programs are attached (something is pinned).
    pub fn syscalls_attached(&self) -> bool {
        self.qos.attached()
    }

    /// False when the kernel's BTF lacked a struct member the request model reads (syscall
    /// latencies are still measured).
    pub fn request_model_available(&self) -> bool {
        self.qos.offsets.valid != 0
    }

    /// True when the kernel keeps per-task run-queue waits (`sched_info`) and the pipeline
    /// reads them.
    pub fn wait_available(&self) -> bool {
        self.wait_offsets.wait_valid != 0
    }

    /// True when the off-CPU split (I/O-blocked, blocked, sleeping) is measured.
    pub fn offcpu_available(&self) -> bool {
        self.wait_offsets.offcpu_valid != 0
    }

    /// True when the kernel counts disk I/O per task (`ioac`) and the pipeline reads it.
    pub fn io_available(&self) -> bool {
        self.wait_offsets.io_valid != 0
    }

    /// The cgroup hierarchy the kernel follows (None: cgroups off).
    pub fn cgroup_fs(&self) -> Option<&crate::os::cgroup::CgroupFs> {
        self.cgroup_fs.as_ref()
    }

    /// Turn the per-thread mode on or off: the kernel charges each slice to its thread as well,
    /// from the next interval on (the first whole interval is the first reported).
    pub fn set_threads(&mut self, on: bool) -> Result<(), ProbeError> {
        let mut c = self.ctl.get(&0, 0).map_err(classify("reading CTL"))?;
        c.threads = u64::from(on);
        self.ctl.set(0, c, 0).map_err(classify("writing CTL"))?;
        self.cgroups.set_threads(on);
        Ok(())
    }

    /// Whether the per-thread mode is on.
    pub fn threads(&self) -> bool {
        self.cgroups.threads()
    }

    /// True when the servers pipeline (socket tracepoints) is attached.
    pub fn servers_available(&self) -> bool {
        self.servers.is_some()
    }

    /// True when the memory pipeline (rss_stat) is attached.
    pub fn mem_available(&self) -> bool {
        self.mem.is_some()
    }

    /// The optional pipelines that are off in this run (this kernel lacks what they need, its
    /// verifier refused one of their programs, or a flag), each with a one-line reason.
    pub fn pipelines_off(&self) -> &[PipelineOff] {
        &self.off
    }

    /// The kernel's page size in bytes.
    pub fn page_size(&self) -> u64 {
        self.page_size
    }

    /// Run time of one program since load (zero unless BPF stats are on).
    pub fn prog_stats_of(&self, name: &str) -> ProgStats {
        prog_stats_of(&self._ebpf, name, self.stats.is_some())
    }

    /// Burst-bin geometry currently in force.
    pub fn bins(&self) -> BinCfg {
        self.bins
    }

    /// Every map our programs use, with the kernel's own memory accounting.
    pub fn map_report(&self) -> Result<Vec<MapMem>, ProbeError> {
        maps::report()
    }

    /// Total run time of our attached programs since load (zero unless BPF stats are on; then
    /// nothing is asked of the kernel, as the counts do not move).
    pub fn prog_stats(&self) -> ProgStats {
        let mut s = ProgStats {
            enabled: self.stats.is_some(),
            ..Default::default()
        };
        if !s.enabled {
            return s;
        }
        for (_, prog) in self._ebpf.programs() {
            if let Ok(info) = prog.info() {
                s.run_ns += info.run_time().as_nanos() as u64;
                s.run_count += info.run_count();
            }
        }
        s
    }

    fn drops_total(&mut self) -> Result<[u64; drops::LEN as usize], aya::maps::MapError> {
        let mut out = [0u64; drops::LEN as usize];
        for per_cpu in self.drops.read()? {
            for (sum, n) in out.iter_mut().zip(per_cpu) {
                *sum += n;
            }
        }
        Ok(out)
    }
}

fn write_bins(ctl: &mut Array<MapData, Ctl>, bins: BinCfg) -> Result<(), aya::maps::MapError> {
    // Only the bin words change here; the epoch word is the flip program's. Read-modify-write
    // is safe because userspace is the only writer apart from `flip`, which we run ourselves.
    let mut c = ctl.get(&0, 0)?;
    c.bin_width_ns = bins.width_ns;
    c.bin_recip = bins.recip;
    c.bin_unit_shift = bins.unit_shift;
    ctl.set(0, c, 0)
}

pub(crate) fn page_size() -> u32 {
    // SAFETY: sysconf has no preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 { p as u32 } else { 4096 }
}

/// Move every record of an update-trace ring (tests and benchmarks only) into `pending` and
/// return those written in `epoch`, the interval just closed; later ones stay pending for
/// their own drain.
fn take_trace<T: Copy>(
    ring: &mut aya::maps::RingBuf<aya::maps::MapData>,
    pending: &mut Vec<T>,
    epoch: u64,
    epoch_of: impl Fn(&T) -> u64,
) -> Vec<T> {
    while let Some(item) = ring.next() {
        if item.len() >= std::mem::size_of::<T>() {
            // SAFETY: T is a plain-old-data record the kernel wrote whole (the length was
            // checked); read_unaligned does not assume alignment.
            pending.push(unsafe { std::ptr::read_unaligned(item.as_ptr().cast::<T>()) });
        }
    }
    let (mine, later): (Vec<T>, Vec<T>) = pending.drain(..).partition(|r| epoch_of(r) == epoch);
    *pending = later;
    mine
}

/// Run time of program `name` of `ebpf` since load (zero unless `enabled`, BPF stats on).
fn prog_stats_of(ebpf: &Ebpf, name: &str, enabled: bool) -> ProgStats {
    let mut s = ProgStats {
        enabled,
        ..Default::default()
    };
    if let Some(info) = ebpf.program(name).and_then(|p| p.info().ok()) {
        s.run_ns = info.run_time().as_nanos() as u64;
        s.run_count = info.run_count();
    }
    s
}

/// Take map `name` out of the object and make it the handle a pipeline reads it through.
fn take_map<T, E: std::error::Error + 'static>(
    ebpf: &mut Ebpf,
    name: &str,
    conv: impl FnOnce(Map) -> Result<T, E>,
) -> Result<T, ProbeError> {
    let m = ebpf
        .take_map(name)
        .ok_or_else(|| ProbeError::Other(format!("eBPF object has no map {name}")))?;
    conv(m).map_err(classify(name))
}

/// Take the per-(CPU, parity) sketch array `name` out of the object and map it.
fn take_sketch<V: aya::Pod + Default>(
    ebpf: &mut Ebpf,
    name: &'static str,
    ncpus: usize,
) -> Result<mmap_array::SketchArray<V>, ProbeError> {
    take_map(ebpf, name, |m| mmap_array::SketchArray::new(m, name, ncpus))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{STATS_ON, stats_period};

    /// The statistics' window (1 s, two drains at least) stays about a tenth of the period.
    #[test]
    fn the_stats_period_grows_with_long_intervals() {
        let ms = Duration::from_millis;
        assert_eq!(stats_period(ms(50)), Duration::from_secs(10));
        assert_eq!(stats_period(ms(500)), Duration::from_secs(10));
        assert_eq!(stats_period(ms(1000)), Duration::from_secs(20));
        assert_eq!(stats_period(ms(5000)), Duration::from_secs(100));
        for i in [10, 50, 200, 500, 1000, 3000, 10_000] {
            let window = STATS_ON.max(ms(i) * 2);
            let share = window.as_secs_f64() / stats_period(ms(i)).as_secs_f64();
            assert!(share <= 0.1 + 1e-9, "{i} ms: {share}");
        }
    }
}
