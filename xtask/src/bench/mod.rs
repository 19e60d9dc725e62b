//! Benchmarks: each starts its workload, runs the measurement (as root where it loads eBPF),
//! prints a table, and rewrites its own section of BENCHMARKS.md with the machine and command.

use std::fmt::Write as _;
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, Result};
use clap::Subcommand;
use serde_json::Value;

use crate::util::{self, output, root};

#[derive(Subcommand)]
pub enum Which {
    /// Precision@k of the CPU sketch against the exact shadow, and a sweep of sketch shapes.
    Precision {
        /// Processes in the skewed workload.
        #[arg(long, default_value_t = 200)]
        procs: u32,
        /// Short-lived processes started per second.
        #[arg(long, default_value_t = 100)]
        churn: u32,
    },
    /// Added cost per context switch of the CPU pipeline: a pipe ping-pong pinned to one CPU,
    /// with no monitor, an empty sched_switch program, ebee-top, and ebee-top with a process
    /// pinned; plus the programs' own run time from BPF statistics.
    Switch {
        /// Rounds (each runs every configuration once; the median is reported).
        #[arg(long, default_value_t = 9)]
        rounds: u32,
        /// Round trips per run (two context switches each).
        #[arg(long, default_value_t = 300_000)]
        round_trips: u64,
    },
    /// Cost at scale beside top and htop, short-lived process storms, burst resolution.
    Scale {
        /// Seconds each monitor is measured for, per process count.
        #[arg(long, default_value_t = 30)]
        seconds: u64,
    },
    /// Added cost per syscall of the QoS hooks (tight syscall loops, with and without).
    Overhead {
        /// Loop iterations per run (getppid; the tcp loop runs a tenth).
        #[arg(long, default_value_t = 2_000_000)]
        calls: u64,
        /// Rounds; each runs every mode once.
        #[arg(long, default_value_t = 15)]
        rounds: u32,
    },
    /// redis-server under redis-benchmark at several loads: ebee-top's request QoS beside the
    /// client's report.
    Qos {
        /// Client connections of each load.
        #[arg(long, default_value = "1,2,4,8,16,32,64")]
        clients: String,
        /// Requests per load.
        #[arg(long, default_value_t = 100_000)]
        requests: u64,
    },
    /// Size of a recording per hour (and its encode/decode cost) on a busy and a moderate
    /// machine, at the default interval and longer ones.
    Record {
        /// Seconds recorded per row.
        #[arg(long, default_value_t = 60)]
        seconds: u64,
    },
}

pub fn run(which: Which) -> Result<()> {
    crate::setup::setup(crate::setup::Needs {
        test: false,
        bench: true,
        screenshots: false,
    })?;
    util::build_release()?;
    match which {
        Which::Precision { procs, churn } => precision(procs, churn),
        Which::Switch {
            rounds,
            round_trips,
        } => switch(rounds, round_trips),
        Which::Scale { seconds } => crate::scale::run(seconds),
        Which::Overhead { calls, rounds } => crate::bench_qos::overhead(calls, rounds),
        Which::Qos { clients, requests } => crate::bench_qos::qos(&clients, requests),
        Which::Record { seconds } => record(seconds),
    }
}

/// Kills the workload when dropped.
pub struct Workload(pub Child);
impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn bin(name: &str) -> std::path::PathBuf {
    root().join("target/release").join(name)
}

pub fn workload(args: &[&str]) -> Result<Workload> {
    let c = Command::new(bin("ebee-load"))
        .args(args)
        .stdin(Stdio::null())
        .spawn()
        .context("starting ebee-load")?;
    Ok(Workload(c))
}

/// Run ebee-bench as root and parse its JSON.
pub fn ebee_bench(args: &[&str]) -> Result<Value> {
    let mut cmd = if util::is_root() {
        Command::new(bin("ebee-bench"))
    } else {
        let mut c = Command::new("sudo");
        c.arg(bin("ebee-bench"));
        c
    };
    let out = cmd.args(args).output().context("running ebee-bench")?;
    if !out.status.success() {
        anyhow::bail!(
            "ebee-bench {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).context("parsing ebee-bench output")
}

/// One line describing the machine.
pub fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|v| v.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let kernel = output(Command::new("uname").arg("-r")).unwrap_or_default();
    let ncpu = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_gib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.trim().trim_end_matches(" kB").parse::<u64>().ok())
        })
        .map_or(0, |kb| kb / 1024 / 1024);
    format!("{cpu}, {ncpu} CPUs, {mem_gib} GiB, Linux {kernel}")
}

