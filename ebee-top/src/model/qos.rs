//! QoS of pinned processes, folded from Batches: per interval and over a sliding window
//! (10 s by default), syscalls per second, requests per second and request latency
//! percentiles, the syscalls that took the most time, and histories for sparklines.
//!
//! Pure like the rest of the Model: histograms arrive as kernel buckets
//! (`ebee_shared::qos::bucket`), are summed over the window here, and are turned into
//! percentiles through hdrhistogram, each bucket recorded at its midpoint (within 1.6% of any
//! value in it).
//!
//! For the QoS pane: [`QosModel::procs`] lists what to show; [`QosModel::view`] gives one
//! process's numbers ([`QosView`]), [`QosModel::history`] its per-interval points for
//! sparklines, and [`QosModel::hist_bins`] a latency histogram to draw.

use std::collections::{BTreeMap, VecDeque};

use ebee_shared::qos::{BUCKETS, bucket_low, bucket_mid, bucket_width};

use crate::batch::Batch;
use crate::batch::qos::{QosSample, SparseHist};

/// Default length of the sliding window.
pub const WINDOW_NS: u64 = 10_000_000_000;
/// Intervals kept per process for sparklines.
pub const HISTORY: usize = 600;
/// Requests over the window from which a process counts as a request/response server.
pub const SERVER_MIN_REQUESTS: u64 = 3;
/// How many intervals a process whose pin ended stays listed (as exited or unpinned).
pub const ENDED_KEEP_INTERVALS: u64 = 100;

/// Rates and latency percentiles over some span (one interval, or the window).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QosStats {
    /// Length of the span, s.
    pub span_s: f64,
    pub syscalls: u64,
    pub syscalls_per_s: f64,
    /// Requests answered (server-side sockets only).
    pub requests: u64,
    pub rps: f64,
    /// Request latency percentiles and maximum, µs; None without requests.
    pub p50_us: Option<f64>,
    pub p90_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub p999_us: Option<f64>,
    pub max_us: Option<f64>,
    pub mean_us: Option<f64>,
    /// Run-queue waits of its threads (each time one got a CPU): how many, p50, p99 and the
    /// maximum, µs; None without any.
    pub runq_waits: u64,
    pub runq_p50_us: Option<f64>,
    pub runq_p99_us: Option<f64>,
    pub runq_max_us: Option<f64>,
}

/// One syscall of a process over the window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SyscallRow {
    pub nr: u32,
    pub name: String,
    pub count: u64,
    pub per_s: f64,
    /// Time spent in it, all threads, ns.
    pub total_ns: u64,
    /// Share of the window's syscall time of the process (0..1).
    pub share: f64,
    pub mean_us: f64,
    /// Percentiles, µs; None when the syscall had no histogram of its own.
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
    pub max_us: f64,
}

/// Everything the QoS pane shows for one process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct QosView {
    pub pid: u32,
    pub comm: String,
    /// Still pinned (false once unpinned or exited; the last numbers stay for a while).
    pub pinned: bool,
    pub exited: bool,
    /// Answered at least `SERVER_MIN_REQUESTS` requests over the window.
    pub server: bool,
    /// The last interval.
    pub interval: QosStats,
    /// The sliding window.
    pub window: QosStats,
    /// Syscalls by total time over the window, most first.
    pub top_syscalls: Vec<SyscallRow>,
    /// Over the window: server-side receives, idle sends (streaming), traffic on other
    /// sockets, accepted connections.
    pub recvs: u64,
    pub sends_idle: u64,
    pub other_sock_io: u64,
    pub accepts: u64,
    /// Over the window: syscalls whose start was not seen, latencies without their own
    /// histogram, request-model updates lost to a full table.
    pub unmatched: u64,
    pub hist_full: u64,
    pub conn_full: u64,
}

/// One interval of one process, for sparklines.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HistoryPoint {
    /// Batch sequence number.
    pub seq: u64,
    pub syscalls_per_s: f64,
    pub rps: f64,
    pub p50_us: Option<f64>,
    pub p99_us: Option<f64>,
}

