//! `ebee-top export FILE`: a recording's intervals through the same Model as live, written as
//! the batch mode's JSON Lines or text, or as CSV, one table at a time.

use std::io::Write;

use anyhow::Context as _;

use super::lines::{write_json, write_text};
use crate::cli::{ExportArgs, ExportFormat, Table};
use crate::model::{Model, WARMUP_INTERVALS};

/// One CSV field, quoted when it needs to be (RFC 4180). Process names and command lines are
/// chosen by whoever runs the process, so a field a spreadsheet would take for a formula
/// (starting with `=`, `+`, `-`, `@`, tab or CR) gets a leading `'` and is read as text.
fn csv_field(s: &str) -> String {
    let s = if s.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        std::borrow::Cow::Owned(format!("'{s}"))
    } else {
        std::borrow::Cow::Borrowed(s)
    };
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.into_owned()
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|x| x.to_string()).unwrap_or_default()
}

fn csv_header(out: &mut impl Write, t: Table) -> std::io::Result<()> {
    let h = match t {
        Table::Intervals => {
            "t_ms,seq,interval_ns,ncpus,switches,processes,exits,sketch_evicted_ns,\
             sketch_evictions,lifecycle_lost,handshake_timeouts,shadow_full,prog_errors,\
             cost_cpu_ns,cost_bpf_ns,cost_bpf_runs"
        }
        Table::Cpu => "t_ms,seq,rank,pid,comm,cmdline,uid,kthread,cpu_ns,cpu_pct,exited,cgroup",
        Table::Cgroups => "t_ms,seq,rank,id,path,cpu_ns,cpu_pct,wait_ns,rss_bytes",
        Table::Threads => "t_ms,seq,rank,tid,pid,comm,cpu_ns,cpu_pct,exited",
        Table::Exits => "t_ms,seq,pid,comm,ts_ns",
        Table::Mem => "t_ms,seq,rank,pid,comm,rss_bytes,rss_delta_bytes,growth_bytes_per_s",
        Table::Wait => "t_ms,seq,rank,pid,comm,wait_ns,wait_pct",
        Table::Io => "t_ms,seq,rank,pid,comm,read_bytes,write_bytes",
        Table::Blocked => {
            "t_ms,seq,rank,pid,comm,io_wait_ns,blocked_ns,sleep_ns,io_wait_pct,blocked_pct"
        }
        Table::WaitBy => "t_ms,seq,rank,pid,comm,culprit_pid,culprit_comm,wait_ns",
        Table::CgroupWaitBy => "t_ms,seq,rank,cgroup,culprit_cgroup,wait_ns",
        Table::Servers => {
            "t_ms,seq,rank,pid,comm,rps,requests,p50_us,p99_us,p999_us,max_us,conns,rx_bytes,\
             tx_bytes"
        }
        Table::Net => "t_ms,seq,rank,pid,comm,rx_bytes,tx_bytes",
    };
    writeln!(out, "{h}")
}

