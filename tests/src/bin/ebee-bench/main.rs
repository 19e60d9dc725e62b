//! Measurements behind `cargo xtask bench ...` that need the library (and root): run by xtask,
//! they print one JSON document on stdout for xtask to tabulate.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use ebee_shared::cpu::{CpuSlot, CpuTrace};
use ebee_shared::hashpipe;
use ebee_shared::mem::{MemSlot, MemTrace};
use ebee_shared::prog_names;
use ebee_top::probes::mem::{MemChange, MemReading, MemTable, merge_slots};
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
    /// Precision@k of the memory sketch against the exact shadow (by RES and by growth) while
    /// a workload runs, its evictions, its maps, and the cost per rss_stat event (BPF stats)
    /// with and without the shadow.
    MemPrecision {
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
    /// Added cost per syscall: tight syscall loops (`ebee-load syscalls`) with no monitor,
    /// with ebee-top loaded and nothing pinned, with another process pinned, and pinned
    /// themselves; rounds interleave the modes so machine noise hits them alike.
    Overhead {
        /// Loop iterations per run.
        #[arg(long, default_value_t = 2_000_000)]
        calls: u64,
        /// Rounds (each runs every mode once).
        #[arg(long, default_value_t = 15)]
        rounds: u32,
        /// `getppid` or `tcp`.
        #[arg(long, default_value = "getppid")]
        kind: String,
    },
    /// Added cost per context switch: `ebee-load pingpong` on CPU 1 with no monitor, with an
    /// empty sched_switch program (the floor), with ebee-top (every pipeline, draining every
    /// 50 ms from CPU 0), and with ebee-top and another process pinned; rounds interleave the
    /// modes. Then one run each of the floor and ebee-top with BPF statistics on, for the
    /// programs' own run time per switch.
    Switch {
        /// Round trips per run (two switches each).
        #[arg(long, default_value_t = 300_000)]
        round_trips: u64,
        /// Rounds (each runs every mode once).
        #[arg(long, default_value_t = 9)]
        rounds: u32,
    },
    /// Request QoS of a running redis-server (pinned) under redis-benchmark at several loads:
    /// ebee-top's count and percentiles over each run beside redis-benchmark's own report.
    Qos {
        /// The redis-server to pin.
        #[arg(long)]
        pid: u32,
        /// Its port on 127.0.0.1.
        #[arg(long)]
        port: u16,
        /// Client connections of each load.
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
        clients: Vec<u32>,
        /// Requests per load.
        #[arg(long, default_value_t = 100_000)]
        requests: u64,
    },
    /// Size and cost of a recording: bytes per interval (key and delta records), raw JSON
    /// bytes, encode and decode time per interval, and a sweep of zstd levels and key spacing
    /// over the same intervals.
    RecordStats {
        #[arg(long)]
        file: std::path::PathBuf,
    },
}

