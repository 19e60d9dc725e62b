//! `cargo xtask bench scale`: ebee-top's own cost as the process count grows, side by side with
//! top and htop; how much of a storm of short-lived processes each one sees; and whether a
//! 20 ms burst shows as 20 ms.

use std::fmt::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use serde_json::Value;

use super::{Workload, bin, ebee_bench, header, publish, table_head, workload};
use crate::util::{self, output};

/// user + system CPU of a process in ns (/proc/PID/stat fields 14 and 15, clock ticks).
fn proc_cpu_ns(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    Some(ticks * 1_000_000_000 / hz)
}

fn spawn_quiet(cmd: &mut Command) -> Result<Workload> {
    Ok(Workload(
        cmd.stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting {:?}", cmd.get_program()))?,
    ))
}

/// Run `cmd` in a fresh 200x50 tmux session `session` (replacing one of that name); the pid
/// of the pane's process.
pub(super) fn tmux_pane(session: &str, cmd: &str) -> Result<u32> {
    let _ = Command::new("tmux")
        .args(["kill-session", "-t", session])
        .status();
    util::status(Command::new("tmux").args([
        "new-session",
        "-d",
        "-s",
        session,
        "-x",
        "200",
        "-y",
        "50",
        cmd,
    ]))?;
    std::thread::sleep(Duration::from_millis(500));
    output(Command::new("tmux").args(["list-panes", "-t", session, "-F", "#{pane_pid}"]))
        .and_then(|s| s.lines().next().and_then(|l| l.trim().parse().ok()))
        .with_context(|| format!("pane pid of {cmd:?}"))
}

/// htop in a 200x50 tmux pane, its session killed when dropped.
struct Htop {
    session: &'static str,
}
impl Htop {
    fn start(session: &'static str) -> Result<(Self, u32)> {
        let pid = tmux_pane(session, "htop -d 1")?;
        Ok((Self { session }, pid))
    }
}
impl Drop for Htop {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", self.session])
            .status();
    }
}

/// ebee-top's interactive screen in a 200x50 tmux pane, quit with `q` when dropped.
struct Screen {
    session: &'static str,
}
impl Screen {
    fn start(session: &'static str, latency: &Path) -> Result<(Self, u32)> {
        let _ = std::fs::remove_file(latency);
        let cmd = format!(
            "{} -d 0.05 --latency-report {}",
            bin("ebee-top").display(),
            latency.display()
        );
        let pid = tmux_pane(session, &cmd)?;
        Ok((Self { session }, pid))
    }
}
impl Drop for Screen {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["send-keys", "-t", self.session, "q"])
            .status();
        std::thread::sleep(Duration::from_millis(1500));
        let _ = Command::new("tmux")
            .args(["kill-session", "-t", self.session])
            .status();
    }
}

/// What one monitor cost over the measured window, and for ebee-top how late its intervals
/// reached stdout or the screen (its `--latency-report`).
struct Measured {
    cpu_ns: u64,
    bpf_ns: Option<u64>,
    latency: Option<Value>,
}

/// Sum of `cost.bpf_ns` over the measured window of a JSON Lines output (after the 2 s
/// warm-up: 40 intervals).
fn bpf_ns_of(json: &Path, secs: u64) -> u64 {
    let text = std::fs::read_to_string(json).unwrap_or_default();
    text.lines()
        .skip(40)
        .take((secs * 20) as usize)
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v["cost"]["bpf_ns"].as_u64())
        .sum()
}

