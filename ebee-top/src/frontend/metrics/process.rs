//! Per-process metrics: on-CPU time, run-queue wait and disk bytes as counters since ebee-top
//! first saw the process, and resident memory as a gauge; labels `pid` and `comm` only (a
//! command line can hold secrets). Every process the Batches charge is counted, but each
//! measure exports only its top K processes, ranked by their recent activity (an exponential
//! window of about ten seconds, so a process does not flicker in and out with each interval),
//! or by resident memory: at most 8 K series. A process that leaves a top K stops being
//! exported for that measure (its series goes stale in Prometheus) and comes back with its
//! counter where it has got to, so `rate()` stays right across the gap.

use std::collections::HashMap;

use prometheus_client::registry::Unit;

use super::exposition::{Family, Kind, Value};
use super::meter::{Section, secs};
use crate::batch::{Batch, ProcInfo};

/// Time constant of the recent activity the top K are ranked by.
pub const RANK_WINDOW_NS: f64 = 10e9;

/// A process no Batch has mentioned for this long is forgotten (its exit event may have been
/// lost); if it shows up again its counters start from zero, which `rate()` takes as a reset.
pub const FORGET_NS: u64 = 600_000_000_000;

/// The counted measures, indexes into `Proc::total` and `Proc::recent`.
const CPU: usize = 0;
const WAIT: usize = 1;
const READ: usize = 2;
const WRITE: usize = 3;
const RX: usize = 4;
const TX: usize = 5;
const CAUSED: usize = 6;
/// Number of counted measures.
const MEASURES: usize = 7;

#[derive(Debug, Default)]
struct Proc {
    start_ticks: u64,
    comm: crate::batch::Name,
    /// Since first seen: on-CPU ns, wait ns, disk bytes read and written, socket bytes
    /// received and sent, wait caused others ns.
    total: [u64; MEASURES],
    /// The same, exponentially decayed with `RANK_WINDOW_NS`.
    recent: [f64; MEASURES],
    rss: Option<u64>,
    /// `end_ns` of the last interval that mentioned it.
    last_seen_ns: u64,
    /// It exited in the last interval: exported once more with its final counts, then gone.
    exited: bool,
}

impl Proc {
    fn from_info(p: &ProcInfo) -> Self {
        Self {
            start_ticks: p.start_ticks,
            comm: p.comm.clone(),
            ..Default::default()
        }
    }
}

/// Every process's counters, and K.
#[derive(Debug)]
pub struct Processes {
    k: usize,
    procs: HashMap<u32, Proc>,
}

impl Processes {
    pub fn new(k: usize) -> Self {
        Self {
            k,
            procs: HashMap::new(),
        }
    }

    fn charge(&mut self, pid: u32, m: usize, amount: u64, now_ns: u64) {
        let p = self.procs.entry(pid).or_default();
        p.total[m] += amount;
        p.recent[m] += amount as f64;
        p.last_seen_ns = now_ns;
    }

    /// The top K pids by recent activity in measure `m` among those with a count.
    fn top(&self, m: usize) -> Vec<(u32, &Proc)> {
        let mut v: Vec<(u32, &Proc)> = self
            .procs
            .iter()
            .filter(|(_, p)| p.total[m] > 0)
            .map(|(pid, p)| (*pid, p))
            .collect();
        v.sort_unstable_by(|(pa, a), (pb, b)| {
            b.recent[m]
                .total_cmp(&a.recent[m])
                .then(b.total[m].cmp(&a.total[m]))
                .then(pa.cmp(pb))
        });
        v.truncate(self.k);
        v
    }
}

fn labels(pid: u32, p: &Proc) -> Vec<(&'static str, String)> {
    vec![("pid", pid.to_string()), ("comm", p.comm.to_string())]
}

impl Section for Processes {
    fn ingest(&mut self, b: &Batch) {
        let now = b.end_ns;
        self.procs
            .retain(|_, p| !p.exited && now.saturating_sub(p.last_seen_ns) < FORGET_NS);
        let decay = (-(b.interval_ns() as f64) / RANK_WINDOW_NS).exp();
        for p in self.procs.values_mut() {
            for r in &mut p.recent {
                *r *= decay;
            }
        }
        for info in &b.procs {
            match self.procs.get_mut(&info.pid) {
                // A reused pid: a new process, new counters.
                Some(p)
                    if p.start_ticks != 0
                        && info.start_ticks != 0
                        && p.start_ticks != info.start_ticks =>
                {
                    *p = Proc::from_info(info);
                }
                Some(p) => {
                    if !info.comm.is_empty() {
                        p.comm.clone_from(&info.comm);
                    }
                    if p.start_ticks == 0 {
                        p.start_ticks = info.start_ticks;
                    }
                }
                None => {
                    self.procs.insert(info.pid, Proc::from_info(info));
                }
            }
        }
        for r in &b.cpu {
            self.charge(r.pid, CPU, r.ns, now);
        }
        for r in &b.wait {
            self.charge(r.pid, WAIT, r.ns, now);
        }
        for r in &b.caused {
            self.charge(r.pid, CAUSED, r.ns, now);
        }
        for r in &b.io {
            self.charge(r.pid, READ, r.read_bytes, now);
            self.charge(r.pid, WRITE, r.write_bytes, now);
        }
        for r in &b.net {
            self.charge(r.pid, RX, r.rx_bytes, now);
            self.charge(r.pid, TX, r.tx_bytes, now);
        }
        for r in &b.mem {
            let p = self.procs.entry(r.pid).or_default();
            p.rss = Some(r.rss_bytes);
            p.last_seen_ns = now;
        }
        for e in &b.exits {
            if let Some(p) = self.procs.get_mut(&e.pid) {
                p.exited = true;
            }
        }
    }

