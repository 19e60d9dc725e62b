//! [`Probes::load`] in its steps: read the kernel's layout, load the object with its globals
//! set, let each pipeline take its maps, load the flip programs, open the first interval, and
//! attach. The order matters where said.

use std::time::Duration;

use aya::{
    Ebpf,
    maps::{Array, IterableMap as _, MapData},
    programs::BtfTracePoint,
};
use ebee_shared::{cpu::BinCfg, ctl::Ctl, global_names, map_names, prog_names};

use super::layout::KernelLayout;
use super::pipelines::{self, PipelineOff};
use super::{
    OBJECT, ProbeConfig, ProbeError, Probes, bench, btf, cgroup, classify, cpu, flip, lifecycle,
    loader, mem, page_size, qos, servers, take_map, wait, write_bins,
};

impl Probes {
    /// Load and attach everything. `interval` sets the burst-bin geometry.
    pub fn load(cfg: ProbeConfig, interval: Duration) -> Result<Self, ProbeError> {
        if OBJECT.is_empty() {
            return Err(ProbeError::NoObject);
        }
        let unsupported = |e: &dyn std::fmt::Display| ProbeError::Unsupported(e.to_string());
        let cgroup_fs = crate::os::cgroup::detect(cfg.cgroups);
        let cgroups_mounted = cgroup_fs.is_some();
        // The kernel's BTF is read once, for the layout and for the ids of the tracepoints the
        // tp_btf programs attach to (all aya needs of it: see `btf::Btf::tracepoint_blob`),
        // and freed before aya parses those.
        let (mut layout, blob) = {
            let btf = btf::Btf::from_sys_fs().map_err(|e| unsupported(&e))?;
            let tps = TP_BTF.iter().map(|(_, tp)| *tp);
            let tps: Vec<&str> = tps
                .chain([prog_names::SYS_ENTER, prog_names::SYS_EXIT])
                .collect();
            (
                KernelLayout::read(&btf, cgroup_fs.as_ref())?,
                btf.tracepoint_blob(&tps),
            )
        };
        if cfg.no_culprits {
            layout.wait.offcpu_valid = 0;
        }
        // A hierarchy whose chain the kernel's BTF cannot give is not followed.
        let cgroup_fs = cgroup_fs.filter(|_| layout.cg.on != 0);
        let mut off = pipelines_off_by_layout(cfg, &layout, cgroups_mounted);
        let aya_btf = btf::parse_for_aya(&blob).map_err(|e| unsupported(&e))?;
        drop(blob);
        let ncpus =
            aya::util::nr_cpus().map_err(|(what, e)| ProbeError::Other(format!("{what}: {e}")))?;
        let mut ebpf = load_object(cfg, &layout, ncpus)?;

        // Each pipeline takes its own maps.
        let mut ctl: Array<MapData, Ctl> = take_map(&mut ebpf, map_names::CTL, Array::try_from)?;
        let ctl_view = super::mmap_array::MappedValue::new(ctl.map(), map_names::CTL)
            .map_err(classify("mapping CTL"))?;
        let drops = take_map(&mut ebpf, map_names::DROPS, |m| {
            super::raw_array::PerCpuValue::new(m, map_names::DROPS, ncpus)
        })?;
        let cpu_maps = cpu::CpuMaps::take(&mut ebpf, cfg, ncpus)?;
        let lifecycle = lifecycle::LifecycleReader::take(&mut ebpf)?;
        let wait = wait::WaitDrain::new(wait::WaitMaps::take(
            &mut ebpf,
            cfg,
            layout.wait.offcpu_valid != 0,
            ncpus,
        )?);
        let cgroups = cgroup::CgDrain::new(
            cgroup::CgMaps::take(&mut ebpf, cfg, ncpus)?,
            cgroup_fs.is_some(),
        );
        let with_servers = layout.has_servers() && !cfg.no_servers;
        // Each optional pipeline's programs are loaded on their own below: a program this
        // kernel's verifier refuses turns its pipeline off (with the verifier's reason), never
        // the whole run.
        let srv_maps = if with_servers {
            Some(servers::ServerMaps::take(&mut ebpf, ncpus)?)
        } else {
            None
        };
        let mem_maps = if layout.has_mem() {
            Some(mem::MemMaps::take(&mut ebpf, cfg, ncpus)?)
        } else {
            None
        };
        // The syscall programs: loaded now when the command line pins (so a verifier error
        // shows at start), else at the first pin; attached only while something is pinned.
        let mut qos = qos::QosProbes::new(&mut ebpf, layout.qos, ncpus)?;
        if cfg.syscalls_now {
            qos.load_programs(&mut ebpf, Some(&aya_btf))?;
        }
        if let Some(r) = qos.refused() {
            off.push(PipelineOff {
                name: "syscalls",
                reason: r.to_owned(),
            });
        }

        // The flip programs: loaded, never attached, run from userspace to close intervals.
        let flipper = flip::Flipper::load(&mut ebpf, prog_names::FLIP)?;
        let cpu_flipper = flip::Flipper::load(&mut ebpf, prog_names::CPU_FLIP)?;

        // The first interval, opened before anything writes to it.
        let bins = BinCfg::for_interval(interval.as_nanos() as u64);
        write_bins(&mut ctl, bins).map_err(classify("writing CTL"))?;
        let epoch = flipper.flip(&ctl_view).map_err(classify("first flip"))?;
        let mut cpu = cpu::CpuDrain::new(cpu_maps, cpu_flipper, ncpus, epoch, bins);
        let mem = match mem_maps {
            Some(m) => Some(mem::MemDrain::new(m, ncpus, epoch).map_err(classify("MEM_CPU"))?),
            None => None,
        };
        cpu.prime().map_err(classify("priming CPU state"))?;

        // The listening ports are marked before the socket programs see any traffic.
        let servers = match srv_maps {
            Some(m) => Some(servers::ServerDrain::new(m)?),
            None => None,
        };
        attach_core(&mut ebpf, &aya_btf)?;
        let (mem_progs, srv_progs) = TP_BTF[3..].split_at(1);
        let mem = match mem {
            Some(m) => match attach_optional(&mut ebpf, &aya_btf, mem_progs) {
                Ok(()) => Some(m),
                Err(reason) => {
                    off.push(PipelineOff {
                        name: "memory",
                        reason,
                    });
                    None
                }
            },
            None => None,
        };
        let servers = match servers {
            Some(s) => match attach_optional(&mut ebpf, &aya_btf, srv_progs) {
                Ok(()) => Some(s),
                Err(reason) => {
                    off.push(PipelineOff {
                        name: "servers",
                        reason,
                    });
                    None
                }
            },
            None => None,
        };
        // Each CPU's clock starts at its first switch; make it now, not whenever it comes.
        cpu.kick_all();

        // Run-time stats are best effort: without them the cost shows as unknown.
        let stats = if cfg.bpf_stats {
            aya::sys::enable_stats(aya::sys::Stats::RunTime).ok()
        } else {
            None
        };
        // Loading read the kernel's BTF (5.5 MB) and aya kept a table of its first tracepoint
        // ids; give the freed heap back to the system rather than keep it resident all day.
        drop(aya_btf);
        // SAFETY: malloc_trim only releases free memory at the top of glibc's heaps.
        unsafe { libc::malloc_trim(0) };
        crate::os::residency::drop_loaded_pages();
        Ok(Self {
            stats,
            want_stats: cfg.bpf_stats,
            stats_sampled: cfg.stats_sampled,
            loaded: std::time::Instant::now(),
            window_drains: 0,
            stats_period: super::stats_period(interval),
            _ebpf: ebpf,
            flip: flipper,
            ctl,
            ctl_view,
            drops,
            cpu,
            lifecycle,
            qos,
            floor: bench::SyscallFloor::default(),
            mem,
            wait,
            wait_offsets: layout.wait,
            cgroups,
            cgroup_fs,
            servers,
            page_size: u64::from(page_size()),
            ncpus,
            bins,
            off,
        })
    }
}

