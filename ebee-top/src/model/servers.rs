//! Servers and network bytes, as the screens and line output show them: each server's
//! requests per second and latency percentiles over the last second (merged from the
//! kernel's per-interval histograms), its open connections and bytes, a history of its p99;
//! each process's socket bytes per second. Pure: everything came in a Batch.

use std::collections::VecDeque;

use ebee_shared::servers::{HIST_BUCKETS, bucket_low, bucket_width};
// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::{HashMap, HashMapExt as _, HashSet};

use crate::batch::Batch;
use crate::batch::servers::{NetRow, ServerRow};

/// The window rates and percentiles are taken over.
pub const WINDOW_NS: u64 = 1_000_000_000;
/// A server that answered nothing for this long leaves the pane (an exited one sooner).
pub const IDLE_KEEP_NS: u64 = 30_000_000_000;
/// An exited server stays this long, marked.
pub const EXITED_KEEP_NS: u64 = 5_000_000_000;
/// p99 values kept per server for its sparkline (one per interval).
pub const P99_HISTORY: usize = 1200;

/// Percentile `q` (0..1) of a sparse histogram (`(bucket, count)`, any order) in ns, by linear
/// interpolation inside the bucket that holds it; None when it is empty.
pub fn percentile(h: &[(u16, u32)], q: f64) -> Option<u64> {
    let total: u64 = h.iter().map(|&(_, c)| u64::from(c)).sum();
    if total == 0 {
        return None;
    }
    let mut sorted: Vec<(u16, u32)> = h.to_vec();
    sorted.sort_unstable_by_key(|&(b, _)| b);
    // The rank of the value wanted, 1-based: the smallest value with at least q of them at
    // or below it.
    let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
    let mut before = 0u64;
    for (b, c) in sorted {
        let c = u64::from(c);
        if before + c >= rank {
            let i = usize::from(b).min(HIST_BUCKETS - 1);
            let frac = (rank - before) as f64 / c as f64;
            return Some(bucket_low(i) + (bucket_width(i) as f64 * frac) as u64);
        }
        before += c;
    }
    None
}

/// Sum sparse histograms.
fn merge(into: &mut HashMap<u16, u32>, h: &[(u16, u32)]) {
    for &(b, c) in h {
        let e = into.entry(b).or_default();
        *e = e.saturating_add(c);
    }
}

#[derive(Clone, Debug)]
struct Sample {
    end_ns: u64,
    requests: u64,
    latency_ns: u64,
    max_ns: u64,
    hist: Option<Vec<(u16, u32)>>,
}

#[derive(Clone, Debug, Default)]
struct Track {
    comm: String,
    samples: VecDeque<Sample>,
    first_ns: u64,
    last_request_ns: u64,
    exited_ns: Option<u64>,
    conns: Option<u64>,
    p99: VecDeque<Option<u64>>,
    /// The window's histograms merged, as of the last Batch (the pane reads it every frame).
    window_hist: Vec<(u16, u32)>,
}

/// One server as the pane shows it (over the last second).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerView {
    pub pid: u32,
    pub comm: String,
    pub rps: f64,
    /// Requests in the window, and how many of them the percentiles cover.
    pub requests: u64,
    pub in_hist: u64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub p999_ns: Option<u64>,
    pub max_ns: Option<u64>,
    pub mean_ns: Option<u64>,
    pub conns: Option<u64>,
    pub rx_per_s: f64,
    pub tx_per_s: f64,
    /// p99 over the trailing second, one value per interval, oldest first.
    pub p99_history: Vec<Option<u64>>,
    pub exited: bool,
}

/// One server in one interval (the line output's `servers` rows).
#[derive(Clone, Debug, PartialEq)]
pub struct ServerInterval {
    pub pid: u32,
    pub comm: String,
    pub rps: f64,
    pub requests: u64,
    pub p50_ns: Option<u64>,
    pub p99_ns: Option<u64>,
    pub p999_ns: Option<u64>,
    pub max_ns: u64,
    pub conns: Option<u64>,
    pub rx_bytes: u64,
    pub tx_bytes: u64,
}

/// How the pane orders servers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServerSort {
    #[default]
    Rps,
    P99,
}

