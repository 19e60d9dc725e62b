//! `cargo xtask bench footprint`: what ebee-top takes from the machine it watches, issue 16's
//! table in one command. Memory: the interactive screen in a 200x50 tmux pane with 1,000 idle
//! processes and one pinned process, for long enough to fill its minute of burst history:
//! resident memory sampled each second (steady: the median of the last 10 s) and its
//! high-water mark; the same screen on the busy load (200 busy processes, 100 new a second);
//! then `ebee-top -b -n 20`'s high-water mark (from start-up, where the kernel's BTF is
//! parsed). Recording: a minute of the busy load at 50 ms. Pinned: what the
//! syscall hooks add to another process's getppid, against no monitor and against empty hooks.

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use super::scale::tmux_pane;
use super::{
    bin, busy_load, ebee_bench, header, load_avg, median, num, publish, table_head, workload,
};

/// `VmRSS` and `VmHWM` of a process, in KiB.
pub fn rss_hwm(pid: u32) -> Option<(u64, u64)> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |k: &str| {
        s.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    };
    Some((kib("VmRSS:")?, kib("VmHWM:")?))
}

fn mib(kib: u64) -> String {
    format!("{:.1}", kib as f64 / 1024.0)
}

/// The screen (`args`) in a 200x50 tmux pane for `seconds`: its resident memory sampled each
/// second, (steady: the median of the last 10 samples, VmHWM), in KiB.
fn screen_rss(args: &str, seconds: u64) -> Result<(u64, u64)> {
    let session = "ebee-footprint";
    let cmd = format!("{} {args}", bin("ebee-top").display());
    let pid = tmux_pane(session, &cmd)?;
    let mut rss = Vec::new();
    let mut hwm = 0;
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(seconds) {
        std::thread::sleep(Duration::from_secs(1));
        if let Some((r, h)) = rss_hwm(pid) {
            rss.push(r as f64);
            hwm = h;
        }
    }
    let _ = Command::new("tmux")
        .args(["send-keys", "-t", session, "q"])
        .status();
    std::thread::sleep(Duration::from_millis(1500));
    let _ = Command::new("tmux")
        .args(["kill-session", "-t", session])
        .status();
    anyhow::ensure!(rss.len() >= 10, "ebee-top's screen did not stay up");
    Ok((median(rss[rss.len() - 10..].to_vec()) as u64, hwm))
}

/// How long the screen runs on the busy load: the minute of history filled twice over, so
/// what turns over in it (bursts of busy processes, short-lived processes) has turned over.
const BUSY_SECONDS: u64 = 150;

