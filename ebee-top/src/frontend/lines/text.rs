//! Top-style text: one block per interval (a header line, the top K by CPU, the memory
//! rankings, the pinned processes' QoS), drawn from the Model.

use std::io::Write;

use super::{Host, QOS_TOP_SYSCALLS};
use crate::model::Model;
use crate::time::fmt_wall;

/// A top-style block of text for the last interval.
pub fn write_text(out: &mut impl Write, m: &Model, k: usize) -> std::io::Result<()> {
    write_text_host(out, m, k, None)
}

/// Each CPU's busy share, memory and swap, on one line.
fn write_host_text(out: &mut impl Write, h: &Host) -> std::io::Result<()> {
    let cpus: Vec<String> = h
        .cpus
        .iter()
        .map(|c| format!("{} {:.1}", c.cpu, c.busy()))
        .collect();
    write!(out, "host: busy% by cpu {}", cpus.join(", "))?;
    let mib = |b: u64| b as f64 / (1u64 << 20) as f64;
    if let Some(mem) = &h.mem {
        write!(
            out,
            "; mem MiB used {:.1}, buffers {:.1}, cache {:.1} of {:.1}; swap MiB used {:.1} of {:.1}",
            mib(mem.used()),
            mib(mem.buffers),
            mib(mem.cached),
            mib(mem.total),
            mib(mem.swap_used()),
            mib(mem.swap_total)
        )?;
    }
    writeln!(out)
}

/// A top-style block of text for the last interval, with the machine's readings for it
/// (when there are some) under the header line.
pub fn write_text_host(
    out: &mut impl Write,
    m: &Model,
    k: usize,
    host: Option<&Host>,
) -> std::io::Result<()> {
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
    if let Some(h) = host {
        write_host_text(out, h)?;
    }
    match m.top_threads(k) {
        Some(rows) => {
            writeln!(
                out,
                "{:>7} {:>7} {:>6} {:>10}  THREAD (PROCESS)",
                "TID", "PID", "%CPU", "TIME(ms)"
            )?;
            for r in rows {
                let name = if r.comm.is_empty() { "?" } else { &r.comm };
                writeln!(
                    out,
                    "{:>7} {:>7} {:>6.1} {:>10.3}  {} ({}){}",
                    r.tid.unwrap_or(0),
                    r.pid,
                    r.cpu_pct,
                    r.cpu_ns as f64 / 1e6,
                    name,
                    name_of(m, r.pid),
                    if r.exited { " (exited)" } else { "" }
                )?;
            }
        }
        None => {
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
        }
    }
    write_cgroups_text(out, m, k)?;
    write_mem_text(out, m, k)?;
    write_wait_text(out, m)?;
    write_servers_text(out, m, k)?;
    write_qos_text(out, m)?;
    writeln!(out)
}

/// The busiest cgroups of the last interval (at most five lines, or `k`).
fn write_cgroups_text(out: &mut impl Write, m: &Model, k: usize) -> std::io::Result<()> {
    let Some(b) = m.latest() else { return Ok(()) };
    if b.cgroups.is_empty() {
        return Ok(());
    }
    let n = b.interval_ns().max(1) as f64;
    writeln!(
        out,
        "{:>6} {:>6} {:>10}  CGROUP ({})",
        "%CPU", "WAIT%", "MEM(MiB)", b.cgroup_stats.hierarchy
    )?;
    for c in b.cgroups.iter().take(k.min(5)) {
        writeln!(
            out,
            "{:>6.1} {:>6.1} {:>10}  {}",
            c.cpu_ns as f64 * 100.0 / n,
            c.wait_ns as f64 * 100.0 / n,
            c.rss_bytes
                .map_or_else(|| "-".into(), |v| format!("{:.1}", v as f64 / 1048576.0)),
            if c.path.is_empty() { "?" } else { &c.path }
        )?;
    }
    Ok(())
}