/// The optional pipelines this kernel's layout (or the flags) leave off, with why.
fn pipelines_off_by_layout(
    cfg: ProbeConfig,
    layout: &KernelLayout,
    cgroups_mounted: bool,
) -> Vec<PipelineOff> {
    let mut off = Vec::new();
    let mut push = |name: &'static str, reason: &str| {
        off.push(PipelineOff {
            name,
            reason: reason.to_owned(),
        });
    };
    if let Some(r) = layout.mem_off {
        push("memory", r);
    }
    if cfg.no_servers {
        push("servers", "--no-servers");
    } else if let Some(r) = layout.servers_off {
        push("servers", r);
    }
    if layout.wait.wait_valid == 0 {
        push(
            "waits",
            "the kernel's BTF has no task_struct.sched_info.run_delay (CONFIG_SCHED_INFO off)",
        );
    }
    if layout.wait.io_valid == 0 {
        push(
            "io",
            "the kernel's BTF has no task_struct.ioac (CONFIG_TASK_IO_ACCOUNTING off)",
        );
    }
    if cfg.cgroups == crate::os::cgroup::Want::Off {
        push("cgroups", "--cgroups off");
    } else if !cgroups_mounted {
        push(
            "cgroups",
            "no cgroup hierarchy of the kind asked for is mounted",
        );
    } else if layout.cg.on == 0 {
        push(
            "cgroups",
            "the kernel's BTF lacks the task -> cgroup chain it follows",
        );
    }
    off
}

