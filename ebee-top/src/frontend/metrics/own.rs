//! Metrics of ebee-top itself: its CPU time and its eBPF programs' run time, the intervals it
//! closed, the context switches it charged, and every loss counter a Batch carries, summed
//! since it started.

use prometheus_client::registry::Unit;

use super::exposition::{Family, Kind, Value};
use super::meter::{Section, counter, gauge, secs};
use crate::batch::Batch;

/// Cumulative counters of ebee-top's own.
#[derive(Debug, Default)]
pub struct Own {
    intervals: u64,
    interval_ns: u64,
    switches: u64,
    cpu_ns: u64,
    /// None until a Batch carried BPF statistics (they are off with `--no-bpf-stats`, and
    /// while something is pinned).
    bpf_ns: Option<u64>,
    bpf_runs: Option<u64>,
    lost: Lost,
    cpu_lost_ns: u64,
    wait_lost_ns: u64,
    io_lost_bytes: u64,
}

/// Every loss counter of a Batch, summed; one series each of `ebee_losses_total`.
#[derive(Debug, Default)]
struct Lost([u64; LOSSES.len()]);

/// `(pipeline, kind)` labels of `ebee_losses_total`, in the order `losses` reads them.
const LOSSES: [(&str, &str); 22] = [
    ("cpu", "sketch_evictions"),
    ("cpu", "handshake_timeouts"),
    ("cpu", "shadow_full"),
    ("cpu", "program_errors"),
    ("lifecycle", "ring_full"),
    ("mem", "sketch_evictions"),
    ("mem", "unattributed"),
    ("mem", "shadow_full"),
    ("mem", "handshake_timeouts"),
    ("wait", "sketch_evictions"),
    ("wait", "thread_misses"),
    ("wait", "shadow_full"),
    ("io", "sketch_evictions"),
    ("qos", "handshake_timeouts"),
    ("qos", "unmatched_syscalls"),
    ("qos", "histograms_full"),
    ("qos", "connection_table_full"),
    ("servers", "sketch_evictions"),
    ("servers", "unhistogrammed_requests"),
    ("servers", "connection_table_full"),
    ("servers", "count_table_full"),
    ("net", "sketch_evictions"),
];

fn losses(b: &Batch) -> [u64; LOSSES.len()] {
    let (d, m, w) = (&b.dropped, &b.mem_stats, &b.wait_stats);
    let q = |f: fn(&crate::batch::qos::QosLost) -> u64| -> u64 {
        b.qos.procs.iter().map(|p| f(&p.lost)).sum()
    };
    [
        d.sketch_evictions,
        d.handshake_timeouts,
        d.shadow_full,
        d.prog_errors,
        d.lifecycle_lost,
        m.evictions,
        m.unattributed,
        m.shadow_full,
        m.handshake_timeouts,
        w.evictions,
        w.thread_misses,
        w.shadow_full,
        w.io_evictions,
        b.qos.handshake_timeouts,
        q(|l| l.unmatched),
        q(|l| l.hist_full),
        q(|l| l.conn_full),
        b.servers_stats.evictions,
        b.servers_stats.unhistogrammed,
        b.servers_stats.conns_full,
        b.servers_stats.counts_full,
        b.servers_stats.net_evictions,
    ]
}

impl Section for Own {
    fn ingest(&mut self, b: &Batch) {
        self.intervals += 1;
        self.interval_ns = b.interval_ns();
        self.switches += b.switches;
        self.cpu_ns += b.cost.cpu_ns;
        if let Some(ns) = b.cost.bpf_ns {
            *self.bpf_ns.get_or_insert(0) += ns;
        }
        if let Some(n) = b.cost.bpf_runs {
            *self.bpf_runs.get_or_insert(0) += n;
        }
        for (sum, n) in self.lost.0.iter_mut().zip(losses(b)) {
            *sum += n;
        }
        self.cpu_lost_ns += b.dropped.sketch_evicted_ns;
        self.wait_lost_ns += b.wait_stats.evicted_ns;
        self.io_lost_bytes += b.wait_stats.io_evicted_bytes;
    }

