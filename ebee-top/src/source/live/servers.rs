//! The kernel's servers and network bytes of one interval as the Batch's rows and counters.

use crate::batch::servers::{NetRow, ServerRow, ServersStats};
use crate::probes::servers::ServersRaw;

pub(super) fn server_rows(raw: &ServersRaw) -> Vec<ServerRow> {
    raw.servers
        .iter()
        .map(|s| ServerRow {
            pid: s.tgid,
            requests: s.requests,
            latency_ns: s.latency_ns,
            max_ns: s.max_ns,
            hist: s.hist.as_ref().map(|h| {
                h.iter()
                    .enumerate()
                    .filter(|(_, c)| **c != 0)
                    .map(|(i, c)| (i as u16, *c))
                    .collect()
            }),
            conns: s.conns,
        })
        .collect()
}

pub(super) fn net_rows(raw: &ServersRaw) -> Vec<NetRow> {
    raw.net
        .iter()
        .map(|n| NetRow {
            pid: n.tgid,
            rx_bytes: n.rx_bytes,
            tx_bytes: n.tx_bytes,
        })
        .collect()
}

pub(super) fn stats(raw: Option<&ServersRaw>) -> ServersStats {
    let Some(r) = raw else {
        return ServersStats::default();
    };
    ServersStats {
        available: true,
        requests: r.requests,
        evictions: r.evictions,
        evicted_requests: r.evicted_requests,
        unhistogrammed: r.unhistogrammed,
        conns_full: r.conns_full,
        counts_full: r.counts_full,
        net_evictions: r.net_evictions,
        net_evicted_bytes: r.net_evicted_bytes,
    }
}
