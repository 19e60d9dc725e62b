//! JSON Lines: one object per interval (the schema is in the README), drawn from the Model.

use std::io::Write;

use serde::Serialize;

use super::{Host, QOS_TOP_SYSCALLS};

use crate::batch::CpuRow;
use crate::batch::cgroup::{CgroupRow, CgroupStats};
use crate::batch::servers::ServersStats;
use crate::batch::wait::{CULPRIT_IDLE, CULPRIT_UNKNOWN, WaitStats};
use crate::batch::{Dropped, MemStats, SelfCost};
use crate::model::mem::MemEntry;
use crate::model::qos::QosStats;
use crate::model::wait::{BlockedEntry, IoEntry, WaitByEntry, WaitEntry};
use crate::model::{CpuEntry, Model};

#[derive(Serialize)]
struct JsonCpu<'a> {
    pid: u32,
    /// With --threads: the thread (and `comm` is the thread's name).
    #[serde(skip_serializing_if = "Option::is_none")]
    tid: Option<u32>,
    comm: &'a str,
    cpu_ns: u64,
    cpu_pct: f64,
    wait_ns: Option<u64>,
    /// Off-CPU time by reason (null when not measured, or for a thread row).
    io_wait_ns: Option<u64>,
    blocked_ns: Option<u64>,
    sleep_ns: Option<u64>,
    /// Run-queue wait it caused other processes (null when not measured).
    caused_wait_ns: Option<u64>,
    #[serde(skip_serializing_if = "str::is_empty")]
    cgroup: &'a str,
}

#[derive(Serialize)]
struct JsonCgroup<'a> {
    id: u64,
    path: &'a str,
    cpu_ns: u64,
    cpu_pct: f64,
    wait_ns: u64,
    rss_bytes: Option<u64>,
}

fn json_cgroups(rows: &[CgroupRow], interval_ns: u64, k: usize) -> Vec<JsonCgroup<'_>> {
    rows.iter()
        .take(k)
        .map(|c| JsonCgroup {
            id: c.id,
            path: &c.path,
            cpu_ns: c.cpu_ns,
            cpu_pct: if interval_ns == 0 {
                0.0
            } else {
                r2(c.cpu_ns as f64 * 100.0 / interval_ns as f64)
            },
            wait_ns: c.wait_ns,
            rss_bytes: c.rss_bytes,
        })
        .collect()
}

#[derive(Serialize)]
struct JsonWait<'a> {
    pid: u32,
    comm: &'a str,
    wait_ns: u64,
    wait_pct: f64,
}

#[derive(Serialize)]
struct JsonBlocked<'a> {
    pid: u32,
    comm: &'a str,
    io_wait_ns: u64,
    blocked_ns: u64,
    sleep_ns: u64,
    io_wait_pct: f64,
    blocked_pct: f64,
}

fn json_blocked(m: &Model, rows: Vec<BlockedEntry>) -> Vec<JsonBlocked<'_>> {
    rows.into_iter()
        .map(|r| JsonBlocked {
            pid: r.pid,
            comm: name_of(m, r.pid),
            io_wait_ns: r.io_ns,
            blocked_ns: r.blocked_ns,
            sleep_ns: r.sleep_ns,
            io_wait_pct: r2(r.io_pct),
            blocked_pct: r2(r.blocked_pct),
        })
        .collect()
}

/// A (victim, culprit) pair; `culprit_pid` 0 is the idle CPU (wakeup latency, `culprit_comm`
/// "(idle)"), 4294967295 what nothing on the CPU explains ("(unattributed)").
#[derive(Serialize)]
struct JsonWaitBy<'a> {
    pid: u32,
    comm: &'a str,
    culprit_pid: u32,
    culprit_comm: &'a str,
    wait_ns: u64,
}

fn json_wait_by(m: &Model, rows: Vec<WaitByEntry>) -> Vec<JsonWaitBy<'_>> {
    rows.into_iter()
        .map(|r| JsonWaitBy {
            pid: r.pid,
            comm: name_of(m, r.pid),
            culprit_pid: r.culprit,
            culprit_comm: match r.culprit {
                CULPRIT_IDLE => "(idle)",
                CULPRIT_UNKNOWN => "(unattributed)",
                c => name_of(m, c),
            },
            wait_ns: r.wait_ns,
        })
        .collect()
}

/// A (victim cgroup, culprit cgroup) pair: the `wait_by` pairs summed by both processes'
/// cgroups.
#[derive(Serialize)]
struct JsonCgroupWaitBy<'a> {
    cgroup: &'a str,
    culprit_cgroup: &'a str,
    wait_ns: u64,
}