fn csv_rows(out: &mut impl Write, t: Table, m: &Model, k: usize) -> std::io::Result<()> {
    let Some(b) = m.latest() else { return Ok(()) };
    match t {
        Table::Intervals => {
            let d = &b.dropped;
            writeln!(
                out,
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
                b.t_ms,
                b.seq,
                b.interval_ns(),
                b.ncpus,
                b.switches,
                b.cpu.len(),
                b.exits.len(),
                d.sketch_evicted_ns,
                d.sketch_evictions,
                d.lifecycle_lost,
                d.handshake_timeouts,
                d.shadow_full,
                d.prog_errors,
                b.cost.cpu_ns,
                opt(b.cost.bpf_ns),
                opt(b.cost.bpf_runs)
            )
        }
        Table::Cpu => {
            for (rank, r) in m.top_cpu(k).iter().enumerate() {
                writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{},{:.2},{},{}",
                    b.t_ms,
                    b.seq,
                    rank + 1,
                    r.pid,
                    csv_field(&r.comm),
                    csv_field(&r.cmdline),
                    opt(r.uid),
                    r.kthread,
                    r.cpu_ns,
                    r.cpu_pct,
                    r.exited,
                    csv_field(&r.cgroup)
                )?;
            }
            Ok(())
        }
        Table::Cgroups => {
            let n = b.interval_ns().max(1) as f64;
            for (rank, c) in b.cgroups.iter().take(k).enumerate() {
                writeln!(
                    out,
                    "{},{},{},{},{},{},{:.2},{},{}",
                    b.t_ms,
                    b.seq,
                    rank + 1,
                    c.id,
                    csv_field(&c.path),
                    c.cpu_ns,
                    c.cpu_ns as f64 * 100.0 / n,
                    c.wait_ns,
                    opt(c.rss_bytes)
                )?;
            }
            Ok(())
        }
        Table::Threads => {
            for (rank, r) in m.top_threads(k).unwrap_or_default().iter().enumerate() {
                writeln!(
                    out,
                    "{},{},{},{},{},{},{},{:.2},{}",
                    b.t_ms,
                    b.seq,
                    rank + 1,
                    r.tid.unwrap_or(0),
                    r.pid,
                    csv_field(&r.comm),
                    r.cpu_ns,
                    r.cpu_pct,
                    r.exited
                )?;
            }
            Ok(())
        }
        Table::Mem => {
            for (rank, e) in m.mem.sketch.top_rss(k).iter().enumerate() {
                let comm = m.proc_info(e.pid).map_or("", |p| p.comm.as_ref());
                writeln!(
                    out,
                    "{},{},{},{},{},{},{},{:.0}",
                    b.t_ms,
                    b.seq,
                    rank + 1,
                    e.pid,
                    csv_field(comm),
                    e.rss_bytes,
                    e.rss_delta_bytes,
                    e.growth_per_s
                )?;
            }
            Ok(())
        }
        Table::Wait => {
            for (rank, w) in m.wait.top_wait(k).iter().enumerate() {
                let comm = m.proc_info(w.pid).map_or("", |p| p.comm.as_ref());
                writeln!(
                    out,
                    "{},{},{},{},{},{},{:.2}",
                    b.t_ms,
                    b.seq,
                    rank + 1,
                    w.pid,
                    csv_field(comm),
                    w.wait_ns,
                    w.wait_pct
                )?;
            }
            Ok(())
        }
        Table::Io => {
            for (rank, r) in m.wait.top_io(k).iter().enumerate() {
                let comm = m.proc_info(r.pid).map_or("", |p| p.comm.as_ref());
                writeln!(
                    out,
                    "{},{},{},{},{},{},{}",
                    b.t_ms,
                    b.seq,
                    rank + 1,
                    r.pid,
                    csv_field(comm),
                    r.read_bytes,
                    r.write_bytes
                )?;
            }
            Ok(())
        }
        Table::Blocked => {
            for (rank, r) in m.wait.top_blocked(k).iter().enumerate() {
                let comm = m.proc_info(r.pid).map_or("", |p| p.comm.as_ref());
                writeln!(
                    out,
                    "{},{},{},{},{},{},{},{},{:.2},{:.2}",
                    b.t_ms,
                    b.seq,
                    rank + 1,
                    r.pid,
                    csv_field(comm),
                    r.io_ns,
                    r.blocked_ns,
                    r.sleep_ns,
                    r.io_pct,
                    r.blocked_pct
                )?;
            }
            Ok(())
        }
        Table::WaitBy => {
            use crate::batch::wait::{CULPRIT_IDLE, CULPRIT_UNKNOWN};
            let comm = |pid: u32| m.proc_info(pid).map_or("", |p| p.comm.as_ref());
            for (rank, r) in m.wait.top_wait_by(k).iter().enumerate() {
                writeln!(
                    out,
                    "{},{},{},{},{},{},{},{}",
                    b.t_ms,
                    b.seq,
                    rank + 1,
                    r.pid,
                    csv_field(comm(r.pid)),
                    r.culprit,
                    csv_field(match r.culprit {
                        CULPRIT_IDLE => "(idle)",
                        CULPRIT_UNKNOWN => "(unattributed)",
                        c => comm(c),
                    }),
                    r.wait_ns
                )?;
            }
            Ok(())
        }
        Table::CgroupWaitBy => {
            for (rank, r) in m.cgroups.top_wait_by(k).iter().enumerate() {
                writeln!(
                    out,
                    "{},{},{},{},{},{}",
                    b.t_ms,
                    b.seq,
                    rank + 1,
                    csv_field(&r.cgroup),
                    csv_field(&r.culprit),
                    r.wait_ns
                )?;
            }
            Ok(())
        }
        Table::Servers => {
            let comm = |pid: u32| {
                m.proc_info(pid)
                    .map_or(String::new(), |p| p.comm.to_string())
            };
            let us = |ns: Option<u64>| opt(ns.map(|v| format!("{:.2}", v as f64 / 1000.0)));
            for (rank, s) in m.servers.interval(comm).iter().take(k).enumerate() {
                writeln!(
                    out,
                    "{},{},{},{},{},{:.2},{},{},{},{},{},{},{},{}",
                    b.t_ms,
                    b.seq,
                    rank + 1,
                    s.pid,
                    csv_field(&s.comm),
                    s.rps,
                    s.requests,
                    us(s.p50_ns),
                    us(s.p99_ns),
                    us(s.p999_ns),
                    us((s.requests > 0).then_some(s.max_ns)),
                    opt(s.conns),
                    s.rx_bytes,
                    s.tx_bytes
                )?;
            }
            Ok(())
        }
        Table::Net => {
            for (rank, n) in m.servers.top_net(k).iter().enumerate() {
                let comm = m.proc_info(n.pid).map_or("", |p| p.comm.as_ref());
                writeln!(
                    out,
                    "{},{},{},{},{},{},{}",
                    b.t_ms,
                    b.seq,
                    rank + 1,
                    n.pid,
                    csv_field(comm),
                    n.rx_bytes,
                    n.tx_bytes
                )?;
            }
            Ok(())
        }
        Table::Exits => {
            for e in &b.exits {
                let comm = m.proc_info(e.pid).map_or("", |p| p.comm.as_ref());
                writeln!(
                    out,
                    "{},{},{},{},{}",
                    b.t_ms,
                    b.seq,
                    e.pid,
                    csv_field(comm),
                    e.ts_ns
                )?;
            }
            Ok(())
        }
    }
}

