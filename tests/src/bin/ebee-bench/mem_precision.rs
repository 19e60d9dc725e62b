//! `mem-precision`: precision@k of the memory sketch while a workload runs: the ranking fed by
//! the sketch (last-known RSS per process) against the same ranking fed by the exact shadow, by
//! RES and by growth in the interval; its evictions and maps; a sweep of sketch shapes replaying
//! the kernel's own update trace; and the cost per rss_stat event from BPF statistics, with and
//! without the shadow.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ebee_shared::mem::{MemSlot, MemTrace};
use ebee_top::probes::mem::{MemReading, merge_slots};
use ebee_top::probes::{ProbeConfig, Probes};
use ebee_top::source::live::mem::{MemChange, MemTable};
use serde_json::json;

use crate::common::{Ticker, ns_per_run};
use crate::topk::{Acc, shapes};

/// Cost of the rss_stat program over `intervals`, from the kernel's BPF run-time stats:
/// (ns per run, runs per second).
fn mem_cost(live: &mut ebee_top::source::Live, intervals: u32) -> anyhow::Result<(f64, f64)> {
    use ebee_top::source::Source;
    let name = ebee_shared::prog_names::RSS_STAT;
    let t0 = Instant::now();
    let a = live.probes().prog_stats_of(name);
    for _ in 0..intervals {
        live.next_batch()?;
    }
    let b = live.probes().prog_stats_of(name);
    if !b.enabled {
        anyhow::bail!("BPF run-time statistics could not be turned on");
    }
    let runs = b.run_count.saturating_sub(a.run_count);
    let ns = b.run_ns.saturating_sub(a.run_ns);
    Ok((
        ns_per_run(ns, runs),
        runs as f64 / t0.elapsed().as_secs_f64(),
    ))
}

/// (pid, bytes), largest first.
type Ranking = Vec<(u32, u64)>;

/// Top 30 by RES and the processes that grew, largest first, of one table.
fn ranked(t: &MemTable, ch: &[MemChange]) -> (Ranking, Ranking) {
    let mut g: Vec<(u32, u64)> = ch
        .iter()
        .filter(|c| c.delta_bytes > 0 && t.get(c.pid).is_some())
        .map(|c| (c.pid, c.delta_bytes as u64))
        .collect();
    g.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    (t.top(30), g)
}