/// Servers and per-process network bytes.
#[derive(Clone, Debug, Default)]
pub struct ServersModel {
    /// The kernel gives servers and network bytes (from the last Batch).
    pub available: bool,
    servers: HashMap<u32, Track>,
    /// Per process: `(end_ns, rx, tx)` of the intervals in the window.
    net: HashMap<u32, VecDeque<(u64, u64, u64)>>,
    last_end_ns: u64,
    first_start_ns: Option<u64>,
    interval_ns: u64,
    latest: Vec<ServerRow>,
    latest_net: Vec<NetRow>,
}

impl ServersModel {
    pub fn ingest(&mut self, b: &Batch) {
        self.available = b.servers_stats.available;
        self.interval_ns = b.interval_ns();
        self.last_end_ns = b.end_ns;
        self.first_start_ns.get_or_insert(b.start_ns);
        let cutoff = b.end_ns.saturating_sub(WINDOW_NS);
        let comm = |pid: u32| {
            b.procs
                .iter()
                .find(|p| p.pid == pid)
                .map(|p| p.comm.clone())
        };
        for r in &b.servers {
            let t = self.servers.entry(r.pid).or_insert_with(|| Track {
                first_ns: b.start_ns,
                ..Default::default()
            });
            if let Some(c) = comm(r.pid) {
                t.comm = c.to_string();
            }
            if r.conns.is_some() {
                t.conns = r.conns;
            }
            if r.requests > 0 {
                t.last_request_ns = b.end_ns;
            }
            t.samples.push_back(Sample {
                end_ns: b.end_ns,
                requests: r.requests,
                latency_ns: r.latency_ns,
                max_ns: r.max_ns,
                hist: r.hist.clone(),
            });
        }
        let exits: HashSet<u32> = b.exits.iter().map(|e| e.pid).collect();
        self.servers.retain(|pid, t| {
            if exits.contains(pid) {
                t.exited_ns.get_or_insert(b.end_ns);
            }
            while t.samples.front().is_some_and(|s| s.end_ns <= cutoff) {
                t.samples.pop_front();
            }
            let mut h = HashMap::new();
            for s in &t.samples {
                if let Some(sh) = &s.hist {
                    merge(&mut h, sh);
                }
            }
            t.window_hist = h.into_iter().collect();
            t.p99.push_back(percentile(&t.window_hist, 0.99));
            while t.p99.len() > P99_HISTORY {
                t.p99.pop_front();
            }
            match t.exited_ns {
                Some(x) => b.end_ns.saturating_sub(x) < EXITED_KEEP_NS,
                None => b.end_ns.saturating_sub(t.last_request_ns.max(t.first_ns)) < IDLE_KEEP_NS,
            }
        });
        for n in &b.net {
            self.net
                .entry(n.pid)
                .or_default()
                .push_back((b.end_ns, n.rx_bytes, n.tx_bytes));
        }
        self.net.retain(|_, q| {
            while q.front().is_some_and(|s| s.0 <= cutoff) {
                q.pop_front();
            }
            !q.is_empty()
        });
        self.latest.clone_from(&b.servers);
        self.latest_net.clone_from(&b.net);
    }

    /// The span rates are over: a second, or less right after the start.
    fn window_ns(&self, since: u64) -> u64 {
        let start = self.first_start_ns.unwrap_or(0).max(since);
        self.last_end_ns.saturating_sub(start).clamp(1, WINDOW_NS)
    }

    /// Bytes per second `pid`'s sockets received and sent over the last second; None when
    /// the kernel gives no network bytes.
    pub fn net_rate(&self, pid: u32) -> Option<(f64, f64)> {
        if !self.available {
            return None;
        }
        let s = self.window_ns(0) as f64 / 1e9;
        Some(self.net.get(&pid).map_or((0.0, 0.0), |q| {
            let (rx, tx) = q.iter().fold((0, 0), |a, x| (a.0 + x.1, a.1 + x.2));
            (rx as f64 / s, tx as f64 / s)
        }))
    }

