//! `precision`: precision@k of the CPU sketch against the exact per-process shadow loaded beside
//! it, interval by interval while a workload runs; and a sweep of sketch shapes, scored the same
//! way, by replaying the kernel's own update trace of the same intervals in userspace.

use std::collections::HashMap;
use std::time::Duration;

use ebee_shared::cpu::{CpuSlot, CpuTrace};
use ebee_top::probes::{ProbeConfig, Probes};
use serde_json::json;

use crate::common::Ticker;
use crate::topk::{Acc, Replay, Update, shapes};

/// (pid, on-CPU ns), largest first, of replayed CPU sketch slots (a pid in several summed).
fn cpu_ranking<'a>(slots: impl Iterator<Item = &'a CpuSlot>) -> Vec<(u32, u64)> {
    let mut m: HashMap<u32, u64> = HashMap::new();
    for slot in slots.filter(|s| s.tgid != 0) {
        *m.entry(slot.tgid).or_default() += slot.ns;
    }
    let mut v: Vec<(u32, u64)> = m.into_iter().collect();
    v.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

/// What a precision run loads beside the sketch and how it scores it.
#[derive(clap::Args, Clone, Copy, Debug, Default)]
pub struct Opts {
    /// Score precision@k at every k from 1 to 30 (default: 1, 5, 10, 20, 30).
    #[arg(long)]
    pub all_k: bool,
    /// Leave the cgroup pipeline off (`--cgroups off`).
    #[arg(long)]
    pub no_cgroups: bool,
    /// Turn the per-thread mode on (`-H`: the thread sketch is written too).
    #[arg(long)]
    pub threads: bool,
}

/// The k of `--all-k`.
const ALL_K: std::ops::RangeInclusive<usize> = 1..=30;

/// The exact top `k` keys' time the sketch did not report, as a share of their exact time.
fn top_loss(k: usize, reported: &[(u32, u64)], exact: &HashMap<u32, u64>) -> (u64, u64) {
    let mut top: Vec<(u32, u64)> = exact.iter().map(|(p, n)| (*p, *n)).collect();
    top.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let got: HashMap<u32, u64> = reported.iter().copied().collect();
    top.iter().take(k).fold((0, 0), |(lost, all), (pid, ns)| {
        let seen = got.get(pid).copied().unwrap_or(0).min(*ns);
        (lost + (ns - seen), all + ns)
    })
}

/// A replay of `hashpipe::update_favour` at `D` x `W` slots per CPU that also splits the exact
/// top 31's lost time by CPU: on the CPU where the process had most of its time (major) or
/// on another (minor). `top`: the keys favoured are those this replay ranked in its top `top`
/// in the interval before (0: none, which is `update_keep`).
struct SplitReplay<const D: usize, const W: usize> {
    top: usize,
    prev: std::collections::HashSet<u32>,
    acc: Acc,
    major_ns: u64,
    minor_ns: u64,
    /// (process, CPU) pairs of the exact top 31 with time offered on a minor CPU and none kept.
    minor_absent: u64,
}

impl<const D: usize, const W: usize> SplitReplay<D, W> {
    fn new(top: usize, ks: &[usize]) -> Self {
        Self {
            top,
            prev: Default::default(),
            acc: Acc::with_ks(ks),
            major_ns: 0,
            minor_ns: 0,
            minor_absent: 0,
        }
    }

    fn add(&mut self, trace: &[CpuTrace], exact: &HashMap<u32, u64>, ncpus: usize) {
        let mut sk = vec![[[CpuSlot::default(); W]; D]; ncpus];
        let mut offered: HashMap<(u32, usize), u64> = HashMap::new();
        for t in trace {
            let c = t.cpu as usize;
            let Some(s) = sk.get_mut(c) else { continue };
            *offered.entry((t.slot.tgid, c)).or_default() += t.slot.ns;
            let prev = &self.prev;
            let _ = ebee_shared::hashpipe::update_favour(s, t.slot, |k| prev.contains(&k));
        }
        let mut kept: HashMap<(u32, usize), u64> = HashMap::new();
        for (c, s) in sk.iter().enumerate() {
            for slot in s.iter().flatten().filter(|x| x.tgid != 0) {
                *kept.entry((slot.tgid, c)).or_default() += slot.ns;
            }
        }
        let mut top: Vec<(u32, u64)> = exact.iter().map(|(p, n)| (*p, *n)).collect();
        top.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        for (pid, _) in top.iter().take(31) {
            let per: Vec<u64> = (0..ncpus)
                .map(|c| offered.get(&(*pid, c)).copied().unwrap_or(0))
                .collect();
            let major = per
                .iter()
                .enumerate()
                .max_by_key(|(_, v)| **v)
                .map_or(0, |(c, _)| c);
            for (c, off) in per.iter().enumerate() {
                let got = kept.get(&(*pid, c)).copied();
                let lost = off - got.unwrap_or(0).min(*off);
                if c == major {
                    self.major_ns += lost;
                } else {
                    self.minor_ns += lost;
                    if lost > 0 && got.is_none() {
                        self.minor_absent += 1;
                    }
                }
            }
        }
        let reported = cpu_ranking(sk.iter().flat_map(|c| c.iter().flatten()));
        self.acc.add(&reported, exact);
        self.prev = reported.iter().take(self.top).map(|(p, _)| *p).collect();
    }

    fn json(&self, sketch_bytes: usize) -> serde_json::Value {
        json!({
            "update": if self.top == 0 { "keep".to_string() } else { format!("favour (previous top {})", self.top) },
            "stages": D, "slots": W, "sketch_bytes": sketch_bytes,
            "top31_lost_major_ns": self.major_ns, "top31_lost_minor_ns": self.minor_ns,
            "top31_minor_absent": self.minor_absent, "precision": self.acc.json(),
        })
    }
}

/// One replayed shape of the sweep: stages, slots, and the replay.
type CpuShape = (usize, usize, Replay<CpuTrace, Vec<(u32, u64)>>);

pub fn precision(
    interval_ms: u64,
    intervals: u32,
    opts: Opts,
) -> anyhow::Result<serde_json::Value> {
    let tick = Duration::from_millis(interval_ms);
    let mut p = Probes::load(
        ProbeConfig {
            shadow: true,
            trace: true,
            cgroups: if opts.no_cgroups {
                ebee_top::os::cgroup::Want::Off
            } else {
                ebee_top::os::cgroup::Want::Auto
            },
            ..Default::default()
        },
        tick,
    )?;
    if opts.threads {
        p.set_threads(true)?;
    }
    let ncpus = p.ncpus();
    let ks: Vec<usize> = if opts.all_k {
        ALL_K.collect()
    } else {
        crate::topk::KS.to_vec()
    };
    let new_acc = || Acc::with_ks(&ks);
    let mut shapes: Vec<(Update, CpuShape)> =
        shapes!(CpuTrace => Vec<(u32, u64)>, cpu_ranking; ncpus;
            (1, 64), (1, 128), (1, 256), (1, 512),
            (2, 32), (2, 64), (2, 128), (2, 256),
            (4, 16), (4, 32), (4, 64), (4, 128),
            (8, 16), (8, 32), (8, 64),
        )
        .into_iter()
        .map(|s| (Update::Pipe, s))
        .collect();
    shapes.extend(
        shapes!(CpuTrace => Vec<(u32, u64)>, cpu_ranking; ncpus; Update::Keep;
            (2, 64), (2, 128), (4, 32), (4, 64), (4, 128), (8, 32), (8, 64),
        )
        .into_iter()
        .map(|s| (Update::Keep, s)),
    );
    // Room for (nearly) every key a CPU is offered in the storm: what is left is not the
    // sketch's doing, and the smallest of these that scores 100% is what the storm needs.
    shapes.extend(
        shapes!(CpuTrace => Vec<(u32, u64)>, cpu_ranking; ncpus; Update::Keep;
            (4, 256), (8, 256), (4, 512), (8, 512))
        .into_iter()
        .map(|s| (Update::Keep, s)),
    );
    // Where the exact top 31 lose time, and what a hint of the last interval's top keys saves.
    let mut split_keep = SplitReplay::<4, 128>::new(0, &ks);
    let mut split_fav = SplitReplay::<4, 128>::new(64, &ks);
    let mut split_fav_half = SplitReplay::<4, 64>::new(64, &ks);
    let mut kernel = new_acc();
    let mut sweep: Vec<Acc> = shapes.iter().map(|_| new_acc()).collect();
    let (mut keys, mut evictions, mut evicted_ns, mut updates, mut total_ns) =
        (0usize, 0u64, 0u64, 0u64, 0u64);
    // Distinct keys each CPU's sketch was offered per interval (from the trace), the worst
    // interval's evicted share, and the top 30's time the sketch missed.
    let (mut cpu_keys, mut cpu_keys_max, mut worst_evicted) = (0usize, 0usize, 0f64);
    let (mut top_lost, mut top_all) = (0u64, 0u64);
    // How long the intervals really were (the drain of one may make the next one late).
    let (mut span_ns, mut span_max_ns) = (0u64, 0u64);
    p.drain()?;
    let mut ticker = Ticker::new(tick);
    for _ in 0..intervals {
        ticker.wait();
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
        let span = raw.end_ns.saturating_sub(raw.start_ns);
        span_ns += span;
        span_max_ns = span_max_ns.max(span);
        let (lost, all) = top_loss(30, &reported, &exact);
        top_lost += lost;
        top_all += all;
        let interval_ns: u64 = exact.values().sum();
        if interval_ns > 0 {
            worst_evicted = worst_evicted.max(raw.evicted_ns as f64 / interval_ns as f64);
        }
        let trace = raw.trace.as_deref().unwrap_or_default();
        for cpu in 0..ncpus {
            let n = trace
                .iter()
                .filter(|t| t.cpu as usize == cpu)
                .map(|t| t.slot.tgid)
                .collect::<std::collections::HashSet<u32>>()
                .len();
            cpu_keys += n;
            cpu_keys_max = cpu_keys_max.max(n);
        }
        split_keep.add(trace, &exact, ncpus);
        split_fav.add(trace, &exact, ncpus);
        split_fav_half.add(trace, &exact, ncpus);
        for ((_, (_, _, f)), acc) in shapes.iter_mut().zip(&mut sweep) {
            acc.add(&f(trace), &exact);
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
        "worst_interval_evicted_share": worst_evicted,
        "top30_missed_share": if top_all > 0 { top_lost as f64 / top_all as f64 } else { 0.0 },
        "keys_per_cpu_interval": cpu_keys as f64 / (f64::from(intervals) * ncpus as f64),
        "keys_per_cpu_interval_max": cpu_keys_max,
        "span_ms_mean": span_ns as f64 / 1e6 / f64::from(intervals),
        "span_ms_max": span_max_ns as f64 / 1e6,
        "cgroups": !opts.no_cgroups,
        "threads": opts.threads,
        "kernel": {
            "stages": ebee_shared::cpu::CPU_STAGES,
            "slots": ebee_shared::cpu::CPU_SLOTS,
            "sketch_bytes": sketch_bytes(ebee_shared::cpu::CPU_STAGES, ebee_shared::cpu::CPU_SLOTS),
            "precision": kernel.json(),
        },
        "maps": maps,
        "split": [
            split_keep.json(sketch_bytes(4, 128)),
            split_fav.json(sketch_bytes(4, 128)),
            split_fav_half.json(sketch_bytes(4, 64)),
        ],
        "trace_lost": p.drain()?.trace_lost,
        "sweep": shapes.iter().zip(&sweep).map(|((u, (d, w, _)), acc)| json!({
            "update": u.name(), "stages": d, "slots": w,
            "sketch_bytes": sketch_bytes(*d, *w), "precision": acc.json(),
        })).collect::<Vec<_>>(),
    }))
}