pub fn run(a: &ExportArgs) -> anyhow::Result<()> {
    let mut r = super::open_recording(&a.file)?;
    let span = r.range(a.from, a.to);
    if span.is_empty() {
        eprintln!(
            "ebee-top: warning: {}: no interval in the requested time range",
            a.file.display()
        );
    }
    let k = a.top as usize;
    let mut model = Model::new();
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let res = (|| -> std::io::Result<()> {
        if a.format == ExportFormat::Csv {
            csv_header(&mut out, a.table)?;
        }
        for i in span.start.saturating_sub(WARMUP_INTERVALS)..span.end {
            let b = match r.read(i) {
                Ok(b) => b,
                Err(e) => {
                    eprintln!(
                        "ebee-top: warning: {}: {}: {e}; skipped",
                        a.file.display(),
                        r.describe(i)
                    );
                    continue;
                }
            };
            let gap = r.gap_before(i);
            if gap > 0 && i > span.start {
                eprintln!(
                    "ebee-top: note: nothing recorded for {} before {} UTC",
                    crate::time::fmt_span(gap),
                    crate::time::fmt_wall(r.t_ms(i))
                );
            }
            model.ingest_owned(b);
            if i < span.start {
                continue;
            }
            match a.format {
                ExportFormat::Json => write_json(&mut out, &model, k)?,
                ExportFormat::Text => write_text(&mut out, &model, k)?,
                ExportFormat::Csv => csv_rows(&mut out, a.table, &model, k)?,
            }
        }
        out.flush()
    })();
    match res {
        Ok(()) => Ok(()),
        // The reader went away (`| head`): a normal end.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e).context("writing the export"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Table `t` of `m` as CSV, header included, the top 20.
    fn csv_of(m: &Model, t: Table) -> String {
        let mut out = Vec::new();
        csv_header(&mut out, t).unwrap();
        csv_rows(&mut out, t, m, 20).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn csv_quoting() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\"\n"), "\"say \"\"hi\"\"\n\"");
    }

    #[test]
    fn csv_fields_never_start_a_formula() {
        assert_eq!(csv_field("=HYPERLINK(\"x\")"), "\"'=HYPERLINK(\"\"x\"\")\"");
        assert_eq!(csv_field("+1"), "'+1");
        assert_eq!(csv_field("-c"), "'-c");
        assert_eq!(csv_field("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(csv_field("bash -c x"), "bash -c x");
    }

    #[test]
    fn servers_and_net_tables() {
        let mut m = Model::new();
        m.ingest(&crate::batch::build::plausible(2, 4));
        let lines = |t| csv_of(&m, t);
        let s = lines(Table::Servers);
        let rows: Vec<&str> = s.lines().collect();
        assert_eq!(rows.len(), 2, "{s}");
        let header: Vec<&str> = rows[0].split(',').collect();
        let row: Vec<&str> = rows[1].split(',').collect();
        assert_eq!(header.len(), row.len());
        assert_eq!(&row[3..8], &["1001", "worker-1", "8040.00", "402", row[7]]);
        assert_eq!(row[11], "12");
        let c = lines(Table::Cgroups);
        assert_eq!(
            c.lines().nth(1),
            Some("1700000000100,2,1,4000,/system.slice/worker-0.service,27000002,54.00,0,67108864"),
            "{c}"
        );
        assert!(
            lines(Table::Cpu)
                .lines()
                .nth(1)
                .unwrap()
                .ends_with(",/system.slice/worker-0.service"),
        );
        let n = lines(Table::Net);
        assert!(
            n.lines()
                .nth(1)
                .unwrap()
                .ends_with(",1001,worker-1,40002,120000"),
            "{n}"
        );
    }

    #[test]
    fn the_blocked_table_ranks_by_time_held_in_the_kernel() {
        let mut m = Model::new();
        m.ingest(&crate::batch::build::plausible(2, 4));
        let mut out = Vec::new();
        csv_header(&mut out, Table::Blocked).unwrap();
        csv_rows(&mut out, Table::Blocked, &m, 20).unwrap();
        let s = String::from_utf8(out).unwrap();
        let rows: Vec<&str> = s.lines().collect();
        // plausible(2, 4): pid 1000 blocked on I/O 3.002 ms; 1001 and 1002 blocked
        // otherwise 0.25 and 0.5 ms; 1003 only slept (not listed).
        assert_eq!(rows.len(), 4, "{s}");
        let pids: Vec<&str> = rows[1..]
            .iter()
            .map(|r| r.split(',').nth(3).unwrap())
            .collect();
        assert_eq!(pids, ["1000", "1002", "1001"]);
        assert_eq!(rows[0].split(',').count(), rows[1].split(',').count());
        assert!(rows[1].contains(",3002000,0,"), "{s}");
    }

    #[test]
    fn the_wait_by_tables_name_both_sides() {
        let mut m = Model::new();
        m.ingest(&crate::batch::build::plausible(2, 4));
        let table = |t| csv_of(&m, t);
        let s = table(Table::WaitBy);
        let rows: Vec<&str> = s.lines().collect();
        assert_eq!(rows.len(), 4, "{s}");
        assert!(
            rows[1].ends_with(",1,1001,worker-1,1000,worker-0,2000002"),
            "{s}"
        );
        assert!(rows[3].ends_with(",1002,worker-2,0,(idle),500000"), "{s}");
        assert_eq!(rows[0].split(',').count(), rows[1].split(',').count());
        // plausible's cgroups: worker-{i % 3}.service, so 1003 shares 1000's.
        let s = table(Table::CgroupWaitBy);
        let rows: Vec<&str> = s.lines().collect();
        assert_eq!(rows.len(), 2, "{s}");
        assert!(
            rows[1].ends_with(
                ",1,/system.slice/worker-1.service,/system.slice/worker-0.service,3000002"
            ),
            "{s}"
        );
    }
}