/// Replace the section `name` of BENCHMARKS.md (between its markers), appending it if new.
pub fn write_section(name: &str, body: &str) -> Result<()> {
    let path = root().join("BENCHMARKS.md");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        "# Benchmarks\n\nEvery table here is written by the command above it; rerun it to \
         refresh. Timings are from the machine named in each section.\n"
            .into()
    });
    let start = format!("<!-- bench:{name}:start -->");
    let end = format!("<!-- bench:{name}:end -->");
    let section = format!("{start}\n{body}{end}");
    let new = match (text.find(&start), text.find(&end)) {
        (Some(a), Some(b)) if b > a => {
            format!("{}{}{}", &text[..a], section, &text[b + end.len()..])
        }
        _ => format!("{}\n{}\n", text.trim_end(), section),
    };
    std::fs::write(&path, new).context("writing BENCHMARKS.md")
}

/// The maps an ebee-bench run reported, as a Markdown table followed by a blank line.
fn maps_table(body: &mut String, maps: &Value) -> Result<()> {
    writeln!(
        body,
        "| map | type | value bytes | entries | memlock bytes |"
    )?;
    writeln!(body, "|---|---|---|---|---|")?;
    for m in maps.as_array().into_iter().flatten() {
        writeln!(
            body,
            "| {} | {} | {} | {} | {} |",
            m["name"].as_str().unwrap_or(""),
            m["kind"].as_str().unwrap_or(""),
            m["value_size"],
            m["max_entries"],
            m["memlock"]
        )?;
    }
    writeln!(body)?;
    Ok(())
}

fn pct(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.is_finite() => format!("{:.1}%", x * 100.0),
        _ => "n/a".into(),
    }
}

fn precision_row(p: &Value) -> String {
    p.as_array()
        .map(|a| {
            a.iter()
                .map(|e| pct(&e["precision"]))
                .collect::<Vec<_>>()
                .join(" | ")
        })
        .unwrap_or_default()
}

fn precision(procs: u32, churn: u32) -> Result<()> {
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
    writeln!(body, "## CPU sketch precision\n")?;
    writeln!(body, "Command: `{cmd}`  ")?;
    writeln!(body, "Machine: {}  ", machine())?;
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
        let k = &v["kernel"];
        writeln!(
            body,
            "### Interval {ms} ms ({n} intervals; {:.0} processes and {:.0} context switches per interval; {} evictions, {:.4}% of CPU time evicted)\n",
            v["mean_processes_per_interval"].as_f64().unwrap_or(0.0),
            v["switches_per_interval"].as_f64().unwrap_or(0.0),
            v["evictions"],
            v["evicted_share"].as_f64().unwrap_or(0.0) * 100.0
        )?;
        writeln!(
            body,
            "| sketch | stages x slots | bytes ({} CPUs, 2 intervals) | k=1 | k=5 | k=10 | k=20 | k=30 |",
            v["ncpus"]
        )?;
        writeln!(body, "|---|---|---|---|---|---|---|---|")?;
        writeln!(
            body,
            "| **kernel (default)** | {} x {} | {} | {} |",
            k["stages"],
            k["slots"],
            k["sketch_bytes"],
            precision_row(&k["precision"])
        )?;
        for s in v["sweep"].as_array().into_iter().flatten() {
            writeln!(
                body,
                "| replay | {} x {} | {} | {} |",
                s["stages"],
                s["slots"],
                s["sketch_bytes"],
                precision_row(&s["precision"])
            )?;
        }
        writeln!(body)?;
        if ms == 50 {
            writeln!(
                body,
                "Maps as the kernel charges them (`memlock`), this run (shadow and trace loaded for the benchmark; without `--exact` they are shrunk to one entry / one page):\n"
            )?;
            maps_table(&mut body, &v["maps"])?;
        }
        if v["trace_lost"].as_u64().unwrap_or(0) > 0 {
            writeln!(
                body,
                "Warning: {} trace records were lost; the sweep rows undercount.\n",
                v["trace_lost"]
            )?;
        }
    }
    print!("{body}");
    write_section("precision", &body)?;
    drop(_w);
    mem_precision(procs)
}

