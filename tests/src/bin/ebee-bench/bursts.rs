//! `bursts`: burst resolution. Watches one process at the default interval and reports every
//! burst, a run of non-empty 10 ms bins (which may straddle intervals), with its on-CPU time,
//! its bin count and its span.

use std::time::{Duration, Instant};

use ebee_top::probes::ProbeConfig;
use serde_json::json;

pub fn bursts(pid: u32, seconds: f64) -> anyhow::Result<serde_json::Value> {
    use ebee_top::source::{Live, Source};
    let mut live = Live::start(ProbeConfig::default(), Duration::from_millis(50))?;
    let stop = Instant::now() + Duration::from_secs_f64(seconds);
    // (bin width, bins) of every interval, in order: bursts may straddle intervals.
    let mut bins: Vec<(u64, u64)> = Vec::new();
    while Instant::now() < stop {
        let Some(b) = live.next_batch()? else { break };
        let n = b.interval_ns().div_ceil(b.bin_width_ns.max(1)) as usize;
        let row = b.cpu.iter().find(|r| r.pid == pid);
        for i in 0..n {
            let v = row.and_then(|r| r.bins.get(i)).copied().unwrap_or(0);
            // The last bin of an interval is partial; carry its true width.
            let w = if i + 1 == n {
                b.interval_ns() - b.bin_width_ns * (n as u64 - 1)
            } else {
                b.bin_width_ns
            };
            bins.push((w, v));
        }
    }
    let mut out = Vec::new();
    let mut cur: Option<(u64, u32, u64)> = None; // (ns, bins, span ns)
    for (w, v) in bins {
        match (&mut cur, v > 0) {
            (Some(c), true) => {
                c.0 += v;
                c.1 += 1;
                c.2 += w;
            }
            (None, true) => cur = Some((v, 1, w)),
            (Some(_), false) => {
                if let Some((ns, n, span)) = cur.take() {
                    out.push(json!({"cpu_ns": ns, "bins": n, "span_ns": span}));
                }
            }
            (None, false) => {}
        }
    }
    Ok(json!({"bursts": out}))
}
