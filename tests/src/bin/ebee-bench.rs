//! Measurements behind `cargo xtask bench ...` that need the library (and root): run by xtask,
//! they print one JSON document on stdout for xtask to tabulate.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use ebee_shared::cpu::{CpuSlot, CpuTrace};
use ebee_shared::hashpipe;
use ebee_top::probes::{ProbeConfig, Probes};
use serde_json::json;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Precision@k of the CPU sketch against the exact shadow, while a workload runs; plus a
    /// sweep of sketch shapes by replaying the kernel's own update trace in userspace.
    Precision {
        /// Interval length in ms.
        #[arg(long, default_value_t = 50)]
        interval_ms: u64,
        /// Intervals to measure.
        #[arg(long, default_value_t = 200)]
        intervals: u32,
    },
    /// Burst resolution: watch `pid` for `seconds` at the default interval and report every
    /// burst (a run of non-empty 10 ms bins) with its on-CPU time and span.
    Bursts {
        #[arg(long)]
        pid: u32,
        #[arg(long)]
        seconds: f64,
    },
}

const KS: [usize; 5] = [1, 5, 10, 20, 30];

/// Tie-aware precision@k: a reported pid counts when its exact value is at least the exact
/// k-th largest value. None when fewer than k processes ran.
fn precision_at(k: usize, reported: &[(u32, u64)], exact: &HashMap<u32, u64>) -> Option<f64> {
    let mut vals: Vec<u64> = exact.values().copied().collect();
    if vals.len() < k {
        return None;
    }
    vals.sort_unstable_by(|a, b| b.cmp(a));
    let kth = vals[k - 1];
    let hits = reported
        .iter()
        .take(k)
        .filter(|(pid, _)| exact.get(pid).is_some_and(|v| *v >= kth))
        .count();
    Some(hits as f64 / k as f64)
}

/// A sketch of any shape, for the replay sweep.
struct Shape<const D: usize, const W: usize> {
    cpus: Vec<[[CpuSlot; W]; D]>,
}

impl<const D: usize, const W: usize> Shape<D, W> {
    fn new(ncpus: usize) -> Self {
        Self {
            cpus: vec![[[CpuSlot::default(); W]; D]; ncpus],
        }
    }
    fn replay(&mut self, trace: &[CpuTrace], crossings: &[(u32, CpuSlot)]) -> Vec<(u32, u64)> {
        for s in &mut self.cpus {
            *s = [[CpuSlot::default(); W]; D];
        }
        for r in trace {
            if let Some(s) = self.cpus.get_mut(r.cpu as usize) {
                let _ = hashpipe::update(s, r.slot);
            }
        }
        let mut m: HashMap<u32, u64> = HashMap::new();
        for s in &self.cpus {
            for slot in s.iter().flatten().filter(|s| s.tgid != 0) {
                *m.entry(slot.tgid).or_default() += slot.ns;
            }
        }
        for (_, c) in crossings {
            *m.entry(c.tgid).or_default() += c.ns;
        }
        let mut v: Vec<(u32, u64)> = m.into_iter().collect();
        v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        v
    }
}

#[derive(Default)]
struct Acc {
    sum: [f64; KS.len()],
    n: [u32; KS.len()],
}

impl Acc {
    fn add(&mut self, reported: &[(u32, u64)], exact: &HashMap<u32, u64>) {
        for (i, k) in KS.iter().enumerate() {
            if let Some(p) = precision_at(*k, reported, exact) {
                self.sum[i] += p;
                self.n[i] += 1;
            }
        }
    }
    fn json(&self) -> serde_json::Value {
        let v: Vec<serde_json::Value> = KS
            .iter()
            .enumerate()
            .map(|(i, k)| {
                json!({"k": k, "intervals": self.n[i],
                       "precision": if self.n[i] > 0 { self.sum[i] / f64::from(self.n[i]) } else { f64::NAN }})
            })
            .collect();
        json!(v)
    }
}

macro_rules! shapes {
    ($ncpus:expr; $(($d:literal, $w:literal)),* $(,)?) => {{
        let v: Vec<(usize, usize, Box<dyn FnMut(&[CpuTrace], &[(u32, CpuSlot)]) -> Vec<(u32, u64)>>)> = vec![
            $({
                let mut s = Shape::<$d, $w>::new($ncpus);
                ($d, $w, Box::new(move |t: &[CpuTrace], c: &[(u32, CpuSlot)]| s.replay(t, c)))
            }),*
        ];
        v
    }};
}

