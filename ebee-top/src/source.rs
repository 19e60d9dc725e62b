//! Where Batches come from. `Live` drains the kernel every tick; a recording will be another
//! `Source`. Everything downstream of a Batch is shared.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use ebee_shared::lifecycle::{EVENT_EXEC, EVENT_EXIT};

use crate::batch::{Batch, CpuRow, Dropped, Exit, MEM_TOP_ROWS, MemStats, SelfCost};
use crate::probes::mem::MemTable;
use crate::probes::{CpuCharge, ProbeConfig, Probes};
use crate::procinfo::{ProcCache, comm_str};

/// A producer of closed intervals.
pub trait Source {
    /// Block until the next interval is closed. `None` when the source has no more.
    fn next_batch(&mut self) -> anyhow::Result<Option<Batch>>;
    /// Change the interval length (live sources only; others ignore it).
    fn set_interval(&mut self, interval: Duration) -> anyhow::Result<()>;
    /// Set the processes pinned for detailed tracking (live sources only).
    fn set_pins(&mut self, pids: &[u32]) -> anyhow::Result<()>;
}

/// The kernel, drained every `interval`.
pub struct Live {
    probes: Probes,
    procs: ProcCache,
    interval: Duration,
    deadline: Instant,
    seq: u64,
    lifecycle_lost: u64,
    pins: Vec<u32>,
    cost: CostMeter,
    /// Cumulative QoS handshake timeouts at the last drain.
    qos_timeouts: u64,
    /// Last-known RSS per process from the sketch, and from the exact shadow (`--exact`).
    mem: MemTable,
    mem_exact: Option<MemTable>,
}

/// Differences of ebee-top's own CPU clock and of its programs' BPF run time between ticks.
struct CostMeter {
    cpu_ns: u64,
    bpf: crate::probes::ProgStats,
}

/// CPU time of this process (all threads), ns.
fn process_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; CLOCK_PROCESS_CPUTIME_ID always exists on Linux.
    if unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
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
            let seed = crate::probes::mem::proc_rss(probes.page_size());
            if let Some(e) = mem_exact.as_mut() {
                e.seed(seed.iter().copied());
            }
            mem.seed(seed);
        }
        Ok(Self {
            mem,
            mem_exact,
            probes,
            procs: ProcCache::new(),
            interval,
            deadline: Instant::now() + interval,
            seq: 0,
            lifecycle_lost: 0,
            pins: Vec::new(),
            qos_timeouts: 0,
            cost: CostMeter {
                cpu_ns: process_cpu_ns(),
                bpf: crate::probes::ProgStats::default(),
            },
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

    fn rows(&self, charges: &[CpuCharge], nbins: usize) -> Vec<CpuRow> {
        charges
            .iter()
            .map(|c| CpuRow {
                pid: c.tgid,
                ns: c.ns,
                bins: c.bins[..nbins].to_vec(),
            })
            .collect()
    }
}

impl Source for Live {
    fn next_batch(&mut self) -> anyhow::Result<Option<Batch>> {
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
                EVENT_EXEC => self.procs.on_exec(ev.tgid),
                EVENT_EXIT => {
                    self.mem.exit(ev.tgid);
                    if let Some(t) = self.mem_exact.as_mut() {
                        t.exit(ev.tgid);
                    }
                    self.procs.on_exit(ev.tgid, comm_str(&ev.comm));
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
        pids.sort_unstable();
        pids.dedup();
        let procs = pids.into_iter().map(|p| self.procs.get(p)).collect();
        let qos = crate::batch_qos::QosBatch {
            procs: raw
                .qos
                .iter()
                .map(|q| qos_sample(q, self.procs.get(q.pid).comm))
                .collect(),
            handshake_timeouts: raw.qos_handshake_timeouts.saturating_sub(self.qos_timeouts),
            request_model: self.probes.request_model_available(),
        };
        self.qos_timeouts = raw.qos_handshake_timeouts;
        self.procs.end_interval();

        let cpu_now = process_cpu_ns();
        let bpf_now = self.probes.prog_stats();
        let cost = SelfCost {
            cpu_ns: cpu_now.saturating_sub(self.cost.cpu_ns),
            bpf_ns: bpf_now
                .enabled
                .then(|| bpf_now.run_ns.saturating_sub(self.cost.bpf.run_ns)),
            bpf_runs: bpf_now
                .enabled
                .then(|| bpf_now.run_count.saturating_sub(self.cost.bpf.run_count)),
        };
        self.cost = CostMeter {
            cpu_ns: cpu_now,
            bpf: bpf_now,
        };

        let batch = Batch {
            seq: self.seq,
            t_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            start_ns: raw.start_ns,
            end_ns: raw.end_ns,
            bin_width_ns: raw.bin_width_ns,
            ncpus: self.probes.ncpus() as u32,
            switches: raw.updates,
            cpu,
            cpu_exact,
            procs,
            exits,
            pinned: qos.procs.iter().map(|q| q.pid).collect(),
            dropped: Dropped {
                sketch_evicted_ns: raw.evicted_ns,
                sketch_evictions: raw.evictions,
                lifecycle_lost: raw.lifecycle_lost - self.lifecycle_lost,
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
        };
        self.lifecycle_lost = raw.lifecycle_lost;
        self.pins = self.probes.pinned();
        Ok(Some(batch))
    }

    fn set_pins(&mut self, pids: &[u32]) -> anyhow::Result<()> {
        self.probes.set_pins(pids)?;
        self.pins = self.probes.pinned();
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

/// One pinned process's raw interval as a Batch sample.
fn qos_sample(q: &crate::probes::qos::QosRaw, comm: String) -> crate::batch_qos::QosSample {
    use crate::batch_qos::{QosLost, QosSample, RequestSample, SyscallSample, sparse};
    let syscalls = q
        .sys
        .iter()
        .enumerate()
        .filter(|(_, s)| s.count > 0)
        .map(|(nr, s)| {
            let h = q.hist_idx.get(nr).copied().unwrap_or(0) as usize;
            SyscallSample {
                nr: nr as u32,
                count: s.count,
                total_ns: s.total_ns,
                max_ns: s.max_ns,
                hist: (h != 0).then(|| sparse(q.hist(h))),
            }
        })
        .collect();
    let p = &q.pin;
    QosSample {
        pid: q.pid,
        comm,
        last: q.last,
        exited: q.exited,
        syscalls,
        other_hist: sparse(q.hist(0)),
        requests: RequestSample {
            requests: p.requests,
            total_ns: p.req_total_ns,
            max_ns: p.req_max_ns,
            hist: sparse(&p.req_hist.buckets),
            recvs: p.recvs,
            sends_idle: p.sends_idle,
            other_sock_io: p.other_sock_io,
            accepts: p.accepts,
        },
        lost: QosLost {
            unmatched: p.unmatched,
            hist_full: p.hist_full,
            conn_full: p.conn_full,
        },
    }
}
