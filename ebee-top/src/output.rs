//! Batch-mode output: top-style text and JSON Lines, both drawn from the Model.

use std::io::Write;

use serde::Serialize;

use crate::batch::{Dropped, SelfCost};
use crate::model::{CpuEntry, Model};

#[derive(Serialize)]
struct JsonCpu<'a> {
    pid: u32,
    comm: &'a str,
    cpu_ns: u64,
    cpu_pct: f64,
}

#[derive(Serialize)]
struct JsonLine<'a> {
    t_ms: u64,
    interval_ms: u64,
    interval_ns: u64,
    seq: u64,
    ncpus: u32,
    switches: u64,
    cpu: Vec<JsonCpu<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cpu_exact: Option<Vec<JsonCpu<'a>>>,
    exited: Vec<u32>,
    dropped: &'a Dropped,
    cost: &'a SelfCost,
}

fn json_rows(rows: &[CpuEntry]) -> Vec<JsonCpu<'_>> {
    rows.iter()
        .map(|r| JsonCpu {
            pid: r.pid,
            comm: &r.comm,
            cpu_ns: r.cpu_ns,
            // Two decimals are all a share of a CPU needs.
            cpu_pct: (r.cpu_pct * 100.0).round() / 100.0,
        })
        .collect()
}

/// One JSON object for the last interval, followed by a newline.
pub fn write_json(out: &mut impl Write, m: &Model, k: usize) -> std::io::Result<()> {
    let Some(b) = m.latest() else { return Ok(()) };
    let top = m.top_cpu(k);
    let exact = m.top_cpu_exact(k);
    let line = JsonLine {
        t_ms: b.t_ms,
        interval_ms: (b.interval_ns() + 500_000) / 1_000_000,
        interval_ns: b.interval_ns(),
        seq: b.seq,
        ncpus: b.ncpus,
        switches: b.switches,
        cpu: json_rows(&top),
        cpu_exact: exact.as_deref().map(json_rows),
        exited: b.exits.iter().map(|e| e.pid).collect(),
        dropped: &b.dropped,
        cost: &b.cost,
    };
    serde_json::to_writer(&mut *out, &line)?;
    out.write_all(b"\n")
}

/// A top-style block of text for the last interval.
pub fn write_text(out: &mut impl Write, m: &Model, k: usize) -> std::io::Result<()> {
    let Some(b) = m.latest() else { return Ok(()) };
    let d = &b.dropped;
    writeln!(
        out,
        "ebee-top - interval {} #{}: {:.1} ms, {} cpus, {} switches, lost {} ns in {} evictions",
        fmt_wall(b.t_ms),
        b.seq,
        b.interval_ns() as f64 / 1e6,
        b.ncpus,
        b.switches,
        d.sketch_evicted_ns,
        d.sketch_evictions
    )?;
    writeln!(
        out,
        "{:>7} {:>6} {:>10}  COMMAND",
        "PID", "%CPU", "TIME(ms)"
    )?;
    for r in m.top_cpu(k) {
        let name = if r.comm.is_empty() { "?" } else { &r.comm };
        writeln!(
            out,
            "{:>7} {:>6.1} {:>10.3}  {}{}",
            r.pid,
            r.cpu_pct,
            r.cpu_ns as f64 / 1e6,
            name,
            if r.exited { " (exited)" } else { "" }
        )?;
    }
    writeln!(out)
}

/// `HH:MM:SS.mmm` (UTC) of a Unix time in ms.
pub fn fmt_wall(t_ms: u64) -> String {
    let s = t_ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        (s / 3600) % 24,
        (s / 60) % 60,
        s % 60,
        t_ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{Batch, CpuRow, ProcInfo};

    fn model() -> Model {
        let mut m = Model::new();
        m.ingest(&Batch {
            seq: 7,
            t_ms: 1_700_000_000_123,
            start_ns: 0,
            end_ns: 50_000_000,
            ncpus: 2,
            cpu: vec![CpuRow {
                pid: 42,
                ns: 25_000_000,
                bins: vec![],
            }],
            procs: vec![ProcInfo {
                pid: 42,
                comm: "burn\"er".into(),
                ..Default::default()
            }],
            ..Default::default()
        });
        m
    }

    #[test]
    fn json_line_follows_the_schema() {
        let mut out = Vec::new();
        write_json(&mut out, &model(), 20).unwrap();
        assert_eq!(out.last(), Some(&b'\n'));
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["t_ms"], 1_700_000_000_123u64);
        assert_eq!(v["interval_ms"], 50);
        assert_eq!(v["cpu"][0]["pid"], 42);
        assert_eq!(v["cpu"][0]["comm"], "burn\"er");
        assert_eq!(v["cpu"][0]["cpu_ns"], 25_000_000);
        assert_eq!(v["cpu"][0]["cpu_pct"], 50.0);
        assert!(v["dropped"]["sketch_evicted_ns"].is_u64());
        assert!(v.get("cpu_exact").is_none());
    }

    #[test]
    fn text_has_a_header_and_rows() {
        let mut out = Vec::new();
        write_text(&mut out, &model(), 20).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("PID"));
        assert!(s.lines().any(|l| l.contains("42") && l.contains("50.0")));
    }

    #[test]
    fn wall_clock_format() {
        assert_eq!(fmt_wall(3_723_004), "01:02:03.004");
    }
}
