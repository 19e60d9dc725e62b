//! The QoS pipeline in userspace: the pin table, attaching `sys_enter`/`sys_exit` only while
//! something is pinned, and draining each pinned process's closed interval.
//!
//! Which slot a process gets and when a slot is read for the last time is decided by the pure
//! [`slots::PinSlots`]; [`QosProbes`] applies its decisions to the kernel's maps
//! (`maps::QosMaps`) and programs, and reads the slots (`drain`).

mod drain;
mod maps;
mod slots;

use aya::{
    Ebpf,
    programs::{BtfTracePoint, tp_btf::BtfTracePointLink},
};
use ebee_shared::{
    prog_names,
    qos::{BUCKETS, MAX_PINS, Offsets, PinStat, RunqStat, SYS_HISTS, SysStat},
};

use super::{ProbeError, classify};
use slots::{Action, PinSlots};

/// Why a set of pins was refused.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("no process with PID {0}")]
    NoSuchProcess(u32),
    #[error("at most {MAX_PINS} processes can be pinned at once (asked for {0})")]
    TooMany(usize),
    #[error("syscall QoS needs x86-64 syscall numbers; this is another architecture")]
    Unsupported,
    #[error("pinning is not available on this kernel: {0}")]
    Refused(String),
}

/// One pinned process's closed interval as read from the kernel.
#[derive(Clone, Debug)]
pub struct QosRaw {
    pub pid: u32,
    /// Per syscall number (index): count, total and maximum latency.
    pub sys: Vec<SysStat>,
    /// The histogram number of each syscall number (0: the shared "other" histogram).
    pub hist_idx: Vec<u64>,
    /// `SYS_HISTS` histograms of `BUCKETS` counts, back to back.
    pub hists: Vec<u32>,
    pub pin: Box<PinStat>,
    /// Its threads' run-queue waits (each time one got a CPU).
    pub runq: Box<RunqStat>,
    /// The pin ended (unpinned or exited): this is its last interval.
    pub last: bool,
    /// The process exited (with `last`).
    pub exited: bool,
}

impl QosRaw {
    /// Histogram `h` (0..SYS_HISTS).
    pub fn hist(&self, h: usize) -> &[u32] {
        let s = (h % SYS_HISTS) * BUCKETS;
        self.hists.get(s..s + BUCKETS).unwrap_or_default()
    }
}

/// Kernel struct offsets the request model needs, from BTF; `valid` is 0 when one is missing.
pub(super) fn offsets(btf: &super::btf::Btf) -> Offsets {
    let get = |s: &str, m: &str| btf.member_offset(s, m).ok();
    let sk_common = get("sock", "__sk_common");
    let found = (|| {
        Some(Offsets {
            regs_di: get("pt_regs", "di")?,
            regs_si: get("pt_regs", "si")?,
            task_files: get("task_struct", "files")?,
            files_fdt: get("files_struct", "fdt")?,
            fdt_max_fds: get("fdtable", "max_fds")?,
            fdt_fd: get("fdtable", "fd")?,
            file_inode: get("file", "f_inode")?,
            file_private: get("file", "private_data")?,
            inode_mode: get("inode", "i_mode")?,
            socket_sk: get("socket", "sk")?,
            sk_family: sk_common? + get("sock_common", "skc_family")?,
            sk_num: sk_common? + get("sock_common", "skc_num")?,
            valid: 1,
        })
    })();
    found.unwrap_or_default()
}

/// Userspace state of the QoS pipeline.
pub(super) struct QosProbes {
    maps: maps::QosMaps,
    slots: PinSlots,
    /// The attached programs; dropping a link detaches its program.
    links: Option<(BtfTracePointLink, BtfTracePointLink)>,
    /// Offsets the request model reads (its `valid` is 0 when BTF lacked one).
    pub(super) offsets: Offsets,
    /// CPUs whose in-flight `sys_exit` could not be waited for (cumulative).
    pub(super) handshake_timeouts: u64,
    /// Why the kernel refused a syscall program (None: both loaded, or not tried yet); pins
    /// are then refused.
    refused: Option<String>,
    /// Both syscall programs are loaded.
    loaded: bool,
}

impl QosProbes {
    /// Take the QoS maps; the two syscall programs are loaded by [`Self::load_programs`].
    pub(super) fn new(ebpf: &mut Ebpf, offsets: Offsets, ncpus: usize) -> Result<Self, ProbeError> {
        let maps = maps::QosMaps::take(ebpf, ncpus)?;
        Ok(Self {
            maps,
            slots: PinSlots::default(),
            links: None,
            offsets,
            handshake_timeouts: 0,
            refused: None,
            loaded: false,
        })
    }