/// One redis-benchmark run (GET) with ebee-top draining beside it.
fn qos_load(
    live: &mut ebee_top::source::Live,
    pid: u32,
    port: u16,
    clients: u32,
    requests: u64,
) -> anyhow::Result<serde_json::Value> {
    use ebee_top::source::Source as _;
    let mut bench = std::process::Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "get",
            "-n",
            &requests.to_string(),
            "-c",
            &clients.to_string(),
            "--csv",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut hist = vec![0u64; ebee_shared::qos::BUCKETS];
    let (mut count, mut max_ns, mut syscalls, mut ns) = (0u64, 0u64, 0u64, 0u64);
    let mut add = |b: &ebee_top::batch::Batch| {
        for s in b.qos.procs.iter().filter(|s| s.pid == pid) {
            count += s.requests.requests;
            max_ns = max_ns.max(s.requests.max_ns);
            syscalls += s.syscalls.iter().map(|x| x.count).sum::<u64>();
            for &(i, c) in &s.requests.hist {
                hist[usize::from(i)] += u64::from(c);
            }
        }
        ns += b.interval_ns();
    };
    loop {
        let b = live
            .next_batch()?
            .ok_or_else(|| anyhow::anyhow!("source ended"))?;
        add(&b);
        if bench.try_wait()?.is_some() {
            break;
        }
    }
    // Answers sent just before the client finished are in the next interval.
    let b = live
        .next_batch()?
        .ok_or_else(|| anyhow::anyhow!("source ended"))?;
    add(&b);
    let out = bench.wait_with_output()?;
    let csv = String::from_utf8_lossy(&out.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",
    // "p99_latency_ms","max_latency_ms"
    let row: Vec<f64> = csv
        .lines()
        .find(|l| l.starts_with("\"GET"))
        .ok_or_else(|| anyhow::anyhow!("no GET row in redis-benchmark output: {csv}"))?
        .split(',')
        .skip(1)
        .map(|f| f.trim_matches('"').parse().unwrap_or(f64::NAN))
        .collect();
    let get = |i: usize| row.get(i).copied().unwrap_or(f64::NAN);
    let h = ebee_top::model::qos::to_hdr(&hist);
    let q = |p: f64| h.as_ref().map(|h| h.value_at_quantile(p) as f64 / 1e3);
    let client_rps = get(0);
    Ok(json!({
        "clients": clients,
        "requests": requests,
        "client": {"rps": client_rps, "avg_ms": get(1), "p50_ms": get(3), "p95_ms": get(4),
                   "p99_ms": get(5), "max_ms": get(6)},
        "ebee": {
            "requests": count,
            // The run lasted requests / client_rps seconds by the client's own clock.
            "rps": if client_rps > 0.0 { count as f64 * client_rps / requests as f64 } else { f64::NAN },
            "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99), "p999_us": q(0.999),
            "max_us": max_ns as f64 / 1e3,
            "syscalls": syscalls,
            "drained_s": ns as f64 / 1e9,
        },
    }))
}

fn qos(pid: u32, port: u16, clients: &[u32], requests: u64) -> anyhow::Result<serde_json::Value> {
    use ebee_top::source::Source as _;
    let mut live =
        ebee_top::source::Live::start(ProbeConfig::default(), Duration::from_millis(100))?;
    live.set_pins(&[pid])?;
    let mut loads = Vec::new();
    for &c in clients {
        loads.push(qos_load(&mut live, pid, port, c, requests)?);
    }
    Ok(json!({"pid": pid, "loads": loads}))
}

/// One run of `ebee-load syscalls`, optionally pinned (with `others`) before it starts.
fn loop_run(
    probes: Option<&mut Probes>,
    others: &[u32],
    pin_self: bool,
    calls: u64,
    kind: &str,
) -> anyhow::Result<f64> {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe()?;
    let load = exe.with_file_name("ebee-load");
    let mut child = Command::new(load)
        .args(["syscalls", "--calls", &calls.to_string(), "--kind", kind])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()?;
    // Let the child set up (the tcp kind connects before waiting).
    std::thread::sleep(Duration::from_millis(100));
    if let Some(p) = probes {
        let mut pins = others.to_vec();
        if pin_self {
            pins.push(child.id());
        }
        p.set_pins(&pins)?;
    }
    child
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdin"))?
        .write_all(b"g")?;
    let out = child.wait_with_output()?;
    let s = String::from_utf8_lossy(&out.stdout);
    s.trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("ebee-load printed {s:?}"))
}