pub fn run(seconds: u64) -> Result<()> {
    let _idle = workload(&["idle", "--procs", "1000"])?;
    let sleeper = workload(&["sleeper", "--ms", "1"])?;
    std::thread::sleep(Duration::from_secs(2));
    let (steady, hwm) = screen_rss(&format!("-d 0.05 -p {}", sleeper.0.id()), seconds)?;

    let mut b = Command::new(bin("ebee-top"))
        .args(["-b", "-n", "20", "-d", "0.05"])
        .stdout(Stdio::null())
        .spawn()
        .context("starting ebee-top -b")?;
    let bpid = b.id();
    let mut batch_hwm = 0;
    while b.try_wait()?.is_none() {
        if let Some((_, h)) = rss_hwm(bpid) {
            batch_hwm = h;
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    drop(_idle);
    drop(sleeper);
    let busy = {
        let _load = busy_load(BUSY_SECONDS + 10)?;
        std::thread::sleep(Duration::from_secs(2));
        screen_rss("-d 0.05", BUSY_SECONDS)?
    };
    let rec = recording()?;
    let hooks = pinned_other()?;

    let mut body = String::new();
    let cmd = format!("cargo xtask bench footprint --seconds {seconds}");
    let note = format!("  \nLoad average when it started: {}", load_avg());
    header(
        &mut body,
        "Footprint: memory, recording size, pinned syscalls",
        &cmd,
        &note,
    )?;
    writeln!(
        body,
        "The screen: `ebee-top -d 0.05 -p PID` in a 200x50 tmux pane for {seconds} s, with \
         `ebee-load idle --procs 1000` and a pinned `ebee-load sleeper`; resident memory \
         (VmRSS) sampled every second, steady = the median of the last 10 samples, peak = \
         VmHWM. The same screen (`-d 0.05`, no pin) for {BUSY_SECONDS} s on the busy load of \
         the recording row below: 200 processes with Zipf-skewed duty cycles and 100 new \
         processes a second, each with a minute of 10 ms history. Batch: `ebee-top -b -n 20 \
         -d 0.05`, its VmHWM polled every 10 ms until it exits.\n"
    )?;
    table_head(
        &mut body,
        &[
            "mode",
            "steady RSS MiB",
            "peak RSS MiB",
            "target (issue 16)",
        ],
    )?;
    writeln!(
        body,
        "| screen, 1,000 processes, a minute of history, one pin | {} | {} | steady ≤ 12, peak ≤ 20 |",
        mib(steady),
        mib(hwm)
    )?;
    writeln!(
        body,
        "| screen, busy machine (200 busy processes, 100 new a second), {BUSY_SECONDS} s | {} | {} | |",
        mib(busy.0),
        mib(busy.1)
    )?;
    writeln!(
        body,
        "| batch, 20 intervals | – | {} | peak ≤ 20 |\n",
        mib(batch_hwm)
    )?;
    writeln!(
        body,
        "Recording: `ebee-top -b -n {REC_INTERVALS} -d 0.05 --record` while `ebee-load mix \
         --procs 200 --churn-per-s 100` runs (the busy load of the recording-size section); \
         MB per hour from the file's size and the recorded intervals' own duration. Pinned: \
         `ebee-bench overhead --kind getppid --calls {HOOK_CALLS} --rounds {HOOK_ROUNDS}` \
         (modes in turn each round, medians; see the syscall-overhead section).\n"
    )?;
    table_head(&mut body, &["", "now", "target (issue 16)"])?;
    writeln!(
        body,
        "| recording, busy machine ({:.0} processes per interval), 50 ms | {:.1} MB/h ({:.0} \
         bytes per interval) | ≤ 100 MB/h |",
        rec.procs, rec.mb_per_hour, rec.bytes_per_interval
    )?;
    writeln!(
        body,
        "| getppid of another process while one is pinned, over no monitor | {:+.0} ns | ≤ \
         +150 ns |",
        hooks.pinned_other
    )?;
    writeln!(
        body,
        "| the same with two empty programs on sys_enter and sys_exit (the floor of any \
         enter/exit design) | {:+.0} ns | |",
        hooks.empty_hooks
    )?;
    writeln!(
        body,
        "| pinned other over that floor | {:+.0} ns | |\n",
        hooks.pinned_other - hooks.empty_hooks
    )?;
    publish("footprint", &body)
}

/// Intervals of the recording row: a minute at 50 ms.
const REC_INTERVALS: u64 = 1200;
const HOOK_CALLS: u64 = 2_000_000;
const HOOK_ROUNDS: u32 = 9;

struct Recording {
    procs: f64,
    bytes_per_interval: f64,
    mb_per_hour: f64,
}

/// A minute of the busy load recorded at 50 ms, and its size per hour.
fn recording() -> Result<Recording> {
    let dir = std::env::temp_dir().join(format!("ebee-bench-footprint-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("busy.ebr");
    let load = busy_load(REC_INTERVALS / 20 + 10)?;
    std::thread::sleep(Duration::from_secs(3));
    super::record::ebee_top_record(&file, REC_INTERVALS, 0.05)?;
    drop(load);
    let v = ebee_bench(&["record-stats", "--quick", "--file", &file.to_string_lossy()])?;
    let _ = std::fs::remove_dir_all(&dir);
    let bytes = num(&v["file_bytes"]);
    Ok(Recording {
        procs: num(&v["processes_per_interval"]),
        bytes_per_interval: bytes / num(&v["intervals"]).max(1.0),
        mb_per_hour: bytes / num(&v["seconds"]).max(1e-9) * 3600.0 / 1e6,
    })
}

struct Hooks {
    pinned_other: f64,
    empty_hooks: f64,
}

/// What another process's getppid pays while one is pinned, and the empty-hooks floor, both
/// over no monitor (medians of alternating rounds).
fn pinned_other() -> Result<Hooks> {
    let v = ebee_bench(&[
        "overhead",
        "--calls",
        &HOOK_CALLS.to_string(),
        "--rounds",
        &HOOK_ROUNDS.to_string(),
        "--kind",
        "getppid",
    ])?;
    let modes = v["modes"].as_array().cloned().unwrap_or_default();
    let med = |name: &str| {
        modes
            .iter()
            .find(|m| m["mode"].as_str() == Some(name))
            .map(|m| num(&m["stats"]["median_ns"]))
            .unwrap_or(f64::NAN)
    };
    let none = med("none");
    Ok(Hooks {
        pinned_other: med("pinned_other") - none,
        empty_hooks: med("empty_hooks") - none,
    })
}