    /// Load (not attach) the two syscall programs, once; `btf` is the loader's, or None to
    /// read the kernel's BTF for them now (a pin after start). A refusal turns pinning off
    /// (see [`Self::refused`]), not the run: the other pipelines do not need these.
    pub(super) fn load_programs(
        &mut self,
        ebpf: &mut Ebpf,
        btf: Option<&aya::Btf>,
    ) -> Result<(), ProbeError> {
        if self.loaded || self.refused.is_some() {
            return Ok(());
        }
        let own;
        let btf = match btf {
            Some(b) => b,
            None => {
                let unsupported =
                    |e: &dyn std::fmt::Display| ProbeError::Unsupported(e.to_string());
                let blob = super::btf::Btf::from_sys_fs()
                    .map_err(|e| unsupported(&e))?
                    .tracepoint_blob(&[prog_names::SYS_ENTER, prog_names::SYS_EXIT]);
                own = super::btf::parse_for_aya(&blob).map_err(|e| unsupported(&e))?;
                &own
            }
        };
        for name in [prog_names::SYS_ENTER, prog_names::SYS_EXIT] {
            let prog: &mut BtfTracePoint = ebpf
                .program_mut(name)
                .ok_or_else(|| ProbeError::Other(format!("no program {name}")))?
                .try_into()
                .map_err(classify(name))?;
            if let Err(e) = prog.load(name, btf) {
                if super::is_permission(&e) {
                    return Err(ProbeError::Permission);
                }
                self.refused = Some(super::pipelines::refused(name, &e));
                return Ok(());
            }
        }
        self.loaded = true;
        Ok(())
    }

    /// Why the kernel refused the syscall programs (None: pinning works).
    pub(super) fn refused(&self) -> Option<&str> {
        self.refused.as_deref()
    }

    /// The pinned processes, in slot order.
    pub(super) fn pinned(&self) -> Vec<u32> {
        self.slots.pinned()
    }

    /// True while the syscall programs are attached.
    pub(super) fn attached(&self) -> bool {
        self.links.is_some()
    }

    /// Make `pids` the pinned set: new ones start being followed now, missing ones are
    /// reported one last time at the next drain. A pid that does not exist is refused and
    /// nothing changes.
    pub(super) fn set_pins(&mut self, ebpf: &mut Ebpf, pids: &[u32]) -> Result<(), ProbeError> {
        if !cfg!(target_arch = "x86_64") && !pids.is_empty() {
            return Err(ProbeError::Pin(PinError::Unsupported));
        }
        if !pids.is_empty() {
            self.load_programs(ebpf, None)?;
        }
        if let (Some(r), false) = (&self.refused, pids.is_empty()) {
            return Err(ProbeError::Pin(PinError::Refused(r.clone())));
        }
        for &pid in pids {
            if pid == 0 || !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return Err(ProbeError::Pin(PinError::NoSuchProcess(pid)));
            }
        }
        let now = crate::time::monotonic_ns();
        let actions = self.slots.set_pins(pids, now)?;
        self.apply(ebpf, actions)
    }

    /// A pinned process ended at `ts_ns`: stop following it; the drain of the interval that
    /// holds its exit reports it as exited with its last numbers.
    pub(super) fn on_exit(
        &mut self,
        ebpf: &mut Ebpf,
        pid: u32,
        ts_ns: u64,
    ) -> Result<(), ProbeError> {
        let actions = self.slots.exited(pid, ts_ns);
        self.apply(ebpf, actions)
    }

    /// Carry out the slots' decisions, in order.
    fn apply(&mut self, ebpf: &mut Ebpf, actions: Vec<Action>) -> Result<(), ProbeError> {
        for a in actions {
            match a {
                Action::Table(t) => self.maps.write_table(&t)?,
                Action::WaitCpus => self.wait_cpus().map_err(classify("QoS handshake"))?,
                Action::Clear(i) => self.maps.clear_slot(i)?,
                Action::Ports(pids) => self.maps.refresh_ports(&pids)?,
                Action::Attached(on) => self.set_attached(ebpf, on)?,
            }
        }
        Ok(())
    }

    fn set_attached(&mut self, ebpf: &mut Ebpf, on: bool) -> Result<(), ProbeError> {
        match (on, self.links.is_some()) {
            (true, false) => {
                let mut attach = |name: &str| -> Result<BtfTracePointLink, ProbeError> {
                    let prog: &mut BtfTracePoint = ebpf
                        .program_mut(name)
                        .ok_or_else(|| ProbeError::Other(format!("no program {name}")))?
                        .try_into()
                        .map_err(classify(name))?;
                    let id = prog.attach().map_err(classify(name))?;
                    prog.take_link(id).map_err(classify(name))
                };
                let enter = attach(prog_names::SYS_ENTER)?;
                let exit = attach(prog_names::SYS_EXIT)?;
                self.links = Some((enter, exit));
            }
            (false, true) => {
                // Dropping the links detaches the programs; they stay loaded for the next pin.
                self.links = None;
                // No program runs now: forget which stacks had pinned syscalls, so the next
                // pins start with a clean filter.
                self.maps.clear_open()?;
            }
            _ => {}
        }
        Ok(())
    }
}