fn overhead(calls: u64, rounds: u32, kind: &str) -> anyhow::Result<serde_json::Value> {
    // A process to pin that is not the loop: a sleeper doing ~100 syscalls/s.
    let exe = std::env::current_exe()?;
    let mut sleeper = std::process::Command::new(exe.with_file_name("ebee-load"))
        .args(["sleeper", "--ms", "10"])
        .spawn()?;
    let other = sleeper.id();
    let modes = [
        "none",
        "loaded",
        "empty_hooks",
        "pinned_other",
        "pinned_self",
    ];
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    let r = (|| -> anyhow::Result<()> {
        for _ in 0..rounds {
            res[0].push(loop_run(None, &[], false, calls, kind)?);
            let mut p = Probes::load(ProbeConfig::default(), Duration::from_millis(50))?;
            res[1].push(loop_run(Some(&mut p), &[], false, calls, kind)?);
            p.set_syscall_floor(true)?;
            res[2].push(loop_run(Some(&mut p), &[], false, calls, kind)?);
            p.set_syscall_floor(false)?;
            res[3].push(loop_run(Some(&mut p), &[other], false, calls, kind)?);
            res[4].push(loop_run(Some(&mut p), &[other], true, calls, kind)?);
        }
        Ok(())
    })();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    r?;
    Ok(json!({
        "kind": kind,
        "calls": calls,
        "rounds": rounds,
        "modes": modes.iter().zip(&res).map(|(m, v)| json!({"mode": m, "stats": run_stats(v.clone())})).collect::<Vec<_>>(),
    }))
}

/// Median, minimum and every value of a benchmark's runs (ns).
fn run_stats(runs: Vec<f64>) -> serde_json::Value {
    let mut s = runs.clone();
    s.sort_by(f64::total_cmp);
    let med = s.get(s.len() / 2).copied().unwrap_or(f64::NAN);
    let min = s.first().copied().unwrap_or(f64::NAN);
    json!({"median_ns": med, "min_ns": min, "runs": runs})
}

/// One `ebee-load pingpong` run on CPU 1: (wall ns, CPU ns) per switch. With `probes`, they
/// drain every 50 ms while it runs, as ebee-top would.
fn pingpong(mut probes: Option<&mut Probes>, round_trips: u64) -> anyhow::Result<(f64, f64)> {
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe()?;
    let mut child = Command::new(exe.with_file_name("ebee-load"))
        .args([
            "pingpong",
            "--round-trips",
            &round_trips.to_string(),
            "--cpu",
            "1",
        ])
        .stdout(Stdio::piped())
        .spawn()?;
    while child.try_wait()?.is_none() {
        std::thread::sleep(Duration::from_millis(50));
        if let Some(p) = probes.as_deref_mut() {
            p.drain()?;
        }
    }
    let out = child.wait_with_output()?;
    let s = String::from_utf8_lossy(&out.stdout);
    let mut it = s.split_whitespace().map(str::parse::<f64>);
    match (it.next(), it.next()) {
        (Some(Ok(w)), Some(Ok(c))) => Ok((w, c)),
        _ => anyhow::bail!("ebee-load pingpong printed {s:?}"),
    }
}

