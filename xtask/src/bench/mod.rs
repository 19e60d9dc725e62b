//! Benchmarks: each starts its workload, runs the measurement (as root where it loads eBPF),
//! prints a table, and rewrites its own section of BENCHMARKS.md with the machine and command.
//! One module per benchmark; this one holds the subcommand, what they share for running
//! things, the section header and BENCHMARKS.md, and the table helpers.

mod cost;
mod footprint;
mod mem_precision;
mod metrics;
mod metrics_tls;
mod overhead;
mod precision;
mod qos;
mod rate;
mod record;
mod scale;
mod servers;
mod soak;
mod switch;
mod waits;

use std::fmt::{self, Write as _};
use std::os::unix::process::CommandExt as _;
use std::process::{Child, Command, Stdio};

use anyhow::{Context as _, Result};
use clap::Subcommand;
use serde_json::Value;

use crate::util::{self, output, root};

#[derive(Subcommand)]
pub enum Which {
    /// Precision@k of the CPU sketch against the exact shadow, and a sweep of sketch shapes.
    /// With `--storm`: the CPU sketch alone under a storm (a few skewed burners, short-lived
    /// processes and thousands of light ones), precision@k at every k from 1 to 30 and the
    /// share of CPU time evicted, into its own section.
    Precision {
        /// Processes in the skewed workload (default 200; 40 with `--storm`).
        #[arg(long)]
        procs: Option<u32>,
        /// Short-lived processes started per second.
        #[arg(long, default_value_t = 100)]
        churn: u32,
        /// The storm mode.
        #[arg(long)]
        storm: bool,
        /// With `--storm`: light processes (each wakes about every 100 ms and burns 20 us).
        #[arg(long, default_value_t = 2000)]
        light: u32,
    },
    /// Precision@k of the run-queue wait and disk I/O sketches against their exact shadows.
    Waits {
        /// Processes in the CPU workload (their waits are ranked).
        #[arg(long, default_value_t = 200)]
        procs: u32,
        /// Processes in the disk workload.
        #[arg(long, default_value_t = 40)]
        io_procs: u32,
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
    /// Pinned request rate of a delay server under closed-loop clients: ebee-top's counts
    /// against the clients' over the same intervals, and the rates compared from outside.
    Rate {
        /// Client connections of each load.
        #[arg(long, default_value = "1,4,16")]
        conns: String,
        /// Seconds of each run.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Runs of each load.
        #[arg(long, default_value_t = 3)]
        runs: u32,
    },
    /// Cost of the servers pipeline (programs on the socket tracepoints): getppid and socket
    /// loops with no monitor, ebee-top without and with the pipeline, the floor of empty
    /// socket programs, pinned mode on a request loop; the programs' run time per event (BPF
    /// statistics); redis-benchmark's requests/s with the pipeline on and off.
    Servers {
        /// getppid iterations per run (the socket loops run a tenth).
        #[arg(long, default_value_t = 2_000_000)]
        calls: u64,
        /// Rounds of the loops; each runs every mode once.
        #[arg(long, default_value_t = 9)]
        rounds: u32,
        /// Rounds of redis-benchmark; each runs every mode once.
        #[arg(long, default_value_t = 5)]
        redis_rounds: u32,
        /// Requests of each redis-benchmark test (SET, then GET).
        #[arg(long, default_value_t = 100_000)]
        redis_requests: u64,
    },
    /// ebee-top's own resident memory: the screen with 1,000 processes, a minute of history
    /// and a pin (steady and peak), and batch mode's peak.
    Footprint {
        /// Seconds the screen runs (a minute of history fills after 60).
        #[arg(long, default_value_t = 75)]
        seconds: u64,
    },
    /// The metrics endpoint under load: the drain's latency with nobody scraping, with 100
    /// open connections and 20 scrapes a second, and with those scrapes besieged by 200
    /// silent connections and 200 half-sent requests. With `--tls`: TLS and basic auth on, a
    /// scrape a second, alone and beside 100 unfinished handshakes, 1,000 wrong passwords a
    /// second and plain HTTP to the TLS port (its own section).
    Metrics {
        /// Seconds each mode runs (default 60; 10 with `--tls`, as issue 31 asks).
        #[arg(long)]
        seconds: Option<u64>,
        /// The TLS mode.
        #[arg(long)]
        tls: bool,
    },
    /// What ebee-top costs, every row of issue 27's table in one run: own CPU (process and
    /// eBPF) in batch mode, on the screen and as `serve`; against top; the socket programs per
    /// request and per non-server call; redis-benchmark's GET rate with and without ebee-top
    /// (interleaved pairs); a recording's size per hour on two busy loads. Medians with
    /// bootstrap 95% intervals, and callgrind's instructions per interval.
    Cost {
        /// Rounds of the CPU measurements (the screen runs half as many, serve a quarter).
        #[arg(long, default_value_t = 20)]
        rounds: u32,
        /// Seconds measured per round.
        #[arg(long, default_value_t = 5)]
        seconds: u64,
        /// Pairs of redis-benchmark runs (off, on).
        #[arg(long, default_value_t = 20)]
        redis_pairs: u32,
        /// GET requests per redis-benchmark run.
        #[arg(long, default_value_t = 100_000)]
        redis_requests: u64,
        /// `instructions`: only callgrind's userspace instructions per interval, batch mode and
        /// the screen, with 1,000 idle processes; printed, BENCHMARKS.md left alone (a quick
        /// re-measure while cutting; deterministic enough that the machine's load does not
        /// matter, unlike the times). `cpu`: only own CPU in batch mode and on the screen,
        /// with `--baseline` alternated round by round; printed, BENCHMARKS.md left alone.
        #[arg(long, value_enum)]
        only: Option<cost::Only>,
        /// Another ebee-top binary (say the commit before's, built beforehand). Own CPU in
        /// batch mode, on the screen and as `serve`: measured in the same rounds as this
        /// tree's, the two one at a time in alternating order, each row adding the
        /// baseline's median and the paired change (the drift between two runs of the bench,
        /// 10-20%, hides a cut of a few percent that the pairs show). With `--only
        /// instructions`: measured at the same time as this tree's, so both see the same
        /// processes.
        #[arg(long)]
        baseline: Option<std::path::PathBuf>,
        /// With `--only instructions`: measurements of each mode.
        #[arg(long, default_value_t = 1)]
        instr_rounds: u32,
    },
    /// The flight recorder, accelerated: `serve --record-dir` at 10 ms on the busy load with a
    /// small budget, killed with SIGKILL twice and restarted; disk use against the budget,
    /// RSS and descriptors over time, every retained interval read back, each kill's loss.
    Soak {
        /// Minutes in all (the kills fall at a third and two thirds).
        #[arg(long, default_value_t = 60)]
        minutes: u64,
        /// The budget (`--retain`), MiB.
        #[arg(long, default_value_t = 64)]
        retain_mib: u64,
        /// First, minutes of the agent at 1 s and at 50 ms for the size per hour (0: none).
        #[arg(long, default_value_t = 10)]
        size_minutes: u64,
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
        bench: true,
        ..Default::default()
    })?;
    util::build_release()?;
    match which {
        Which::Precision {
            procs,
            churn,
            storm: false,
            ..
        } => precision::run(procs.unwrap_or(200), churn),
        Which::Precision {
            procs,
            churn,
            storm: true,
            light,
        } => precision::storm(procs.unwrap_or(40), churn, light),
        Which::Waits { procs, io_procs } => waits::run(procs, io_procs),
        Which::Switch {
            rounds,
            round_trips,
        } => switch::run(rounds, round_trips),
        Which::Scale { seconds } => scale::run(seconds),
        Which::Soak {
            minutes,
            retain_mib,
            size_minutes,
        } => soak::run(minutes, retain_mib, size_minutes),
        Which::Overhead { calls, rounds } => overhead::run(calls, rounds),
        Which::Qos { clients, requests } => qos::run(&clients, requests),
        Which::Record { seconds } => record::run(seconds),
        Which::Rate {
            conns,
            seconds,
            runs,
        } => rate::run(&conns, seconds, runs),
        Which::Servers {
            calls,
            rounds,
            redis_rounds,
            redis_requests,
        } => servers::run(calls, rounds, redis_rounds, redis_requests),
        Which::Metrics {
            seconds,
            tls: false,
        } => metrics::run(seconds.unwrap_or(60)),
        Which::Metrics { seconds, tls: true } => metrics_tls::run(seconds.unwrap_or(10)),
        Which::Footprint { seconds } => footprint::run(seconds),
        Which::Cost {
            rounds,
            seconds,
            redis_pairs,
            redis_requests,
            only,
            baseline,
            instr_rounds,
        } => match only {
            Some(cost::Only::Instructions) => cost::instructions(baseline.as_deref(), instr_rounds),
            Some(cost::Only::Cpu) => cost::cpu(&cost::Opts {
                rounds,
                seconds,
                redis_pairs,
                redis_requests,
                baseline,
            }),
            None => cost::run(&cost::Opts {
                rounds,
                seconds,
                redis_pairs,
                redis_requests,
                baseline,
            }),
        },
    }
}

