//! `cargo xtask bench precision`: precision@k of the CPU sketch against the exact shadow on
//! `ebee-load mix` (Zipf-skewed duty cycles plus churn), at a 50 ms and a 1 s interval, with the
//! sweep of sketch shapes replayed from the kernel's own update trace; then the memory sketch
//! (`mem_precision`, its own section).

use std::fmt::Write as _;

use anyhow::Result;
use serde_json::Value;

use super::{
    ebee_bench, header, maps_table, publish, sketch_row, table_head, trace_lost_warning,
    with_k_cols, workload,
};

pub fn run(procs: u32, churn: u32) -> Result<()> {
    let runs = [(50u64, 400u32), (1000, 20)];
    let total_s: u64 = runs.iter().map(|(ms, n)| ms * u64::from(*n)).sum::<u64>() / 1000 + 20;
    let _w = workload(&[
        "mix",
        "--procs",
        &procs.to_string(),
        "--churn-per-s",
        &churn.to_string(),
        "--seconds",
        &total_s.to_string(),
    ])?;
    // Let every process start before measuring.
    std::thread::sleep(std::time::Duration::from_secs(3));
    let mut body = String::new();
    let cmd = format!("cargo xtask bench precision --procs {procs} --churn {churn}");
    header(&mut body, "CPU sketch precision", &cmd, "")?;
    writeln!(
        body,
        "Workload: `ebee-load mix`: {procs} processes with Zipf-skewed duty cycles (process i \
         burns about 90%/i of a core in 10-28 ms periods) plus {churn} short-lived processes per \
         second (5-20 ms of CPU each). Precision@k per interval against the exact per-process \
         shadow loaded beside the sketch, tie-aware (a reported process counts when its exact \
         time is at least the exact k-th largest). The sweep replays the kernel's own update \
         trace of the same intervals through the same `hashpipe::update` in userspace.\n"
    )?;
    for (ms, n) in runs {
        let v = ebee_bench(&[
            "precision",
            "--interval-ms",
            &ms.to_string(),
            "--intervals",
            &n.to_string(),
        ])?;
        writeln!(
            body,
            "### Interval {ms} ms ({n} intervals; {:.0} processes and {:.0} context switches per interval; {} evictions, {:.4}% of CPU time evicted)\n",
            v["mean_processes_per_interval"].as_f64().unwrap_or(0.0),
            v["switches_per_interval"].as_f64().unwrap_or(0.0),
            v["evictions"],
            v["evicted_share"].as_f64().unwrap_or(0.0) * 100.0
        )?;
        let bytes = format!("bytes ({} CPUs, 2 intervals)", v["ncpus"]);
        table_head(
            &mut body,
            &with_k_cols(&["sketch", "stages x slots", &bytes]),
        )?;
        let k = &v["kernel"];
        sketch_row(&mut body, "**kernel (default)**", k, None, &k["precision"])?;
        for s in v["sweep"].as_array().into_iter().flatten() {
            let label = format!("replay, {}", s["update"].as_str().unwrap_or("hashpipe"));
            sketch_row(&mut body, &label, s, None, &s["precision"])?;
        }
        writeln!(body)?;
        if ms == 50 {
            writeln!(
                body,
                "Maps as the kernel charges them (`memlock`), this run (shadow and trace loaded for the benchmark; without `--exact` they are shrunk to one entry / one page):\n"
            )?;
            maps_table(&mut body, &v["maps"])?;
        }
        trace_lost_warning(&mut body, &v)?;
    }
    publish("precision", &body)?;
    drop(_w);
    super::mem_precision::run(procs)
}

/// The k columns the storm's tables show of the 30 it scores.
const STORM_KS: [usize; 5] = [1, 5, 10, 20, 30];

/// Precision at `k` from an ebee-bench precision array.
fn at_k(p: &Value, k: usize) -> f64 {
    p.as_array()
        .and_then(|a| a.iter().find(|e| e["k"].as_u64() == Some(k as u64)))
        .map_or(f64::NAN, |e| super::num(&e["precision"]))
}

/// The lowest precision over every k scored, and the smallest k where it falls there.
fn worst_k(p: &Value) -> (f64, u64) {
    p.as_array()
        .into_iter()
        .flatten()
        .map(|e| (super::num(&e["precision"]), e["k"].as_u64().unwrap_or(0)))
        .filter(|(v, _)| v.is_finite())
        .fold(
            (f64::INFINITY, 0),
            |(bv, bk), (v, k)| {
                if v < bv { (v, k) } else { (bv, bk) }
            },
        )
}

