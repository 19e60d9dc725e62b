//! The live source: the eBPF programs loaded and attached, drained every tick into a
//! `RawInterval`, turned into a Batch with what /proc knows of each process (names, command
//! lines, owners; cached and invalidated by the kernel's exec and exit events), the last-known
//! RSS of every process, the pinned processes' QoS and ebee-top's own cost.

mod cgroup;
mod cost;
pub mod mem;
mod qos;
mod servers;
mod wait;

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use ebee_shared::lifecycle::{EVENT_EXEC, EVENT_EXIT};
// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::{HashMap, HashMapExt as _, HashSet, HashSetExt as _};

use super::Source;
use crate::batch::{Batch, CpuRow, Dropped, Exit, MEM_TOP_ROWS, MemStats};
use crate::os::procinfo::{ProcCache, comm_str};
use crate::probes::{CpuCharge, ProbeConfig, Probes};
use mem::MemTable;

/// The kernel, drained every `interval`.
pub struct Live {
    probes: Probes,
    procs: ProcCache,
    interval: Duration,
    deadline: Instant,
    seq: u64,
    lifecycle_lost: u64,
    prog_errors: u64,
    pins: Vec<u32>,
    cost: cost::CostMeter,
    /// Cumulative QoS handshake timeouts at the last drain.
    qos_timeouts: u64,
    /// Last-known RSS per process from the sketch, and from the exact shadow (`--exact`).
    mem: MemTable,
    mem_exact: Option<MemTable>,
    /// Cgroup paths and memory, process cgroups, thread names.
    cg: cgroup::CgroupSide,
    /// The heap's free pages, handed back now and then.
    heap: crate::os::residency::HeapTrim,
    /// When each ancestor was last sent in `Batch::lineage` (ms of wall-clock time).
    lineage_sent: HashMap<u32, u64>,
    /// The pids `lineage` has looked at this interval; kept, emptied, from one to the next
    /// so that its table is not allocated every interval.
    lineage_seen: HashSet<u32>,
}

impl Live {
    /// Load and attach the programs; the first interval starts now.
    pub fn start(cfg: ProbeConfig, interval: Duration) -> Result<Self, crate::probes::ProbeError> {
        let mut probes = Probes::load(cfg, interval)?;
        // The interval open since loading includes the attach itself; close and discard it so
        // the first reported interval starts with everything attached.
        probes.drain()?;
        // Seed every process's RSS once, after attaching: a change after this read arrives as
        // an event in the first interval, and the last event of a process always carries a
        // value at least as new as this read (every counter change fires one).
        let mut mem = MemTable::new(probes.page_size());
        let mut mem_exact = cfg.shadow.then(|| MemTable::new(probes.page_size()));
        if probes.mem_available() {
            let seed = crate::os::rss::proc_rss(probes.page_size());
            if let Some(e) = mem_exact.as_mut() {
                e.seed(seed.iter().copied());
            }
            mem.seed(seed);
        }
        Ok(Self {
            cg: cgroup::CgroupSide::new(probes.cgroup_fs().cloned()),
            heap: crate::os::residency::HeapTrim::new(),
            mem,
            mem_exact,
            probes,
            procs: ProcCache::new(),
            interval,
            deadline: Instant::now() + interval,
            seq: 0,
            lifecycle_lost: 0,
            prog_errors: 0,
            pins: Vec::new(),
            qos_timeouts: 0,
            cost: cost::CostMeter::start(),
            lineage_sent: HashMap::new(),
            lineage_seen: HashSet::new(),
        })
    }

    /// The processes pinned now (a pinned process that exits is dropped after its last batch).
    pub fn pins(&self) -> &[u32] {
        &self.pins
    }

    /// The loaded probes (map report, program statistics).
    pub fn probes(&self) -> &Probes {
        &self.probes
    }

    /// The ancestors of `procs` not in it, each when first seen and again every
    /// `LINEAGE_REFRESH_MS`, and the processes reparented since the last interval: what the
    /// process tree needs beyond the rows. Each pid is looked at once per interval.
    fn lineage(
        &mut self,
        procs: &[crate::batch::ProcInfo],
        t_ms: u64,
    ) -> Vec<crate::batch::ProcInfo> {
        // Sized for the rows and as many ancestors up front, not rehashed as it grows; the
        // last interval's table, emptied.
        let mut seen = std::mem::take(&mut self.lineage_seen);
        seen.clear();
        seen.reserve(2 * procs.len());
        seen.extend(procs.iter().map(|p| p.pid));
        let mut out = Vec::new();
        for pid in self.procs.take_reparented() {
            if seen.insert(pid) {
                let mut info = self.procs.get(pid);
                self.cg.fill(&mut info);
                if info.ppid.is_some() {
                    self.lineage_sent.insert(pid, t_ms);
                    out.push(info);
                }
            }
        }
        let mut up: Vec<u32> = procs.iter().filter_map(|p| p.ppid).collect();
        while let Some(pid) = up.pop() {
            // 0 is the parent of init and of kthreadd: no process.
            if pid == 0 || !seen.insert(pid) {
                continue;
            }
            let fresh = self
                .lineage_sent
                .get(&pid)
                .is_some_and(|&t| t_ms.saturating_sub(t) < crate::batch::LINEAGE_REFRESH_MS);
            let Some(pp) = self.procs.parent(pid) else {
                continue;
            };
            up.push(pp);
            if !fresh {
                self.lineage_sent.insert(pid, t_ms);
                let mut info = self.procs.get(pid);
                self.cg.fill(&mut info);
                out.push(info);
            }
        }
        self.lineage_seen = seen;
        out
    }

