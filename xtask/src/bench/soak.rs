//! `cargo xtask bench soak`: the flight recorder, accelerated. `ebee-top serve --record-dir`
//! at a 10 ms interval on the busy load of BENCHMARKS.md, with a small budget so files are
//! rotated and deleted many times, killed with SIGKILL twice in the middle and restarted.
//! Sampled every 10 s: the folder's size on disk against the budget, the agent's resident
//! memory and open descriptors. At the end every retained interval is read back (`ebee-top
//! export DIR`), and each kill's loss is measured: the time from the last interval recorded
//! to the kill, and the bytes of the record torn by it.

use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt as _;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};

use super::footprint::rss_hwm;
use super::{as_root, busy_load, header, load_avg, publish, table_head};

/// Our recordings in `dir` (by the names the agent gives them), oldest first.
fn recordings(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("ebee-top-") && n.ends_with(".ebr"))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Bytes on disk of the recordings in `dir`, and how many files.
fn used(dir: &Path) -> (u64, usize) {
    let files = recordings(dir);
    let bytes = files
        .iter()
        .filter_map(|p| std::fs::symlink_metadata(p).ok())
        .map(|m| m.blocks() * 512)
        .sum();
    (bytes, files.len())
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

fn agent(dir: &Path, retain: &str) -> Result<Child> {
    agent_at(dir, retain, "0.01")
}

fn agent_at(dir: &Path, retain: &str, delay: &str) -> Result<Child> {
    as_root("ebee-top")
        .args(["serve", "-d", delay, "--retain", retain, "--record-dir"])
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("starting ebee-top serve")
}

/// The ebee-top process of `c` (itself, or sudo's child).
fn agent_pid(c: &Child) -> u32 {
    let id = c.id();
    let child = std::fs::read_to_string(format!("/proc/{id}/task/{id}/children"))
        .ok()
        .and_then(|s| s.split_whitespace().next().and_then(|p| p.parse().ok()));
    child.unwrap_or(id)
}

/// What a SIGKILL at `kill_ms` cost: the newest file read back alone, the time from its last
/// whole interval to the kill, and whether a record was torn (the interval in flight).
fn kill_loss(dir: &Path, kill_ms: u64) -> Result<String> {
    let Some(newest) = recordings(dir).pop() else {
        return Ok("no file".into());
    };
    let out = as_root("ebee-top")
        .arg("export")
        .arg(&newest)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .context("exporting the file a kill cut")?;
    let last = out
        .stdout
        .split(|b| *b == b'\n')
        .filter_map(|l| serde_json::from_slice::<serde_json::Value>(l).ok())
        .filter_map(|v| v["t_ms"].as_u64())
        .max();
    let torn = String::from_utf8_lossy(&out.stderr).contains("ends early");
    Ok(match last {
        Some(t) => format!(
            "last interval {} ms before the kill, {}",
            kill_ms.saturating_sub(t),
            if torn {
                "one record torn (the interval in flight), every whole one kept"
            } else {
                "no record torn"
            }
        ),
        None => "nothing recorded in the cut file".into(),
    })
}

struct Sample {
    t_s: u64,
    run: usize,
    bytes: u64,
    files: usize,
    rss_kib: u64,
    fds: usize,
}

/// Least-squares slope of `ys` over `xs`, per unit of x.
fn slope(xs: &[f64], ys: &[f64]) -> f64 {
    let n = xs.len() as f64;
    if xs.len() < 2 {
        return 0.0;
    }
    let mx = xs.iter().sum::<f64>() / n;
    let my = ys.iter().sum::<f64>() / n;
    let num: f64 = xs.iter().zip(ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let den: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    if den == 0.0 { 0.0 } else { num / den }
}

/// The agent recording into a fresh folder at `delay` for `minutes` on the load already
/// running: bytes per hour (the folder's files, by length) and intervals recorded.
fn size_per_hour(delay: &str, minutes: u64) -> Result<(f64, usize)> {
    let dir = std::env::temp_dir().join(format!("ebee-bench-size-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut c = agent_at(&dir, "100G", delay)?;
    // Past start-up (loading, the first key record), then measure from a known size.
    std::thread::sleep(Duration::from_secs(20));
    let len = |d: &Path| -> u64 {
        recordings(d)
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum()
    };
    let b0 = len(&dir);
    let t0 = Instant::now();
    std::thread::sleep(Duration::from_secs(minutes * 60));
    let b1 = len(&dir);
    let secs = t0.elapsed().as_secs_f64();
    let pid = agent_pid(&c);
    // SAFETY: a plain signal to the agent we started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = c.wait();
    let out = as_root("ebee-top")
        .arg("export")
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .output()
        .context("exporting the size run")?;
    let n = out
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(((b1 - b0) as f64 * 3600.0 / secs, n))
}

pub fn run(minutes: u64, retain_mib: u64, size_minutes: u64) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("ebee-bench-soak-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let retain = format!("{retain_mib}M");
    let budget = retain_mib << 20;
    let load = "`ebee-load mix --procs 200 --churn-per-s 100`";
    // Long enough for the size runs (20 s of start-up each), the soak and the read-back.
    let load_secs = (2 * size_minutes + minutes) * 60 + 900;
    let mut busy = busy_load(load_secs)?;
    std::thread::sleep(Duration::from_secs(2));
    anyhow::ensure!(
        busy.0.try_wait()?.is_none(),
        "the busy load (ebee-load mix) ended at once"
    );
    let mut sizes = Vec::new();
    if size_minutes > 0 {
        for (delay, label) in [("1", "1 s (the agent's default)"), ("0.05", "50 ms")] {
            let (per_hour, n) = size_per_hour(delay, size_minutes)?;
            sizes.push((label, per_hour, n));
        }
    }
    let total = Duration::from_secs(minutes * 60);
    let kills = [total / 3, total * 2 / 3];
    let start = Instant::now();
    let mut c = agent(&dir, &retain)?;
    let mut run = 0;
    let mut samples: Vec<Sample> = Vec::new();
    let mut kill_at_ms: Vec<u64> = Vec::new();
    let mut losses: Vec<String> = Vec::new();
    let mut next_sample = Duration::from_secs(10);
    while start.elapsed() < total {
        std::thread::sleep(Duration::from_millis(200));
        let (bytes, files) = used(&dir);
        // The budget is checked every 200 ms; a sample is kept every 10 s.
        anyhow::ensure!(
            bytes <= budget,
            "the folder held {bytes} bytes, over the {budget}-byte budget"
        );
        if start.elapsed() >= next_sample {
            next_sample += Duration::from_secs(10);
            let pid = agent_pid(&c);
            samples.push(Sample {
                t_s: start.elapsed().as_secs(),
                run,
                bytes,
                files,
                rss_kib: rss_hwm(pid).map_or(0, |(rss, _)| rss),
                fds: fds(pid),
            });
        }
        if run < kills.len() && start.elapsed() >= kills[run] {
            let pid = agent_pid(&c);
            // SAFETY: a plain signal to the agent we started.
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            kill_at_ms.push(
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .as_millis() as u64,
            );
            let _ = c.wait();
            losses.push(kill_loss(&dir, *kill_at_ms.last().unwrap_or(&0))?);
            run += 1;
            c = agent(&dir, &retain)?;
        }
    }
    let pid = agent_pid(&c);
    // SAFETY: a plain signal to the agent we started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = c.wait();

    // Read everything back: each file alone, then the folder as one timeline.
    let files = recordings(&dir);
    let out = as_root("ebee-top")
        .arg("export")
        .arg(&dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .context("exporting the folder")?;
    let exported = out
        .stdout
        .split(|b| *b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    let warnings = String::from_utf8_lossy(&out.stderr).into_owned();
    let undecodable = warnings.lines().filter(|l| l.contains("skipped")).count();
    let mut body = String::new();
    let cmd = format!(
        "cargo xtask bench soak --minutes {minutes} --retain-mib {retain_mib} --size-minutes \
         {size_minutes}"
    );
    header(&mut body, "Flight recorder soak", &cmd, "")?;
    writeln!(
        body,
        "`ebee-top serve --record-dir DIR -d 0.01 --retain {retain}` for {minutes} minutes on \
         {load}, killed with SIGKILL at {} and {} min and restarted each time, then stopped \
         with SIGTERM. The folder's size on disk (st_blocks of the recordings) was checked \
         every 200 ms; the table keeps one sample a minute. Load average at the end: {}.\n",
        kills[0].as_secs() / 60,
        kills[1].as_secs() / 60,
        load_avg()
    )?;
    if !sizes.is_empty() {
        writeln!(
            body,
            "Size first: the agent alone (`serve --record-dir`, no budget in the way) for \
             {size_minutes} minutes at each interval on the same load, measured from 20 s after \
             its start. Burst bins (10 ms) are kept at every interval.\n"
        )?;
        table_head(
            &mut body,
            &[
                "interval",
                "intervals recorded",
                "MB per hour",
                "MB per day",
            ],
        )?;
        for (label, per_hour, n) in &sizes {
            writeln!(
                body,
                "| {label} | {n} | {:.1} | {:.0} |",
                per_hour / 1e6,
                per_hour * 24.0 / 1e6
            )?;
        }
        writeln!(body, "\nThen the soak:\n")?;
    }
    table_head(
        &mut body,
        &[
            "minute",
            "run",
            "on disk (MiB)",
            "files",
            "RSS (MiB)",
            "open fds",
        ],
    )?;
    for s in samples.iter().filter(|s| s.t_s % 60 < 10) {
        writeln!(
            body,
            "| {} | {} | {:.1} | {} | {:.1} | {} |",
            s.t_s / 60,
            s.run + 1,
            s.bytes as f64 / 1048576.0,
            s.files,
            s.rss_kib as f64 / 1024.0,
            s.fds
        )?;
    }
    let most = samples.iter().map(|s| s.bytes).max().unwrap_or(0);
    // Growth per hour within each run, after its first two minutes (start-up settles).
    let mut rss_growth = Vec::new();
    let mut fd_growth = Vec::new();
    for r in 0..=kills.len() {
        let first = samples.iter().find(|s| s.run == r).map_or(0, |s| s.t_s);
        let pts: Vec<&Sample> = samples
            .iter()
            .filter(|s| s.run == r && s.t_s >= first + 120)
            .collect();
        let xs: Vec<f64> = pts.iter().map(|s| s.t_s as f64 / 3600.0).collect();
        rss_growth.push(slope(
            &xs,
            &pts.iter()
                .map(|s| s.rss_kib as f64 / 1024.0)
                .collect::<Vec<_>>(),
        ));
        fd_growth.push(slope(
            &xs,
            &pts.iter().map(|s| s.fds as f64).collect::<Vec<_>>(),
        ));
    }
    let fmt = |v: &[f64]| {
        v.iter()
            .map(|x| format!("{x:+.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    writeln!(body)?;
    writeln!(
        body,
        "- Most on disk, checked every 200 ms: {:.2} MiB of the {retain_mib} MiB budget; \
         never above it.",
        most.max(used(&dir).0) as f64 / 1048576.0
    )?;
    writeln!(
        body,
        "- RSS growth per hour in each run (least squares after its first 2 minutes): {} MiB/h; \
         open descriptors: {} per hour.",
        fmt(&rss_growth),
        fmt(&fd_growth)
    )?;
    writeln!(
        body,
        "- Retained at the end: {} files, {exported} intervals, every one exported \
         ({undecodable} could not be decoded).",
        files.len()
    )?;
    writeln!(
        body,
        "- Each kill, read back from the file it cut right after it: {}.",
        losses.join("; ")
    )?;
    writeln!(body)?;
    publish("soak", &body)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
