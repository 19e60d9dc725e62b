//! `cargo xtask bench switch`: the cost per context switch of the CPU pipeline, from
//! `ebee-bench switch` (a pipe ping-pong pinned to one CPU with no monitor, an empty
//! sched_switch program, ebee-top, ebee-top with a process pinned; the medians and what each
//! adds over none), plus the programs' own run time from BPF statistics.

use std::fmt::Write as _;

use anyhow::Result;

use super::{ebee_bench, header, num, publish, table_head};

pub fn run(rounds: u32, round_trips: u64) -> Result<()> {
    let v = ebee_bench(&[
        "switch",
        "--rounds",
        &rounds.to_string(),
        "--round-trips",
        &round_trips.to_string(),
    ])?;
    let mut body = String::new();
    header(
        &mut body,
        "Cost per context switch (CPU pipeline)",
        &format!("cargo xtask bench switch --rounds {rounds} --round-trips {round_trips}"),
        "",
    )?;
    writeln!(
        body,
        "Workload: `ebee-load pingpong`: two processes pinned to CPU 1 bounce a byte through two \
         pipes, {round_trips} round trips ({} context switches) per run. Per switch: **wall** = \
         elapsed / switches; **CPU** = both processes' CPU time / switches (the scheduler \
         charges a switch's tracepoint programs to the task switched in, and CPU time leaves out \
         time the hypervisor stole, so it is the steadier of the two on this shared VM). Median \
         of {rounds} rounds; each round runs every mode once, in turn. Modes: **none** no eBPF; \
         **floor** an empty tp_btf sched_switch program alone; **ebee-top** every pipeline \
         loaded and drained every 50 ms from CPU 0 (BPF statistics off); **+ pinned other** \
         the same with another process pinned, so the syscall hooks are attached too (the \
         ping-pong's own read/write calls pay their unpinned cost); **+ BPF statistics** \
         ebee-top with the kernel's BPF run-time statistics on all the time (ebee-top keeps \
         them on 1 s in every 10 to measure its own cost, so it pays a tenth of this \
         difference).\n",
        2 * round_trips
    )?;
    table_head(
        &mut body,
        &["mode", "wall ns/switch", "added", "CPU ns/switch", "added"],
    )?;
    let modes = v["modes"].as_array().cloned().unwrap_or_default();
    let base = |k: &str| {
        modes
            .first()
            .map(|m| num(&m[k]["median_ns"]))
            .unwrap_or(f64::NAN)
    };
    let (bw, bc) = (base("wall"), base("cpu"));
    for m in &modes {
        let (w, c) = (num(&m["wall"]["median_ns"]), num(&m["cpu"]["median_ns"]));
        let name = match m["mode"].as_str().unwrap_or("?") {
            "ebee_top" => "ebee-top",
            "ebee_top_pinned_other" => "ebee-top + pinned other",
            "ebee_top_stats_on" => "ebee-top + BPF statistics",
            other => other,
        };
        writeln!(
            body,
            "| {name} | {w:.0} | {:+.0} | {c:.0} | {:+.0} |",
            w - bw,
            c - bc
        )?;
    }
    let st = &v["bpf_stats"];
    let floor = num(&st["floor_ns_per_run"]);
    writeln!(
        body,
        "\nKernel BPF statistics, {} more runs of each with statistics on, interleaved \
         (medians): the empty program {:.0} ns per run ({} runs), ebee-top's `sched_switch` \
         {:.0} ns per run ({} runs). Both include the statistics' own clock reads; their \
         difference, {:+.0} ns, is what ebee-top's program body costs over an empty program.\n",
        st["reps"],
        floor,
        st["floor_runs"],
        num(&st["sched_switch_ns_per_run"]),
        st["sched_switch_runs"],
        num(&st["sched_switch_ns_per_run"]) - floor,
    )?;
    table_head(
        &mut body,
        &[
            "sched_switch loaded with",
            "ns per run",
            "over the empty program",
        ],
    )?;
    for (name, k) in [
        (
            "off-CPU split and culprits off (`--no-culprits`)",
            "no_culprits_ns_per_run",
        ),
        ("cgroups off (`--cgroups off`)", "cgroups_off_ns_per_run"),
        ("cgroups on (the default)", "sched_switch_ns_per_run"),
        (
            "cgroups on, per-thread mode on (`-H`)",
            "threads_ns_per_run",
        ),
    ] {
        let ns = num(&st[k]);
        writeln!(body, "| {name} | {ns:.0} | {:+.0} |", ns - floor)?;
    }
    publish("switch", &body)
}