#[derive(Serialize)]
struct JsonIo<'a> {
    pid: u32,
    comm: &'a str,
    read_bytes: u64,
    write_bytes: u64,
}

fn comm_of(m: &Model, pid: u32) -> String {
    name_of(m, pid).to_owned()
}

/// A process's name, borrowed from the Model: the line is written at once, so its rows need
/// no copies of the names.
fn name_of(m: &Model, pid: u32) -> &str {
    m.proc_info(pid).map_or("", |p| &p.comm)
}

fn json_wait(m: &Model, rows: Vec<WaitEntry>) -> Vec<JsonWait<'_>> {
    rows.into_iter()
        .map(|w| JsonWait {
            pid: w.pid,
            comm: name_of(m, w.pid),
            wait_ns: w.wait_ns,
            wait_pct: r2(w.wait_pct),
        })
        .collect()
}

fn json_io(m: &Model, rows: Vec<IoEntry>) -> Vec<JsonIo<'_>> {
    rows.into_iter()
        .map(|r| JsonIo {
            pid: r.pid,
            comm: name_of(m, r.pid),
            read_bytes: r.read_bytes,
            write_bytes: r.write_bytes,
        })
        .collect()
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
    runq_p50_us: Option<f64>,
    runq_p99_us: Option<f64>,
    runq_max_us: Option<f64>,
}

