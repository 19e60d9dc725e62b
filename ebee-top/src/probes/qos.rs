//! The QoS pipeline in userspace: the pin table, attaching `sys_enter`/`sys_exit` only while
//! something is pinned, and draining each pinned process's closed interval.
//!
//! Pin slots are reused with care: a slot whose process was unpinned (or exited) is read once
//! more at the next drain, so its last interval is reported, and only then cleared and freed.
//! A new owner gets a new generation, so per-thread and per-connection state left by the old
//! one is recognised in the kernel and ignored.

use std::time::{Duration, Instant};

use aya::{
    Ebpf,
    maps::{Array, MapData, PerCpuArray},
    programs::{BtfTracePoint, tp_btf::BtfTracePointLink},
};
use ebee_shared::{
    prog_names,
    qos::{
        BUCKETS, HistIdx, HistTable, MAX_PINS, NR_SLOTS, OPEN_SLOTS, Offsets, OpenStacks,
        PIN_BIT_WORDS, PORT_WORDS, PinStat, PinState, PinTable, QosCpu, SYS_HISTS, SysStat,
        SysTable, pin_entry,
    },
};

use super::{ProbeError, classify, raw_array::RawArray};

/// Give up waiting for a CPU's in-flight `sys_exit` after this long (counted).
const HANDSHAKE_TIMEOUT: Duration = Duration::from_millis(20);

/// Why a set of pins was refused.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    #[error("no process with PID {0}")]
    NoSuchProcess(u32),
    #[error("at most {MAX_PINS} processes can be pinned at once (asked for {0})")]
    TooMany(usize),
    #[error("syscall QoS needs x86-64 syscall numbers; this is another architecture")]
    Unsupported,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SlotState {
    Free,
    /// Pinned: in the kernel's table with this generation.
    Pinned {
        pid: u32,
        gen_: u32,
    },
    /// Removed from the kernel's table; read (and freed) by the first drain whose interval
    /// ends after `until_ns` (`CLOCK_MONOTONIC`), which then reports it as the last.
    Draining {
        pid: u32,
        exited: bool,
        until_ns: u64,
    },
}

/// Userspace state of the QoS pipeline.
pub(super) struct QosProbes {
    table: Array<MapData, PinTable>,
    /// The kernel's first filter: one bit per tgid, set for the pinned processes.
    pin_bits: Array<MapData, u64>,
    /// Nonzero words of `pin_bits` as last written, by index.
    bit_words: std::collections::BTreeMap<u32, u64>,
    sys: RawArray<SysTable>,
    hist: RawArray<HistTable>,
    hist_idx: RawArray<HistIdx>,
    pin: RawArray<PinStat>,
    pin_state: Array<MapData, PinState>,
    open: RawArray<OpenStacks>,
    cpu: PerCpuArray<MapData, QosCpu>,
    ports: Array<MapData, u64>,
    slots: [SlotState; MAX_PINS],
    next_gen: u32,
    /// The attached programs; dropping a link detaches its program.
    links: Option<(BtfTracePointLink, BtfTracePointLink)>,
    /// The port bitmap as last written.
    port_words: Vec<u64>,
    /// Offsets the request model reads (its `valid` is 0 when BTF lacked one).
    pub(super) offsets: Offsets,
    /// CPUs whose in-flight `sys_exit` could not be waited for (cumulative).
    pub(super) handshake_timeouts: u64,
}

/// One pinned process's per-syscall statistics, summed over the per-CPU copies (`NR_SLOTS`
/// entries per CPU, back to back).
fn fold_sys(per_cpu: &[SysStat]) -> Vec<SysStat> {
    let mut out = vec![SysStat::default(); NR_SLOTS];
    for cpu in per_cpu.chunks_exact(NR_SLOTS) {
        for (o, s) in out.iter_mut().zip(cpu) {
            o.count += s.count;
            o.total_ns += s.total_ns;
            o.max_ns = o.max_ns.max(s.max_ns);
        }
    }
    out
}