/// Which latency distribution to draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HistOf {
    /// Request latencies.
    Requests,
    /// Every syscall of the process.
    AllSyscalls,
    /// One syscall number (empty when it had no histogram of its own).
    Syscall(u32),
}

/// One bar of a drawn histogram: `count` latencies in `[lo_ns, hi_ns)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistBin {
    pub lo_ns: u64,
    pub hi_ns: u64,
    pub count: u64,
}

/// Dense sums of kernel buckets.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Dense(Vec<u64>);

impl Default for Dense {
    fn default() -> Self {
        Self(vec![0; BUCKETS])
    }
}

impl Dense {
    fn add(&mut self, h: &SparseHist, sign: i64) {
        for &(b, c) in h {
            if let Some(v) = self.0.get_mut(usize::from(b)) {
                *v = v.wrapping_add_signed(sign * i64::from(c));
            }
        }
    }
    fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// Sums over the window of one syscall number.
#[derive(Clone, Debug, Default)]
struct SysSum {
    count: u64,
    total_ns: u64,
    /// Counts that came with a histogram of its own.
    hist: Option<Dense>,
}

#[derive(Clone, Debug, Default)]
struct WindowSums {
    len_ns: u64,
    syscalls: u64,
    requests: u64,
    req_total_ns: u64,
    req_hist: Dense,
    all_hist: Dense,
    runq: u64,
    runq_hist: Dense,
    sys: BTreeMap<u32, SysSum>,
    recvs: u64,
    sends_idle: u64,
    other_sock_io: u64,
    accepts: u64,
    unmatched: u64,
    hist_full: u64,
    conn_full: u64,
}

impl WindowSums {
    fn add(&mut self, iv: &Interval, sign: i64) {
        let s = &iv.sample;
        let f = |acc: &mut u64, v: u64| *acc = acc.wrapping_add_signed(sign * v as i64);
        f(&mut self.len_ns, iv.len_ns);
        for sc in &s.syscalls {
            f(&mut self.syscalls, sc.count);
            let e = self.sys.entry(sc.nr).or_default();
            f(&mut e.count, sc.count);
            f(&mut e.total_ns, sc.total_ns);
            if let Some(h) = &sc.hist {
                e.hist.get_or_insert_with(Dense::default).add(h, sign);
                self.all_hist.add(h, sign);
            }
        }
        self.all_hist.add(&s.other_hist, sign);
        self.sys.retain(|_, e| e.count != 0);
        let r = &s.requests;
        f(&mut self.requests, r.requests);
        f(&mut self.req_total_ns, r.total_ns);
        self.req_hist.add(&r.hist, sign);
        f(&mut self.recvs, r.recvs);
        f(&mut self.sends_idle, r.sends_idle);
        f(&mut self.other_sock_io, r.other_sock_io);
        f(&mut self.accepts, r.accepts);
        f(&mut self.unmatched, s.lost.unmatched);
        f(&mut self.hist_full, s.lost.hist_full);
        f(&mut self.conn_full, s.lost.conn_full);
        f(&mut self.runq, s.runq.count);
        self.runq_hist.add(&s.runq.hist, sign);
    }
}

#[derive(Clone, Debug)]
struct Interval {
    len_ns: u64,
    sample: QosSample,
}

#[derive(Clone, Debug, Default)]
struct ProcQos {
    comm: String,
    /// Batch seq of the last sample.
    last_seq: u64,
    /// The pin ended (unpinned or exited) at `last_seq`.
    ended: bool,
    exited: bool,
    window: VecDeque<Interval>,
    sums: WindowSums,
    history: VecDeque<HistoryPoint>,
}

/// The QoS side of the Model.
#[derive(Clone, Debug)]
pub struct QosModel {
    window_ns: u64,
    seq: u64,
    procs: BTreeMap<u32, ProcQos>,
}

impl Default for QosModel {
    fn default() -> Self {
        Self::new(WINDOW_NS)
    }
}

/// An hdrhistogram of kernel bucket counts, each recorded at its bucket's midpoint (ns).
pub fn to_hdr(buckets: &[u64]) -> Option<hdrhistogram::Histogram<u64>> {
    // Two significant digits: hdrhistogram's own rounding stays under 1%, below the kernel's
    // bucket width; the range covers the kernel's (its last bucket ends at 2^36 ns).
    let mut h = hdrhistogram::Histogram::<u64>::new_with_bounds(1, 1 << 37, 2).ok()?;
    for (i, &c) in buckets.iter().enumerate() {
        if c > 0 {
            h.record_n(bucket_mid(i).max(1), c).ok()?;
        }
    }
    (!h.is_empty()).then_some(h)
}

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// Percentiles (µs) of a dense histogram: p50, p90, p99, p99.9.
fn percentiles(d: &Dense) -> [Option<f64>; 4] {
    match to_hdr(&d.0) {
        Some(h) => [0.5, 0.9, 0.99, 0.999].map(|q| Some(us(h.value_at_quantile(q)))),
        None => [None; 4],
    }
}

fn rate(n: u64, len_ns: u64) -> f64 {
    if len_ns == 0 {
        0.0
    } else {
        n as f64 * 1e9 / len_ns as f64
    }
}

impl QosModel {
    /// A model with a sliding window of `window_ns`.
    pub fn new(window_ns: u64) -> Self {
        Self {
            window_ns: window_ns.max(1),
            seq: 0,
            procs: BTreeMap::new(),
        }
    }