// ---- Running the pieces -------------------------------------------------------------------

/// Kills the workload when dropped, with every process it started: `workload` puts it in a
/// process group of its own (`mix`'s workers outlived it, and ran through the rows measured
/// after it).
pub struct Workload(pub Child);
impl Drop for Workload {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the group our own child leads (ESRCH, harmless, if it leads none).
        unsafe { libc::kill(-(self.0.id() as i32), libc::SIGKILL) };
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A binary of the release build.
pub fn bin(name: &str) -> std::path::PathBuf {
    root().join("target/release").join(name)
}

/// Start `ebee-load` with arguments; killed when dropped.
pub fn workload(args: &[&str]) -> Result<Workload> {
    let c = Command::new(bin("ebee-load"))
        .args(args)
        .stdin(Stdio::null())
        .process_group(0)
        .spawn()
        .context("starting ebee-load")?;
    Ok(Workload(c))
}

/// The busy load of the recording-size section (200 processes with Zipf-skewed duty cycles,
/// 100 new a second), for `seconds`.
pub fn busy_load(seconds: u64) -> Result<Workload> {
    workload(&[
        "mix",
        "--procs",
        "200",
        "--churn-per-s",
        "100",
        "--seconds",
        &seconds.to_string(),
    ])
}

/// A release binary run as root (through sudo when needed).
pub fn as_root(name: &str) -> Command {
    util::root_command(&bin(name))
}

/// Run ebee-bench as root and parse its JSON.
pub fn ebee_bench(args: &[&str]) -> Result<Value> {
    let out = as_root("ebee-bench")
        .args(args)
        .output()
        .context("running ebee-bench")?;
    if !out.status.success() {
        anyhow::bail!(
            "ebee-bench {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    serde_json::from_slice(&out.stdout).context("parsing ebee-bench output")
}

// ---- The machine and BENCHMARKS.md --------------------------------------------------------

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

/// The 1-minute load average, for benchmarks measured on a shared machine.
pub fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

/// The head of every section: its title, the command that wrote it (with `note` after it),
/// and the machine.
pub fn header(body: &mut String, title: &str, command: &str, note: &str) -> fmt::Result {
    writeln!(body, "## {title}\n")?;
    writeln!(body, "Command: `{command}`{note}  ")?;
    writeln!(body, "Machine: {}  ", machine())
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

/// Print a finished section and write it to BENCHMARKS.md.
pub fn publish(name: &str, body: &str) -> Result<()> {
    print!("{body}");
    write_section(name, body)
}

// ---- Numbers and tables -------------------------------------------------------------------

/// A JSON number, NaN when missing.
pub fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
}

/// The head of a Markdown table: its column names and the separator line.
pub fn table_head(body: &mut String, cols: &[&str]) -> fmt::Result {
    writeln!(body, "| {} |", cols.join(" | "))?;
    writeln!(body, "|{}", "---|".repeat(cols.len()))
}

/// The precision@k columns, in the order ebee-bench reports them.
pub const K_COLS: [&str; 5] = ["k=1", "k=5", "k=10", "k=20", "k=30"];

/// `cols` followed by the precision@k columns.
pub fn with_k_cols<'a>(cols: &[&'a str]) -> Vec<&'a str> {
    cols.iter().copied().chain(K_COLS).collect()
}

