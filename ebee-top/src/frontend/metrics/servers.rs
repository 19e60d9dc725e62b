//! Metrics of the servers the kernel finds by itself (no pin): requests answered as a counter
//! and their latency as a histogram, cumulative since ebee-top first saw the server, labels
//! `pid` and `comm`. The kernel's server histograms have 8 buckets per power of two; each is
//! folded into the Prometheus buckets (two per power of two, on the pinned histograms' edges,
//! which are edges of these too), so the counts are exact. Only the top K servers by recent
//! requests are exported, as for processes; a server that exits is exported once more.

use std::collections::HashMap;

use ebee_shared::servers::{HIST_BUCKETS, bucket_low};
use prometheus_client::registry::Unit;

use super::exposition::{Family, Kind, Value};
use super::histogram::Buckets;
use super::meter::{Section, secs};
use super::process::RANK_WINDOW_NS;
use crate::batch::Batch;

#[derive(Debug)]
struct Server {
    comm: crate::batch::Name,
    requests: u64,
    latency_ns: u64,
    /// Requests in a histogram (those of intervals it held a histogram slot in).
    in_hist: u64,
    hist: Vec<u64>,
    recent: f64,
    last_seen_ns: u64,
    exited: bool,
}

/// Every server's counters, and K.
#[derive(Debug)]
pub struct Servers {
    k: usize,
    buckets: Buckets,
    /// The kernel server bucket `i` as a pinned-histogram bucket (the same edges, coarser).
    to_pinned: Vec<u16>,
    servers: HashMap<u32, Server>,
    available: bool,
}

impl Servers {
    pub fn new(k: usize) -> Self {
        let to_pinned = (0..HIST_BUCKETS)
            .map(|i| ebee_shared::qos::bucket(bucket_low(i)) as u16)
            .collect();
        Self {
            k,
            buckets: Buckets::new(),
            to_pinned,
            servers: HashMap::new(),
            available: false,
        }
    }
}

impl Section for Servers {
    fn ingest(&mut self, b: &Batch) {
        self.available = b.servers_stats.available;
        let now = b.end_ns;
        self.servers.retain(|_, s| {
            !s.exited && now.saturating_sub(s.last_seen_ns) < super::process::FORGET_NS
        });
        let decay = (-(b.interval_ns() as f64) / RANK_WINDOW_NS).exp();
        for s in self.servers.values_mut() {
            s.recent *= decay;
        }
        for r in &b.servers {
            let comm = b.procs.iter().find(|p| p.pid == r.pid).map(|p| &p.comm);
            let buckets = &self.buckets;
            let s = self.servers.entry(r.pid).or_insert_with(|| Server {
                comm: Default::default(),
                requests: 0,
                latency_ns: 0,
                in_hist: 0,
                hist: buckets.zeros(),
                recent: 0.0,
                last_seen_ns: now,
                exited: false,
            });
            if let Some(c) = comm.filter(|c| !c.is_empty()) {
                s.comm.clone_from(c);
            }
            s.requests += r.requests;
            s.recent += r.requests as f64;
            s.last_seen_ns = now;
            if let Some(h) = &r.hist {
                let mapped: Vec<(u16, u32)> = h
                    .iter()
                    .map(|&(i, n)| {
                        (
                            self.to_pinned
                                .get(usize::from(i))
                                .copied()
                                .unwrap_or(u16::MAX),
                            n,
                        )
                    })
                    .collect();
                buckets.add(&mut s.hist, &mapped);
                s.in_hist += h.iter().map(|&(_, n)| u64::from(n)).sum::<u64>();
                // The sum goes with the histogram's count: the requests in it, at their mean.
                let n: u64 = h.iter().map(|&(_, n)| u64::from(n)).sum();
                s.latency_ns +=
                    (r.latency_ns as u128 * u128::from(n) / u128::from(r.requests.max(1))) as u64;
            }
        }
        for e in &b.exits {
            if let Some(s) = self.servers.get_mut(&e.pid) {
                s.exited = true;
            }
        }
    }

    fn families(&self, out: &mut Vec<Family>) {
        let mut reqs = Family::new(
            "ebee_server_requests",
            "Requests a server answered since ebee-top first saw it (found by the kernel, no \
             pin: a receive on a connection to a listening TCP port, then the first send); the \
             top K servers by recent requests.",
            None,
            Kind::Counter,
        );
        let mut lat = Family::new(
            "ebee_server_request_duration",
            "Latency of a server's requests from the kernel's histograms (a new server's first \
             intervals are counted in ebee_server_requests_total, not here).",
            Some(Unit::Seconds),
            Kind::Histogram,
        );
        if self.available {
            let mut v: Vec<(&u32, &Server)> = self.servers.iter().collect();
            v.sort_unstable_by(|a, b| {
                b.1.recent
                    .total_cmp(&a.1.recent)
                    .then(b.1.requests.cmp(&a.1.requests))
                    .then(a.0.cmp(b.0))
            });
            v.truncate(self.k);
            for (pid, s) in v {
                let labels = vec![("pid", pid.to_string()), ("comm", s.comm.to_string())];
                reqs.push(labels.clone(), Value::Counter(s.requests as f64));
                lat.push(
                    labels,
                    Value::Histogram {
                        sum: secs(s.latency_ns),
                        count: s.in_hist,
                        buckets: self.buckets.prometheus(&s.hist),
                    },
                );
            }
        }
        out.extend([reqs, lat]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::servers::{ServerRow, ServersStats};
    use ebee_shared::servers::bucket;

    #[test]
    fn requests_and_histograms_accumulate_exactly() {
        let mut s = Servers::new(5);
        for seq in 1..=3 {
            let b = Batch::build(seq, seq * 50_000_000, 50_000_000)
                .with(|b| {
                    b.servers = vec![ServerRow {
                        pid: 9,
                        requests: 10,
                        latency_ns: 10 * 1_000_000,
                        max_ns: 2_000_000,
                        // 9 at 1 ms, 1 at 10 ms; the first interval has no histogram yet.
                        hist: (seq > 1).then(|| {
                            vec![
                                (bucket(1_000_000) as u16, 9),
                                (bucket(10_000_000) as u16, 1),
                            ]
                        }),
                        conns: Some(2),
                    }];
                    b.servers_stats = ServersStats {
                        available: true,
                        ..Default::default()
                    };
                })
                .done();
            s.ingest(&b);
        }
        let mut out = Vec::new();
        s.families(&mut out);
        let find = |n: &str| out.iter().find(|f| f.exposed_name() == n).unwrap();
        assert_eq!(
            find("ebee_server_requests_total").series[0].value,
            Value::Counter(30.0)
        );
        let Value::Histogram { count, buckets, .. } =
            &find("ebee_server_request_duration_seconds").series[0].value
        else {
            panic!("not a histogram");
        };
        assert_eq!(*count, 20);
        // Counts per bucket (the encoder makes them cumulative): the 18 requests of 1 ms are
        // in (1.5 * 2^19, 2^20] ns, the 2 of 10 ms in (2^23, 1.5 * 2^23] ns.
        let at = |bound: f64| {
            buckets
                .iter()
                .find(|(b, _)| (*b - bound).abs() < 1e-12)
                .unwrap()
                .1
        };
        assert_eq!(at((1u64 << 20) as f64 / 1e9), 18);
        assert_eq!(at((1u64 << 19) as f64 * 1.5 / 1e9), 0);
        assert_eq!(at((1u64 << 23) as f64 * 1.5 / 1e9), 2);
        assert_eq!(buckets.iter().map(|(_, n)| n).sum::<u64>(), 20);
    }
}