/// Load the object (maps created, no program loaded yet) with its globals set from `cfg` and
/// the kernel's layout.
/// aya gets no target BTF: the object has no CO-RE relocations (`loader` explains).
fn load_object(cfg: ProbeConfig, layout: &KernelLayout, ncpus: usize) -> Result<Ebpf, ProbeError> {
    let shadow_on = u32::from(cfg.shadow);
    let trace_on = u32::from(cfg.trace);
    let mut loader = loader::new();
    loader
        .override_global(global_names::SHADOW_ON, &shadow_on, true)
        .override_global(global_names::TRACE_ON, &trace_on, true)
        .override_global(global_names::TASK_TGID_OFF, &layout.tgid_off, true)
        .override_global(global_names::TASK_PID_OFF, &layout.pid_off, true)
        .override_global(global_names::CG_OFFSETS, &layout.cg, true)
        .override_global(
            global_names::TASK_EXEC_START_OFF,
            &layout.exec_start_off,
            true,
        )
        .override_global(
            global_names::EXIT_HAS_GROUP_DEAD,
            &layout.exit_has_group_dead,
            true,
        )
        .override_global(global_names::QOS_OFFSETS, &layout.qos, true)
        .override_global(global_names::MEM_OFFSETS, &layout.mem, true)
        .override_global(global_names::WAIT_OFFSETS, &layout.wait, true)
        .override_global(global_names::SRV_OFFSETS, &layout.servers, true);
    // One sketch per (CPU, parity), read in place through a mapping (`mmap_array`).
    let entries = u32::try_from(2 * ncpus)
        .map_err(|_| ProbeError::Other(format!("{ncpus} possible CPUs")))?;
    for m in SKETCH_ARRAYS {
        loader.map_max_entries(m, entries);
    }
    if !cfg.shadow {
        // Unused maps still take memory; make them as small as the kernel allows.
        for m in [
            map_names::CPU_SHADOW0,
            map_names::CPU_SHADOW1,
            map_names::MEM_SHADOW0,
            map_names::MEM_SHADOW1,
            map_names::WAIT_SHADOW0,
            map_names::WAIT_SHADOW1,
            map_names::IO_SHADOW0,
            map_names::IO_SHADOW1,
            map_names::THREAD_SHADOW0,
            map_names::THREAD_SHADOW1,
            map_names::CG_SHADOW0,
            map_names::CG_SHADOW1,
        ] {
            loader.map_max_entries(m, 1);
        }
    }
    if !cfg.trace {
        loader.map_max_entries(map_names::CPU_TRACE, page_size());
        loader.map_max_entries(map_names::MEM_TRACE, page_size());
    }
    loader.load(OBJECT).map_err(classify("loading eBPF object"))
}