    fn families(&self, out: &mut Vec<Family>) {
        out.push(counter(
            "ebee_intervals",
            "Intervals ebee-top closed and drained.",
            None,
            self.intervals as f64,
        ));
        out.push(gauge(
            "ebee_interval",
            "Length of the last interval.",
            Some(Unit::Seconds),
            secs(self.interval_ns),
        ));
        out.push(counter(
            "ebee_context_switches",
            "Context switches charged by the CPU pipeline.",
            None,
            self.switches as f64,
        ));
        out.push(counter(
            "ebee_self_cpu",
            "CPU time of the ebee-top process (user + system, all threads).",
            Some(Unit::Seconds),
            secs(self.cpu_ns),
        ));
        if let Some(ns) = self.bpf_ns {
            out.push(counter(
                "ebee_self_bpf_run",
                "Run time of ebee-top's eBPF programs (kernel BPF statistics; not counted \
                 while they are off).",
                Some(Unit::Seconds),
                secs(ns),
            ));
        }
        if let Some(n) = self.bpf_runs {
            out.push(counter(
                "ebee_self_bpf_runs",
                "Runs of ebee-top's eBPF programs (kernel BPF statistics).",
                None,
                n as f64,
            ));
        }
        let mut l = Family::new(
            "ebee_losses",
            "Things ebee-top could not count, by pipeline and kind (sketch entries evicted, \
             events lost, CPUs that missed a handshake); zero is the normal case.",
            None,
            Kind::Counter,
        );
        for ((pipeline, kind), n) in LOSSES.iter().zip(self.lost.0) {
            l.push(
                vec![("pipeline", (*pipeline).into()), ("kind", (*kind).into())],
                Value::Counter(n as f64),
            );
        }
        out.push(l);
        out.push(counter(
            "ebee_lost_cpu",
            "On-CPU time that fell out of the CPU sketch (attributed to no process).",
            Some(Unit::Seconds),
            secs(self.cpu_lost_ns),
        ));
        out.push(counter(
            "ebee_lost_wait",
            "Run-queue wait that fell out of the wait sketch.",
            Some(Unit::Seconds),
            secs(self.wait_lost_ns),
        ));
        out.push(counter(
            "ebee_lost_io",
            "Disk bytes that fell out of the I/O sketch.",
            Some(Unit::Bytes),
            self.io_lost_bytes as f64,
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::SelfCost;

    fn value(out: &[Family], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let f = out.iter().find(|f| f.exposed_name() == name)?;
        let s = f.series.iter().find(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.iter().any(|(k2, v2)| k2 == k && v2 == v))
        })?;
        match s.value {
            Value::Counter(v) | Value::Gauge(v) => Some(v),
            Value::Histogram { .. } => None,
        }
    }

    #[test]
    fn counters_accumulate_and_bpf_appears_once_known() {
        let mut o = Own::default();
        let b = |seq, bpf: Option<u64>| {
            Batch::build(seq, seq * 50_000_000, 50_000_000)
                .cpus(2, 100)
                .with(|b| {
                    b.cost = SelfCost {
                        cpu_ns: 1_000_000,
                        bpf_ns: bpf,
                        bpf_runs: bpf.map(|_| 10),
                        bpf_sampled: false,
                    };
                    b.dropped.sketch_evictions = 2;
                    b.dropped.sketch_evicted_ns = 3_000_000;
                    b.wait_stats.thread_misses = 1;
                })
                .done()
        };
        o.ingest(&b(1, None));
        let mut out = Vec::new();
        o.families(&mut out);
        assert!(value(&out, "ebee_self_bpf_run_seconds_total", &[]).is_none());
        o.ingest(&b(2, Some(500_000)));
        o.ingest(&b(3, Some(500_000)));
        let mut out = Vec::new();
        o.families(&mut out);
        assert_eq!(value(&out, "ebee_intervals_total", &[]), Some(3.0));
        assert_eq!(value(&out, "ebee_context_switches_total", &[]), Some(300.0));
        assert_eq!(value(&out, "ebee_self_cpu_seconds_total", &[]), Some(0.003));
        assert_eq!(
            value(&out, "ebee_self_bpf_run_seconds_total", &[]),
            Some(0.001)
        );
        assert_eq!(value(&out, "ebee_self_bpf_runs_total", &[]), Some(20.0));
        assert_eq!(value(&out, "ebee_interval_seconds", &[]), Some(0.05));
        assert_eq!(
            value(
                &out,
                "ebee_losses_total",
                &[("pipeline", "cpu"), ("kind", "sketch_evictions")]
            ),
            Some(6.0)
        );
        assert_eq!(
            value(
                &out,
                "ebee_losses_total",
                &[("pipeline", "wait"), ("kind", "thread_misses")]
            ),
            Some(3.0)
        );
        assert_eq!(value(&out, "ebee_lost_cpu_seconds_total", &[]), Some(0.009));
    }
}