/// The servers the kernel found in the last interval (requests per second, latency in ms over
/// the interval), then the processes with the most socket traffic on one line.
fn write_servers_text(out: &mut impl Write, m: &Model, k: usize) -> std::io::Result<()> {
    let Some(b) = m.latest() else { return Ok(()) };
    if !m.servers.available {
        return Ok(());
    }
    let secs = b.interval_ns().max(1) as f64 / 1e9;
    let name = |pid: u32| name_of(m, pid);
    let servers = m.servers.interval(name);
    if !servers.is_empty() {
        writeln!(
            out,
            "{:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>9} {:>9}  COMMAND (servers; latency in ms)",
            "PID", "REQ/s", "p50", "p99", "p99.9", "max", "CONNS", "RX KiB/s", "TX KiB/s"
        )?;
        let ms_ns = |v: Option<u64>| ms(v.map(|ns| ns as f64 / 1000.0));
        for s in servers.iter().take(k) {
            writeln!(
                out,
                "{:>7} {:>9.1} {:>9} {:>9} {:>9} {:>9} {:>6} {:>9.1} {:>9.1}  {}",
                s.pid,
                s.rps,
                ms_ns(s.p50_ns),
                ms_ns(s.p99_ns),
                ms_ns(s.p999_ns),
                ms_ns((s.requests > 0).then_some(s.max_ns)),
                s.conns.map_or_else(|| "-".into(), |c| c.to_string()),
                s.rx_bytes as f64 / 1024.0 / secs,
                s.tx_bytes as f64 / 1024.0 / secs,
                s.comm
            )?;
        }
    }
    let net: Vec<String> = m
        .servers
        .top_net(WAIT_TOP)
        .iter()
        .map(|n| {
            format!(
                "{} {} rx {:.1} tx {:.1} KiB/s",
                n.pid,
                name(n.pid),
                n.rx_bytes as f64 / 1024.0 / secs,
                n.tx_bytes as f64 / 1024.0 / secs
            )
        })
        .collect();
    if !net.is_empty() {
        writeln!(out, "{:>7}   network: {}", "", net.join(", "))?;
    }
    Ok(())
}

const MIB: f64 = 1024.0 * 1024.0;

/// A process's name as the lines show it: `?` when unknown.
fn name_of(m: &Model, pid: u32) -> String {
    m.proc_info(pid)
        .map(|p| p.comm.to_string())
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "?".into())
}

/// Processes listed on the waiting and disk lines.
const WAIT_TOP: usize = 5;

/// The processes that waited longest for a CPU, and those with the most disk I/O, in the
/// last interval: one line each, when the kernel gives them and something happened.
fn write_wait_text(out: &mut impl Write, m: &Model) -> std::io::Result<()> {
    let Some(b) = m.latest() else { return Ok(()) };
    let secs = b.interval_ns().max(1) as f64 / 1e9;
    let name = |pid: u32| name_of(m, pid);
    let waiting: Vec<String> = m
        .wait
        .top_wait(WAIT_TOP)
        .into_iter()
        .map(|w| format!("{} {} {:.1}%", w.pid, name(w.pid), w.wait_pct))
        .collect();
    if !waiting.is_empty() {
        writeln!(out, "{:>7}   waiting: {}", "", waiting.join(", "))?;
    }
    let disk: Vec<String> = m
        .wait
        .top_io(WAIT_TOP)
        .into_iter()
        .map(|r| {
            format!(
                "{} {} r {:.1} w {:.1} MiB/s",
                r.pid,
                name(r.pid),
                r.read_bytes as f64 / MIB / secs,
                r.write_bytes as f64 / MIB / secs
            )
        })
        .collect();
    if !disk.is_empty() {
        writeln!(out, "{:>7}   disk: {}", "", disk.join(", "))?;
    }
    Ok(())
}

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
    let name = |pid: u32| name_of(m, pid);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::lines::tests::model;

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
    fn a_host_line_under_the_header() {
        use crate::os::host::{CpuShare, MemInfo};
        let host = Host {
            cpus: vec![
                CpuShare {
                    cpu: 0,
                    user: 40.0,
                    system: 12.25,
                    ..Default::default()
                },
                CpuShare {
                    cpu: 1,
                    ..Default::default()
                },
            ],
            mem: Some(MemInfo {
                total: 24 << 30,
                free: 4 << 30,
                buffers: 1 << 29,
                cached: 13 << 30,
                swap_total: 2 << 30,
                swap_free: 7 << 28,
                ..Default::default()
            }),
            span_ms: 1000,
        };
        let mut out = Vec::new();
        write_text_host(&mut out, &model(), 20, Some(&host)).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert_eq!(
            s.lines().nth(1),
            Some(
                "host: busy% by cpu 0 52.2, 1 0.0; mem MiB used 6656.0, buffers 512.0, \
                 cache 13312.0 of 24576.0; swap MiB used 256.0 of 2048.0"
            ),
            "{s}"
        );
        let mut out = Vec::new();
        write_text(&mut out, &model(), 20).unwrap();
        assert!(!String::from_utf8(out).unwrap().contains("host:"));
    }

    #[test]
    fn servers_and_network_lines() {
        let mut m = Model::new();
        m.ingest(&crate::batch::build::plausible(1, 4));
        let mut out = Vec::new();
        write_text(&mut out, &m, 20).unwrap();
        let s = String::from_utf8(out).unwrap();
        assert!(s.contains("(servers; latency in ms)"), "{s}");
        // 401 requests in 50 ms, 12 connections.
        assert!(
            s.lines()
                .any(|l| l.contains("1001") && l.contains("8020.0") && l.contains(" 12 ")),
            "{s}"
        );
        assert!(
            s.contains("network: 1001 worker-1 rx 781.3 tx 2343.8 KiB/s"),
            "{s}"
        );
    }
}