fn pct(v: f64) -> String {
    if v.is_finite() {
        format!("{:.1}%", v * 100.0)
    } else {
        "n/a".into()
    }
}

/// The shown k cells and the worst k of one precision array, as table cells.
fn k_cells(p: &Value) -> String {
    let mut cells: Vec<String> = STORM_KS.iter().map(|k| pct(at_k(p, *k))).collect();
    let (v, k) = worst_k(p);
    cells.push(if v.is_finite() {
        format!("{} (k={k})", pct(v))
    } else {
        "n/a".into()
    });
    cells.join(" | ")
}

/// `cargo xtask bench precision --storm`: the CPU sketch under `procs` Zipf-skewed burners,
/// `churn` short-lived processes a second and `light` light processes, at 50 ms and 1 s;
/// precision@k for k = 1..30 and the CPU time evicted; the same with the cgroup pipeline off
/// and with the thread sketch on (what else the switch writes), and the sweep of shapes.
pub fn storm(procs: u32, churn: u32, light: u32) -> Result<()> {
    // (label, interval ms, intervals, ebee-bench options)
    let runs: [(&str, u64, u32, &[&str]); 6] = [
        ("default", 50, 400, &[]),
        ("default", 1000, 30, &[]),
        ("cgroups off", 50, 400, &["--no-cgroups"]),
        ("cgroups off", 1000, 30, &["--no-cgroups"]),
        ("threads on (-H)", 50, 400, &["--threads"]),
        ("threads on (-H)", 1000, 30, &["--threads"]),
    ];
    // Each run loads the probes anew (about 2 s) besides measuring, and under the storm its
    // intervals run late: the workload is given four times the nominal length (it is killed
    // when the runs are done), or the last runs measured an idle machine.
    let total_s: u64 = 4 * runs
        .iter()
        .map(|(_, ms, n, _)| ms * u64::from(*n) / 1000 + 5)
        .sum::<u64>()
        + 30;
    let secs = total_s.to_string();
    let _mix = workload(&[
        "mix",
        "--procs",
        &procs.to_string(),
        "--churn-per-s",
        &churn.to_string(),
        "--seconds",
        &secs,
    ])?;
    let _light = workload(&[
        "light",
        "--procs",
        &light.to_string(),
        "--burn-us",
        "20",
        "--seconds",
        &secs,
    ])?;
    // Let every process start and settle before measuring.
    std::thread::sleep(std::time::Duration::from_secs(5));
    let mut body = String::new();
    let cmd = format!(
        "cargo xtask bench precision --storm --procs {procs} --churn {churn} --light {light}"
    );
    let note = format!("  \nLoad average when it started: {}", super::load_avg());
    header(&mut body, "CPU sketch precision under a storm", &cmd, &note)?;
    writeln!(
        body,
        "Workload: `ebee-load mix --procs {procs} --churn-per-s {churn}` ({procs} processes \
         with Zipf-skewed duty cycles, process i about 90%/i of a core, plus {churn} \
         short-lived processes a second burning 5-20 ms each) and `ebee-load light --procs \
         {light} --burn-us 20` ({light} processes each waking about every 100 ms to burn 20 us), on a \
         machine of fewer CPUs than the burners want. Precision@k is scored as in the section \
         above, at every k from 1 to 30 (the worst of the 30 in the last column); \"keys per \
         CPU\" counts the distinct processes one CPU's sketch was offered in an interval (mean \
         and worst interval); \"top 30 missed\" is the exact top 30's time the sketch did not \
         report. Each row is its own load of the probes, one after another under the same \
         workload.\n"
    )?;
    let mut results = Vec::new();
    for (label, ms, n, extra) in runs {
        let (ms_s, n_s) = (ms.to_string(), n.to_string());
        let mut args = vec![
            "precision",
            "--interval-ms",
            &ms_s,
            "--intervals",
            &n_s,
            "--all-k",
        ];
        args.extend_from_slice(extra);
        results.push((label, ms, ebee_bench(&args)?));
    }
    table_head(
        &mut body,
        &[
            "kernel run",
            "interval",
            "processes",
            "keys per CPU (max)",
            "switches",
            "CPU time evicted (worst interval)",
            "top 30 missed",
            "k=1",
            "k=5",
            "k=10",
            "k=20",
            "k=30",
            "worst k=1..30",
        ],
    )?;
    for (label, ms, v) in &results {
        writeln!(
            body,
            "| {label} | {ms} ms | {:.0} | {:.0} ({}) | {:.0} | {:.2}% ({:.2}%) | {:.3}% | {} |",
            super::num(&v["mean_processes_per_interval"]),
            super::num(&v["keys_per_cpu_interval"]),
            v["keys_per_cpu_interval_max"],
            super::num(&v["switches_per_interval"]),
            super::num(&v["evicted_share"]) * 100.0,
            super::num(&v["worst_interval_evicted_share"]) * 100.0,
            super::num(&v["top30_missed_share"]) * 100.0,
            k_cells(&v["kernel"]["precision"]),
        )?;
    }
    writeln!(body)?;
    for (_, ms, v) in results.iter().filter(|(l, _, _)| *l == "default") {
        writeln!(
            body,
            "### Shapes replayed from the default run's trace, {ms} ms\n"
        )?;
        let bytes = format!("bytes ({} CPUs, 2 intervals)", v["ncpus"]);
        table_head(
            &mut body,
            &[
                "sketch",
                "stages x slots",
                &bytes,
                "k=1",
                "k=5",
                "k=10",
                "k=20",
                "k=30",
                "worst k=1..30",
            ],
        )?;
        let row = |body: &mut String, label: &str, s: &Value| {
            writeln!(
                body,
                "| {label} | {} x {} | {} | {} |",
                s["stages"],
                s["slots"],
                s["sketch_bytes"],
                k_cells(&s["precision"])
            )
        };
        row(&mut body, "**kernel**", &v["kernel"])?;
        for s in v["sweep"].as_array().into_iter().flatten() {
            let label = format!("replay, {}", s["update"].as_str().unwrap_or("hashpipe"));
            row(&mut body, &label, s)?;
        }
        writeln!(body)?;
        writeln!(
            body,
            "Where the exact top 31 lose time, {ms} ms: replays of `update_keep` and of \
             `update_favour` (the keys the replay itself ranked in its top 64 the interval \
             before may displace a lighter resident), the lost time split by whether it fell on \
             the CPU where the process ran most (major) or on another (minor); \"absent\" counts \
             (process, minor CPU) pairs with time offered and none kept.\n"
        )?;
        table_head(
            &mut body,
            &[
                "replay",
                "stages x slots",
                &bytes,
                "top 31 lost, major CPU (ms)",
                "minor CPUs (ms)",
                "absent",
                "k=1",
                "k=5",
                "k=10",
                "k=20",
                "k=30",
                "worst k=1..30",
            ],
        )?;
        for s in v["split"].as_array().into_iter().flatten() {
            writeln!(
                body,
                "| {} | {} x {} | {} | {:.3} | {:.3} | {} | {} |",
                s["update"].as_str().unwrap_or("?"),
                s["stages"],
                s["slots"],
                s["sketch_bytes"],
                super::num(&s["top31_lost_major_ns"]) / 1e6,
                super::num(&s["top31_lost_minor_ns"]) / 1e6,
                s["top31_minor_absent"],
                k_cells(&s["precision"])
            )?;
        }
        writeln!(body)?;
        trace_lost_warning(&mut body, v)?;
    }
    writeln!(body, "### Precision@k of the default runs, every k\n")?;
    let defaults: Vec<&(&str, u64, Value)> =
        results.iter().filter(|(l, _, _)| *l == "default").collect();
    let heads: Vec<String> = defaults
        .iter()
        .map(|(_, ms, _)| format!("{ms} ms"))
        .collect();
    let mut cols = vec!["k"];
    cols.extend(heads.iter().map(String::as_str));
    table_head(&mut body, &cols)?;
    for k in 1..=30 {
        let cells: Vec<String> = defaults
            .iter()
            .map(|(_, _, v)| pct(at_k(&v["kernel"]["precision"], k)))
            .collect();
        writeln!(body, "| {k} | {} |", cells.join(" | "))?;
    }
    writeln!(body)?;
    if let Some((_, _, v)) = defaults.first() {
        writeln!(
            body,
            "Maps as the kernel charges them (`memlock`), the default 50 ms run (shadow and \
             trace loaded for the benchmark):\n"
        )?;
        maps_table(&mut body, &v["maps"])?;
    }
    publish("precision-storm", &body)
}