/// Memory sketch precision and cost, on `ebee-load mem-mix` (written to its own section).
fn mem_precision(procs: u32) -> Result<()> {
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
    writeln!(body, "## Memory sketch precision and cost\n")?;
    writeln!(
        body,
        "Command: `cargo xtask bench precision --procs {procs}` (runs after the CPU tables)  "
    )?;
    writeln!(body, "Machine: {}  ", machine())?;
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
    writeln!(
        body,
        "| interval | events/s | recorded/interval | changed/interval | evictions | ranking | k=1 | k=5 | k=10 | k=20 | k=30 |"
    )?;
    writeln!(body, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    let mut last = Value::Null;
    for (ms, n) in runs {
        let v = ebee_bench(&[
            "mem-precision",
            "--interval-ms",
            &ms.to_string(),
            "--intervals",
            &n.to_string(),
        ])?;
        for what in ["res", "growth"] {
            writeln!(
                body,
                "| {ms} ms x {n} | {:.0} | {:.0} | {:.1} | {} | {} | {} |",
                v["events_per_s"].as_f64().unwrap_or(0.0),
                v["recorded_per_interval"].as_f64().unwrap_or(0.0),
                v["changed_per_interval"].as_f64().unwrap_or(0.0),
                v["evictions"],
                if what == "res" { "RES" } else { "growth" },
                precision_row(&v[what])
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
    writeln!(
        body,
        "| sketch | stages x slots | bytes ({} CPUs, 2 intervals) | ranking | k=1 | k=5 | k=10 | k=20 | k=30 |",
        v["ncpus"]
    )?;
    writeln!(body, "|---|---|---|---|---|---|---|---|---|")?;
    for what in ["res", "growth"] {
        writeln!(
            body,
            "| **kernel (default)** | {} x {} | {} | {} | {} |",
            v["stages"],
            v["slots"],
            v["sketch_bytes"],
            if what == "res" { "RES" } else { "growth" },
            precision_row(&v[what])
        )?;
    }
    for sh in v["sweep"].as_array().into_iter().flatten() {
        for what in ["res", "growth"] {
            writeln!(
                body,
                "| replay | {} x {} | {} | {} | {} |",
                sh["stages"],
                sh["slots"],
                sh["sketch_bytes"],
                if what == "res" { "RES" } else { "growth" },
                precision_row(&sh[what])
            )?;
        }
    }
    writeln!(body)?;
    if v["trace_lost"].as_u64().unwrap_or(0) > 0 {
        writeln!(
            body,
            "Warning: {} trace records were lost; the sweep rows undercount.\n",
            v["trace_lost"]
        )?;
    }
    writeln!(
        body,
        "Sketch: {} stages x {} slots of {} bytes per CPU and interval parity \
         ({} bytes per value).\n",
        v["stages"], v["slots"], 24, v["sketch_value_bytes"]
    )?;
    writeln!(
        body,
        "| rss_stat cost (50 ms run) | ns per event |\n|---|---|\n| default (no shadow) | {:.1} |\n| with the exact shadow | {:.1} |\n",
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
    let as_root = |args: &[&str]| {
        let mut c = if util::is_root() {
            Command::new(bin("ebee-top"))
        } else {
            let mut c = Command::new("sudo");
            c.arg(bin("ebee-top"));
            c
        };
        c.args(args);
        output(&mut c)
    };
    if let Some(line) = as_root(&["--print-maps"]).and_then(|t| {
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
    print!("{body}");
    write_section("mem-precision", &body)
}

fn faults() -> Result<f64> {
    let s =
        output(Command::new(bin("ebee-load")).args(["faults", "--mib", "64", "--rounds", "20"]))
            .context("ebee-load faults failed")?;
    s.parse().context("parsing faults output")
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// Start ebee-top in batch JSON mode as root; its stdout goes to `out`.
fn monitor(args: &[&str], out: &std::path::Path) -> Result<Workload> {
    let file = std::fs::File::create(out).context("creating monitor output")?;
    let mut cmd = if util::is_root() {
        Command::new(bin("ebee-top"))
    } else {
        let mut c = Command::new("sudo");
        c.arg(bin("ebee-top"));
        c
    };
    let c = cmd
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

fn switch(rounds: u32, round_trips: u64) -> Result<()> {
    let v = ebee_bench(&[
        "switch",
        "--rounds",
        &rounds.to_string(),
        "--round-trips",
        &round_trips.to_string(),
    ])?;
    let num = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let mut body = String::new();
    writeln!(body, "## Cost per context switch (CPU pipeline)\n")?;
    writeln!(
        body,
        "Command: `cargo xtask bench switch --rounds {rounds} --round-trips {round_trips}`  "
    )?;
    writeln!(body, "Machine: {}  ", machine())?;
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
         ping-pong's own read/write calls pay their unpinned cost).\n",
        2 * round_trips
    )?;
    writeln!(
        body,
        "| mode | wall ns/switch | added | CPU ns/switch | added |"
    )?;
    writeln!(body, "|---|---|---|---|---|")?;
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
    writeln!(
        body,
        "\nKernel BPF statistics, one more run of each with statistics on: the empty program \
         {:.0} ns per run ({} runs), ebee-top's `sched_switch` {:.0} ns per run ({} runs). \
         Both include the statistics' own clock reads; their difference, {:+.0} ns, is what \
         ebee-top's program body costs over an empty program.\n",
        num(&st["floor_ns_per_run"]),
        st["floor_runs"],
        num(&st["sched_switch_ns_per_run"]),
        st["sched_switch_runs"],
        num(&st["sched_switch_ns_per_run"]) - num(&st["floor_ns_per_run"]),
    )?;
    print!("{body}");
    write_section("switch", &body)
}

/// Run ebee-top (as root) recording `n` intervals of `delay_s` to `file`, output discarded.
fn ebee_top_record(file: &std::path::Path, n: u64, delay_s: f64) -> Result<()> {
    let mut cmd = if util::is_root() {
        Command::new(bin("ebee-top"))
    } else {
        let mut c = Command::new("sudo");
        c.arg(bin("ebee-top"));
        c
    };
    let st = cmd
        .args(["-b", "--format", "json", "--force", "-n"])
        .arg(n.to_string())
        .arg("-d")
        .arg(delay_s.to_string())
        .arg("--record")
        .arg(file)
        .stdout(Stdio::null())
        .status()
        .context("running ebee-top")?;
    anyhow::ensure!(st.success(), "ebee-top --record failed ({st})");
    Ok(())
}

fn record(seconds: u64) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("ebee-bench-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("bench.ebr");
    let loads: [(&str, &[&str], &[u64]); 2] = [
        (
            "busy: `ebee-load mix --procs 200 --churn-per-s 100`",
            &["mix", "--procs", "200", "--churn-per-s", "100"],
            &[50, 200, 1000],
        ),
        (
            "moderate: `ebee-load mix --procs 30 --churn-per-s 10`",
            &["mix", "--procs", "30", "--churn-per-s", "10"],
            &[50, 1000],
        ),
    ];
    let mut body = String::new();
    let cmd = format!("cargo xtask bench record --seconds {seconds}");
    writeln!(body, "## Recording size\n")?;
    writeln!(body, "Command: `{cmd}`  ")?;
    writeln!(body, "Machine: {}  ", machine())?;
    writeln!(
        body,
        "Each row records {seconds} s of `ebee-top -b --record` while the workload runs (plus \
         whatever else the machine was doing). Bytes per hour are the file's size scaled to an \
         hour. Encode and decode times are per interval, measured by re-encoding and decoding \
         the same intervals in one thread (`ebee-bench record-stats`); the recorder does the \
         encoding on its own thread, off the drain and UI loops.\n"
    )?;
    writeln!(
        body,
        "| workload | interval | processes per interval | raw JSON per interval | key record | delta record | **MB per hour** | encode | decode |"
    )?;
    writeln!(body, "|---|---|---|---|---|---|---|---|---|")?;
    let mut sweeps = Vec::new();
    for (name, args, intervals) in loads {
        for &ms in intervals {
            let n = (seconds * 1000 / ms).max(2);
            let mut wargs: Vec<String> = args.iter().map(|s| s.to_string()).collect();
            wargs.extend(["--seconds".into(), (seconds + 10).to_string()]);
            let wrefs: Vec<&str> = wargs.iter().map(String::as_str).collect();
            let _w = workload(&wrefs)?;
            std::thread::sleep(std::time::Duration::from_secs(3));
            ebee_top_record(&file, n, ms as f64 / 1000.0)?;
            let v = ebee_bench(&["record-stats", "--file", &file.to_string_lossy()])?;
            let f = |k: &str| v[k].as_f64().unwrap_or(0.0);
            let per_hour = f("file_bytes") / f("seconds").max(1e-9) * 3600.0 / 1e6;
            writeln!(
                body,
                "| {name} | {ms} ms | {:.0} | {:.1} KB | {:.1} KB | {:.2} KB | **{per_hour:.0}** | {:.0} µs | {:.0} µs |",
                f("processes_per_interval"),
                f("raw_json_bytes_per_interval") / 1000.0,
                f("key_bytes") / 1000.0,
                f("delta_bytes") / 1000.0,
                f("encode_us"),
                f("decode_us"),
            )?;
            if ms == 50 {
                sweeps.push((name, v));
            }
        }
    }
    writeln!(
        body,
        "\nThe same 50 ms intervals re-encoded with other zstd levels and key spacing (key every 1 = \
         every record compressed alone; the default is level {} with a key at least every {} \
         records). Bytes per interval, and encode time:\n",
        3, 100
    )?;
    writeln!(
        body,
        "| workload | level | key every | bytes per interval | MB per hour at 50 ms | encode |"
    )?;
    writeln!(body, "|---|---|---|---|---|---|")?;
    for (name, v) in &sweeps {
        let short = name.split(':').next().unwrap_or("");
        for s in v["sweep"].as_array().into_iter().flatten() {
            let b = s["bytes_per_interval"].as_f64().unwrap_or(0.0);
            writeln!(
                body,
                "| {short} | {} | {} | {b:.0} | {:.0} | {:.0} µs |",
                s["level"],
                s["key_every"],
                b * 20.0 * 3600.0 / 1e6,
                s["encode_us"].as_f64().unwrap_or(0.0)
            )?;
        }
    }
    writeln!(body)?;
    let _ = std::fs::remove_dir_all(&dir);
    print!("{body}");
    write_section("record", &body)
}