pub fn mem_precision(interval_ms: u64, intervals: u32) -> anyhow::Result<serde_json::Value> {
    use ebee_top::source::Live;
    let tick = Duration::from_millis(interval_ms);
    let mut p = Probes::load(
        ProbeConfig {
            shadow: true,
            trace: true,
            ..Default::default()
        },
        tick,
    )?;
    if !p.mem_available() {
        anyhow::bail!("the memory pipeline is not available on this kernel");
    }
    let ncpus = p.ncpus();
    let page = p.page_size();
    let mut shapes = shapes!(MemTrace => Vec<MemReading>, merge_slots; ncpus;
        (1, 32), (1, 64), (1, 256),
        (2, 16), (2, 32), (2, 64),
        (4, 8), (4, 16), (4, 32), (4, 64),
        (8, 8), (8, 16),
    );
    p.drain()?;
    // Every table starts from the same /proc walk, as `Live` does.
    let seed = ebee_top::os::rss::proc_rss(page);
    let fresh = || {
        let mut t = MemTable::new(page);
        t.seed(seed.iter().copied());
        t
    };
    let (mut sketch, mut exact) = (fresh(), fresh());
    let mut tables: Vec<MemTable> = shapes.iter().map(|_| fresh()).collect();
    let (mut res, mut growth) = (Acc::default(), Acc::default());
    let mut sweep: Vec<(Acc, Acc)> = shapes.iter().map(|_| Default::default()).collect();
    let (mut events, mut recorded, mut evictions, mut tracked, mut risky, mut unattributed) =
        (0u64, 0u64, 0u64, 0u64, 0u32, 0u64);
    let (mut timeouts, mut changed, mut replay_mismatch) = (0u64, 0usize, 0u32);
    let t0 = Instant::now();
    let mut ticker = Ticker::new(tick);
    for _ in 0..intervals {
        ticker.wait();
        let raw = p.drain()?;
        let Some(m) = raw.mem.as_ref() else {
            anyhow::bail!("no memory data in the interval");
        };
        let exits: Vec<u32> = raw
            .lifecycle
            .iter()
            .filter(|e| e.kind == ebee_shared::lifecycle::EVENT_EXIT)
            .map(|e| e.tgid)
            .collect();
        let sk_ch = sketch.apply(&m.readings);
        let ex_ch = exact.apply(m.exact.as_deref().unwrap_or_default());
        let trace = m.trace.as_deref().unwrap_or_default();
        let mut shape_ch = Vec::with_capacity(shapes.len());
        for ((d, w, f), t) in shapes.iter_mut().zip(&mut tables) {
            let readings = f(trace);
            if (*d, *w) == (ebee_shared::mem::MEM_STAGES, ebee_shared::mem::MEM_SLOTS)
                && readings != m.readings
            {
                replay_mismatch += 1;
            }
            shape_ch.push(t.apply(&readings));
        }
        for pid in &exits {
            sketch.exit(*pid);
            exact.exit(*pid);
            for t in &mut tables {
                t.exit(*pid);
            }
        }
        let (_, ex_growth) = ranked(&exact, &ex_ch);
        let exact_all: HashMap<u32, u64> = exact.top(usize::MAX).into_iter().collect();
        let exact_growth: HashMap<u32, u64> = ex_growth.into_iter().collect();
        let (r, g) = ranked(&sketch, &sk_ch);
        res.add(&r, &exact_all);
        growth.add(&g, &exact_growth);
        for ((t, ch), (ra, ga)) in tables.iter().zip(&shape_ch).zip(&mut sweep) {
            let (r, g) = ranked(t, ch);
            ra.add(&r, &exact_all);
            ga.add(&g, &exact_growth);
        }
        events += m.events;
        recorded += m.updates;
        evictions += m.evictions;
        tracked += sketch.len() as u64;
        unattributed += m.unattributed;
        timeouts += m.handshake_timeouts;
        changed += ex_ch.len();
        // An eviction can only have touched the top 30 if what it dropped was that large.
        let kth = exact.top(30).get(29).map_or(0, |e| e.1);
        if m.evictions > 0 && m.evicted_max_pages * page >= kth {
            risky += 1;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let maps: Vec<_> = p
        .map_report()?
        .into_iter()
        .filter(|m| m.name.starts_with("MEM_"))
        .collect();
    let trace_lost = p.drain()?.trace_lost;
    drop(p);
    // Cost per event from the kernel's BPF statistics: the default configuration (no shadow,
    // no trace), then with the exact shadow.
    let cost = |shadow: bool| -> anyhow::Result<(f64, f64)> {
        let mut live = Live::start(
            ProbeConfig {
                shadow,
                bpf_stats: true,
                ..Default::default()
            },
            tick,
        )?;
        mem_cost(&mut live, intervals.min(100))
    };
    let (plain_ns, plain_rate) = cost(false)?;
    let (shadow_ns, _) = cost(true)?;
    let n = f64::from(intervals);
    let slot = std::mem::size_of::<MemSlot>();
    let bytes = |d: usize, w: usize| d * w * slot * 2 * ncpus;
    Ok(json!({
        "interval_ms": interval_ms,
        "intervals": intervals,
        "ncpus": ncpus,
        "events_per_interval": events as f64 / n,
        "events_per_s": events as f64 / secs,
        "recorded_per_interval": recorded as f64 / n,
        "changed_per_interval": changed as f64 / n,
        "tracked_per_interval": tracked as f64 / n,
        "evictions": evictions,
        "intervals_with_an_eviction_at_or_above_the_30th": risky,
        "unattributed": unattributed,
        "handshake_timeouts": timeouts,
        "replay_mismatches": replay_mismatch,
        "trace_lost": trace_lost,
        "stages": ebee_shared::mem::MEM_STAGES,
        "slots": ebee_shared::mem::MEM_SLOTS,
        "sketch_bytes": bytes(ebee_shared::mem::MEM_STAGES, ebee_shared::mem::MEM_SLOTS),
        "sketch_value_bytes": std::mem::size_of::<ebee_shared::mem::MemSketch>(),
        "res": res.json(),
        "growth": growth.json(),
        "sweep": shapes.iter().zip(&sweep).map(|((d, w, _), (r, g))| json!({
            "stages": d, "slots": w, "sketch_bytes": bytes(*d, *w),
            "res": r.json(), "growth": g.json(),
        })).collect::<Vec<_>>(),
        "maps": maps,
        "ns_per_event": plain_ns,
        "ns_per_event_with_shadow": shadow_ns,
        "events_per_s_cost_run": plain_rate,
    }))
}
