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

/// Two decimals for rates and latencies in µs.
fn r2(v: f64) -> f64 {
    (v * 100.0).round() / 100.0
}

#[derive(Serialize)]
struct JsonQosStats {
    syscalls_per_s: f64,
    rps: f64,
    requests: u64,
    p50_us: Option<f64>,
    p90_us: Option<f64>,
    p99_us: Option<f64>,
    p999_us: Option<f64>,
    max_us: Option<f64>,
}

impl From<&crate::model::qos::QosStats> for JsonQosStats {
    fn from(s: &crate::model::qos::QosStats) -> Self {
        Self {
            syscalls_per_s: r2(s.syscalls_per_s),
            rps: r2(s.rps),
            requests: s.requests,
            p50_us: s.p50_us.map(r2),
            p90_us: s.p90_us.map(r2),
            p99_us: s.p99_us.map(r2),
            p999_us: s.p999_us.map(r2),
            max_us: s.max_us.map(r2),
        }
    }
}

#[derive(Serialize)]
struct JsonSyscall {
    name: String,
    nr: u32,
    count: u64,
    total_us: f64,
    mean_us: f64,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    max_us: f64,
}

#[derive(Serialize)]
struct JsonQosLost {
    unmatched: u64,
    hist_full: u64,
    conn_full: u64,
}

#[derive(Serialize)]
struct JsonQos {
    pid: u32,
    comm: String,
    pinned: bool,
    exited: bool,
    server: bool,
    #[serde(flatten)]
    interval: JsonQosStats,
    window_s: f64,
    window: JsonQosStats,
    top_syscalls: Vec<JsonSyscall>,
    lost: JsonQosLost,
}

/// Syscalls listed per pinned process in batch output.
pub const QOS_TOP_SYSCALLS: usize = 5;

fn json_qos(m: &Model) -> Vec<JsonQos> {
    m.qos
        .procs()
        .into_iter()
        .filter_map(|pid| m.qos.view(pid))
        .map(|v| JsonQos {
            pid: v.pid,
            comm: v.comm.clone(),
            pinned: v.pinned,
            exited: v.exited,
            server: v.server,
            interval: (&v.interval).into(),
            window_s: r2(v.window.span_s),
            window: (&v.window).into(),
            top_syscalls: v
                .top_syscalls
                .iter()
                .take(QOS_TOP_SYSCALLS)
                .map(|s| JsonSyscall {
                    name: s.name.clone(),
                    nr: s.nr,
                    count: s.count,
                    total_us: r2(s.total_ns as f64 / 1000.0),
                    mean_us: r2(s.mean_us),
                    p50_us: s.p50_us.map(r2),
                    p99_us: s.p99_us.map(r2),
                    max_us: r2(s.max_us),
                })
                .collect(),
            lost: JsonQosLost {
                unmatched: v.unmatched,
                hist_full: v.hist_full,
                conn_full: v.conn_full,
            },
        })
        .collect()
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
    qos: Vec<JsonQos>,
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
        qos: json_qos(m),
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
    write_qos_text(out, m)?;
    writeln!(out)
}

fn ms(v: Option<f64>) -> String {
    v.map_or_else(|| "-".into(), |us| format!("{:.3}", us / 1000.0))
}

/// The pinned processes' QoS: the last interval, then the sliding window.
fn write_qos_text(out: &mut impl Write, m: &Model) -> std::io::Result<()> {
    let views: Vec<_> = m
        .qos
        .procs()
        .into_iter()
        .filter_map(|p| m.qos.view(p))
        .collect();
    if views.is_empty() {
        return Ok(());
    }
    writeln!(
        out,
        "{:>7} {:>5} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}  COMMAND (QoS; latency in ms)",
        "PID", "SPAN", "SYSCALL/s", "REQ/s", "p50", "p90", "p99", "p99.9", "max"
    )?;
    for v in views {
        let state = if v.exited {
            " (exited)"
        } else if !v.pinned {
            " (unpinned)"
        } else if !v.server {
            " (no requests)"
        } else {
            ""
        };
        for (span, st) in [("last", &v.interval), ("win", &v.window)] {
            writeln!(
                out,
                "{:>7} {:>5} {:>10.0} {:>9.1} {:>9} {:>9} {:>9} {:>9} {:>9}  {}{}",
                v.pid,
                span,
                st.syscalls_per_s,
                st.rps,
                ms(st.p50_us),
                ms(st.p90_us),
                ms(st.p99_us),
                ms(st.p999_us),
                ms(st.max_us),
                v.comm,
                state
            )?;
        }
        let top: Vec<String> = v
            .top_syscalls
            .iter()
            .take(QOS_TOP_SYSCALLS)
            .map(|s| format!("{} {:.1}ms/{}", s.name, s.total_ns as f64 / 1e6, s.count))
            .collect();
        writeln!(out, "{:>7}   top syscalls (window): {}", "", top.join(", "))?;
    }
    Ok(())
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
