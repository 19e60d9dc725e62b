//! `cargo xtask bench precision`, second part: the memory sketch on `ebee-load mem-mix`
//! (Zipf-skewed anonymous memory that keeps moving). Precision@k by RES and by growth against
//! the exact shadow, a sweep of sketch shapes, the cost per rss_stat event from BPF
//! statistics, the maps, and a page-fault loop timed with and without ebee-top.

use std::fmt::Write as _;
use std::process::{Command, Stdio};

use anyhow::{Context as _, Result};
use serde_json::Value;

use super::{
    Workload, as_root, bin, ebee_bench, header, maps_table, median, publish, sketch_row,
    table_head, trace_lost_warning, with_k_cols, workload,
};
use crate::util::output;

/// The two rankings scored: (key in ebee-bench's JSON, name in the tables).
const RANKINGS: [(&str, &str); 2] = [("res", "RES"), ("growth", "growth")];

/// Memory sketch precision and cost, on `ebee-load mem-mix` (written to its own section).
pub fn run(procs: u32) -> Result<()> {
    let runs = [(50u64, 400u32), (1000, 20)];
    // Each run measures its intervals with the shadow, then up to 100 more without it.
    let total_s: u64 = runs
        .iter()
        .map(|(ms, n)| ms * u64::from(*n + (*n).min(100)))
        .sum::<u64>()
        / 1000
        + 20;
    let top_mib = 256;
    let _w = workload(&[
        "mem-mix",
        "--procs",
        &procs.to_string(),
        "--top-mib",
        &top_mib.to_string(),
        "--seconds",
        &total_s.to_string(),
    ])?;
    std::thread::sleep(std::time::Duration::from_secs(3));
    let mut body = String::new();
    header(
        &mut body,
        "Memory sketch precision and cost",
        &format!("cargo xtask bench precision --procs {procs}"),
        " (runs after the CPU tables)",
    )?;
    writeln!(
        body,
        "Workload: `ebee-load mem-mix`: {procs} processes holding Zipf-skewed anonymous memory \
         (process i about {top_mib} MiB / i), each moving at random between half and one and a \
         half of its share every 50-300 ms (touching pages in, or MADV_DONTNEED), so ranks cross \
         all the time. Precision@k per interval of the sketch's ranking (last-known RSS fed by \
         the sketch) against the same ranking fed by the exact per-process shadow, tie-aware; \
         by RES and by growth in the interval (k counted only when at least k processes grew). \
         Cost: the `rss_stat` program's run time per run from the kernel's BPF statistics \
         (run_time_ns / run_cnt), with the shadow and without it (the default). This machine \
         was also running other builds while measured.\n"
    )?;
    table_head(
        &mut body,
        &with_k_cols(&[
            "interval",
            "events/s",
            "recorded/interval",
            "changed/interval",
            "evictions",
            "ranking",
        ]),
    )?;
    let mut last = Value::Null;
    for (ms, n) in runs {
        let v = ebee_bench(&[
            "mem-precision",
            "--interval-ms",
            &ms.to_string(),
            "--intervals",
            &n.to_string(),
        ])?;
        for (key, ranking) in RANKINGS {
            writeln!(
                body,
                "| {ms} ms x {n} | {:.0} | {:.0} | {:.1} | {} | {ranking} | {} |",
                v["events_per_s"].as_f64().unwrap_or(0.0),
                v["recorded_per_interval"].as_f64().unwrap_or(0.0),
                v["changed_per_interval"].as_f64().unwrap_or(0.0),
                v["evictions"],
                super::precision_row(&v[key])
            )?;
        }
        if ms == 50 {
            last = v;
        }
    }
    let v = &last;
    writeln!(body)?;
    writeln!(
        body,
        "Sketch shapes, 50 ms run: the kernel's own update trace of the same intervals replayed \
         through the same `hashpipe::update` in userspace (the default shape's replay matched \
         the kernel's readings in {} of {} intervals).\n",
        v["intervals"].as_u64().unwrap_or(0) - v["replay_mismatches"].as_u64().unwrap_or(0),
        v["intervals"]
    )?;
    let bytes = format!("bytes ({} CPUs, 2 intervals)", v["ncpus"]);
    table_head(
        &mut body,
        &with_k_cols(&["sketch", "stages x slots", &bytes, "ranking"]),
    )?;
    for (key, ranking) in RANKINGS {
        sketch_row(&mut body, "**kernel (default)**", v, Some(ranking), &v[key])?;
    }
    for sh in v["sweep"].as_array().into_iter().flatten() {
        for (key, ranking) in RANKINGS {
            sketch_row(&mut body, "replay", sh, Some(ranking), &sh[key])?;
        }
    }
    writeln!(body)?;
    trace_lost_warning(&mut body, v)?;
    writeln!(
        body,
        "Sketch: {} stages x {} slots of {} bytes per CPU and interval parity \
         ({} bytes per value).\n",
        v["stages"], v["slots"], 24, v["sketch_value_bytes"]
    )?;
    table_head(&mut body, &["rss_stat cost (50 ms run)", "ns per event"])?;
    writeln!(
        body,
        "| default (no shadow) | {:.1} |\n| with the exact shadow | {:.1} |\n",
        v["ns_per_event"].as_f64().unwrap_or(f64::NAN),
        v["ns_per_event_with_shadow"].as_f64().unwrap_or(f64::NAN)
    )?;
    writeln!(
        body,
        "Memory maps as the kernel charges them (`memlock`, {} possible CPUs; the shadow maps \
         exist at this size only with `--exact`, otherwise one entry each, and the trace only \
         in tests and benchmarks, otherwise one page):\n",
        v["ncpus"]
    )?;
    maps_table(&mut body, &v["maps"])?;
    // What the memory pipeline costs in the default configuration, as `--print-maps` sums it.
    if let Some(line) = output(as_root("ebee-top").arg("--print-maps")).and_then(|t| {
        t.lines()
            .find(|l| l.starts_with("of it MEM_*"))
            .map(str::to_owned)
    }) {
        let bytes = line.trim_start_matches("of it MEM_*").trim();
        writeln!(
            body,
            "Default configuration (`ebee-top --print-maps`, no `--exact`): the memory \
             pipeline's maps take {bytes} bytes in all (eHashPipe's memory sketch: 1.2 MB).\n"
        )?;
    }
    drop(_w);

    // Wall clock: a page-fault loop with no monitor and with ebee-top loaded, interleaved.
    let runs = 7;
    let tmp = std::env::temp_dir().join("ebee-bench-faults.jsonl");
    let (mut bare, mut with) = (Vec::new(), Vec::new());
    for _ in 0..runs {
        bare.push(faults()?);
        let m = monitor(&["--no-bpf-stats"], &tmp)?;
        with.push(faults()?);
        drop(m);
    }
    let _ = std::fs::remove_file(&tmp);
    let (b, w) = (median(bare), median(with));
    writeln!(
        body,
        "Page-fault loop (`ebee-load faults --mib 64 --rounds 20`: map 64 MiB, touch every page, \
         unmap; one rss_stat event per page faulted in, a few per unmap), median of {runs} runs \
         interleaved, on a quiet workload: {b:.0} ns per page with no monitor, {w:.0} ns with \
         `ebee-top -b --no-bpf-stats` loaded: {:+.0} ns per page ({:+.1}%), the whole added cost \
         of an event including the tracepoint's dispatch to the program.\n",
        w - b,
        (w - b) / b * 100.0
    )?;
    publish("mem-precision", &body)
}

fn faults() -> Result<f64> {
    let s =
        output(Command::new(bin("ebee-load")).args(["faults", "--mib", "64", "--rounds", "20"]))
            .context("ebee-load faults failed")?;
    s.parse().context("parsing faults output")
}

/// Start ebee-top in batch JSON mode as root; its stdout goes to `out`.
fn monitor(args: &[&str], out: &std::path::Path) -> Result<Workload> {
    let file = std::fs::File::create(out).context("creating monitor output")?;
    let c = as_root("ebee-top")
        .args(["-b", "--format", "json"])
        .args(args)
        .stdout(file)
        .stdin(Stdio::null())
        .spawn()
        .context("starting ebee-top")?;
    // Let it load and attach.
    std::thread::sleep(std::time::Duration::from_millis(700));
    Ok(Workload(c))
}