    /// Length of the sliding window, ns.
    pub fn window_ns(&self) -> u64 {
        self.window_ns
    }

    /// Fold one Batch in.
    pub fn ingest(&mut self, b: &Batch) {
        self.seq = b.seq;
        let len_ns = b.interval_ns();
        for s in &b.qos.procs {
            let p = self.procs.entry(s.pid).or_default();
            if p.ended {
                // The pid was pinned again (or reused): start afresh.
                *p = ProcQos::default();
            }
            if !s.comm.is_empty() {
                p.comm = s.comm.clone();
            }
            p.last_seq = b.seq;
            p.ended = s.last;
            p.exited = s.exited;
            let iv = Interval {
                len_ns,
                sample: s.clone(),
            };
            p.sums.add(&iv, 1);
            p.window.push_back(iv);
            while p.sums.len_ns > self.window_ns {
                let Some(old) = p.window.pop_front() else {
                    break;
                };
                p.sums.add(&old, -1);
            }
            let st = interval_stats(s, len_ns);
            p.history.push_back(HistoryPoint {
                seq: b.seq,
                syscalls_per_s: st.syscalls_per_s,
                rps: st.rps,
                p50_us: st.p50_us,
                p99_us: st.p99_us,
            });
            while p.history.len() > HISTORY {
                p.history.pop_front();
            }
        }
        // A pinned process has a sample in every interval; one whose pin ended (or that stopped
        // having samples) is listed for a while with its last numbers.
        let seq = b.seq;
        self.procs
            .retain(|_, p| seq.saturating_sub(p.last_seq) < ENDED_KEEP_INTERVALS);
    }

    /// Processes to show: pinned ones, and recently unpinned or exited ones, by pid.
    pub fn procs(&self) -> Vec<u32> {
        self.procs.keys().copied().collect()
    }