impl From<&QosStats> for JsonQosStats {
    fn from(s: &QosStats) -> Self {
        Self {
            syscalls_per_s: r2(s.syscalls_per_s),
            rps: r2(s.rps),
            requests: s.requests,
            p50_us: s.p50_us.map(r2),
            p90_us: s.p90_us.map(r2),
            p99_us: s.p99_us.map(r2),
            p999_us: s.p999_us.map(r2),
            max_us: s.max_us.map(r2),
            runq_p50_us: s.runq_p50_us.map(r2),
            runq_p99_us: s.runq_p99_us.map(r2),
            runq_max_us: s.runq_max_us.map(r2),
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
struct JsonMem<'a> {
    pid: u32,
    comm: &'a str,
    rss_bytes: u64,
    rss_delta_bytes: i64,
    growth_bytes_per_s: f64,
}

fn json_mem(m: &Model, rows: Vec<MemEntry>) -> Vec<JsonMem<'_>> {
    rows.into_iter()
        .map(|e| JsonMem {
            pid: e.pid,
            comm: name_of(m, e.pid),
            rss_bytes: e.rss_bytes,
            rss_delta_bytes: e.rss_delta_bytes,
            growth_bytes_per_s: e.growth_per_s.round(),
        })
        .collect()
}

#[derive(Serialize)]
struct JsonServer {
    pid: u32,
    comm: String,
    rps: f64,
    requests: u64,
    p50_us: Option<f64>,
    p99_us: Option<f64>,
    p999_us: Option<f64>,
    max_us: Option<f64>,
    conns: Option<u64>,
    rx_bytes: u64,
    tx_bytes: u64,
}

#[derive(Serialize)]
struct JsonNet {
    pid: u32,
    comm: String,
    rx_bytes: u64,
    tx_bytes: u64,
}

fn us(ns: u64) -> f64 {
    r2(ns as f64 / 1000.0)
}

fn json_servers(m: &Model, k: usize) -> Vec<JsonServer> {
    m.servers
        .interval(|pid| comm_of(m, pid))
        .into_iter()
        .take(k)
        .map(|s| JsonServer {
            pid: s.pid,
            comm: s.comm,
            rps: r2(s.rps),
            requests: s.requests,
            p50_us: s.p50_ns.map(us),
            p99_us: s.p99_ns.map(us),
            p999_us: s.p999_ns.map(us),
            max_us: (s.requests > 0).then(|| us(s.max_ns)),
            conns: s.conns,
            rx_bytes: s.rx_bytes,
            tx_bytes: s.tx_bytes,
        })
        .collect()
}

fn json_net(m: &Model, k: usize) -> Vec<JsonNet> {
    m.servers
        .top_net(k)
        .iter()
        .map(|n| JsonNet {
            pid: n.pid,
            comm: comm_of(m, n.pid),
            rx_bytes: n.rx_bytes,
            tx_bytes: n.tx_bytes,
        })
        .collect()
}

#[derive(Serialize)]
struct JsonHostCpu {
    cpu: u32,
    busy_pct: f64,
    user_pct: f64,
    system_pct: f64,
    iowait_pct: f64,
    irq_pct: f64,
    steal_pct: f64,
}

#[derive(Serialize)]
struct JsonHostMem {
    total_bytes: u64,
    used_bytes: u64,
    free_bytes: u64,
    available_bytes: u64,
    buffers_bytes: u64,
    cached_bytes: u64,
}

#[derive(Serialize)]
struct JsonHostSwap {
    total_bytes: u64,
    used_bytes: u64,
}

#[derive(Serialize)]
struct JsonHost {
    span_ms: u64,
    cpus: Vec<JsonHostCpu>,
    mem: Option<JsonHostMem>,
    swap: Option<JsonHostSwap>,
}

fn json_host(h: &Host) -> JsonHost {
    JsonHost {
        span_ms: h.span_ms,
        cpus: h
            .cpus
            .iter()
            .map(|c| JsonHostCpu {
                cpu: c.cpu,
                busy_pct: r2(c.busy()),
                user_pct: r2(c.user),
                system_pct: r2(c.system),
                iowait_pct: r2(c.iowait),
                irq_pct: r2(c.irq),
                steal_pct: r2(c.steal),
            })
            .collect(),
        mem: h.mem.map(|m| JsonHostMem {
            total_bytes: m.total,
            used_bytes: m.used(),
            free_bytes: m.free,
            available_bytes: m.available,
            buffers_bytes: m.buffers,
            cached_bytes: m.cached,
        }),
        swap: h.mem.map(|m| JsonHostSwap {
            total_bytes: m.swap_total,
            used_bytes: m.swap_used(),
        }),
    }
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
    mem: Vec<JsonMem<'a>>,
    mem_growth: Vec<JsonMem<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    mem_exact: Option<Vec<JsonMem<'a>>>,
    mem_stats: &'a MemStats,
    wait: Vec<JsonWait<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    wait_exact: Option<Vec<JsonWait<'a>>>,
    io: Vec<JsonIo<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    io_exact: Option<Vec<JsonIo<'a>>>,
    blocked: Vec<JsonBlocked<'a>>,
    wait_by: Vec<JsonWaitBy<'a>>,
    wait_stats: &'a WaitStats,
    servers: Vec<JsonServer>,
    net: Vec<JsonNet>,
    servers_stats: &'a ServersStats,
    cgroups: Vec<JsonCgroup<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cgroups_exact: Option<Vec<JsonCgroup<'a>>>,
    cgroup_stats: &'a CgroupStats,
    cgroup_wait_by: Vec<JsonCgroupWaitBy<'a>>,
    /// Batch mode's own /proc readings for the interval; null where there are none (an
    /// unreadable /proc/stat, or an export: a recording does not keep them).
    host: Option<JsonHost>,
}

/// A process ranking's rows as `Model::top_cpu` would give them, the names borrowed from the
/// Model: a `CpuEntry` copies each row's command line, names and bins only for this line.
fn json_proc_rows<'a>(
    m: &'a Model,
    rows: &[CpuRow],
    interval_ns: u64,
    k: usize,
) -> Vec<JsonCpu<'a>> {
    rows.iter()
        .take(k)
        .map(|r| {
            let info = m.proc_info(r.pid);
            let off = m.wait.offcpu_of(r.pid);
            let pct = if interval_ns == 0 {
                0.0
            } else {
                r.ns as f64 * 100.0 / interval_ns as f64
            };
            JsonCpu {
                pid: r.pid,
                tid: None,
                cgroup: info.map_or("", |p| &p.cgroup),
                comm: info.map_or("", |p| &p.comm),
                cpu_ns: r.ns,
                cpu_pct: (pct * 100.0).round() / 100.0,
                wait_ns: m.wait.wait_of(r.pid),
                io_wait_ns: off.as_ref().map(|o| o.io_ns),
                blocked_ns: off.as_ref().map(|o| o.blocked_ns),
                sleep_ns: off.as_ref().map(|o| o.sleep_ns),
                caused_wait_ns: m.wait.caused_of(r.pid),
            }
        })
        .collect()
}

fn json_rows(rows: &[CpuEntry]) -> Vec<JsonCpu<'_>> {
    rows.iter()
        .map(|r| JsonCpu {
            pid: r.pid,
            tid: r.tid,
            cgroup: &r.cgroup,
            comm: &r.comm,
            cpu_ns: r.cpu_ns,
            // Two decimals are all a share of a CPU needs.
            cpu_pct: (r.cpu_pct * 100.0).round() / 100.0,
            wait_ns: r.wait_ns,
            io_wait_ns: r.offcpu.as_ref().map(|o| o.io_ns),
            blocked_ns: r.offcpu.as_ref().map(|o| o.blocked_ns),
            sleep_ns: r.offcpu.as_ref().map(|o| o.sleep_ns),
            caused_wait_ns: r.caused_wait_ns,
        })
        .collect()
}