fn pct(v: &Value) -> String {
    match v.as_f64() {
        Some(x) if x.is_finite() => format!("{:.1}%", x * 100.0),
        _ => "n/a".into(),
    }
}

/// The precision@k cells of one ebee-bench precision array.
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

/// One sketch's row of a precision table: `label`, its shape and size, the ranking scored
/// (memory tables), and its precision@k cells.
pub fn sketch_row(
    body: &mut String,
    label: &str,
    shape: &Value,
    ranking: Option<&str>,
    precision: &Value,
) -> fmt::Result {
    write!(
        body,
        "| {label} | {} x {} | {} | ",
        shape["stages"], shape["slots"], shape["sketch_bytes"]
    )?;
    if let Some(r) = ranking {
        write!(body, "{r} | ")?;
    }
    writeln!(body, "{} |", precision_row(precision))
}

/// The maps an ebee-bench run reported, as a Markdown table followed by a blank line.
pub fn maps_table(body: &mut String, maps: &Value) -> Result<()> {
    table_head(
        body,
        &["map", "type", "value bytes", "entries", "memlock bytes"],
    )?;
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

/// The warning a precision section carries when the update trace lost records.
pub fn trace_lost_warning(body: &mut String, v: &Value) -> fmt::Result {
    if v["trace_lost"].as_u64().unwrap_or(0) > 0 {
        writeln!(
            body,
            "Warning: {} trace records were lost; the sweep rows undercount.\n",
            v["trace_lost"]
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_head_has_one_separator_per_column() {
        let mut s = String::new();
        table_head(&mut s, &with_k_cols(&["sketch", "ranking"])).unwrap();
        assert_eq!(
            s,
            "| sketch | ranking | k=1 | k=5 | k=10 | k=20 | k=30 |\n|---|---|---|---|---|---|---|\n"
        );
    }

    #[test]
    fn sketch_row_cells() {
        let shape = serde_json::json!({"stages": 2, "slots": 32, "sketch_bytes": 1024});
        let p = serde_json::json!([{"precision": 0.5}, {"precision": null}]);
        let mut s = String::new();
        sketch_row(&mut s, "replay", &shape, None, &p).unwrap();
        sketch_row(&mut s, "**kernel (default)**", &shape, Some("RES"), &p).unwrap();
        assert_eq!(
            s,
            "| replay | 2 x 32 | 1024 | 50.0% | n/a |\n\
             | **kernel (default)** | 2 x 32 | 1024 | RES | 50.0% | n/a |\n"
        );
    }

    #[test]
    fn header_names_command_and_machine() {
        let mut s = String::new();
        header(&mut s, "Title", "cargo xtask bench x", " (after y)").unwrap();
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(
            lines[..3],
            ["## Title", "", "Command: `cargo xtask bench x` (after y)  "]
        );
        assert!(lines[3].starts_with("Machine: ") && lines[3].ends_with("  "));
        assert_eq!(lines.len(), 4);
    }
}
