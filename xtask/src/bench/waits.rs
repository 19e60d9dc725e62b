//! `cargo xtask bench waits`: precision@k of the run-queue wait and disk I/O sketches against
//! their exact shadows, on `ebee-load mix` (Zipf-skewed CPU demand on two CPUs: every process
//! waits) beside `ebee-load io-mix` (Zipf-skewed writers through the page cache, a tenth of
//! them reading back from disk).

use std::fmt::Write as _;

use anyhow::{Context as _, Result};

use super::{ebee_bench, header, publish, sketch_row, table_head, with_k_cols, workload};

pub fn run(procs: u32, io_procs: u32) -> Result<()> {
    let runs = [(50u64, 400u32), (1000, 20)];
    let total_s: u64 = runs.iter().map(|(ms, n)| ms * u64::from(*n)).sum::<u64>() / 1000 + 20;
    let secs = total_s.to_string();
    let dir = tempfile_dir()?;
    let _cpu = workload(&[
        "mix",
        "--procs",
        &procs.to_string(),
        "--churn-per-s",
        "20",
        "--seconds",
        &secs,
    ])?;
    let _io = workload(&[
        "io-mix",
        dir.to_str().context("temporary directory path")?,
        "--procs",
        &io_procs.to_string(),
        "--seconds",
        &secs,
    ])?;
    std::thread::sleep(std::time::Duration::from_secs(3));
    let mut body = String::new();
    let cmd = format!("cargo xtask bench waits --procs {procs} --io-procs {io_procs}");
    header(&mut body, "Wait and disk I/O sketch precision", &cmd, "")?;
    writeln!(
        body,
        "Workload: `ebee-load mix` ({procs} processes with Zipf-skewed duty cycles and 20 \
         short-lived ones per second: on 2 CPUs every one of them waits) beside `ebee-load \
         io-mix` ({io_procs} processes writing Zipf-skewed amounts through the page cache, \
         process i about 2 MiB/i every 50 ms, every tenth also reading its file back from \
         disk). Precision@k per interval of the kernel's wait and I/O sketches against the \
         exact per-process shadows loaded beside them, tie-aware as for CPU.\n"
    )?;
    for (ms, n) in runs {
        let v = ebee_bench(&[
            "wait-precision",
            "--interval-ms",
            &ms.to_string(),
            "--intervals",
            &n.to_string(),
        ])?;
        writeln!(
            body,
            "### Interval {ms} ms ({n} intervals; {:.0} processes with waits and {:.0} with disk I/O per interval; {} and {} evictions; {:.1} thread misses per interval)\n",
            v["wait"]["mean_processes_per_interval"]
                .as_f64()
                .unwrap_or(0.0),
            v["io"]["mean_processes_per_interval"]
                .as_f64()
                .unwrap_or(0.0),
            v["wait"]["evictions"],
            v["io"]["evictions"],
            v["thread_misses_per_interval"].as_f64().unwrap_or(0.0),
        )?;
        let bytes = format!("bytes ({} CPUs, 2 intervals)", v["ncpus"]);
        table_head(
            &mut body,
            &with_k_cols(&["sketch", "stages x slots", &bytes]),
        )?;
        sketch_row(
            &mut body,
            "run-queue wait",
            &v["wait"],
            None,
            &v["wait"]["precision"],
        )?;
        sketch_row(&mut body, "disk I/O", &v["io"], None, &v["io"]["precision"])?;
        writeln!(body)?;
    }
    publish("waits", &body)?;
    drop(dir);
    Ok(())
}

/// A directory on a disk-backed file system for the writers, removed afterwards.
fn tempfile_dir() -> Result<TempDir> {
    let p = std::path::Path::new("/var/tmp").join(format!("ebee-bench-io-{}", std::process::id()));
    std::fs::create_dir_all(&p).with_context(|| format!("creating {}", p.display()))?;
    Ok(TempDir(p))
}

struct TempDir(std::path::PathBuf);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