fn read_latency(path: &Path) -> Option<Value> {
    for _ in 0..30 {
        if let Some(v) = std::fs::read_to_string(path)
            .ok()
            .and_then(|t| serde_json::from_str(&t).ok())
        {
            return Some(v);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// One monitor: `ebee-top` (batch, JSON), `ebee-top-screen` (interactive, in tmux), `top`
/// or `htop`.
fn measure(monitor: &str, secs: u64, json: &Path) -> Result<Measured> {
    let latency = std::env::temp_dir().join(format!("ebee-scale-latency-{monitor}.json"));
    let _ = std::fs::remove_file(&latency);
    let (guard, pid): (Box<dyn std::any::Any>, u32) = match monitor {
        "ebee-top" => {
            let f = std::fs::File::create(json)?;
            let c = Command::new(bin("ebee-top"))
                .args(["-b", "--format", "json", "-d", "0.05", "--latency-report"])
                .arg(&latency)
                .stdout(f)
                .stdin(Stdio::null())
                .spawn()?;
            let pid = c.id();
            (Box::new(Workload(c)), pid)
        }
        "ebee-top-screen" => {
            let (s, pid) = Screen::start("ebee-screen", &latency)?;
            (Box::new(s), pid)
        }
        "top" => {
            let w = spawn_quiet(Command::new("top").args(["-b", "-d", "0.05"]))?;
            let pid = w.0.id();
            (Box::new(w), pid)
        }
        _ => {
            let (h, pid) = Htop::start("ebee-htop")?;
            (Box::new(h), pid)
        }
    };
    std::thread::sleep(Duration::from_secs(2));
    let a = proc_cpu_ns(pid).context("monitor CPU")?;
    let t_start = Instant::now();
    std::thread::sleep(Duration::from_secs(secs));
    let b = proc_cpu_ns(pid).context("monitor CPU")?;
    let wall = t_start.elapsed();
    if monitor == "ebee-top" {
        // SIGTERM, not SIGKILL: ebee-top writes its latency report on the way out.
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        std::thread::sleep(Duration::from_millis(500));
    }
    drop(guard);
    let cpu = (b - a) as f64 * secs as f64 / wall.as_secs_f64();
    let bpf_ns = (monitor == "ebee-top").then(|| bpf_ns_of(json, secs));
    let latency = monitor
        .starts_with("ebee-top")
        .then(|| read_latency(&latency))
        .flatten();
    Ok(Measured {
        cpu_ns: cpu as u64,
        bpf_ns,
        latency,
    })
}

pub fn run(secs: u64) -> Result<()> {
    if !util::is_root() {
        bail!("bench scale runs monitors as root: run it with sudo -E (keeping PATH)");
    }
    let json = std::env::temp_dir().join("ebee-scale.jsonl");
    let mut body = String::new();
    header(
        &mut body,
        "Cost at scale, short-lived processes, burst resolution",
        &format!("cargo xtask bench scale --seconds {secs}"),
        "",
    )?;
    let top_v = output(Command::new("top").arg("-v")).unwrap_or_default();
    let htop_v = output(Command::new("htop").arg("--version")).unwrap_or_default();
    writeln!(
        body,
        "Monitors: ebee-top `-b --format json -d 0.05`; {} `-b -d 0.05`; {} `-d 1` (0.1 s, its \
         minimum) in a 200x50 tmux pane.\n",
        top_v.lines().next().unwrap_or("top"),
        htop_v.lines().next().unwrap_or("htop")
    )?;

    // 1. Self-cost against the process count.
    writeln!(body, "### Self-cost with many processes\n")?;
    writeln!(
        body,
        "N idle processes (`ebee-load idle`) plus 50 busy ones (`ebee-load burn --duty 0.02`, \
         10 ms periods: one core in total). CPU of the monitor process (user + system, from \
         /proc/PID/stat) over {secs} s, and for ebee-top also the run time of its eBPF programs \
         (kernel BPF statistics, as ebee-top reports them), as % of one core.\n"
    )?;
    table_head(
        &mut body,
        &["processes", "monitor", "process CPU", "eBPF", "total"],
    )?;
    let mut latencies = Vec::new();
    let mut busy = Vec::new();
    for _ in 0..50 {
        busy.push(workload(&["burn", "--duty", "0.02", "--period-ms", "10"])?);
    }
    for n in [1000u32, 10_000] {
        let idle = workload(&["idle", "--procs", &n.to_string()])?;
        std::thread::sleep(Duration::from_secs(if n > 5000 { 8 } else { 3 }));
        for monitor in ["ebee-top", "ebee-top-screen", "top", "htop"] {
            let m = measure(monitor, secs, &json)?;
            if let Some(l) = m.latency {
                latencies.push((n, monitor, l));
            }
            let (cpu, bpf) = (m.cpu_ns, m.bpf_ns);
            let pct = |ns: u64| ns as f64 / (secs as f64 * 1e9) * 100.0;
            let total = cpu + bpf.unwrap_or(0);
            writeln!(
                body,
                "| {n} | {monitor} | {:.2}% | {} | {:.2}% |",
                pct(cpu),
                bpf.map_or("-".into(), |b| format!("{:.2}%", pct(b))),
                pct(total)
            )?;
            eprintln!("scale: {n} {monitor}: {:.2}%", pct(total));
        }
        drop(idle);
        std::thread::sleep(Duration::from_secs(2));
    }
    drop(busy);
    writeln!(
        body,
        "\n`ebee-top-screen` is the interactive screen (`-d 0.05`) in a 200x50 tmux pane; its \
         eBPF programs are the same as in batch mode.\n"
    )?;

    // 1b. How late the numbers reach the user.
    writeln!(body, "### Drain and draw latency\n")?;
    writeln!(
        body,
        "From the kernel closing an interval (the flip's `CLOCK_MONOTONIC` time) to the Batch \
         reaching the consumer (drain) and to its line on stdout (batch) or its frame written to \
         the terminal (screen), from ebee-top's `--latency-report`, over the runs above.\n"
    )?;
    table_head(
        &mut body,
        &[
            "processes",
            "mode",
            "intervals",
            "drain p50",
            "drain p99",
            "shown p50",
            "shown p99",
            "shown max",
        ],
    )?;
    for (n, monitor, l) in &latencies {
        let us = |v: &Value| v.as_f64().map_or("-".into(), |x| format!("{x:.0} us"));
        writeln!(
            body,
            "| {n} | {monitor} | {} | {} | {} | {} | {} | {} |",
            l["shown"]["count"],
            us(&l["drain"]["p50_us"]),
            us(&l["drain"]["p99_us"]),
            us(&l["shown"]["p50_us"]),
            us(&l["shown"]["p99_us"]),
            us(&l["shown"]["max_us"]),
        )?;
    }

    // 2. A storm of short-lived processes.
    writeln!(body, "\n### Short-lived processes\n")?;
    let storm_s = 10.0;
    writeln!(
        body,
        "`ebee-load storm --per-s 500 --seconds {storm_s}`: 500 processes a second, each \
         burning 5-20 ms of CPU and exiting. Ground truth: the CPU time of the reaped children \
         from getrusage(RUSAGE_CHILDREN). Seen: the CPU time each monitor attributes to \
         processes named `ebee-storm` (ebee-top: sum of `cpu_ns` with `-k 10000`, its maximum; top: \
         sum of %CPU x interval).\n"
    )?;
    table_head(
        &mut body,
        &["monitor", "storm CPU seen", "of the true storm CPU"],
    )?;
    for monitor in ["ebee-top", "top"] {
        let out_path = std::env::temp_dir().join("ebee-storm.out");
        let f = std::fs::File::create(&out_path)?;
        let m = match monitor {
            "ebee-top" => Command::new(bin("ebee-top"))
                .args(["-b", "--format", "json", "-d", "0.05", "-k", "10000"])
                .stdout(f)
                .stdin(Stdio::null())
                .spawn()?,
            _ => Command::new("top")
                .args(["-b", "-d", "0.05", "-w", "512"])
                .stdout(f)
                .stdin(Stdio::null())
                .spawn()?,
        };
        let m = Workload(m);
        std::thread::sleep(Duration::from_secs(1));
        let truth: u64 = output(Command::new(bin("ebee-load")).args([
            "storm",
            "--per-s",
            "500",
            "--seconds",
            &storm_s.to_string(),
        ]))
        .and_then(|s| s.trim().parse().ok())
        .context("storm output")?;
        std::thread::sleep(Duration::from_millis(500));
        drop(m);
        let text = std::fs::read_to_string(&out_path).unwrap_or_default();
        let seen: f64 = if monitor == "ebee-top" {
            text.lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .flat_map(|v| v["cpu"].as_array().cloned().unwrap_or_default())
                .filter(|r| r["comm"] == "ebee-storm")
                .filter_map(|r| r["cpu_ns"].as_u64())
                .sum::<u64>() as f64
        } else {
            // top -b rows: PID USER PR NI VIRT RES SHR S %CPU %MEM TIME+ COMMAND
            text.lines()
                .filter(|l| l.trim_end().ends_with("ebee-storm"))
                .filter_map(|l| {
                    l.split_whitespace()
                        .nth(8)
                        .and_then(|c| c.parse::<f64>().ok())
                })
                .map(|pct| pct / 100.0 * 0.05e9)
                .sum()
        };
        writeln!(
            body,
            "| {monitor} | {:.0} ms | {:.1}% |",
            seen / 1e6,
            seen / truth as f64 * 100.0
        )?;
        eprintln!(
            "scale: storm {monitor}: {:.1}%",
            seen / truth as f64 * 100.0
        );
    }

    // 3. Burst resolution.
    writeln!(body, "\n### Temporal resolution\n")?;
    writeln!(
        body,
        "`ebee-load bursts --burst-ms 20 --idle-ms 1980`: 20 ms of CPU every 2 s. ebee-top: each \
         burst as a run of non-empty 10 ms bins (default 50 ms interval). top: the %CPU it shows \
         for the process at its default 3 s delay and at 0.05 s.\n"
    )?;
    let b = workload(&[
        "bursts",
        "--burst-ms",
        "20",
        "--idle-ms",
        "1980",
        "--seconds",
        "40",
    ])?;
    let pid = b.0.id().to_string();
    let v = ebee_bench(&["bursts", "--pid", &pid, "--seconds", "12"])?;
    table_head(&mut body, &["burst", "ebee-top on-CPU", "bins", "span"])?;
    for (i, x) in v["bursts"].as_array().into_iter().flatten().enumerate() {
        writeln!(
            body,
            "| {} | {:.1} ms | {} | {:.0} ms |",
            i + 1,
            x["cpu_ns"].as_f64().unwrap_or(0.0) / 1e6,
            x["bins"],
            x["span_ns"].as_f64().unwrap_or(0.0) / 1e6
        )?;
    }
    for delay in ["3", "0.05"] {
        let n = if delay == "3" { "4" } else { "200" };
        let t = output(Command::new("top").args(["-b", "-d", delay, "-n", n, "-p", &pid]))
            .unwrap_or_default();
        let vals: Vec<f64> = t
            .lines()
            .filter(|l| l.split_whitespace().next() == Some(pid.as_str()))
            .filter_map(|l| l.split_whitespace().nth(8).and_then(|c| c.parse().ok()))
            .collect();
        let max = vals.iter().copied().fold(0.0, f64::max);
        let nonzero = vals.iter().filter(|v| **v > 0.0).count();
        writeln!(
            body,
            "\ntop -d {delay}: {} samples, max %CPU {max:.1}, {nonzero} non-zero samples.",
            vals.len()
        )?;
    }
    drop(b);
    writeln!(body)?;
    publish("scale", &body)
}
