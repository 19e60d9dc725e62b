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
struct JsonMem {
    pid: u32,
    comm: String,
    rss_bytes: u64,
    rss_delta_bytes: i64,
    growth_bytes_per_s: f64,
}

fn json_mem(m: &Model, rows: Vec<crate::model::mem::MemEntry>) -> Vec<JsonMem> {
    rows.into_iter()
        .map(|e| JsonMem {
            pid: e.pid,
            comm: m
                .proc_info(e.pid)
                .map(|p| p.comm.clone())
                .unwrap_or_default(),
            rss_bytes: e.rss_bytes,
            rss_delta_bytes: e.rss_delta_bytes,
            growth_bytes_per_s: e.growth_per_s.round(),
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
    mem: Vec<JsonMem>,
    mem_growth: Vec<JsonMem>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mem_exact: Option<Vec<JsonMem>>,
    mem_stats: &'a crate::batch::MemStats,
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
        mem: json_mem(m, m.mem.sketch.top_rss(k)),
        mem_growth: json_mem(m, m.mem.sketch.top_growth(k)),
        mem_exact: m.mem.exact.as_ref().map(|e| json_mem(m, e.top_rss(k))),
        mem_stats: &b.mem_stats,
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
    write_mem_text(out, m, k)?;
    write_qos_text(out, m)?;
    writeln!(out)
}

const MIB: f64 = 1024.0 * 1024.0;

/// Resident memory: the largest processes, then the fastest growing of the last interval.
fn write_mem_text(out: &mut impl Write, m: &Model, k: usize) -> std::io::Result<()> {
    let Some(b) = m.latest() else { return Ok(()) };
    if !m.mem.available {
        return Ok(());
    }
    let st = &b.mem_stats;
    writeln!(
        out,
        "{:>7} {:>10} {:>10} {:>11}  COMMAND (memory: {} processes, {} rss_stat events, {} evictions)",
        "PID", "RES(MiB)", "DELTA(MiB)", "GROW(MiB/s)", st.tracked, st.events, st.evictions
    )?;
    let name = |pid: u32| {
        m.proc_info(pid)
            .map(|p| p.comm.clone())
            .filter(|c| !c.is_empty())
            .unwrap_or_else(|| "?".into())
    };
    for e in m.mem.sketch.top_rss(k) {
        writeln!(
            out,
            "{:>7} {:>10.1} {:>+10.1} {:>11.1}  {}",
            e.pid,
            e.rss_bytes as f64 / MIB,
            e.rss_delta_bytes as f64 / MIB,
            e.growth_per_s / MIB,
            name(e.pid)
        )?;
    }
    let growth: Vec<String> = m
        .mem
        .sketch
        .top_growth(5)
        .into_iter()
        .map(|e| {
            format!(
                "{} {} +{:.1}MiB",
                e.pid,
                name(e.pid),
                e.rss_delta_bytes as f64 / MIB
            )
        })
        .collect();
    if !growth.is_empty() {
        writeln!(out, "{:>7}   growing: {}", "", growth.join(", "))?;
    }
    Ok(())
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
    use crate::batch::{Batch, CpuRow, MemRow, MemStats, ProcInfo};

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
            mem: vec![
                MemRow {
                    pid: 42,
                    rss_bytes: 300 << 20,
                    rss_delta_bytes: 64 << 20,
                },
                MemRow {
                    pid: 43,
                    rss_bytes: 10 << 20,
                    rss_delta_bytes: 0,
                },
            ],
            mem_stats: MemStats {
                available: true,
                tracked: 2,
                ..Default::default()
            },
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
        assert_eq!(v["mem"][0]["pid"], 42);
        assert_eq!(v["mem"][0]["comm"], "burn\"er");
        assert_eq!(v["mem"][0]["rss_bytes"], 300u64 << 20);
        assert_eq!(v["mem"][0]["rss_delta_bytes"], 64u64 << 20);
        // 64 MiB in 50 ms.
        assert_eq!(v["mem"][0]["growth_bytes_per_s"], 1_342_177_280.0);
        assert_eq!(v["mem"][1]["pid"], 43);
        assert_eq!(v["mem_growth"].as_array().map(Vec::len), Some(1));
        assert_eq!(v["mem_stats"]["available"], true);
        assert!(v.get("mem_exact").is_none());
    }

    #[test]
    fn text_has_a_header_and_rows() {
        let mut out = Vec::new();
        write_text(&mut out, &model(), 20).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("PID"));
        assert!(s.lines().any(|l| l.contains("42") && l.contains("50.0")));
        assert!(s.contains("RES(MiB)"));
        assert!(
            s.lines()
                .any(|l| l.contains("42") && l.contains("300.0") && l.contains("+64.0"))
        );
    }

    #[test]
    fn wall_clock_format() {
        assert_eq!(fmt_wall(3_723_004), "01:02:03.004");
    }
}
