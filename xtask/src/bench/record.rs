//! `cargo xtask bench record`: the size of a recording per hour and its encode/decode cost.
//! Records with `ebee-top -b --record` on a busy and a moderate `ebee-load mix`, at the default
//! interval and longer ones, then reads each file back with `ebee-bench record-stats` (which
//! also re-encodes the 50 ms intervals at other zstd levels and key spacings).

use std::fmt::Write as _;
use std::process::Stdio;

use anyhow::{Context as _, Result};

use super::{as_root, ebee_bench, header, publish, table_head, workload};

/// Run ebee-top (as root) recording `n` intervals of `delay_s` to `file`, output discarded.
pub fn ebee_top_record(file: &std::path::Path, n: u64, delay_s: f64) -> Result<()> {
    let st = as_root("ebee-top")
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

/// The zstd level ebee-top records with (ebee-top's `record::codec::LEVEL`; xtask does not
/// link ebee-top).
fn ebee_top_level() -> i32 {
    9
}

pub fn run(seconds: u64) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("ebee-bench-record-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("bench.ebr");
    let loads: [(&str, &[&str], &[u64]); 3] = [
        (
            "busy: `ebee-load mix --procs 200 --churn-per-s 100`",
            &["mix", "--procs", "200", "--churn-per-s", "100"],
            &[50, 200, 1000],
        ),
        (
            "storm: `ebee-load mix --procs 300 --top-duty 0.5 --churn-per-s 300`",
            &[
                "mix",
                "--procs",
                "300",
                "--top-duty",
                "0.5",
                "--churn-per-s",
                "300",
            ],
            &[50],
        ),
        (
            "moderate: `ebee-load mix --procs 30 --churn-per-s 10`",
            &["mix", "--procs", "30", "--churn-per-s", "10"],
            &[50, 1000],
        ),
    ];
    let mut body = String::new();
    let cmd = format!("cargo xtask bench record --seconds {seconds}");
    header(&mut body, "Recording size", &cmd, "")?;
    writeln!(
        body,
        "Each row records {seconds} s of `ebee-top -b --record` while the workload runs (plus \
         whatever else the machine was doing). Bytes per hour are the file's size scaled to an \
         hour. Encode and decode times are per interval, measured by re-encoding and decoding \
         the same intervals in one thread (`ebee-bench record-stats`); the recorder does the \
         encoding on its own thread, off the drain and UI loops. Format 1 (the Batch's JSON \
         under zstd, what ebee-top wrote before format 2), format 2 (columns coded against \
         the key record, before format 3), format 3 (columns coded against the record \
         before, the key as every delta's zstd dictionary, before format 4) and format 4 \
         (48-byte record heads, whole zstd frames, a key record every 100, before format 5) \
         and format 5 (a table only of rows with the same fields, before format 6) are \
         measured by re-encoding the same intervals with the encoders kept for that.\n"
    )?;
    table_head(
        &mut body,
        &[
            "workload",
            "interval",
            "processes per interval",
            "raw payload per interval",
            "key record",
            "delta record",
            "bytes per interval",
            "**MB per hour**",
            "format 1, MB per hour",
            "format 2, MB per hour",
            "format 3, MB per hour",
            "format 4, MB per hour",
            "format 5, MB per hour",
            "encode",
            "decode",
        ],
    )?;
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
            let hour = |bytes: f64| bytes / f("mean_interval_ms").max(1e-9) * 3600.0 * 1000.0 / 1e6;
            writeln!(
                body,
                "| {name} | {ms} ms | {:.0} | {:.1} KB | {:.1} KB | {:.2} KB | {:.0} | **{per_hour:.1}** | {:.0} | {:.0} | {:.1} | {:.1} | {:.1} | {:.0} µs | {:.0} µs |",
                f("processes_per_interval"),
                f("raw_bytes_per_interval") / 1000.0,
                f("key_bytes") / 1000.0,
                f("delta_bytes") / 1000.0,
                f("file_bytes") / f("intervals").max(1.0),
                hour(f("v1_bytes_per_interval")),
                hour(f("v2_bytes_per_interval")),
                hour(f("v3_bytes_per_interval")),
                hour(f("v4_bytes_per_interval")),
                hour(f("v5_bytes_per_interval")),
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
        "\nThe same 50 ms intervals re-encoded without the run-queue wait table (added to the \
         Batch after format 1 was first measured at 281 MB/h), in both formats. Bytes per \
         interval (MB per hour at 50 ms):\n"
    )?;
    table_head(
        &mut body,
        &[
            "workload",
            "format 6",
            "format 6, no wait table",
            "format 1",
            "format 1, no wait table",
        ],
    )?;
    for (name, v) in &sweeps {
        let short = name.split(':').next().unwrap_or("");
        let cell = |k: &str| {
            let b = v[k].as_f64().unwrap_or(0.0);
            format!("{b:.0} ({:.0})", b * 20.0 * 3600.0 / 1e6)
        };
        writeln!(
            body,
            "| {short} | {} | {} | {} | {} |",
            cell("bytes_per_interval_default"),
            cell("no_wait_bytes_per_interval"),
            cell("v1_bytes_per_interval"),
            cell("v1_no_wait_bytes_per_interval"),
        )?;
    }
    writeln!(
        body,
        "\nFormat 6 with other zstd levels and key spacing (key every 1 = every record coded \
         alone; the default is level {} with a key at least every {} records). Bytes per \
         interval, and encode time:\n",
        ebee_top_level(),
        200
    )?;
    table_head(
        &mut body,
        &[
            "workload",
            "level",
            "key every",
            "bytes per interval",
            "MB per hour at 50 ms",
            "encode",
        ],
    )?;
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
    publish("record", &body)
}
