//! `precision`: precision@k of the CPU sketch against the exact per-process shadow loaded beside
//! it, interval by interval while a workload runs; and a sweep of sketch shapes, scored the same
//! way, by replaying the kernel's own update trace of the same intervals in userspace.

use std::collections::HashMap;
use std::time::Duration;

use ebee_shared::cpu::{CpuSlot, CpuTrace};
use ebee_top::probes::{ProbeConfig, Probes};
use serde_json::json;

use crate::common::Ticker;
use crate::topk::{Acc, shapes};

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

pub fn precision(interval_ms: u64, intervals: u32) -> anyhow::Result<serde_json::Value> {
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
    let mut shapes = shapes!(CpuTrace => Vec<(u32, u64)>, cpu_ranking; ncpus;
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
        let trace = raw.trace.as_deref().unwrap_or_default();
        for ((_, _, f), acc) in shapes.iter_mut().zip(&mut sweep) {
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
