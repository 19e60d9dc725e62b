//! A pinned process's raw interval from the kernel as the Batch's QoS sample (histograms as
//! their non-empty buckets).

use crate::batch::qos::{QosLost, QosSample, RequestSample, RunqSample, SyscallSample, sparse};
use crate::probes::qos::QosRaw;

/// One pinned process's raw interval as a Batch sample.
pub(super) fn qos_sample(q: &QosRaw, comm: String) -> QosSample {
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
        runq: RunqSample {
            count: q.runq.count,
            total_ns: q.runq.total_ns,
            max_ns: q.runq.max_ns,
            hist: sparse(&q.runq.hist.buckets),
        },
    }
}
