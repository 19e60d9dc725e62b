//! The Meter: a pure fold of Batches into the cumulative counters Prometheus wants, and the
//! [`Snapshot`] of them taken after each interval. It is made of [`Section`]s, one per part of
//! the Batch (processes, pinned processes, ebee-top itself).
//!
//! Adding metrics for a new pipeline (the extension point): write a `Section` whose `ingest`
//! folds that pipeline's part of the Batch into its own cumulative state (counters since
//! ebee-top first saw the series, so `rate()` is right) and whose `families` lists what to
//! export, bounded in series; then add it to [`Meter::new`]. Nothing else changes: the HTTP
//! side, the formats and the tests of the exposition are shared. Server metrics
//! (`ebee_server_requests_total`, `ebee_server_request_duration_seconds`) are meant to go in
//! this way once the servers pipeline puts its rows in the Batch, using
//! [`super::histogram::Buckets`] to turn the kernel's log-linear histograms into Prometheus
//! buckets (as the pinned-process section does, in pinned.rs: copy its shape). In outline:
//! a `Servers` section keyed by whatever identifies a server in those rows (pid and port,
//! say), holding per server a request count, a latency sum and `Buckets::zeros()` counts;
//! `ingest` adds each row's interval to them (`Buckets::add` for the histogram) and forgets
//! servers that ended; `families` emits `ebee_server_requests` (counter) and
//! `ebee_server_request_duration` (`Unit::Seconds`, histogram), bounded by the pipeline's own
//! table size or a top K like process.rs. Then a line in `Meter::new`, a row in the README's
//! metrics table, and the cardinality sums there and in
//! `the_number_of_series_is_bounded_as_documented` below.

use prometheus_client::registry::Unit;

use super::exposition::{Family, Kind, Snapshot, Value};
use super::{cgroups, own, pinned, process, servers};
use crate::batch::Batch;

/// One part of the metrics: its own cumulative state, folded from every Batch.
pub trait Section: Send {
    /// Fold one interval in.
    fn ingest(&mut self, b: &Batch);
    /// Append this section's families, as of the last interval.
    fn families(&self, out: &mut Vec<Family>);
}

/// Every section, and what the metrics front-end itself lost.
pub struct Meter {
    sections: Vec<Box<dyn Section>>,
    /// Intervals the metrics thread could not take (its queue was full); their counts are
    /// missing from the counters.
    queue_dropped: u64,
    /// What the HTTP side closed, refused and could not reload.
    endpoint: EndpointCounts,
}

/// The HTTP side's counters (cumulative).
#[derive(Debug, Default, Clone, Copy)]
pub struct EndpointCounts {
    /// Connections closed to make room for a new one.
    pub evicted: u64,
    /// Connections answered 503.
    pub refused: u64,
    /// TLS handshakes that failed or did not finish in time.
    pub tls_failed: u64,
    /// Requests answered 401.
    pub unauthorized: u64,
    /// Changes of the web config (or its files) that did not load.
    pub reload_errors: u64,
}

impl Meter {
    /// A Meter exporting the top `k` processes per measure.
    pub fn new(k: usize) -> Self {
        Self {
            sections: vec![
                Box::new(own::Own::default()),
                Box::new(process::Processes::new(k)),
                Box::new(pinned::Pinned::default()),
                Box::new(servers::Servers::new(k)),
                Box::new(cgroups::Cgroups::new(k)),
            ],
            queue_dropped: 0,
            endpoint: EndpointCounts::default(),
        }
    }

    pub fn ingest(&mut self, b: &Batch) {
        for s in &mut self.sections {
            s.ingest(b);
        }
    }

    /// Set the number of intervals the metrics thread had to drop so far.
    pub fn set_queue_dropped(&mut self, n: u64) {
        self.queue_dropped = n;
    }

    /// Set the HTTP side's counters so far.
    pub fn set_connections(&mut self, c: EndpointCounts) {
        self.endpoint = c;
    }

    /// Every family as of the last interval.
    pub fn snapshot(&self) -> Snapshot {
        let mut out = Vec::new();
        for s in &self.sections {
            s.families(&mut out);
        }
        let mut q = Family::new(
            "ebee_metrics_intervals_dropped",
            "Intervals the metrics endpoint could not fold in (its queue was full): their \
             counts are missing from every counter.",
            None,
            Kind::Counter,
        );
        q.push(vec![], Value::Counter(self.queue_dropped as f64));
        out.push(q);
        let mut c = Family::new(
            "ebee_metrics_connections_closed",
            "Connections to the metrics endpoint closed before a request of theirs was \
             served: evicted (made room for a new connection: silent, kept alive between \
             requests, or too slow to take a response), refused (answered 503: every \
             connection held was being served) or tls_failed (a TLS handshake that failed \
             or did not finish in time).",
            None,
            Kind::Counter,
        );
        let e = self.endpoint;
        for (reason, n) in [
            ("evicted", e.evicted),
            ("refused", e.refused),
            ("tls_failed", e.tls_failed),
        ] {
            c.push(vec![("reason", reason.into())], Value::Counter(n as f64));
        }
        out.push(c);
        out.push(counter(
            "ebee_metrics_unauthorized_requests",
            "Requests to the metrics endpoint answered 401 (basic auth from --web-config: no \
             credential or a wrong one).",
            None,
            e.unauthorized as f64,
        ));
        out.push(counter(
            "ebee_metrics_web_config_reload_errors",
            "Changes on disk to the web config, its certificate, key or CA that did not load \
             (the previous configuration stayed in use).",
            None,
            e.reload_errors as f64,
        ));
        Snapshot::new(out)
    }
}