fn switch_cost(round_trips: u64, rounds: u32) -> anyhow::Result<serde_json::Value> {
    // The drains run here, on CPU 0, away from the ping-pong on CPU 1.
    ebee_tests::pin_to_cpu(0);
    let exe = std::env::current_exe()?;
    let mut sleeper = std::process::Command::new(exe.with_file_name("ebee-load"))
        .args(["sleeper", "--ms", "10"])
        .spawn()?;
    let other = sleeper.id();
    let modes = ["none", "floor", "ebee_top", "ebee_top_pinned_other"];
    let mut res: Vec<Vec<(f64, f64)>> = vec![Vec::new(); modes.len()];
    let r = (|| -> anyhow::Result<serde_json::Value> {
        for _ in 0..rounds {
            res[0].push(pingpong(None, round_trips)?);
            {
                let _f = ebee_top::probes::SwitchFloor::attach(false)?;
                res[1].push(pingpong(None, round_trips)?);
            }
            let mut p = Probes::load(ProbeConfig::default(), Duration::from_millis(50))?;
            res[2].push(pingpong(Some(&mut p), round_trips)?);
            p.set_pins(&[other])?;
            res[3].push(pingpong(Some(&mut p), round_trips)?);
        }
        // Program run time per switch, from the kernel's BPF statistics.
        let f = ebee_top::probes::SwitchFloor::attach(true)?;
        pingpong(None, round_trips)?;
        let floor = f.stats();
        drop(f);
        let mut p = Probes::load(
            ProbeConfig {
                bpf_stats: true,
                ..Default::default()
            },
            Duration::from_millis(50),
        )?;
        let before = p.prog_stats_of(prog_names::SCHED_SWITCH);
        pingpong(Some(&mut p), round_trips)?;
        let after = p.prog_stats_of(prog_names::SCHED_SWITCH);
        let per = |ns: u64, n: u64| {
            if n == 0 {
                f64::NAN
            } else {
                ns as f64 / n as f64
            }
        };
        Ok(json!({
            "floor_ns_per_run": per(floor.run_ns, floor.run_count),
            "floor_runs": floor.run_count,
            "sched_switch_ns_per_run": per(after.run_ns - before.run_ns, after.run_count - before.run_count),
            "sched_switch_runs": after.run_count - before.run_count,
        }))
    })();
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    let stats = r?;
    Ok(json!({
        "round_trips": round_trips,
        "rounds": rounds,
        "modes": modes.iter().zip(&res).map(|(m, v)| json!({
            "mode": m,
            "wall": run_stats(v.iter().map(|r| r.0).collect()),
            "cpu": run_stats(v.iter().map(|r| r.1).collect()),
        })).collect::<Vec<_>>(),
        "bpf_stats": stats,
    }))
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
    fn replay(&mut self, trace: &[CpuTrace]) -> Vec<(u32, u64)> {
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
        let v: Vec<(usize, usize, Box<dyn FnMut(&[CpuTrace]) -> Vec<(u32, u64)>>)> = vec![
            $({
                let mut s = Shape::<$d, $w>::new($ncpus);
                ($d, $w, Box::new(move |t: &[CpuTrace]| s.replay(t)))
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
        if runs > 0 {
            ns as f64 / runs as f64
        } else {
            f64::NAN
        },
        runs as f64 / t0.elapsed().as_secs_f64(),
    ))
}

/// A memory sketch of any shape, for the replay sweep.
struct MemShape<const D: usize, const W: usize> {
    cpus: Vec<[[MemSlot; W]; D]>,
}

impl<const D: usize, const W: usize> MemShape<D, W> {
    fn new(ncpus: usize) -> Self {
        Self {
            cpus: vec![[[MemSlot::default(); W]; D]; ncpus],
        }
    }
    fn replay(&mut self, trace: &[MemTrace]) -> Vec<MemReading> {
        for s in &mut self.cpus {
            *s = [[MemSlot::default(); W]; D];
        }
        for r in trace {
            if let Some(s) = self.cpus.get_mut(r.cpu as usize) {
                let _ = hashpipe::update(s, r.slot);
            }
        }
        merge_slots(self.cpus.iter().flat_map(|c| c.iter().flatten()))
    }
}

type MemReplay = Box<dyn FnMut(&[MemTrace]) -> Vec<MemReading>>;

macro_rules! mem_shapes {
    ($ncpus:expr; $(($d:literal, $w:literal)),* $(,)?) => {{
        let v: Vec<(usize, usize, MemReplay)> = vec![
            $({
                let mut s = MemShape::<$d, $w>::new($ncpus);
                ($d, $w, Box::new(move |t: &[MemTrace]| s.replay(t)) as MemReplay)
            }),*
        ];
        v
    }};
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

fn mem_precision(interval_ms: u64, intervals: u32) -> anyhow::Result<serde_json::Value> {
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
    let mut shapes = mem_shapes!(ncpus;
        (1, 32), (1, 64), (1, 256),
        (2, 16), (2, 32), (2, 64),
        (4, 8), (4, 16), (4, 32), (4, 64),
        (8, 8), (8, 16),
    );
    p.drain()?;
    // Every table starts from the same /proc walk, as `Live` does.
    let seed = ebee_top::probes::mem::proc_rss(page);
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
    let mut next = Instant::now();
    for _ in 0..intervals {
        next += tick;
        if let Some(d) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(d);
        }
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
        Cmd::MemPrecision {
            interval_ms,
            intervals,
        } => mem_precision(interval_ms, intervals),
        Cmd::Overhead {
            calls,
            rounds,
            kind,
        } => overhead(calls, rounds, &kind),
        Cmd::Switch {
            round_trips,
            rounds,
        } => switch_cost(round_trips, rounds),
        Cmd::Qos {
            pid,
            port,
            clients,
            requests,
        } => qos(pid, port, &clients, requests),
        Cmd::RecordStats { file } => record_stats(&file),
    };
    match r {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("ebee-bench: {e:#}");
            std::process::exit(1);
        }
    }
}

fn record_stats(path: &std::path::Path) -> anyhow::Result<serde_json::Value> {
    use ebee_top::record::Reader;
    use ebee_top::record::codec::Encoder;
    use ebee_top::record::format::KIND_KEY;

    let file_bytes = std::fs::metadata(path)?.len();
    let mut r = Reader::open(path)?;
    anyhow::ensure!(!r.is_empty(), "no intervals in {}", path.display());
    let entries = r.entries().to_vec();
    let t0 = Instant::now();
    let mut batches = Vec::with_capacity(r.len());
    for i in 0..r.len() {
        batches.push(r.batch(i)?);
    }
    let decode_us = t0.elapsed().as_secs_f64() * 1e6 / batches.len() as f64;
    let n = batches.len() as f64;
    let interval_ns: u64 = batches.iter().map(|b| b.interval_ns()).sum();
    let procs: usize = batches.iter().map(|b| b.cpu.len()).sum();
    let raw: u64 = entries.iter().map(|e| u64::from(e.head.raw_len)).sum();
    let (keys, deltas): (Vec<_>, Vec<_>) = entries.iter().partition(|e| e.head.kind == KIND_KEY);
    let mean = |v: &[&ebee_top::record::reader::Entry]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().map(|e| e.head.total_len() as f64).sum::<f64>() / v.len() as f64
        }
    };
    // Re-encode the same intervals: default parameters (timed), then the sweep.
    let encode = |level: i32, every: u32| -> anyhow::Result<(f64, f64)> {
        let mut enc = Encoder::with_params(level, every)?;
        let mut off = 0u64;
        let t = Instant::now();
        for b in &batches {
            let (h, _) = enc.encode(b, off)?;
            off += h.total_len();
        }
        Ok((off as f64 / n, t.elapsed().as_secs_f64() * 1e6 / n))
    };
    let (_, encode_us) = encode(
        ebee_top::record::codec::LEVEL,
        ebee_top::record::codec::KEY_EVERY,
    )?;
    let mut sweep = Vec::new();
    for level in [1, 3, 9] {
        for every in [1, 20, 100, 500] {
            let (bytes, us) = encode(level, every)?;
            sweep.push(json!({"level": level, "key_every": every, "bytes_per_interval": bytes, "encode_us": us}));
        }
    }
    Ok(json!({
        "intervals": batches.len(),
        "file_bytes": file_bytes,
        "seconds": interval_ns as f64 / 1e9,
        "mean_interval_ms": interval_ns as f64 / n / 1e6,
        "processes_per_interval": procs as f64 / n,
        "raw_json_bytes_per_interval": raw as f64 / n,
        "key_records": keys.len(),
        "key_bytes": mean(&keys),
        "delta_bytes": mean(&deltas),
        "encode_us": encode_us,
        "decode_us": decode_us,
        "sweep": sweep,
    }))
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
