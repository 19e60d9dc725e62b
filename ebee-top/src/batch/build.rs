//! Batches made by hand, for tests (unit and integration), the fuzzer's seeds and benchmarks:
//! a builder that starts from an empty interval, so a test names only the rows it is about, and
//! [`plausible`], an interval with a bit of everything the recording and replay tests need.
//! Never used on a live path: live Batches come from the kernel, replayed ones from a file.

use super::Name;
use super::cgroup::{CgroupRow, ThreadRow};
use super::qos::{QosSample, RequestSample, SyscallSample};
use super::servers::{NetRow, ServerRow, ServersStats};
use super::wait::{CULPRIT_IDLE, IoRow, OffCpuRow, WaitByRow, WaitRow, WaitStats};
use super::{Batch, CpuRow, Dropped, Exit, MemRow, MemStats, ProcInfo};

/// Builds one Batch; see [`Batch::build`].
#[derive(Clone, Debug)]
#[must_use]
pub struct BatchBuilder(Batch);

impl Batch {
    /// Interval `seq`, covering `start_ns .. start_ns + len_ns` (`CLOCK_MONOTONIC`), with
    /// nothing in it yet and no burst bins (see [`BatchBuilder::bins`]).
    pub fn build(seq: u64, start_ns: u64, len_ns: u64) -> BatchBuilder {
        BatchBuilder(Batch {
            seq,
            start_ns,
            end_ns: start_ns + len_ns,
            ..Default::default()
        })
    }
}

impl ProcInfo {
    /// A process known by pid and name only.
    pub fn named(pid: u32, comm: impl Into<Name>) -> Self {
        Self {
            pid,
            comm: comm.into(),
            ..Default::default()
        }
    }
}

impl BatchBuilder {
    /// Burst bins `width_ns` wide (the rows' `bins` are per bin of this width).
    pub fn bins(mut self, width_ns: u64) -> Self {
        self.0.bin_width_ns = width_ns;
        self
    }

    /// Wall-clock time at the end of the interval, ms since the Unix epoch.
    pub fn wall_ms(mut self, t_ms: u64) -> Self {
        self.0.t_ms = t_ms;
        self
    }

    /// The machine: `ncpus` CPUs and `switches` context switches charged.
    pub fn cpus(mut self, ncpus: u32, switches: u64) -> Self {
        self.0.ncpus = ncpus;
        self.0.switches = switches;
        self
    }

    /// One process's on-CPU time (rows go in the order given: heaviest first, as the kernel's).
    pub fn cpu(mut self, pid: u32, ns: u64, bins: &[u64]) -> Self {
        self.0.cpu.push(CpuRow {
            pid,
            ns,
            bins: bins.to_vec(),
        });
        self
    }

    /// What is known of a process.
    pub fn proc(mut self, p: ProcInfo) -> Self {
        self.0.procs.push(p);
        self
    }

    /// A process that ended at `ts_ns`.
    pub fn exit(mut self, pid: u32, ts_ns: u64) -> Self {
        self.0.exits.push(Exit { pid, ts_ns });
        self
    }

    /// One process's resident memory; the memory pipeline is then marked available.
    pub fn mem(mut self, pid: u32, rss_bytes: u64, rss_delta_bytes: i64) -> Self {
        self.0.mem.push(MemRow {
            pid,
            rss_bytes,
            rss_delta_bytes,
        });
        self.0.mem_stats.available = true;
        self
    }

    /// One pinned process's QoS sample; the request model is marked available.
    pub fn qos(mut self, s: QosSample) -> Self {
        self.0.qos.procs.push(s);
        self.0.qos.request_model = true;
        self
    }

    /// One cgroup's interval (rows in the order given, heaviest first); cgroups are then
    /// marked available, following cgroup v2.
    pub fn cgroup(mut self, id: u64, path: &str, cpu_ns: u64, wait_ns: u64) -> Self {
        self.0.cgroups.push(CgroupRow {
            id,
            path: path.to_owned(),
            cpu_ns,
            wait_ns,
            rss_bytes: None,
        });
        self.0.cgroup_stats.available = true;
        self.0.cgroup_stats.hierarchy = "v2".into();
        self
    }

    /// One thread's on-CPU time (the per-thread mode is then on for the interval).
    pub fn thread(mut self, tid: u32, pid: u32, comm: &str, ns: u64, bins: &[u64]) -> Self {
        self.0.threads.get_or_insert_with(Vec::new).push(ThreadRow {
            tid,
            pid,
            comm: comm.to_owned(),
            ns,
            bins: bins.to_vec(),
            ..ThreadRow::default()
        });
        self.0.cgroup_stats.threads = true;
        self
    }

    /// Anything else, by hand.
    pub fn with(mut self, f: impl FnOnce(&mut Batch)) -> Self {
        f(&mut self.0);
        self
    }

    pub fn done(self) -> Batch {
        self.0
    }
}