/// One pinned process's request-model counters, summed over the per-CPU copies.
fn fold_pin(per_cpu: &[PinStat]) -> PinStat {
    let mut o = PinStat::default();
    for p in per_cpu {
        o.requests += p.requests;
        o.req_total_ns += p.req_total_ns;
        o.req_max_ns = o.req_max_ns.max(p.req_max_ns);
        o.recvs += p.recvs;
        o.sends_idle += p.sends_idle;
        o.other_sock_io += p.other_sock_io;
        o.accepts += p.accepts;
        o.unmatched += p.unmatched;
        o.hist_full += p.hist_full;
        o.conn_full += p.conn_full;
        for (b, v) in o.req_hist.buckets.iter_mut().zip(&p.req_hist.buckets) {
            *b += v;
        }
    }
    o
}

/// Kernel struct offsets the request model needs, from BTF; `valid` is 0 when one is missing.
pub(super) fn offsets(btf: &super::btf::Btf) -> Offsets {
    let get = |s: &str, m: &str| btf.member_offset(s, m).ok();
    let sk_common = get("sock", "__sk_common");
    let found = (|| {
        Some(Offsets {
            regs_di: get("pt_regs", "di")?,
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

fn take<T>(
    ebpf: &mut Ebpf,
    name: &str,
    conv: impl FnOnce(aya::maps::Map) -> Result<T, aya::maps::MapError>,
) -> Result<T, ProbeError> {
    let m = ebpf
        .take_map(name)
        .ok_or_else(|| ProbeError::Other(format!("eBPF object has no map {name}")))?;
    conv(m).map_err(classify(name))
}

fn raw<V>(ebpf: &mut Ebpf, name: &str, ncpus: usize) -> Result<RawArray<V>, ProbeError> {
    take(ebpf, name, |m| RawArray::new(m, name, ncpus))
}

impl QosProbes {
    /// Take the QoS maps and load (not attach) the two syscall programs.
    pub(super) fn new(
        ebpf: &mut Ebpf,
        btf: &aya::Btf,
        offsets: Offsets,
    ) -> Result<Self, ProbeError> {
        use ebee_shared::map_names as n;
        let table = take(ebpf, n::QOS_PINS, Array::try_from)?;
        let pin_bits = take(ebpf, n::QOS_PIN_BITS, Array::try_from)?;
        let ncpus =
            aya::util::nr_cpus().map_err(|(what, e)| ProbeError::Other(format!("{what}: {e}")))?;
        let sys = raw(ebpf, n::QOS_SYS, ncpus)?;
        let hist = raw(ebpf, n::QOS_HIST, ncpus)?;
        let hist_idx = raw(ebpf, n::QOS_HIST_IDX, ncpus)?;
        let pin = raw(ebpf, n::QOS_PIN, ncpus)?;
        let pin_state = take(ebpf, n::QOS_PIN_STATE, Array::try_from)?;
        let open = raw(ebpf, n::QOS_OPEN, ncpus)?;
        let cpu = take(ebpf, n::QOS_CPU, PerCpuArray::try_from)?;
        let ports = take(ebpf, n::QOS_PORTS, Array::try_from)?;
        for name in [prog_names::SYS_ENTER, prog_names::SYS_EXIT] {
            let prog: &mut BtfTracePoint = ebpf
                .program_mut(name)
                .ok_or_else(|| ProbeError::Other(format!("no program {name}")))?
                .try_into()
                .map_err(classify(name))?;
            prog.load(name, btf).map_err(classify(name))?;
        }
        Ok(Self {
            table,
            pin_bits,
            bit_words: Default::default(),
            sys,
            hist,
            hist_idx,
            pin,
            pin_state,
            open,
            cpu,
            ports,
            slots: [SlotState::Free; MAX_PINS],
            next_gen: 1,
            links: None,
            port_words: vec![0; PORT_WORDS as usize],
            offsets,
            handshake_timeouts: 0,
        })
    }

    /// The pinned processes, in slot order.
    pub(super) fn pinned(&self) -> Vec<u32> {
        self.slots
            .iter()
            .filter_map(|s| match s {
                SlotState::Pinned { pid, .. } => Some(*pid),
                _ => None,
            })
            .collect()
    }

    /// True while the syscall programs are attached.
    pub(super) fn attached(&self) -> bool {
        self.links.is_some()
    }

    /// Make `pids` the pinned set: new ones start being followed now, missing ones are
    /// reported one last time at the next drain.
    pub(super) fn set_pins(&mut self, ebpf: &mut Ebpf, pids: &[u32]) -> Result<(), ProbeError> {
        let mut want: Vec<u32> = pids.to_vec();
        want.sort_unstable();
        want.dedup();
        if !cfg!(target_arch = "x86_64") && !want.is_empty() {
            return Err(ProbeError::Pin(PinError::Unsupported));
        }
        for &pid in &want {
            if pid == 0 || !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return Err(ProbeError::Pin(PinError::NoSuchProcess(pid)));
            }
        }
        let keep = |pid: u32| want.contains(&pid);
        // Slots needed: the kept pins, the new ones, and those still draining.
        let kept = self.pinned().into_iter().filter(|p| keep(*p)).count();
        let draining = self
            .slots
            .iter()
            .filter(|s| matches!(s, SlotState::Draining { .. }))
            .count();
        let newly = want.iter().filter(|p| !self.pinned().contains(p)).count();
        if want.len() > MAX_PINS {
            return Err(ProbeError::Pin(PinError::TooMany(want.len())));
        }
        if kept + newly + draining > MAX_PINS {
            // Slots still draining free up at the next drain; free them now instead, losing
            // their last partial interval rather than refusing the user.
            self.release_draining()?;
        }
        let now = crate::latency::monotonic_ns();
        for s in self.slots.iter_mut() {
            if let SlotState::Pinned { pid, .. } = *s {
                if !keep(pid) {
                    *s = SlotState::Draining {
                        pid,
                        exited: false,
                        until_ns: now,
                    };
                }
            }
        }
        // The pins just removed take their slots until the next drain too: when that leaves
        // no room for the new ones, free them now as well (the table written first drops them).
        if self.slots.iter().filter(|s| **s == SlotState::Free).count() < newly {
            self.release_draining()?;
        }
        let current = self.pinned();
        for pid in want.into_iter().filter(|p| !current.contains(p)) {
            let Some(i) = self.slots.iter().position(|s| *s == SlotState::Free) else {
                return Err(ProbeError::Pin(PinError::TooMany(pids.len())));
            };
            self.clear_slot(i)?;
            let gen_ = self.next_gen;
            self.next_gen = self.next_gen.wrapping_add(1).max(1);
            self.slots[i] = SlotState::Pinned { pid, gen_ };
        }
        self.refresh_ports()?;
        self.write_table()?;
        self.update_attachment(ebpf)
    }

    /// A pinned process ended at `ts_ns`: stop following it; the drain of the interval that
    /// holds its exit reports it as exited with its last numbers.
    pub(super) fn on_exit(
        &mut self,
        ebpf: &mut Ebpf,
        pid: u32,
        ts_ns: u64,
    ) -> Result<(), ProbeError> {
        let mut changed = false;
        for s in self.slots.iter_mut() {
            if matches!(*s, SlotState::Pinned { pid: p, .. } if p == pid) {
                *s = SlotState::Draining {
                    pid,
                    exited: true,
                    until_ns: ts_ns,
                };
                changed = true;
            }
        }
        if changed {
            self.write_table()?;
            self.update_attachment(ebpf)?;
        }
        Ok(())
    }

    fn write_table(&mut self) -> Result<(), ProbeError> {
        let mut t = PinTable::default();
        let mut words = std::collections::BTreeMap::<u32, u64>::new();
        for (i, s) in self.slots.iter().enumerate() {
            if let SlotState::Pinned { pid, gen_ } = *s {
                t.pins[i] = pin_entry(pid, gen_);
                *words.entry((pid >> 6) & (PIN_BIT_WORDS - 1)).or_default() |= 1 << (pid & 63);
            }
        }
        // The bitmap only filters: the table decides. So new bits go in before the table
        // (a new pin is seen from its first syscall after the table write), old ones come
        // out after it.
        for (&i, &w) in &words {
            let old = self.bit_words.get(&i).copied().unwrap_or(0);
            if w & !old != 0 {
                self.pin_bits
                    .set(i, w | old, 0)
                    .map_err(classify("writing QOS_PIN_BITS"))?;
            }
        }
        self.table
            .set(0, t, 0)
            .map_err(classify("writing QOS_PINS"))?;
        for (&i, &old) in &self.bit_words {
            let w = words.get(&i).copied().unwrap_or(0);
            if w != old {
                self.pin_bits
                    .set(i, w, 0)
                    .map_err(classify("writing QOS_PIN_BITS"))?;
            }
        }
        self.bit_words = words;
        // Order the table write before any later read of the per-CPU marks (see drain).
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        Ok(())
    }

    fn update_attachment(&mut self, ebpf: &mut Ebpf) -> Result<(), ProbeError> {
        let any = self
            .slots
            .iter()
            .any(|s| matches!(s, SlotState::Pinned { .. }));
        match (any, self.links.is_some()) {
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
                self.open
                    .write(0, &vec![0u8; OPEN_SLOTS])
                    .map_err(classify("clearing QOS_OPEN"))?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Zero a slot's data in both interval buffers and its histogram assignment. Only for a
    /// slot absent from the kernel's table, after the handshake in `drain` or `wait_cpus`.
    fn clear_slot(&mut self, i: usize) -> Result<(), ProbeError> {
        let i = i as u32;
        let zero_sys = vec![SysStat::default(); NR_SLOTS * self.sys.copies()];
        let zero_hist = vec![0u32; SYS_HISTS * BUCKETS];
        let zero_pin = vec![PinStat::default(); self.pin.copies()];
        for parity in 0..2u32 {
            let k = parity * MAX_PINS as u32 + i;
            self.sys
                .write(k, &zero_sys)
                .map_err(classify("clearing QOS_SYS"))?;
            self.hist
                .write(k, &zero_hist)
                .map_err(classify("clearing QOS_HIST"))?;
            self.pin
                .write(k, &zero_pin)
                .map_err(classify("clearing QOS_PIN"))?;
        }
        self.hist_idx
            .write(i, &vec![0u64; NR_SLOTS])
            .map_err(classify("clearing QOS_HIST_IDX"))?;
        self.pin_state
            .set(i, PinState::default(), 0)
            .map_err(classify("clearing QOS_PIN_STATE"))
    }

    /// Free every draining slot now (after waiting out in-flight runs), without reading it.
    fn release_draining(&mut self) -> Result<(), ProbeError> {
        self.write_table()?;
        self.wait_cpus(None).map_err(classify("QoS handshake"))?;
        for i in 0..MAX_PINS {
            if matches!(self.slots[i], SlotState::Draining { .. }) {
                self.clear_slot(i)?;
                self.slots[i] = SlotState::Free;
            }
        }
        Ok(())
    }

    /// Wait until no CPU is inside a `sys_exit` run that started before now. With
    /// `first_seen`, that earlier read of the marks is used as the starting point.
    fn wait_cpus(&mut self, first_seen: Option<Vec<u64>>) -> Result<(), aya::maps::MapError> {
        let start = match first_seen {
            Some(s) => s,
            None => self.cpu.get(&0, 0)?.iter().map(|c| c.seq).collect(),
        };
        let deadline = Instant::now() + HANDSHAKE_TIMEOUT;
        let mut busy: Vec<(usize, u64)> = start
            .iter()
            .enumerate()
            .filter(|(_, s)| *s % 2 == 1)
            .map(|(i, s)| (i, *s))
            .collect();
        while !busy.is_empty() {
            if Instant::now() > deadline {
                self.handshake_timeouts += busy.len() as u64;
                break;
            }
            std::thread::yield_now();
            let now: Vec<u64> = self.cpu.get(&0, 0)?.iter().map(|c| c.seq).collect();
            // A CPU whose mark moved has finished the run we waited for.
            busy.retain(|(i, s)| now.get(*i) == Some(s));
        }
        Ok(())
    }

    /// A flip at `end_ns` has closed the interval of parity `old_parity`: read it for every
    /// pinned (and draining) process and clear it for reuse.
    pub(super) fn drain(
        &mut self,
        old_parity: u32,
        end_ns: u64,
    ) -> Result<Vec<QosRaw>, ProbeError> {
        if self.slots.iter().all(|s| *s == SlotState::Free) {
            return Ok(Vec::new());
        }
        self.wait_cpus(None).map_err(classify("QoS handshake"))?;
        let mut out = Vec::new();
        for i in 0..MAX_PINS {
            let (pid, last, exited) = match self.slots[i] {
                SlotState::Free => continue,
                SlotState::Pinned { pid, .. } => (pid, false, false),
                SlotState::Draining {
                    pid,
                    exited,
                    until_ns,
                } => (pid, until_ns <= end_ns, exited),
            };
            let k = old_parity * MAX_PINS as u32 + i as u32;
            let mut sys = vec![SysStat::default(); NR_SLOTS * self.sys.copies()];
            let mut hists = vec![0u32; SYS_HISTS * BUCKETS];
            let mut pin = vec![PinStat::default(); self.pin.copies()];
            let mut hist_idx = vec![0u64; NR_SLOTS];
            let e = |what: &'static str| classify(what);
            self.sys.read(k, &mut sys).map_err(e("reading QOS_SYS"))?;
            self.hist
                .read(k, &mut hists)
                .map_err(e("reading QOS_HIST"))?;
            self.pin.read(k, &mut pin).map_err(e("reading QOS_PIN"))?;
            self.hist_idx
                .read(i as u32, &mut hist_idx)
                .map_err(e("reading QOS_HIST_IDX"))?;
            self.sys
                .write(k, &vec![SysStat::default(); NR_SLOTS * self.sys.copies()])
                .map_err(e("clearing QOS_SYS"))?;
            self.hist
                .write(k, &vec![0u32; SYS_HISTS * BUCKETS])
                .map_err(e("clearing QOS_HIST"))?;
            self.pin
                .write(k, &vec![PinStat::default(); self.pin.copies()])
                .map_err(e("clearing QOS_PIN"))?;
            let sys = fold_sys(&sys);
            let pin = Box::new(fold_pin(&pin));
            out.push(QosRaw {
                pid,
                sys,
                hist_idx,
                hists,
                pin,
                last,
                exited: exited && last,
            });
            if last {
                // Both buffers of a draining slot are now read or empty: free it.
                self.clear_slot(i)?;
                self.slots[i] = SlotState::Free;
            }
        }
        Ok(out)
    }

    /// Rebuild the listening-port bitmap from the pinned processes' sockets in /proc. (The
    /// kernel adds the ports of `listen()` calls made while pinned by itself.)
    fn refresh_ports(&mut self) -> Result<(), ProbeError> {
        let mut words = vec![0u64; PORT_WORDS as usize];
        for pid in self.pinned() {
            for port in crate::procnet::listening_ports(pid) {
                words[usize::from(port >> 6)] |= 1 << (port & 63);
            }
        }
        for (i, (w, old)) in words.iter().zip(&mut self.port_words).enumerate() {
            // Words the kernel may have set by itself are rewritten too.
            if *w != 0 || *old != 0 || i == 0 {
                self.ports
                    .set(i as u32, *w, 0)
                    .map_err(classify("writing QOS_PORTS"))?;
                *old = *w;
            }
        }
        Ok(())
    }
}
