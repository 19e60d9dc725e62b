//! `cargo xtask bench precision`: precision@k of the CPU sketch against the exact shadow on
//! `ebee-load mix` (Zipf-skewed duty cycles plus churn), at a 50 ms and a 1 s interval, with the
//! sweep of sketch shapes replayed from the kernel's own update trace; then the memory sketch
//! (`mem_precision`, its own section).

use std::fmt::Write as _;

use anyhow::Result;

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
            sketch_row(&mut body, "replay", s, None, &s["precision"])?;
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
