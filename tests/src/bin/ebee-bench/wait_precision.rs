//! `wait-precision`: precision@k of the run-queue wait and disk I/O sketches against the exact
//! per-process shadows loaded beside them, interval by interval while a workload runs.

use std::collections::HashMap;
use std::time::Duration;

use ebee_top::probes::{ProbeConfig, Probes};
use serde_json::json;

use crate::common::Ticker;
use crate::topk::Acc;

pub fn wait_precision(interval_ms: u64, intervals: u32) -> anyhow::Result<serde_json::Value> {
    let tick = Duration::from_millis(interval_ms);
    let mut p = Probes::load(
        ProbeConfig {
            shadow: true,
            ..Default::default()
        },
        tick,
    )?;
    let (mut wait, mut io) = (Acc::default(), Acc::default());
    let (mut wait_keys, mut io_keys, mut wait_ev, mut io_ev, mut misses) = (0, 0, 0, 0, 0);
    p.drain()?;
    let mut ticker = Ticker::new(tick);
    for _ in 0..intervals {
        ticker.wait();
        let w = p.drain()?.waits;
        let exact: HashMap<u32, u64> = w
            .wait_exact
            .iter()
            .flatten()
            .map(|c| (c.tgid, c.wait_ns))
            .filter(|c| c.1 > 0)
            .collect();
        wait_keys += exact.len();
        let reported: Vec<(u32, u64)> = w.wait.iter().map(|c| (c.tgid, c.wait_ns)).collect();
        wait.add(&reported, &exact);
        let bytes = |r: u64, w: u64| r + w;
        let exact: HashMap<u32, u64> = w
            .io_exact
            .iter()
            .flatten()
            .map(|c| (c.tgid, bytes(c.read_bytes, c.write_bytes)))
            .filter(|c| c.1 > 0)
            .collect();
        io_keys += exact.len();
        let reported: Vec<(u32, u64)> =
            w.io.iter()
                .map(|c| (c.tgid, bytes(c.read_bytes, c.write_bytes)))
                .collect();
        io.add(&reported, &exact);
        wait_ev += w.wait_evictions;
        io_ev += w.io_evictions;
        misses += w.thread_misses;
    }
    let n = f64::from(intervals);
    let ncpus = p.ncpus();
    let bytes = |d: usize, w: usize, slot: usize| d * w * slot * 2 * ncpus;
    use ebee_shared::wait::{IO_SLOTS, IO_STAGES, IoSlot, WAIT_SLOTS, WAIT_STAGES, WaitSlot};
    Ok(json!({
        "interval_ms": interval_ms,
        "intervals": intervals,
        "ncpus": ncpus,
        "thread_misses_per_interval": misses as f64 / n,
        "wait": {
            "stages": WAIT_STAGES, "slots": WAIT_SLOTS,
            "sketch_bytes": bytes(WAIT_STAGES, WAIT_SLOTS, std::mem::size_of::<WaitSlot>()),
            "mean_processes_per_interval": wait_keys as f64 / n,
            "evictions": wait_ev,
            "precision": wait.json(),
        },
        "io": {
            "stages": IO_STAGES, "slots": IO_SLOTS,
            "sketch_bytes": bytes(IO_STAGES, IO_SLOTS, std::mem::size_of::<IoSlot>()),
            "mean_processes_per_interval": io_keys as f64 / n,
            "evictions": io_ev,
            "precision": io.json(),
        },
    }))
}