/// One JSON object for the last interval, followed by a newline; `host` null.
pub fn write_json(out: &mut impl Write, m: &Model, k: usize) -> std::io::Result<()> {
    write_json_host(out, m, k, None)
}

/// One JSON object for the last interval, with the machine's readings for it, followed by a
/// newline.
pub fn write_json_host(
    out: &mut impl Write,
    m: &Model,
    k: usize,
    host: Option<&Host>,
) -> std::io::Result<()> {
    let Some(b) = m.latest() else { return Ok(()) };
    // With --threads the rows are threads (the Batch says whether it carried them).
    let threads = m.top_threads(k).map(|t| (t, m.top_threads_exact(k)));
    let n = b.interval_ns();
    let (cpu, cpu_exact) = match &threads {
        Some((top, exact)) => (json_rows(top), exact.as_deref().map(json_rows)),
        None => (
            json_proc_rows(m, &b.cpu, n, k),
            b.cpu_exact.as_deref().map(|c| json_proc_rows(m, c, n, k)),
        ),
    };
    let line = JsonLine {
        t_ms: b.t_ms,
        interval_ms: (b.interval_ns() + 500_000) / 1_000_000,
        interval_ns: b.interval_ns(),
        seq: b.seq,
        ncpus: b.ncpus,
        switches: b.switches,
        cpu,
        cpu_exact,
        exited: b.exits.iter().map(|e| e.pid).collect(),
        dropped: &b.dropped,
        cost: &b.cost,
        qos: json_qos(m),
        mem: json_mem(m, m.mem.sketch.top_rss(k)),
        mem_growth: json_mem(m, m.mem.sketch.top_growth(k)),
        mem_exact: m.mem.exact.as_ref().map(|e| json_mem(m, e.top_rss(k))),
        mem_stats: &b.mem_stats,
        wait: json_wait(m, m.wait.top_wait(k)),
        wait_exact: m.wait.top_wait_exact(k).map(|w| json_wait(m, w)),
        io: json_io(m, m.wait.top_io(k)),
        io_exact: m.wait.top_io_exact(k).map(|r| json_io(m, r)),
        blocked: json_blocked(m, m.wait.top_blocked(k)),
        wait_by: json_wait_by(m, m.wait.top_wait_by(k)),
        wait_stats: &b.wait_stats,
        servers: json_servers(m, k),
        net: json_net(m, k),
        servers_stats: &b.servers_stats,
        cgroups: json_cgroups(&b.cgroups, b.interval_ns(), k),
        cgroups_exact: b
            .cgroups_exact
            .as_deref()
            .map(|c| json_cgroups(c, b.interval_ns(), k)),
        cgroup_stats: &b.cgroup_stats,
        cgroup_wait_by: m
            .cgroups
            .top_wait_by(k)
            .iter()
            .map(|p| JsonCgroupWaitBy {
                cgroup: &p.cgroup,
                culprit_cgroup: &p.culprit,
                wait_ns: p.wait_ns,
            })
            .collect(),
        host: host.map(json_host),
    };
    serde_json::to_writer(&mut *out, &line)?;
    out.write_all(b"\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frontend::lines::tests::model;

    #[test]
    fn borrowed_process_rows_are_top_cpus() {
        let m = model();
        let b = m.latest().unwrap();
        for k in [1, 20] {
            let borrowed = json_proc_rows(&m, &b.cpu, b.interval_ns(), k);
            let top = m.top_cpu(k);
            let copied = json_rows(&top);
            assert_eq!(
                serde_json::to_string(&borrowed).unwrap(),
                serde_json::to_string(&copied).unwrap()
            );
        }
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
    fn host_follows_the_schema() {
        use crate::os::host::{CpuShare, MemInfo};
        let mut out = Vec::new();
        write_json(&mut out, &model(), 20).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(v["host"].is_null(), "no readings, no numbers: {v}");
        let host = Host {
            cpus: vec![CpuShare {
                cpu: 1,
                user: 61.0 / 0.9,
                system: 10.0,
                iowait: 1.0 / 3.0,
                irq: 2.0,
                steal: 0.5,
            }],
            mem: Some(MemInfo {
                total: 1000,
                free: 100,
                available: 600,
                buffers: 50,
                cached: 300,
                swap_total: 200,
                swap_free: 150,
            }),
            span_ms: 1002,
        };
        let mut out = Vec::new();
        write_json_host(&mut out, &model(), 20, Some(&host)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["host"]["span_ms"], 1002);
        let c = &v["host"]["cpus"][0];
        assert_eq!(c["cpu"], 1);
        assert_eq!(c["user_pct"], 67.78);
        assert_eq!(c["system_pct"], 10.0);
        assert_eq!(c["iowait_pct"], 0.33);
        assert_eq!(c["irq_pct"], 2.0);
        assert_eq!(c["steal_pct"], 0.5);
        // The parts add up to busy within their rounding.
        assert_eq!(c["busy_pct"], 80.61);
        let m = &v["host"]["mem"];
        assert_eq!(m["total_bytes"], 1000);
        assert_eq!(m["used_bytes"], 550);
        assert_eq!(m["free_bytes"], 100);
        assert_eq!(m["available_bytes"], 600);
        assert_eq!(m["buffers_bytes"], 50);
        assert_eq!(m["cached_bytes"], 300);
        assert_eq!(v["host"]["swap"]["total_bytes"], 200);
        assert_eq!(v["host"]["swap"]["used_bytes"], 50);
        let no_mem = Host { mem: None, ..host };
        let mut out = Vec::new();
        write_json_host(&mut out, &model(), 20, Some(&no_mem)).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert!(
            v["host"]["mem"].is_null() && v["host"]["swap"].is_null(),
            "{v}"
        );
        assert_eq!(v["host"]["cpus"].as_array().map(Vec::len), Some(1));
    }

    #[test]
    fn servers_and_net_follow_the_schema() {
        let mut m = Model::new();
        m.ingest(&crate::batch::build::plausible(1, 4));
        let mut out = Vec::new();
        write_json(&mut out, &m, 20).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let s = &v["servers"][0];
        assert_eq!(s["pid"], 1001);
        assert_eq!(s["comm"], "worker-1");
        assert_eq!(s["requests"], 401);
        // 401 requests in 50 ms.
        assert_eq!(s["rps"], 8020.0);
        assert_eq!(s["conns"], 12);
        assert_eq!(s["max_us"], 900.0);
        assert!(s["p50_us"].as_f64().unwrap() > 0.0);
        assert!(s["p99_us"].as_f64().unwrap() >= s["p50_us"].as_f64().unwrap());
        assert!(s["p999_us"].is_f64());
        assert_eq!(s["rx_bytes"], 40_001);
        assert_eq!(s["tx_bytes"], 120_000);
        assert_eq!(v["net"][0]["pid"], 1001);
        assert_eq!(v["net"][0]["comm"], "worker-1");
        assert_eq!(v["servers_stats"]["available"], true);
        assert!(v["servers_stats"]["evictions"].is_u64());
    }

    #[test]
    fn cgroups_and_threads_follow_the_schema() {
        let mut m = Model::new();
        let b = crate::batch::build::plausible(1, 4);
        m.ingest(&b);
        let mut out = Vec::new();
        write_json(&mut out, &m, 2).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let c = &v["cgroups"];
        assert_eq!(c.as_array().map(Vec::len), Some(2), "top k");
        assert_eq!(c[0]["id"], 4000);
        assert_eq!(c[0]["path"], "/system.slice/worker-0.service");
        assert_eq!(c[0]["cpu_ns"], 27_000_001);
        // 27 ms of 50 ms.
        assert_eq!(c[0]["cpu_pct"], 54.0);
        assert_eq!(c[0]["rss_bytes"], 64u64 << 20);
        assert!(c[0]["wait_ns"].is_u64());
        assert_eq!(v["cgroup_stats"]["hierarchy"], "v2");
        assert!(
            v["cpu"][0]["cgroup"]
                .as_str()
                .unwrap()
                .starts_with("/system.slice/")
        );
        assert!(v["cpu"][0].get("tid").is_none());

        let t = crate::batch::Batch::build(2, b.end_ns, 50_000_000)
            .bins(10_000_000)
            .cpu(1000, 30_000_000, &[])
            .thread(1207, 1000, "io-worker", 20_000_000, &[])
            .thread(1000, 1000, "main", 10_000_000, &[])
            .done();
        m.ingest(&t);
        let mut out = Vec::new();
        write_json(&mut out, &m, 20).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v["cpu"][0]["tid"], 1207);
        assert_eq!(v["cpu"][0]["pid"], 1000);
        assert_eq!(v["cpu"][0]["comm"], "io-worker");
        assert_eq!(v["cpu"][0]["cpu_pct"], 40.0);
        assert_eq!(v["cpu"][1]["tid"], 1000);
        assert_eq!(v["cgroup_stats"]["threads"], true);
    }
}