/// A plausible 50 ms interval: `n` processes (pids from 1000) with command lines, burst bins,
/// resident memory and run-queue waits, one of them writing to disk, an exit, a pinned process
/// answering requests, and numbers that change with `seq`, so consecutive intervals differ
/// the way live ones do.
pub fn plausible(seq: u64, n: u32) -> Batch {
    let start = seq * 50_000_000;
    let mut b = Batch::build(seq, start, 50_000_000)
        .bins(10_000_000)
        .wall_ms(1_700_000_000_000 + seq * 50)
        .cpus(2, 800 + seq)
        .exit(999, start + 1)
        .qos(QosSample {
            pid: 1000,
            comm: "worker-0".into(),
            syscalls: vec![SyscallSample {
                nr: 0,
                count: 40 + seq,
                total_ns: 2_000_000,
                max_ns: 90_000,
                hist: Some(vec![(120, 30), (180, 10 + seq as u32)]),
            }],
            requests: RequestSample {
                requests: 20,
                total_ns: 1_000_000,
                max_ns: 80_000,
                hist: vec![(150, 20)],
                recvs: 20,
                ..Default::default()
            },
            ..Default::default()
        });
    for i in 0..n {
        let pid = 1000 + i;
        let delta = if i == 0 { 4096 * seq as i64 } else { 0 };
        b = b
            .cpu(
                pid,
                (u64::from(n - i) * 97_531 + seq * 13) % 50_000_000,
                &[u64::from(i) * 1000 + seq; 5],
            )
            .proc(ProcInfo {
                pid,
                start_ticks: u64::from(i) * 7,
                comm: format!("worker-{i}").into(),
                cmdline: format!("/usr/bin/worker --id {i} --config /etc/worker.toml").into(),
                uid: Some(1000),
                kthread: false,
                cgroup: format!("/system.slice/worker-{}.service", i % 3).into(),
                tgid: None,
                ppid: None,
            })
            .mem(pid, u64::from(n - i) << 20, delta);
    }
    b.with(|b| {
        b.dropped = Dropped {
            sketch_evictions: seq % 3,
            ..Default::default()
        };
        b.mem_stats = MemStats {
            available: true,
            events: 10 + seq,
            tracked: u64::from(n),
            ..Default::default()
        };
        b.wait = (0..n)
            .map(|i| WaitRow {
                pid: 1000 + i,
                ns: (u64::from(n - i) * 31_337 + seq * 7) % 20_000_000,
            })
            .collect();
        b.offcpu = (0..n)
            .map(|i| OffCpuRow {
                pid: 1000 + i,
                io_ns: if i == 0 { 3_000_000 + seq * 1_000 } else { 0 },
                blocked_ns: u64::from(i % 3) * 250_000,
                sleep_ns: (u64::from(i) * 7_919_000 + seq * 13) % 50_000_000,
            })
            .collect();
        super::wait::sort_offcpu(&mut b.offcpu);
        b.io = vec![IoRow {
            pid: 1000,
            read_bytes: 4096 * (seq % 3),
            write_bytes: 65_536 * seq,
        }];
        // Who made whom wait: 1001 behind 1000 (another cgroup) and 1003 (its own), 1002
        // behind an idle CPU.
        if n >= 4 {
            b.wait_by = [
                (1001, 1000, 2_000_000 + seq),
                (1001, 1003, 1_000_000),
                (1002, CULPRIT_IDLE, 500_000),
            ]
            .iter()
            .map(|&(pid, culprit, ns)| WaitByRow { pid, culprit, ns })
            .collect();
            b.caused = vec![
                WaitRow {
                    pid: 1000,
                    ns: 2_000_000 + seq,
                },
                WaitRow {
                    pid: 1003,
                    ns: 1_000_000,
                },
            ];
        }
        b.wait_stats = WaitStats {
            available: true,
            io_available: true,
            offcpu_available: true,
            thread_misses: seq % 2,
            ..Default::default()
        };
        b.servers = vec![ServerRow {
            pid: 1001,
            requests: 400 + seq,
            latency_ns: (400 + seq) * 60_000,
            max_ns: 900_000,
            hist: Some(vec![(100, 300), (110, 100 + seq as u32)]),
            conns: Some(12),
        }];
        b.net = vec![NetRow {
            pid: 1001,
            rx_bytes: 40_000 + seq,
            tx_bytes: 120_000,
        }];
        b.servers_stats = ServersStats {
            available: true,
            requests: 400 + seq,
            ..Default::default()
        };
        b.cgroups = (0..3)
            .map(|u| CgroupRow {
                id: 4000 + u,
                path: format!("/system.slice/worker-{u}.service"),
                cpu_ns: (3 - u) * 9_000_000 + seq,
                wait_ns: u * 1_000_000,
                rss_bytes: Some((64 + u) << 20),
            })
            .collect();
        b.cgroup_stats.available = true;
        b.cgroup_stats.hierarchy = "v2".into();
        b.cgroup_stats.updates = 700 + seq;
    })
    .done()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_what_it_is_told_and_nothing_else() {
        let b = Batch::build(3, 1_000, 50)
            .bins(10)
            .cpu(7, 40, &[10, 30])
            .proc(ProcInfo::named(7, "x"))
            .exit(8, 1_020)
            .done();
        assert_eq!(
            (b.seq, b.start_ns, b.end_ns, b.bin_width_ns),
            (3, 1_000, 1_050, 10)
        );
        assert_eq!(b.cpu[0].bins, vec![10, 30]);
        assert_eq!(&*b.procs[0].comm, "x");
        assert_eq!(b.exits[0].pid, 8);
        assert!(b.mem.is_empty() && !b.mem_stats.available && b.qos.procs.is_empty());
    }

    #[test]
    fn plausible_intervals_follow_each_other() {
        let (a, b) = (plausible(1, 4), plausible(2, 4));
        assert_eq!(a.end_ns, b.start_ns);
        assert_eq!((a.cpu.len(), a.procs.len(), a.mem.len()), (4, 4, 4));
        assert_ne!(a.cpu, b.cpu);
        assert!(a.mem_stats.available && a.qos.request_model);
    }
}