fn precision(interval_ms: u64, intervals: u32) -> anyhow::Result<serde_json::Value> {
    let tick = Duration::from_millis(interval_ms);
    let mut p = Probes::load(
        ProbeConfig {
            shadow: true,
            trace: true,
            ..Default::default()
        },
        tick,
    )?;
    let ncpus = p.ncpus();
    let mut shapes = shapes!(ncpus;
        (1, 64), (1, 128), (1, 256), (1, 512),
        (2, 32), (2, 64), (2, 128), (2, 256),
        (4, 16), (4, 32), (4, 64), (4, 128),
        (8, 16), (8, 32), (8, 64),
    );
    let mut kernel = Acc::default();
    let mut sweep: Vec<Acc> = shapes.iter().map(|_| Acc::default()).collect();
    let (mut keys, mut evictions, mut evicted_ns, mut updates, mut total_ns) =
        (0usize, 0u64, 0u64, 0u64, 0u64);
    p.drain()?;
    let mut next = Instant::now();
    for _ in 0..intervals {
        next += tick;
        if let Some(d) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
        let raw = p.drain()?;
        let exact: HashMap<u32, u64> = raw
            .exact
            .as_ref()
            .map(|e| e.iter().map(|r| (r.tgid, r.ns)).collect())
            .unwrap_or_default();
        keys += exact.len();
        total_ns += exact.values().sum::<u64>();
        evictions += raw.evictions;
        evicted_ns += raw.evicted_ns;
        updates += raw.updates;
        let reported: Vec<(u32, u64)> = raw.rows.iter().map(|r| (r.tgid, r.ns)).collect();
        kernel.add(&reported, &exact);
        let trace = raw.trace.as_deref().unwrap_or_default();
        let crossings = raw.crossings.as_deref().unwrap_or_default();
        for ((_, _, f), acc) in shapes.iter_mut().zip(&mut sweep) {
            acc.add(&f(trace, crossings), &exact);
        }
    }
    let slot = std::mem::size_of::<CpuSlot>();
    let sketch_bytes = |d: usize, w: usize| d * w * slot * 2 * ncpus;
    let maps = p.map_report()?;
    Ok(json!({
        "interval_ms": interval_ms,
        "intervals": intervals,
        "ncpus": ncpus,
        "mean_processes_per_interval": keys as f64 / f64::from(intervals),
        "switches_per_interval": updates as f64 / f64::from(intervals),
        "evictions": evictions,
        "evicted_share": if total_ns > 0 { evicted_ns as f64 / total_ns as f64 } else { 0.0 },
        "kernel": {
            "stages": ebee_shared::cpu::CPU_STAGES,
            "slots": ebee_shared::cpu::CPU_SLOTS,
            "sketch_bytes": sketch_bytes(ebee_shared::cpu::CPU_STAGES, ebee_shared::cpu::CPU_SLOTS),
            "precision": kernel.json(),
        },
        "maps": maps,
        "trace_lost": p.drain()?.trace_lost,
        "sweep": shapes.iter().zip(&sweep).map(|((d, w, _), acc)| json!({
            "stages": d, "slots": w, "sketch_bytes": sketch_bytes(*d, *w), "precision": acc.json(),
        })).collect::<Vec<_>>(),
    }))
}

fn bursts(pid: u32, seconds: f64) -> anyhow::Result<serde_json::Value> {
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

fn main() {
    let args = Args::parse();
    let r = match args.cmd {
        Cmd::Precision {
            interval_ms,
            intervals,
        } => precision(interval_ms, intervals),
        Cmd::Bursts { pid, seconds } => bursts(pid, seconds),
    };
    match r {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("ebee-bench: {e:#}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precision_is_tie_aware() {
        let exact: HashMap<u32, u64> = [(1, 10), (2, 5), (3, 5), (4, 1)].into_iter().collect();
        // Top-2 is {1, 2 or 3}: reporting 3 second is correct.
        assert_eq!(precision_at(2, &[(1, 10), (3, 5)], &exact), Some(1.0));
        assert_eq!(precision_at(2, &[(1, 10), (4, 1)], &exact), Some(0.5));
        assert_eq!(precision_at(5, &[(1, 10)], &exact), None);
    }
}