    fn rows(&self, charges: &[CpuCharge], nbins: usize) -> Vec<CpuRow> {
        charges
            .iter()
            .map(|c| CpuRow {
                pid: c.tgid,
                ns: c.ns,
                bins: c.bins_upto(nbins),
            })
            .collect()
    }
}

impl Source for Live {
    fn next_batch(&mut self) -> anyhow::Result<Option<Batch>> {
        // In the time before the tick, which is idle.
        self.heap.tick();
        let now = Instant::now();
        if self.deadline > now {
            std::thread::sleep(self.deadline - now);
        }
        // Absolute deadlines keep the tick from drifting; after a long stall, start afresh.
        self.deadline += self.interval;
        if self.deadline < Instant::now() {
            self.deadline = Instant::now() + self.interval;
        }
        let mut raw = self.probes.drain().context("draining the kernel maps")?;
        self.seq += 1;

        if raw.lifecycle_lost != self.lifecycle_lost {
            // Lost exec/exit events: cached names may belong to dead processes.
            self.procs.clear();
            self.cg.clear();
            self.lineage_sent.clear();
        }
        // Memory: fold this interval's readings in before the exits, which then forget the
        // processes that ended.
        let mem_raw = raw.mem.take().unwrap_or_default();
        let mem_changes = self.mem.apply(&mem_raw.readings);
        let mem_exact_changes = match (self.mem_exact.as_mut(), mem_raw.exact.as_ref()) {
            (Some(t), Some(e)) => Some(t.apply(e)),
            _ => None,
        };
        let mut exits = Vec::new();
        for ev in &raw.lifecycle {
            match ev.kind {
                EVENT_EXEC => {
                    self.procs.on_exec(ev.tgid);
                    self.cg.forget(ev.tgid);
                }
                EVENT_EXIT => {
                    self.cg.exited(ev.tgid);
                    self.mem.exit(ev.tgid);
                    if let Some(t) = self.mem_exact.as_mut() {
                        t.exit(ev.tgid);
                    }
                    self.procs.on_exit(ev.tgid, comm_str(&ev.comm));
                    self.lineage_sent.remove(&ev.tgid);
                    exits.push(Exit {
                        pid: ev.tgid,
                        ts_ns: ev.ts,
                    });
                }
                _ => {}
            }
        }
        let interval_ns = raw.end_ns.saturating_sub(raw.start_ns);
        let nbins = (interval_ns.div_ceil(raw.bin_width_ns.max(1)) as usize)
            .clamp(1, ebee_shared::cpu::BURST_BINS);
        let cpu = self.rows(&raw.rows, nbins);
        self.cg.note_processes(&raw.rows);
        let threads = raw
            .cgroups
            .threads
            .as_ref()
            .map(|t| self.cg.threads(t, nbins));
        let threads_exact = raw.cgroups.threads_exact.as_ref().map(|e| {
            let pid_of: HashMap<u32, u32> = raw
                .cgroups
                .threads
                .iter()
                .flatten()
                .map(|t| (t.tgid, t.aux))
                .collect();
            let rows: Vec<CpuCharge> = e
                .iter()
                .map(|t| CpuCharge {
                    aux: pid_of.get(&t.tgid).copied().unwrap_or(0),
                    ..t.clone()
                })
                .collect();
            self.cg.threads(&rows, nbins)
        });
        let (cgroups, cgroups_exact, cgroups_removed, cgroup_stats) = self.cg.rows(&raw.cgroups);
        let cpu_exact = raw.exact.as_ref().map(|e| self.rows(e, nbins));
        let mut pids: Vec<u32> = cpu.iter().map(|r| r.pid).collect();
        if let Some(e) = &cpu_exact {
            pids.extend(e.iter().map(|r| r.pid));
        }
        let mem = self.mem.rows(&mem_changes, MEM_TOP_ROWS);
        let mem_exact = match (&self.mem_exact, &mem_exact_changes) {
            (Some(t), Some(c)) => Some(t.rows(c, MEM_TOP_ROWS)),
            _ => None,
        };
        pids.extend(mem.iter().map(|r| r.pid));
        if let Some(e) = &mem_exact {
            pids.extend(e.iter().map(|r| r.pid));
        }
        pids.extend(exits.iter().map(|e| e.pid));
        let w = &raw.waits;
        let (wait, io) = (wait::wait_rows(&w.wait), wait::io_rows(&w.io));
        let offcpu = wait::offcpu_rows(&w.wait);
        pids.extend(offcpu.iter().map(|r| r.pid));
        let wait_by = wait::wait_by_rows(&w.pairs);
        let (caused, caused_rest_ns) = wait::caused_rows(&w.pairs);
        pids.extend(wait_by.iter().map(|r| r.pid));
        pids.extend(caused.iter().map(|r| r.pid));
        pids.extend(wait_by.iter().map(|r| r.culprit).filter(|&c| {
            c != crate::batch::wait::CULPRIT_IDLE && c != crate::batch::wait::CULPRIT_UNKNOWN
        }));
        let wait_exact = w.wait_exact.as_deref().map(wait::wait_rows);
        let io_exact = w.io_exact.as_deref().map(wait::io_rows);
        pids.extend(wait.iter().map(|r| r.pid));
        pids.extend(io.iter().map(|r| r.pid));
        if let Some(e) = &wait_exact {
            pids.extend(e.iter().map(|r| r.pid));
        }
        if let Some(e) = &io_exact {
            pids.extend(e.iter().map(|r| r.pid));
        }
        let srv = raw.servers.as_ref();
        let servers = srv.map(servers::server_rows).unwrap_or_default();
        let net = srv.map(servers::net_rows).unwrap_or_default();
        pids.extend(servers.iter().map(|r| r.pid));
        pids.extend(net.iter().map(|r| r.pid));
        pids.extend(threads.iter().flatten().map(|t| t.pid).filter(|&p| p != 0));
        pids.sort_unstable();
        pids.dedup();
        let procs: Vec<crate::batch::ProcInfo> = pids
            .into_iter()
            .map(|p| {
                let mut info = self.procs.get(p);
                if self.procs.is_known(p) {
                    self.cg.fill(&mut info);
                }
                info
            })
            .collect();
        let t_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        let lineage = self.lineage(&procs, t_ms);
        let qos = crate::batch::qos::QosBatch {
            procs: raw
                .qos
                .iter()
                .map(|q| qos::qos_sample(q, self.procs.get(q.pid).comm.to_string()))
                .collect(),
            handshake_timeouts: raw.qos_handshake_timeouts.saturating_sub(self.qos_timeouts),
            request_model: self.probes.request_model_available(),
        };
        self.qos_timeouts = raw.qos_handshake_timeouts;
        self.procs.end_interval();
        self.cg.end_interval();

        let cost = self
            .cost
            .tick(&self.probes, raw.end_ns.saturating_sub(raw.start_ns));

        let batch = Batch {
            seq: self.seq,
            t_ms,
            start_ns: raw.start_ns,
            end_ns: raw.end_ns,
            bin_width_ns: raw.bin_width_ns,
            ncpus: self.probes.ncpus() as u32,
            switches: raw.updates,
            cpu,
            cpu_exact,
            procs,
            lineage,
            exits,
            pinned: qos.procs.iter().map(|q| q.pid).collect(),
            dropped: Dropped {
                sketch_evicted_ns: raw.evicted_ns,
                sketch_evictions: raw.evictions,
                lifecycle_lost: raw.lifecycle_lost - self.lifecycle_lost,
                prog_errors: raw.prog_errors.saturating_sub(self.prog_errors),
                handshake_timeouts: raw.handshake_timeouts,
                shadow_full: raw.shadow_full,
            },
            cost,
            qos,
            mem,
            mem_exact,
            mem_stats: MemStats {
                available: self.probes.mem_available(),
                events: mem_raw.events,
                recorded: mem_raw.updates,
                evictions: mem_raw.evictions,
                evicted_max_bytes: ebee_shared::mem::pages_to_bytes(
                    mem_raw.evicted_max_pages,
                    self.probes.page_size(),
                ),
                unattributed: mem_raw.unattributed,
                shadow_full: mem_raw.shadow_full,
                handshake_timeouts: mem_raw.handshake_timeouts,
                tracked: self.mem.len() as u64,
            },
            wait_stats: wait::stats(
                &raw.waits,
                caused_rest_ns,
                self.probes.wait_available(),
                self.probes.io_available(),
                self.probes.offcpu_available(),
            ),
            wait,
            offcpu,
            wait_by,
            caused,
            wait_exact,
            io,
            io_exact,
            servers_stats: servers::stats(srv),
            servers,
            net,
            cgroups,
            cgroups_exact,
            cgroups_removed,
            cgroup_stats,
            threads,
            threads_exact,
        };
        self.lifecycle_lost = raw.lifecycle_lost;
        self.prog_errors = raw.prog_errors;
        self.pins = self.probes.pinned();
        Ok(Some(batch))
    }

    fn set_pins(&mut self, pids: &[u32]) -> anyhow::Result<()> {
        self.probes.set_pins(pids)?;
        self.pins = self.probes.pinned();
        Ok(())
    }

    fn set_threads(&mut self, on: bool) -> anyhow::Result<()> {
        self.probes.set_threads(on)?;
        Ok(())
    }

    fn set_interval(&mut self, interval: Duration) -> anyhow::Result<()> {
        self.interval = interval;
        self.deadline = Instant::now() + interval;
        self.probes
            .set_interval(interval)
            .context("changing the interval")
    }
}