    /// Every server the pane shows, in `sort` order.
    pub fn view(&self, sort: ServerSort) -> Vec<ServerView> {
        let mut v: Vec<ServerView> = self
            .servers
            .iter()
            .map(|(&pid, t)| {
                let span = self.window_ns(t.first_ns) as f64 / 1e9;
                let requests: u64 = t.samples.iter().map(|s| s.requests).sum();
                let latency: u64 = t.samples.iter().map(|s| s.latency_ns).sum();
                let h = &t.window_hist;
                let (rx, tx) = self.net_rate(pid).unwrap_or_default();
                ServerView {
                    pid,
                    comm: t.comm.clone(),
                    rps: requests as f64 / span,
                    requests,
                    in_hist: h.iter().map(|&(_, c)| u64::from(c)).sum(),
                    p50_ns: percentile(h, 0.5),
                    p99_ns: percentile(h, 0.99),
                    p999_ns: percentile(h, 0.999),
                    max_ns: t.samples.iter().map(|s| s.max_ns).max().filter(|&m| m > 0),
                    mean_ns: (requests > 0).then(|| latency / requests),
                    conns: t.conns,
                    rx_per_s: rx,
                    tx_per_s: tx,
                    p99_history: t.p99.iter().copied().collect(),
                    exited: t.exited_ns.is_some(),
                }
            })
            .collect();
        match sort {
            ServerSort::Rps => v.sort_by(|a, b| {
                b.rps
                    .total_cmp(&a.rps)
                    .then(b.conns.cmp(&a.conns))
                    .then(a.pid.cmp(&b.pid))
            }),
            ServerSort::P99 => v.sort_by(|a, b| b.p99_ns.cmp(&a.p99_ns).then(a.pid.cmp(&b.pid))),
        }
        v
    }

    /// The last interval's servers, busiest first (line output).
    pub fn interval(&self, comm: impl Fn(u32) -> String) -> Vec<ServerInterval> {
        let s = self.interval_ns.max(1) as f64 / 1e9;
        let bytes: HashMap<u32, (u64, u64)> = self
            .latest_net
            .iter()
            .map(|n| (n.pid, (n.rx_bytes, n.tx_bytes)))
            .collect();
        self.latest
            .iter()
            .map(|r| {
                let h = r.hist.as_deref().unwrap_or(&[]);
                let (rx_bytes, tx_bytes) = bytes.get(&r.pid).copied().unwrap_or_default();
                ServerInterval {
                    pid: r.pid,
                    comm: comm(r.pid),
                    rps: r.requests as f64 / s,
                    requests: r.requests,
                    p50_ns: percentile(h, 0.5),
                    p99_ns: percentile(h, 0.99),
                    p999_ns: percentile(h, 0.999),
                    max_ns: r.max_ns,
                    conns: r.conns,
                    rx_bytes,
                    tx_bytes,
                }
            })
            .collect()
    }