    /// One process's numbers.
    pub fn view(&self, pid: u32) -> Option<QosView> {
        let p = self.procs.get(&pid)?;
        let last = p.window.back()?;
        let w = &p.sums;
        let mut window = QosStats {
            span_s: w.len_ns as f64 / 1e9,
            syscalls: w.syscalls,
            syscalls_per_s: rate(w.syscalls, w.len_ns),
            requests: w.requests,
            rps: rate(w.requests, w.len_ns),
            ..Default::default()
        };
        if w.requests > 0 {
            let [p50, p90, p99, p999] = percentiles(&w.req_hist);
            window.p50_us = p50;
            window.p90_us = p90;
            window.p99_us = p99;
            window.p999_us = p999;
            window.mean_us = Some(us(w.req_total_ns) / w.requests as f64);
            window.max_us = p
                .window
                .iter()
                .map(|i| i.sample.requests.max_ns)
                .max()
                .map(us);
        }
        if w.runq > 0 {
            let [p50, _, p99, _] = percentiles(&w.runq_hist);
            window.runq_waits = w.runq;
            window.runq_p50_us = p50;
            window.runq_p99_us = p99;
            window.runq_max_us = p.window.iter().map(|i| i.sample.runq.max_ns).max().map(us);
        }
        let total_sys_ns: u64 = w.sys.values().map(|s| s.total_ns).sum();
        let mut top: Vec<SyscallRow> = w
            .sys
            .iter()
            .map(|(&nr, s)| {
                let (p50, p99) = match &s.hist {
                    Some(h) if h.total() > 0 => {
                        let [a, _, c, _] = percentiles(h);
                        (a, c)
                    }
                    _ => (None, None),
                };
                let max_ns = p
                    .window
                    .iter()
                    .flat_map(|i| i.sample.syscalls.iter())
                    .filter(|x| x.nr == nr)
                    .map(|x| x.max_ns)
                    .max()
                    .unwrap_or(0);
                SyscallRow {
                    nr,
                    name: crate::batch::syscalls::name(nr),
                    count: s.count,
                    per_s: rate(s.count, w.len_ns),
                    total_ns: s.total_ns,
                    share: if total_sys_ns == 0 {
                        0.0
                    } else {
                        s.total_ns as f64 / total_sys_ns as f64
                    },
                    mean_us: if s.count == 0 {
                        0.0
                    } else {
                        us(s.total_ns) / s.count as f64
                    },
                    p50_us: p50,
                    p99_us: p99,
                    max_us: us(max_ns),
                }
            })
            .collect();
        top.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.nr.cmp(&b.nr)));
        Some(QosView {
            pid,
            comm: p.comm.clone(),
            pinned: !p.ended,
            exited: p.exited,
            server: w.requests >= SERVER_MIN_REQUESTS,
            interval: interval_stats(&last.sample, last.len_ns),
            window,
            top_syscalls: top,
            recvs: w.recvs,
            sends_idle: w.sends_idle,
            other_sock_io: w.other_sock_io,
            accepts: w.accepts,
            unmatched: w.unmatched,
            hist_full: w.hist_full,
            conn_full: w.conn_full,
        })
    }

    /// Per-interval points of one process, oldest first (at most `HISTORY`).
    pub fn history(&self, pid: u32) -> Vec<HistoryPoint> {
        self.procs
            .get(&pid)
            .map(|p| p.history.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// A latency histogram over the window for drawing: `per_octave` bars per power of two
    /// (1, 2, 4, 8, 16 or 32), from the first to the last non-empty bar.
    pub fn hist_bins(&self, pid: u32, of: HistOf, per_octave: u32) -> Vec<HistBin> {
        let Some(p) = self.procs.get(&pid) else {
            return Vec::new();
        };
        let w = &p.sums;
        let dense = match of {
            HistOf::Requests => &w.req_hist,
            HistOf::AllSyscalls => &w.all_hist,
            HistOf::Syscall(nr) => match w.sys.get(&nr).and_then(|s| s.hist.as_ref()) {
                Some(h) => h,
                None => return Vec::new(),
            },
        };
        bins(&dense.0, per_octave)
    }
}

/// Merge kernel buckets into `per_octave` bars per power of two (the 64 one-ns buckets below
/// 64 ns are merged the same way by value).
pub fn bins(buckets: &[u64], per_octave: u32) -> Vec<HistBin> {
    let per = per_octave.clamp(1, 32).next_power_of_two();
    let group = (32 / per) as usize;
    let mut out: Vec<HistBin> = Vec::new();
    let mut i = 0;
    while i < buckets.len() {
        // Below 64 ns, group by octave of the value: [0,2), [2,4), ... as one bar each.
        let (lo, n) = if i < 64 {
            let lo = bucket_low(i);
            let hi = if lo < 2 {
                2
            } else {
                (lo + 1).next_power_of_two()
            };
            let octave_n = (hi - lo) as usize;
            (lo, octave_n.min(64 - i).max(1))
        } else {
            (bucket_low(i), group)
        };
        let end = (i + n).min(buckets.len());
        let count = buckets[i..end].iter().sum();
        let last = end - 1;
        out.push(HistBin {
            lo_ns: lo,
            hi_ns: bucket_low(last) + bucket_width(last),
            count,
        });
        i = end;
    }
    let first = out.iter().position(|b| b.count > 0);
    let last = out.iter().rposition(|b| b.count > 0);
    match (first, last) {
        (Some(a), Some(b)) => out[a..=b].to_vec(),
        _ => Vec::new(),
    }
}

fn interval_stats(s: &QosSample, len_ns: u64) -> QosStats {
    let syscalls: u64 = s.syscalls.iter().map(|x| x.count).sum();
    let r = &s.requests;
    let mut st = QosStats {
        span_s: len_ns as f64 / 1e9,
        syscalls,
        syscalls_per_s: rate(syscalls, len_ns),
        requests: r.requests,
        rps: rate(r.requests, len_ns),
        ..Default::default()
    };
    if r.requests > 0 {
        let mut d = Dense::default();
        d.add(&r.hist, 1);
        let [p50, p90, p99, p999] = percentiles(&d);
        st.p50_us = p50;
        st.p90_us = p90;
        st.p99_us = p99;
        st.p999_us = p999;
        st.max_us = Some(us(r.max_ns));
        st.mean_us = Some(us(r.total_ns) / r.requests as f64);
    }
    if s.runq.count > 0 {
        let mut d = Dense::default();
        d.add(&s.runq.hist, 1);
        let [p50, _, p99, _] = percentiles(&d);
        st.runq_waits = s.runq.count;
        st.runq_p50_us = p50;
        st.runq_p99_us = p99;
        st.runq_max_us = Some(us(s.runq.max_ns));
    }
    st
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::qos::{RequestSample, SyscallSample};
    use ebee_shared::qos::bucket;

    fn hist(values: &[(u64, u32)]) -> SparseHist {
        let mut d = vec![0u32; BUCKETS];
        for &(v, n) in values {
            d[bucket(v)] += n;
        }
        crate::batch::qos::sparse(&d)
    }

    /// One 100 ms interval: `n` requests, half at 2 ms and half at 20 ms.
    fn batch(seq: u64, n: u32, last: bool) -> Batch {
        let lat = hist(&[(2_000_000, n / 2), (20_000_000, n - n / 2)]);
        Batch::build(seq, seq * 100_000_000, 100_000_000)
            .qos(QosSample {
                pid: 42,
                comm: "srv".into(),
                last,
                exited: last,
                syscalls: vec![
                    SyscallSample {
                        nr: 0,
                        count: u64::from(n),
                        total_ns: 1000 * u64::from(n),
                        max_ns: 5000,
                        hist: Some(hist(&[(1000, n)])),
                    },
                    SyscallSample {
                        nr: 35,
                        count: 2,
                        total_ns: 20_000_000,
                        max_ns: 10_000_000,
                        hist: Some(hist(&[(10_000_000, 2)])),
                    },
                ],
                requests: RequestSample {
                    requests: u64::from(n),
                    total_ns: u64::from(n / 2) * 2_000_000 + u64::from(n - n / 2) * 20_000_000,
                    max_ns: 20_000_000,
                    hist: lat,
                    ..Default::default()
                },
                ..Default::default()
            })
            .done()
    }

    #[test]
    fn rates_and_percentiles_of_one_interval() {
        let mut m = QosModel::default();
        m.ingest(&batch(1, 100, false));
        let v = m.view(42).unwrap();
        assert_eq!(v.comm, "srv");
        assert!(v.server && v.pinned && !v.exited);
        assert!((v.interval.rps - 1000.0).abs() < 1e-6);
        assert!((v.interval.syscalls_per_s - 1020.0).abs() < 1e-6);
        let p50 = v.interval.p50_us.unwrap();
        let p99 = v.interval.p99_us.unwrap();
        assert!((p50 - 2000.0).abs() / 2000.0 < 0.03, "p50 {p50}");
        assert!((p99 - 20000.0).abs() / 20000.0 < 0.03, "p99 {p99}");
        assert_eq!(v.interval.max_us, Some(20000.0));
        // nanosleep took the most time.
        assert_eq!(v.top_syscalls[0].name, "nanosleep");
        assert_eq!(v.top_syscalls[1].name, "read");
        assert!(v.top_syscalls[0].p50_us.is_some());
    }

    #[test]
    fn the_window_slides() {
        let mut m = QosModel::new(1_000_000_000);
        for seq in 1..=30 {
            m.ingest(&batch(seq, if seq <= 10 { 10 } else { 100 }, false));
        }
        let v = m.view(42).unwrap();
        // Only the last ten 100 ms intervals are in a 1 s window.
        assert!((v.window.span_s - 1.0).abs() < 1e-9);
        assert_eq!(v.window.requests, 1000);
        assert!((v.window.rps - 1000.0).abs() < 1e-6);
        assert_eq!(m.history(42).len(), 30);
    }

    #[test]
    fn an_exited_process_keeps_its_last_numbers_then_goes() {
        let mut m = QosModel::default();
        m.ingest(&batch(1, 10, false));
        m.ingest(&batch(2, 10, true));
        let v = m.view(42).unwrap();
        assert!(v.exited && !v.pinned);
        assert_eq!(v.window.requests, 20);
        for seq in 3..3 + ENDED_KEEP_INTERVALS {
            m.ingest(&Batch {
                seq,
                ..Default::default()
            });
        }
        assert!(m.view(42).is_none());
        assert!(m.procs().is_empty());
    }

    #[test]
    fn no_requests_means_not_a_server() {
        let mut m = QosModel::default();
        let mut b = batch(1, 0, false);
        b.qos.procs[0].requests = RequestSample::default();
        m.ingest(&b);
        let v = m.view(42).unwrap();
        assert!(!v.server);
        assert_eq!(v.window.p99_us, None);
        assert_eq!(v.window.rps, 0.0);
    }

    #[test]
    fn bins_cover_the_data_and_keep_counts() {
        let mut d = vec![0u64; BUCKETS];
        d[bucket(1_000)] = 5;
        d[bucket(1_000_000)] = 7;
        d[bucket(3)] = 1;
        let b = bins(&d, 4);
        assert_eq!(b.iter().map(|x| x.count).sum::<u64>(), 13);
        assert!(b.first().unwrap().lo_ns <= 3);
        assert!(b.last().unwrap().hi_ns > 1_000_000);
        for w in b.windows(2) {
            assert_eq!(w[0].hi_ns, w[1].lo_ns, "bars are contiguous");
        }
        assert!(bins(&vec![0; BUCKETS], 4).is_empty());
    }

    #[test]
    fn hdr_percentiles_track_the_buckets() {
        let mut d = vec![0u64; BUCKETS];
        for v in [1_000u64, 10_000, 100_000, 1_000_000, 10_000_000] {
            d[bucket(v)] += 1;
        }
        let h = to_hdr(&d).unwrap();
        let p50 = h.value_at_quantile(0.5) as f64;
        assert!((p50 - 100_000.0).abs() / 100_000.0 < 0.03, "{p50}");
        assert!(to_hdr(&vec![0; BUCKETS]).is_none());
    }
}
