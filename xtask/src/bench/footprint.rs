//! `cargo xtask bench footprint`: what ebee-top takes from the machine it watches, in memory.
//! The interactive screen in a 200x50 tmux pane with 1,000 idle processes and one pinned
//! process, for long enough to fill its minute of burst history: resident memory sampled each
//! second (steady: the median of the last 10 s) and its high-water mark; then `ebee-top -b -n
//! 20`'s high-water mark (from start-up, where the kernel's BTF is parsed).

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use super::scale::tmux_pane;
use super::{bin, header, load_avg, median, publish, table_head, workload};

/// `VmRSS` and `VmHWM` of a process, in KiB.
fn rss_hwm(pid: u32) -> Option<(u64, u64)> {
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

pub fn run(seconds: u64) -> Result<()> {
    let _idle = workload(&["idle", "--procs", "1000"])?;
    let sleeper = workload(&["sleeper", "--ms", "1"])?;
    std::thread::sleep(Duration::from_secs(2));
    let session = "ebee-footprint";
    let cmd = format!(
        "{} -d 0.05 -p {}",
        bin("ebee-top").display(),
        sleeper.0.id()
    );
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
    let steady = median(rss[rss.len() - 10..].to_vec()) as u64;

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

    let mut body = String::new();
    let cmd = format!("cargo xtask bench footprint --seconds {seconds}");
    let note = format!("  \nLoad average when it started: {}", load_avg());
    header(&mut body, "Footprint: ebee-top's own memory", &cmd, &note)?;
    writeln!(
        body,
        "The screen: `ebee-top -d 0.05 -p PID` in a 200x50 tmux pane for {seconds} s, with \
         `ebee-load idle --procs 1000` and a pinned `ebee-load sleeper`; resident memory \
         (VmRSS) sampled every second, steady = the median of the last 10 samples, peak = \
         VmHWM. Batch: `ebee-top -b -n 20 -d 0.05`, its VmHWM polled every 10 ms until it \
         exits.\n"
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
        "| batch, 20 intervals | – | {} | peak ≤ 20 |\n",
        mib(batch_hwm)
    )?;
    publish("footprint", &body)
}