    /// The last interval's `k` processes with the most socket bytes (received + sent).
    pub fn top_net(&self, k: usize) -> &[NetRow] {
        &self.latest_net[..self.latest_net.len().min(k)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::ProcInfo;
    use crate::batch::servers::ServersStats;
    use ebee_shared::servers::bucket;

    fn hist(values: &[(u64, u32)]) -> Vec<(u16, u32)> {
        values.iter().map(|&(v, c)| (bucket(v) as u16, c)).collect()
    }

    fn batch(seq: u64, servers: Vec<ServerRow>, net: Vec<NetRow>) -> Batch {
        let start = (seq - 1) * 50_000_000;
        Batch::build(seq, start, 50_000_000)
            .with(|b| {
                b.procs = vec![ProcInfo {
                    pid: 7,
                    comm: "redis-server".into(),
                    ..Default::default()
                }];
                b.servers = servers;
                b.net = net;
                b.servers_stats = ServersStats {
                    available: true,
                    ..Default::default()
                };
            })
            .done()
    }

    #[test]
    fn percentiles_of_nine_fast_and_one_slow_request() {
        // 9 of 10 at 1 ms, 1 at 10 ms: p50 is 1 ms and p99 is 10 ms, each within its bucket
        // (an eighth of its value).
        let h = hist(&[(1_000_000, 900), (10_000_000, 100)]);
        let p50 = percentile(&h, 0.5).unwrap();
        let p99 = percentile(&h, 0.99).unwrap();
        assert!((p50 as f64 / 1e6 - 1.0).abs() < 0.125, "{p50}");
        assert!((p99 as f64 / 1e7 - 1.0).abs() < 0.125, "{p99}");
        assert_eq!(percentile(&[], 0.5), None);
        assert_eq!(percentile(&[(3, 0)], 0.5), None);
    }

    #[test]
    fn rates_and_percentiles_over_the_last_second() {
        let mut m = ServersModel::default();
        for seq in 1..=40 {
            let row = ServerRow {
                pid: 7,
                requests: 100,
                latency_ns: 100 * 50_000,
                max_ns: 80_000,
                hist: Some(hist(&[(50_000, 100)])),
                conns: Some(4),
            };
            let net = NetRow {
                pid: 7,
                rx_bytes: 1000,
                tx_bytes: 3000,
            };
            m.ingest(&batch(seq, vec![row], vec![net]));
        }
        let v = m.view(ServerSort::Rps);
        assert_eq!(v.len(), 1);
        let s = &v[0];
        assert_eq!(s.comm, "redis-server");
        // 100 requests per 50 ms interval: 2,000 per second.
        assert!((s.rps - 2000.0).abs() < 1e-6, "{}", s.rps);
        assert_eq!(s.requests, 2000);
        assert_eq!(s.conns, Some(4));
        assert!((s.rx_per_s - 20_000.0).abs() < 1e-6);
        assert!((s.tx_per_s - 60_000.0).abs() < 1e-6);
        assert!(s.p99_ns.unwrap().abs_diff(50_000) < 50_000 / 8);
        assert_eq!(s.max_ns, Some(80_000));
        assert_eq!(s.p99_history.len(), 40);
        let i = m.interval(|_| "x".into());
        assert_eq!(i[0].requests, 100);
        assert!((i[0].rps - 2000.0).abs() < 1e-6);
        assert_eq!((i[0].rx_bytes, i[0].tx_bytes), (1000, 3000));
        assert_eq!(m.net_rate(8), Some((0.0, 0.0)));
    }

    #[test]
    fn an_idle_server_leaves_and_an_exited_one_is_marked() {
        let mut m = ServersModel::default();
        let row = ServerRow {
            pid: 7,
            requests: 1,
            ..Default::default()
        };
        m.ingest(&batch(1, vec![row], vec![]));
        for seq in 2..=20 {
            m.ingest(&batch(seq, vec![], vec![]));
        }
        let v = m.view(ServerSort::Rps);
        assert_eq!(v.len(), 1, "still there after a second of silence");
        let idle = (IDLE_KEEP_NS / 50_000_000) + 2;
        for seq in 21..=idle {
            m.ingest(&batch(seq, vec![], vec![]));
        }
        assert!(m.view(ServerSort::Rps).is_empty());
        // Exits.
        let mut m = ServersModel::default();
        m.ingest(&batch(
            1,
            vec![ServerRow {
                pid: 7,
                requests: 5,
                ..Default::default()
            }],
            vec![],
        ));
        let mut b = batch(2, vec![], vec![]);
        b.exits = vec![crate::batch::Exit { pid: 7, ts_ns: 0 }];
        m.ingest(&b);
        assert!(m.view(ServerSort::Rps)[0].exited);
    }

    #[test]
    fn sorting_by_p99_puts_the_slowest_first() {
        let mut m = ServersModel::default();
        let fast = ServerRow {
            pid: 1,
            requests: 1000,
            hist: Some(hist(&[(10_000, 1000)])),
            ..Default::default()
        };
        let slow = ServerRow {
            pid: 2,
            requests: 10,
            hist: Some(hist(&[(5_000_000, 10)])),
            ..Default::default()
        };
        m.ingest(&batch(1, vec![fast, slow], vec![]));
        let by_rps: Vec<u32> = m.view(ServerSort::Rps).iter().map(|s| s.pid).collect();
        let by_p99: Vec<u32> = m.view(ServerSort::P99).iter().map(|s| s.pid).collect();
        assert_eq!(by_rps, vec![1, 2]);
        assert_eq!(by_p99, vec![2, 1]);
    }
}