/// Nanoseconds as seconds.
pub fn secs(ns: u64) -> f64 {
    ns as f64 / 1e9
}

/// A family with one unlabelled counter.
pub fn counter(name: &'static str, help: &'static str, unit: Option<Unit>, v: f64) -> Family {
    let mut f = Family::new(name, help, unit, Kind::Counter);
    f.push(vec![], Value::Counter(v));
    f
}

/// A family with one unlabelled gauge.
pub fn gauge(name: &'static str, help: &'static str, unit: Option<Unit>, v: f64) -> Family {
    let mut f = Family::new(name, help, unit, Kind::Gauge);
    f.push(vec![], Value::Gauge(v));
    f
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::ProcInfo;
    use crate::frontend::metrics::exposition::Format;

    #[test]
    fn an_empty_meter_renders_valid_families() {
        let m = Meter::new(20);
        let text = String::from_utf8(m.snapshot().render(Format::Prometheus).to_vec()).unwrap();
        assert!(text.contains("ebee_intervals_total 0"), "{text}");
        assert!(text.contains("ebee_metrics_intervals_dropped_total 0"));
        assert!(!text.contains("ebee_process_cpu"));
    }

    /// Every series of the worst case: K processes per measure all different, K servers, 8 pins.
    #[test]
    fn the_number_of_series_is_bounded_as_documented() {
        use crate::batch::qos::{QosSample, RequestSample, SyscallSample};
        use crate::batch::wait::{IoRow, WaitRow};
        let k = 7u32;
        let mut m = Meter::new(k as usize);
        let mut b = Batch::build(1, 0, 50_000_000)
            .with(|b| {
                b.cost.bpf_ns = Some(1);
                b.cost.bpf_runs = Some(1);
                b.qos.request_model = true;
            })
            .done();
        // Five disjoint groups of 3K processes, one per measure: only K of each exported.
        for i in 0..3 * k {
            b.cpu.push(crate::batch::CpuRow {
                pid: 1000 + i,
                ns: 1,
                bins: vec![],
            });
            b.wait.push(WaitRow {
                pid: 2000 + i,
                ns: 1,
            });
            b.io.push(IoRow {
                pid: 3000 + i,
                read_bytes: 1,
                write_bytes: 0,
            });
            b.io.push(IoRow {
                pid: 4000 + i,
                read_bytes: 0,
                write_bytes: 1,
            });
            b.mem.push(crate::batch::MemRow {
                pid: 5000 + i,
                rss_bytes: 4096,
                rss_delta_bytes: 0,
            });
            b.net.push(crate::batch::servers::NetRow {
                pid: 6000 + i,
                rx_bytes: 1,
                tx_bytes: 0,
            });
            b.net.push(crate::batch::servers::NetRow {
                pid: 7000 + i,
                rx_bytes: 0,
                tx_bytes: 1,
            });
            b.servers.push(crate::batch::servers::ServerRow {
                pid: 8000 + i,
                requests: 1,
                hist: Some(vec![(100, 1)]),
                ..Default::default()
            });
        }
        b.servers_stats.available = true;
        for i in 0..3 * u64::from(k) {
            b.cgroups.push(crate::batch::cgroup::CgroupRow {
                id: 9000 + i,
                path: format!("/c{i}"),
                cpu_ns: 1,
                wait_ns: 1,
                rss_bytes: Some(1),
            });
        }
        b.cgroup_stats.available = true;
        for pid in 1..=8 {
            b.qos.procs.push(QosSample {
                pid,
                syscalls: vec![SyscallSample {
                    count: 1,
                    ..Default::default()
                }],
                requests: RequestSample {
                    requests: 1,
                    hist: vec![(500, 1)],
                    ..Default::default()
                },
                ..Default::default()
            });
        }
        m.ingest(&b);
        let text = String::from_utf8(m.snapshot().render(Format::Prometheus).to_vec()).unwrap();
        let count = |prefix: &str| {
            text.lines()
                .filter(|l| !l.starts_with('#') && l.starts_with(prefix))
                .count()
        };
        assert_eq!(count("ebee_process_"), 7 * k as usize);
        // A counter and a histogram of 53 buckets, +Inf, sum and count per server.
        assert_eq!(count("ebee_server_"), k as usize * 57);
        // 3 counters and a histogram of 53 buckets, +Inf, sum and count per pin.
        assert_eq!(count("ebee_pinned_"), 8 * 59);
        // CPU, wait and memory per cgroup.
        assert_eq!(count("ebee_cgroup_"), 3 * k as usize);
        let own = text.lines().filter(|l| !l.starts_with('#')).count()
            - count("ebee_process_")
            - count("ebee_pinned_")
            - count("ebee_server_")
            - count("ebee_cgroup_");
        assert_eq!(own, 38, "{text}");
    }

    #[test]
    fn every_family_name_is_prefixed_and_unique() {
        let mut m = Meter::new(3);
        let b = Batch::build(1, 0, 50_000_000)
            .cpus(2, 10)
            .cpu(42, 25_000_000, &[])
            .proc(ProcInfo::named(42, "burner"))
            .mem(42, 300 << 20, 0)
            .done();
        m.ingest(&b);
        let snap = m.snapshot();
        let mut names: Vec<String> = snap.families().iter().map(Family::exposed_name).collect();
        assert!(names.iter().all(|n| n.starts_with("ebee_")), "{names:?}");
        let n = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), n, "duplicate family names");
    }
}
