//! Metrics of the processes pinned with `-p` (at most 8): their syscalls, and when the kernel
//! has what the request model needs, their requests as a counter and a latency histogram, all
//! cumulative since the pin began. A process leaves when its pin ends (unpinned or exited).

use std::collections::BTreeMap;

use prometheus_client::registry::Unit;

use super::exposition::{Family, Kind, Value};
use super::histogram::Buckets;
use super::meter::{Section, secs};
use crate::batch::Batch;

#[derive(Debug)]
struct Pin {
    comm: String,
    syscalls: u64,
    syscall_ns: u64,
    requests: u64,
    request_ns: u64,
    request_hist: Vec<u64>,
    /// Its pin ended in the last interval: exported once more, then gone.
    last: bool,
}

/// Cumulative counts of every pinned process, by pid.
#[derive(Debug, Default)]
pub struct Pinned {
    buckets: Buckets,
    pins: BTreeMap<u32, Pin>,
    request_model: bool,
}

impl Section for Pinned {
    fn ingest(&mut self, b: &Batch) {
        self.pins.retain(|_, p| !p.last);
        self.request_model = b.qos.request_model;
        for s in &b.qos.procs {
            let buckets = &self.buckets;
            let p = self.pins.entry(s.pid).or_insert_with(|| Pin {
                comm: s.comm.clone(),
                syscalls: 0,
                syscall_ns: 0,
                requests: 0,
                request_ns: 0,
                request_hist: buckets.zeros(),
                last: false,
            });
            p.syscalls += s.syscalls.iter().map(|c| c.count).sum::<u64>();
            p.syscall_ns += s.syscalls.iter().map(|c| c.total_ns).sum::<u64>();
            p.requests += s.requests.requests;
            p.request_ns += s.requests.total_ns;
            buckets.add(&mut p.request_hist, &s.requests.hist);
            p.last = s.last;
        }
    }

    fn families(&self, out: &mut Vec<Family>) {
        let labels = |pid: &u32, p: &Pin| vec![("pid", pid.to_string()), ("comm", p.comm.clone())];
        let mut calls = Family::new(
            "ebee_pinned_syscalls",
            "Syscalls a pinned process completed since it was pinned.",
            None,
            Kind::Counter,
        );
        let mut call_time = Family::new(
            "ebee_pinned_syscall_time",
            "Time a pinned process spent in syscalls, summed over syscalls, since it was pinned.",
            Some(Unit::Seconds),
            Kind::Counter,
        );
        let mut reqs = Family::new(
            "ebee_pinned_requests",
            "Requests a pinned server answered since it was pinned (request model: a receive \
             on an accepted connection to the next send).",
            None,
            Kind::Counter,
        );
        let mut lat = Family::new(
            "ebee_pinned_request_duration",
            "Latency of a pinned server's requests, from the kernel's histograms.",
            Some(Unit::Seconds),
            Kind::Histogram,
        );
        for (pid, p) in &self.pins {
            calls.push(labels(pid, p), Value::Counter(p.syscalls as f64));
            call_time.push(labels(pid, p), Value::Counter(secs(p.syscall_ns)));
            if self.request_model {
                reqs.push(labels(pid, p), Value::Counter(p.requests as f64));
                lat.push(
                    labels(pid, p),
                    Value::Histogram {
                        sum: secs(p.request_ns),
                        count: p.request_hist.iter().sum(),
                        buckets: self.buckets.prometheus(&p.request_hist),
                    },
                );
            }
        }
        out.extend([calls, call_time, reqs, lat]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::qos::{QosSample, RequestSample, SyscallSample};
    use ebee_shared::qos::bucket;

    fn sample(last: bool) -> QosSample {
        QosSample {
            pid: 7,
            comm: "srv".into(),
            last,
            syscalls: vec![SyscallSample {
                nr: 0,
                count: 10,
                total_ns: 10_000,
                ..Default::default()
            }],
            requests: RequestSample {
                requests: 3,
                total_ns: 3_000_000,
                hist: vec![(bucket(1_000_000) as u16, 3)],
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn pins_accumulate_until_their_pin_ends() {
        let mut p = Pinned::default();
        let b = |seq, last| {
            Batch::build(seq, 0, 1)
                .qos(sample(last))
                .with(|b| b.qos.request_model = true)
                .done()
        };
        p.ingest(&b(1, false));
        p.ingest(&b(2, true));
        let mut out = Vec::new();
        p.families(&mut out);
        let find = |n: &str| out.iter().find(|f| f.exposed_name() == n).unwrap();
        assert_eq!(
            find("ebee_pinned_requests_total").series[0].value,
            Value::Counter(6.0)
        );
        assert_eq!(
            find("ebee_pinned_syscalls_total").series[0].value,
            Value::Counter(20.0)
        );
        match &find("ebee_pinned_request_duration_seconds").series[0].value {
            Value::Histogram {
                sum,
                count,
                buckets,
            } => {
                assert_eq!((*sum, *count), (0.006, 6));
                assert_eq!(buckets.iter().map(|(_, n)| n).sum::<u64>(), 6);
            }
            v => panic!("{v:?}"),
        }
        p.ingest(&Batch::build(3, 0, 1).done());
        let mut out = Vec::new();
        p.families(&mut out);
        assert!(out.iter().all(|f| f.series.is_empty()));
    }
}