    fn families(&self, out: &mut Vec<Family>) {
        let counted: [(usize, &'static str, &'static str, Unit); MEASURES] = [
            (
                CPU,
                "ebee_process_cpu",
                "On-CPU time of a process (all threads) since ebee-top first saw it; the top K \
                 processes by recent CPU.",
                Unit::Seconds,
            ),
            (
                WAIT,
                "ebee_process_runqueue_wait",
                "Time a process's threads were runnable but waiting for a CPU, summed, since \
                 ebee-top first saw it; the top K by recent wait.",
                Unit::Seconds,
            ),
            (
                READ,
                "ebee_process_disk_read",
                "Bytes a process had the block layer read since ebee-top first saw it; the top \
                 K by recent reads.",
                Unit::Bytes,
            ),
            (
                WRITE,
                "ebee_process_disk_written",
                "Bytes a process had the block layer write since ebee-top first saw it; the top \
                 K by recent writes.",
                Unit::Bytes,
            ),
            (
                RX,
                "ebee_process_network_receive",
                "Bytes a process's sockets received (any family) since ebee-top first saw it; \
                 the top K by recent traffic.",
                Unit::Bytes,
            ),
            (
                TX,
                "ebee_process_network_transmit",
                "Bytes a process's sockets sent (any family) since ebee-top first saw it; the \
                 top K by recent traffic.",
                Unit::Bytes,
            ),
            (
                CAUSED,
                "ebee_process_caused_wait",
                "Run-queue wait a process caused other processes (it ran on their CPU while \
                 they waited for it) since ebee-top first saw it; the top K by recent wait \
                 caused.",
                Unit::Seconds,
            ),
        ];
        for (m, name, help, unit) in counted {
            let seconds = unit == Unit::Seconds;
            let mut f = Family::new(name, help, Some(unit), Kind::Counter);
            for (pid, p) in self.top(m) {
                let v = if seconds {
                    secs(p.total[m])
                } else {
                    p.total[m] as f64
                };
                f.push(labels(pid, p), Value::Counter(v));
            }
            out.push(f);
        }
        let mut rss: Vec<(u32, &Proc, u64)> = self
            .procs
            .iter()
            .filter_map(|(pid, p)| p.rss.filter(|r| *r > 0).map(|r| (*pid, p, r)))
            .collect();
        rss.sort_unstable_by(|a, b| b.2.cmp(&a.2).then(a.0.cmp(&b.0)));
        rss.truncate(self.k);
        let mut f = Family::new(
            "ebee_process_resident_memory",
            "Resident memory of a process (as VmRSS), last known; the top K by it.",
            Some(Unit::Bytes),
            Kind::Gauge,
        );
        for (pid, p, r) in rss {
            f.push(labels(pid, p), Value::Gauge(r as f64));
        }
        out.push(f);
        let mut t = Family::new(
            "ebee_metrics_processes",
            "Processes whose counters ebee-top keeps (exported or not).",
            None,
            Kind::Gauge,
        );
        t.push(vec![], Value::Gauge(self.procs.len() as f64));
        out.push(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::wait::{IoRow, WaitRow};

    const TICK: u64 = 50_000_000;

    fn batch(seq: u64) -> crate::batch::build::BatchBuilder {
        Batch::build(seq, seq * TICK, TICK)
    }

    fn exported(p: &Processes, name: &str) -> Vec<(String, String, f64)> {
        let mut out = Vec::new();
        p.families(&mut out);
        let f = out.iter().find(|f| f.exposed_name() == name).unwrap();
        f.series
            .iter()
            .map(|s| {
                let v = match s.value {
                    Value::Counter(v) | Value::Gauge(v) => v,
                    Value::Histogram { .. } => panic!("histogram"),
                };
                (s.labels[0].1.clone(), s.labels[1].1.clone(), v)
            })
            .collect()
    }

    #[test]
    fn counters_add_up_every_interval_not_just_the_exported_ones() {
        let mut p = Processes::new(1);
        // pid 1 busy at first, then pid 2 overtakes it; pid 1 keeps counting while hidden.
        for seq in 1..=10 {
            p.ingest(
                &batch(seq)
                    .cpu(1, 10_000_000, &[])
                    .proc(ProcInfo::named(1, "one"))
                    .done(),
            );
        }
        assert_eq!(
            exported(&p, "ebee_process_cpu_seconds_total"),
            vec![("1".into(), "one".into(), 0.1)]
        );
        for seq in 11..=400 {
            p.ingest(
                &batch(seq)
                    .cpu(1, 1_000_000, &[])
                    .cpu(2, 40_000_000, &[])
                    .proc(ProcInfo::named(1, "one"))
                    .proc(ProcInfo::named(2, "two"))
                    .done(),
            );
        }
        let e = exported(&p, "ebee_process_cpu_seconds_total");
        assert_eq!(e.len(), 1);
        assert_eq!((e[0].0.as_str(), e[0].1.as_str()), ("2", "two"));
        assert!((e[0].2 - 390.0 * 0.04).abs() < 1e-9);
        // pid 2 stops: after a few window lengths pid 1 is back, with everything it used.
        for seq in 401..=1400 {
            p.ingest(&batch(seq).cpu(1, 1_000_000, &[]).done());
        }
        let e = exported(&p, "ebee_process_cpu_seconds_total");
        assert_eq!(e[0].0, "1");
        assert!((e[0].2 - (0.1 + 1390.0 * 0.001)).abs() < 1e-9, "{e:?}");
    }

    #[test]
    fn waits_io_and_memory_have_their_own_top_k() {
        let mut p = Processes::new(2);
        p.ingest(
            &batch(1)
                .cpu(1, 5, &[])
                .mem(1, 100, 0)
                .mem(2, 300, 0)
                .mem(3, 200, 0)
                .mem(4, 0, 0)
                .with(|b| {
                    b.wait = vec![WaitRow {
                        pid: 3,
                        ns: 2_000_000_000,
                    }];
                    b.io = vec![IoRow {
                        pid: 4,
                        read_bytes: 7,
                        write_bytes: 0,
                    }];
                    b.caused = vec![WaitRow {
                        pid: 5,
                        ns: 1_500_000_000,
                    }];
                })
                .done(),
        );
        let pids = |name| {
            exported(&p, name)
                .into_iter()
                .map(|(pid, _, v)| (pid, v))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            pids("ebee_process_resident_memory_bytes"),
            vec![("2".into(), 300.0), ("3".into(), 200.0)]
        );
        assert_eq!(
            pids("ebee_process_runqueue_wait_seconds_total"),
            vec![("3".into(), 2.0)]
        );
        assert_eq!(
            pids("ebee_process_disk_read_bytes_total"),
            vec![("4".into(), 7.0)]
        );
        assert!(pids("ebee_process_disk_written_bytes_total").is_empty());
        assert_eq!(
            pids("ebee_process_caused_wait_seconds_total"),
            vec![("5".into(), 1.5)]
        );
        assert_eq!(
            pids("ebee_process_cpu_seconds_total"),
            vec![("1".into(), 5e-9)]
        );
    }

    #[test]
    fn exits_reused_pids_and_forgotten_processes() {
        let mut p = Processes::new(5);
        let info = |start| ProcInfo {
            start_ticks: start,
            ..ProcInfo::named(9, "nine")
        };
        p.ingest(&batch(1).cpu(9, 1_000, &[]).proc(info(100)).done());
        p.ingest(&batch(2).cpu(9, 1_000, &[]).proc(info(100)).done());
        assert_eq!(exported(&p, "ebee_process_cpu_seconds_total")[0].2, 2e-6);
        // Same pid, another start time: a new process.
        p.ingest(&batch(3).cpu(9, 1_000, &[]).proc(info(200)).done());
        assert_eq!(exported(&p, "ebee_process_cpu_seconds_total")[0].2, 1e-6);
        // It exits: exported once more with its final count, then gone.
        p.ingest(&batch(4).cpu(9, 1_000, &[]).exit(9, 0).done());
        assert_eq!(exported(&p, "ebee_process_cpu_seconds_total")[0].2, 2e-6);
        p.ingest(&batch(5).done());
        assert!(exported(&p, "ebee_process_cpu_seconds_total").is_empty());
        // A process not mentioned for FORGET_NS is dropped.
        p.ingest(&batch(6).cpu(8, 1_000, &[]).done());
        p.ingest(&batch(6 + FORGET_NS / TICK).done());
        assert!(exported(&p, "ebee_process_cpu_seconds_total").is_empty());
    }
}