/// The sketch arrays with one entry per (CPU, parity) (`ebee_shared::cpu::sketch_entry`).
const SKETCH_ARRAYS: [&str; 9] = [
    map_names::CPU_SKETCH,
    map_names::MEM_SKETCH,
    map_names::SRV_SKETCH,
    map_names::NET_SKETCH,
    map_names::THREAD_SKETCH,
    map_names::CG_SKETCH,
    map_names::WAIT_SKETCH,
    map_names::IO_SKETCH,
    map_names::PAIR_SKETCH,
];

/// The always-on tp_btf programs and their tracepoints: three for the CPU pipeline and the
/// process lifecycle, one for memory, three for the servers.
const TP_BTF: [(&str, &str); 7] = [
    (prog_names::SCHED_SWITCH, "sched_switch"),
    (prog_names::PROCESS_EXIT, "sched_process_exit"),
    (prog_names::PROCESS_EXEC, "sched_process_exec"),
    (prog_names::RSS_STAT, "rss_stat"),
    (prog_names::SOCK_STATE, "inet_sock_set_state"),
    (prog_names::SOCK_RECV, "sock_recv_length"),
    (prog_names::SOCK_SEND, "sock_send_length"),
];

/// Load and attach the CPU pipeline's and the process lifecycle's tp_btf programs, which
/// every run needs: a refusal here ends the run. Only after the first interval is open and
/// primed: from the first switch on, every slice is charged to an interval.
fn attach_core(ebpf: &mut Ebpf, btf: &aya::Btf) -> Result<(), ProbeError> {
    for &(name, tp) in &TP_BTF[..3] {
        let prog: &mut BtfTracePoint = ebpf
            .program_mut(name)
            .ok_or_else(|| ProbeError::Other(format!("no program {name}")))?
            .try_into()
            .map_err(classify(name))?;
        prog.load(tp, btf).map_err(classify(name))?;
        prog.attach().map_err(classify(name))?;
    }
    Ok(())
}

/// Load and attach one optional pipeline's programs, all or none: when the kernel refuses one,
/// those already attached are unloaded again and the reason is returned (one line).
fn attach_optional(ebpf: &mut Ebpf, btf: &aya::Btf, progs: &[(&str, &str)]) -> Result<(), String> {
    let mut attach = |name: &str, tp: &str| -> Result<(), String> {
        let prog: &mut BtfTracePoint = ebpf
            .program_mut(name)
            .ok_or_else(|| format!("the eBPF object has no program {name}"))?
            .try_into()
            .map_err(|e| pipelines::refused(name, &e))?;
        prog.load(tp, btf)
            .map_err(|e| pipelines::refused(name, &e))?;
        prog.attach()
            .map(drop)
            .map_err(|e| pipelines::refused(name, &e))
    };
    let mut result = Ok(());
    for &(name, tp) in progs {
        result = attach(name, tp);
        if result.is_err() {
            break;
        }
    }
    if result.is_err() {
        for &(name, _) in progs {
            if let Some(p) = ebpf.program_mut(name) {
                let p: Result<&mut BtfTracePoint, _> = p.try_into();
                // A program that never loaded has nothing to unload: that error is expected.
                if let Ok(p) = p {
                    let _ = p.unload();
                }
            }
        }
    }
    result
}
