//! Benchmark-only programs, not used by ebee-top itself: the empty "floor" programs that
//! measure what any program on a hook costs on this machine, beside which the real pipelines'
//! cost is judged. [`SwitchFloor`] for `sched_switch` (the switch-cost benchmark),
//! [`Probes::set_syscall_floor`] for `sys_enter`/`sys_exit` (the overhead benchmark) and
//! [`Probes::set_sock_floor`] for `sock_recv_length`/`sock_send_length` (the servers
//! benchmark).

use aya::{
    Ebpf,
    programs::{BtfTracePoint, tp_btf::BtfTracePointLink},
};
use ebee_shared::prog_names;

use super::{OBJECT, ProbeError, Probes, ProgStats, classify};

/// The benchmarks' empty programs attached beside the real ones: `floor_enter`/`floor_exit`
/// while the overhead benchmark wants them, `floor_recv`/`floor_send` (the socket
/// tracepoints, [`SockFloor`]) while the servers benchmark does.
#[derive(Default)]
pub(super) struct SyscallFloor {
    links: Option<(BtfTracePointLink, BtfTracePointLink)>,
    sock: SockFloor,
}

/// The empty `floor_recv`/`floor_send` programs on `sock_recv_length`/`sock_send_length`:
/// what any program on the socket tracepoints costs on this machine.
#[derive(Default)]
pub(super) struct SockFloor {
    links: Option<(BtfTracePointLink, BtfTracePointLink)>,
}

/// Load (the first time) and attach the tp_btf program `name` on `tp`.
fn attach_floor(
    ebpf: &mut Ebpf,
    btf: &aya::Btf,
    name: &str,
    tp: &str,
) -> Result<BtfTracePointLink, ProbeError> {
    let prog: &mut BtfTracePoint = ebpf
        .program_mut(name)
        .ok_or_else(|| ProbeError::Other(format!("no program {name}")))?
        .try_into()
        .map_err(classify(name))?;
    if prog.fd().is_err() {
        prog.load(tp, btf).map_err(classify(name))?;
    }
    let id = prog.attach().map_err(classify(name))?;
    prog.take_link(id).map_err(classify(name))
}

/// Attach (`on`) or detach a pair of floor programs kept in `links`.
fn set_pair(
    links: &mut Option<(BtfTracePointLink, BtfTracePointLink)>,
    ebpf: &mut Ebpf,
    on: bool,
    btf: &aya::Btf,
    pair: [(&str, &str); 2],
) -> Result<(), ProbeError> {
    if !on {
        *links = None;
        return Ok(());
    }
    if links.is_some() {
        return Ok(());
    }
    let a = attach_floor(ebpf, btf, pair[0].0, pair[0].1)?;
    let b = attach_floor(ebpf, btf, pair[1].0, pair[1].1)?;
    *links = Some((a, b));
    Ok(())
}

impl SyscallFloor {
    /// Attach (`on`) or detach the syscall floor programs, loading them the first time.
    fn set(&mut self, ebpf: &mut Ebpf, on: bool, btf: &aya::Btf) -> Result<(), ProbeError> {
        set_pair(
            &mut self.links,
            ebpf,
            on,
            btf,
            [
                (prog_names::FLOOR_ENTER, prog_names::SYS_ENTER),
                (prog_names::FLOOR_EXIT, prog_names::SYS_EXIT),
            ],
        )
    }
}

impl SockFloor {
    /// Attach (`on`) or detach the socket floor programs, loading them the first time.
    fn set(&mut self, ebpf: &mut Ebpf, on: bool, btf: &aya::Btf) -> Result<(), ProbeError> {
        set_pair(
            &mut self.links,
            ebpf,
            on,
            btf,
            [
                (prog_names::FLOOR_RECV, "sock_recv_length"),
                (prog_names::FLOOR_SEND, "sock_send_length"),
            ],
        )
    }
}

/// What aya needs of the kernel's BTF to load tp_btf programs on `tps`.
fn tp_btf(tps: &[&str]) -> Result<aya::Btf, ProbeError> {
    let unsupported = |e: super::btf::BtfError| ProbeError::Unsupported(e.to_string());
    let blob = super::btf::Btf::from_sys_fs()
        .map_err(unsupported)?
        .tracepoint_blob(tps);
    super::btf::parse_for_aya(&blob).map_err(unsupported)
}

impl Probes {
    /// Benchmarks only: attach (or detach) empty programs on `sys_enter`/`sys_exit`, the
    /// floor any enter/exit design pays on this machine.
    pub fn set_syscall_floor(&mut self, on: bool) -> Result<(), ProbeError> {
        let btf = tp_btf(&[prog_names::SYS_ENTER, prog_names::SYS_EXIT])?;
        self.floor.set(&mut self._ebpf, on, &btf)
    }

    /// Benchmarks only: attach (or detach) empty programs on `sock_recv_length` and
    /// `sock_send_length` (`prog_names::FLOOR_RECV`, `FLOOR_SEND`; their run time through
    /// [`Probes::prog_stats_of`]), the floor any socket-tracepoint design pays on this
    /// machine. Meant beside a load with `no_servers`, so the real socket programs are not
    /// attached too.
    pub fn set_sock_floor(&mut self, on: bool) -> Result<(), ProbeError> {
        let btf = tp_btf(&["sock_recv_length", "sock_send_length"])?;
        self.floor.sock.set(&mut self._ebpf, on, &btf)
    }
}

/// The empty `floor_switch` program attached to `sched_switch` on its own: what any
/// sched_switch program costs on this machine (the switch-cost benchmark; not used by
/// ebee-top itself). Dropping it detaches and unloads everything.
pub struct SwitchFloor {
    ebpf: Ebpf,
    stats: Option<std::os::fd::OwnedFd>,
}

impl SwitchFloor {
    /// Load the object (maps included, nothing else attached) and attach `floor_switch`,
    /// with the kernel's BPF run-time statistics on when `bpf_stats`.
    pub fn attach(bpf_stats: bool) -> Result<Self, ProbeError> {
        if OBJECT.is_empty() {
            return Err(ProbeError::NoObject);
        }
        let btf = tp_btf(&["sched_switch"])?;
        let mut ebpf = super::loader::new()
            .load(OBJECT)
            .map_err(classify("loading eBPF object"))?;
        let prog: &mut BtfTracePoint = ebpf
            .program_mut(prog_names::FLOOR_SWITCH)
            .ok_or_else(|| ProbeError::Other("no floor_switch program".into()))?
            .try_into()
            .map_err(classify("floor_switch"))?;
        prog.load("sched_switch", &btf)
            .map_err(classify("floor_switch"))?;
        prog.attach().map_err(classify("floor_switch"))?;
        let stats = if bpf_stats {
            aya::sys::enable_stats(aya::sys::Stats::RunTime).ok()
        } else {
            None
        };
        Ok(Self { ebpf, stats })
    }

    /// Run time of the floor program since it was attached (zero without statistics).
    pub fn stats(&self) -> ProgStats {
        super::prog_stats_of(&self.ebpf, prog_names::FLOOR_SWITCH, self.stats.is_some())
    }
}
