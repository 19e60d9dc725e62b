//! The running kernel's layout as the programs need it, read once from its BTF: struct member
//! offsets (aya-ebpf has no CO-RE, so the programs get them as load-time globals) and the
//! tracepoint prototypes that decide what can be attached.

use ebee_shared::{
    cgroup::CgOffsets, mem::MemOffsets, prog_names, qos::Offsets, servers::SrvOffsets,
    wait::WaitOffsets,
};

use super::{ProbeError, btf::Btf, cgroup, mem, qos, servers, wait};
use crate::os::cgroup::CgroupFs;

/// Every offset and layout fact the programs are loaded with.
#[derive(Clone, Copy, Debug)]
pub(super) struct KernelLayout {
    /// `task_struct.tgid`.
    pub tgid_off: u32,
    /// `task_struct.pid` (the thread id).
    pub pid_off: u32,
    /// The task -> cgroup key chain (`on` 0: cgroups off).
    pub cg: CgOffsets,
    /// The scheduler's task clock as stamped into each task: `task_struct.se.exec_start`.
    pub exec_start_off: u32,
    /// 1 when `sched_process_exit` passes `group_dead` (its second argument).
    pub exit_has_group_dead: u32,
    /// The request model's offsets (`valid` 0: requests are not modelled).
    pub qos: Offsets,
    /// The memory pipeline's offsets (`valid` 0: it is not attached).
    pub mem: MemOffsets,
    /// The waits and disk I/O offsets (each half off when its fields are missing).
    pub wait: WaitOffsets,
    /// The servers pipeline's offsets (`valid` 0 also when a socket tracepoint is missing).
    pub servers: SrvOffsets,
    /// Why the memory pipeline cannot be attached (None: it can).
    pub mem_off: Option<&'static str>,
    /// Why the servers pipeline cannot be attached (None: it can).
    pub servers_off: Option<&'static str>,
}

impl KernelLayout {
    /// Read the layout; the kernel is unsupported when the CPU pipeline's needs are missing.
    /// Cgroups follow the hierarchy `cg` (off when None).
    pub(super) fn read(btf: &Btf, cg: Option<&CgroupFs>) -> Result<Self, ProbeError> {
        let unsupported = |e: super::btf::BtfError| ProbeError::Unsupported(e.to_string());
        let tgid_off = btf
            .member_offset("task_struct", "tgid")
            .map_err(unsupported)?;
        let pid_off = btf
            .member_offset("task_struct", "pid")
            .map_err(unsupported)?;
        let exec_start_off = btf
            .member_offset("task_struct", "se")
            .and_then(|se| Ok(se + btf.member_offset("sched_entity", "exec_start")?))
            .map_err(unsupported)?;
        for tp in [
            prog_names::SCHED_SWITCH,
            prog_names::PROCESS_EXIT,
            prog_names::PROCESS_EXEC,
        ] {
            if btf.tracepoint_args(tp).is_none() {
                return Err(ProbeError::Unsupported(format!(
                    "no BTF tracepoint {tp} (tp_btf programs need it)"
                )));
            }
        }
        let exit_has_group_dead =
            u32::from(btf.tracepoint_args(prog_names::PROCESS_EXIT) == Some(2));
        let mut mem = mem::offsets(btf);
        let mut mem_off = (mem.valid == 0).then_some(
            "the kernel's BTF lacks the mm_struct fields it reads (rss_stat[] as percpu counters)",
        );
        if btf.tracepoint_args(prog_names::RSS_STAT) != Some(2) {
            mem.valid = 0;
            // Before Linux 6.2 rss_stat passes (mm, member, count); the program reads the
            // percpu counters the (mm, member) form implies.
            mem_off = Some("no rss_stat tracepoint with (mm, member) arguments (Linux 6.2+)");
        }
        let mut srv = servers::offsets(btf);
        let mut servers_off = (srv.valid == 0).then_some(
            "the kernel's BTF lacks the struct sock fields it reads (sk_type, __sk_common)",
        );
        for (tp, why) in [
            (
                "inet_sock_set_state",
                "no BTF tracepoint sock:inet_sock_set_state with 3 arguments",
            ),
            (
                "sock_send_length",
                "no BTF tracepoint sock:sock_send_length (Linux 6.3+)",
            ),
            (
                "sock_recv_length",
                "no BTF tracepoint sock:sock_recv_length (Linux 6.3+)",
            ),
        ] {
            if btf.tracepoint_args(tp) != Some(3) {
                srv.valid = 0;
                servers_off = Some(why);
            }
        }
        Ok(Self {
            mem_off,
            servers_off,
            servers: srv,
            tgid_off,
            pid_off,
            cg: cgroup::offsets(btf, cg),
            exec_start_off,
            exit_has_group_dead,
            qos: qos::offsets(btf),
            mem,
            wait: wait::offsets(btf),
        })
    }

    /// Whether the servers pipeline can be attached.
    pub(super) fn has_servers(&self) -> bool {
        self.servers.valid != 0
    }

    /// Whether the memory pipeline can be attached.
    pub(super) fn has_mem(&self) -> bool {
        self.mem.valid != 0
    }
}
