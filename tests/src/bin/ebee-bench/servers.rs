//! `servers`: what the servers pipeline (the socket tracepoints) costs. Tight loops of
//! `ebee-load syscalls` (getppid; socket calls that are not a server's: UDP and a TCP socket
//! connected to itself; a request/response over loopback TCP, both ends in the loop) timed by
//! their own thread CPU clock, with no monitor, ebee-top without the servers pipeline
//! (`no_servers`), that plus empty programs on the socket tracepoints (the floor), ebee-top with
//! it, and (the request loop) ebee-top without it but with the loop pinned, for pinned mode's
//! cost of the same server; rounds interleave the modes. Then the programs' own run time per
//! event from BPF statistics (the floor's and the pipeline's, on the same loops), and
//! redis-benchmark's own requests/s against a redis-server with the pipeline on and off.

use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;
use std::time::Duration;

use ebee_shared::prog_names;
use ebee_top::probes::{ProbeConfig, Probes};
use serde_json::json;

use crate::common::{ebee_load, ns_per_run, run_stats};

const TICK: Duration = Duration::from_millis(50);

/// The loops: (kind, socket calls per iteration, iterations as a fraction of `calls`).
const LOOPS: [(&str, u32, u64); 4] = [
    ("getppid", 0, 1),
    ("udp", 2, 10),
    ("tcp-self", 2, 10),
    ("tcp", 4, 10),
];

/// Load ebee-top's programs: every pipeline, or all but the servers one.
fn load(servers: bool, bpf_stats: bool) -> anyhow::Result<Probes> {
    Ok(Probes::load(
        ProbeConfig {
            no_servers: !servers,
            bpf_stats,
            ..Default::default()
        },
        TICK,
    )?)
}

/// One run of `ebee-load syscalls` on CPU 1 (draining from here, CPU 0, every 50 ms as
/// ebee-top does, so a server gets its histogram slot), pinned first when `pin_self`.
fn loop_run(
    mut probes: Option<&mut Probes>,
    pin_self: bool,
    calls: u64,
    kind: &str,
) -> anyhow::Result<f64> {
    let mut cmd = ebee_load()?;
    cmd.args(["syscalls", "--calls", &calls.to_string(), "--kind", kind])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    // SAFETY: only sched_setaffinity (a plain syscall) between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            ebee_tests::pin_to_cpu(1);
            Ok(())
        });
    }
    let mut child = ebee_tests::Proc(cmd.spawn()?);
    // Let the child set up (the socket kinds connect before waiting).
    std::thread::sleep(Duration::from_millis(100));
    if let Some(p) = probes.as_deref_mut() {
        let me = [child.pid()];
        p.set_pins(if pin_self { &me } else { &[] })?;
        p.drain()?;
    }
    child
        .0
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdin"))?
        .write_all(b"g")?;
    while child.0.try_wait()?.is_none() {
        std::thread::sleep(TICK);
        if let Some(p) = probes.as_deref_mut() {
            p.drain()?;
        }
    }
    if let Some(p) = probes {
        p.set_pins(&[])?;
    }
    let mut out = String::new();
    std::io::Read::read_to_string(
        child
            .0
            .stdout
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?,
        &mut out,
    )?;
    out.trim()
        .parse()
        .map_err(|_| anyhow::anyhow!("ebee-load printed {out:?}"))
}

/// Run time of the socket programs (recv and send) over one loop run: (ns, runs).
fn sock_stats(p: &Probes, progs: [&str; 2]) -> (u64, u64) {
    progs.iter().fold((0, 0), |a, n| {
        let s = p.prog_stats_of(n);
        (a.0 + s.run_ns, a.1 + s.run_count)
    })
}

/// BPF statistics over one run of each socket loop: the floor programs (servers pipeline
/// off) and the pipeline's, ns per run and per loop iteration.
fn bpf_stats(calls: u64) -> anyhow::Result<serde_json::Value> {
    let mut rows = Vec::new();
    for (kind, per, frac) in LOOPS.iter().copied().filter(|l| l.1 > 0) {
        let n = calls / frac;
        let mut floor = load(false, true)?;
        floor.set_sock_floor(true)?;
        let f0 = sock_stats(&floor, [prog_names::FLOOR_RECV, prog_names::FLOOR_SEND]);
        loop_run(Some(&mut floor), false, n, kind)?;
        let f1 = sock_stats(&floor, [prog_names::FLOOR_RECV, prog_names::FLOOR_SEND]);
        drop(floor);
        let mut on = load(true, true)?;
        let o0 = sock_stats(&on, [prog_names::SOCK_RECV, prog_names::SOCK_SEND]);
        loop_run(Some(&mut on), false, n, kind)?;
        let o1 = sock_stats(&on, [prog_names::SOCK_RECV, prog_names::SOCK_SEND]);
        drop(on);
        let (fns, fruns) = (f1.0 - f0.0, f1.1 - f0.1);
        let (ons, oruns) = (o1.0 - o0.0, o1.1 - o0.1);
        rows.push(json!({
            "kind": kind,
            "iterations": n,
            "socket_calls_per_iteration": per,
            "floor_ns_per_run": ns_per_run(fns, fruns),
            "floor_runs": fruns,
            "on_ns_per_run": ns_per_run(ons, oruns),
            "on_runs": oruns,
            "floor_ns_per_iteration": fns as f64 / n as f64,
            "on_ns_per_iteration": ons as f64 / n as f64,
        }));
    }
    Ok(json!(rows))
}

/// redis-benchmark's own requests/s (GET and SET, no pipelining) against a redis-server on
/// `port`, with ebee-top draining every 50 ms from here when `probes`.
fn redis_run(
    mut probes: Option<&mut Probes>,
    port: u16,
    requests: u64,
) -> anyhow::Result<Vec<f64>> {
    let mut child = ebee_tests::Proc(
        std::process::Command::new("redis-benchmark")
            .args([
                "-p",
                &port.to_string(),
                "-c",
                "50",
                "-P",
                "1",
                "-t",
                "set,get",
            ])
            .args(["-n", &requests.to_string(), "--csv"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()?,
    );
    while child.0.try_wait()?.is_none() {
        std::thread::sleep(TICK);
        if let Some(p) = probes.as_deref_mut() {
            p.drain()?;
        }
    }
    let mut out = String::new();
    std::io::Read::read_to_string(
        child
            .0
            .stdout
            .as_mut()
            .ok_or_else(|| anyhow::anyhow!("no stdout"))?,
        &mut out,
    )?;
    // "test","rps",...: one line per test after the header.
    let rps: Vec<f64> = out
        .lines()
        .filter(|l| l.starts_with("\"SET\"") || l.starts_with("\"GET\""))
        .filter_map(|l| l.split(',').nth(1))
        .filter_map(|v| v.trim_matches('"').parse().ok())
        .collect();
    anyhow::ensure!(rps.len() == 2, "redis-benchmark printed {out:?}");
    Ok(rps)
}

/// redis-benchmark with no monitor, ebee-top without the servers pipeline, and with it;
/// `rounds` rounds, each mode once per round. Also the socket programs' run time per request
/// from BPF statistics over one more run.
fn redis(rounds: u32, requests: u64) -> anyhow::Result<serde_json::Value> {
    const PORT: u16 = 17501;
    let _server = ebee_tests::Proc(
        std::process::Command::new("redis-server")
            .args(["--port", &PORT.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()?,
    );
    let t = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", PORT)).is_err() {
        anyhow::ensure!(t.elapsed() < Duration::from_secs(5), "redis did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let modes = ["none", "servers_off", "servers_on"];
    let mut res: Vec<Vec<f64>> = vec![Vec::new(); modes.len()];
    for _ in 0..rounds {
        let r = redis_run(None, PORT, requests)?;
        res[0].push((r[0] + r[1]) / 2.0);
        let mut p = load(false, false)?;
        let r = redis_run(Some(&mut p), PORT, requests)?;
        res[1].push((r[0] + r[1]) / 2.0);
        drop(p);
        let mut p = load(true, false)?;
        let r = redis_run(Some(&mut p), PORT, requests)?;
        res[2].push((r[0] + r[1]) / 2.0);
    }
    let mut p = load(true, true)?;
    let s0 = sock_stats(&p, [prog_names::SOCK_RECV, prog_names::SOCK_SEND]);
    redis_run(Some(&mut p), PORT, requests)?;
    let s1 = sock_stats(&p, [prog_names::SOCK_RECV, prog_names::SOCK_SEND]);
    Ok(json!({
        "requests": requests,
        "clients": 50,
        "modes": modes.iter().zip(&res).map(|(m, v)| json!({"mode": m, "rps": v})).collect::<Vec<_>>(),
        // GET and SET runs: 2 * requests requests, each two socket calls at the server and
        // two at the client.
        "prog_ns_per_request": (s1.0 - s0.0) as f64 / (2 * requests) as f64,
        "prog_runs_per_request": (s1.1 - s0.1) as f64 / (2 * requests) as f64,
    }))
}

pub fn servers(
    calls: u64,
    rounds: u32,
    redis_rounds: u32,
    redis_requests: u64,
) -> anyhow::Result<serde_json::Value> {
    // The drains run here, on CPU 0; the loops on CPU 1.
    ebee_tests::pin_to_cpu(0);
    let modes = ["none", "servers_off", "floor", "servers_on", "pinned_self"];
    let mut res: Vec<Vec<Vec<f64>>> = vec![vec![Vec::new(); modes.len()]; LOOPS.len()];
    for _ in 0..rounds {
        for (i, &(kind, _, frac)) in LOOPS.iter().enumerate() {
            let n = calls / frac;
            res[i][0].push(loop_run(None, false, n, kind)?);
            let mut p = load(false, false)?;
            res[i][1].push(loop_run(Some(&mut p), false, n, kind)?);
            p.set_sock_floor(true)?;
            res[i][2].push(loop_run(Some(&mut p), false, n, kind)?);
            p.set_sock_floor(false)?;
            if kind == "tcp" {
                res[i][4].push(loop_run(Some(&mut p), true, n, kind)?);
            }
            drop(p);
            let mut p = load(true, false)?;
            res[i][3].push(loop_run(Some(&mut p), false, n, kind)?);
        }
    }
    let stats = bpf_stats(calls)?;
    let redis = redis(redis_rounds, redis_requests)?;
    Ok(json!({
        "calls": calls,
        "rounds": rounds,
        "loops": LOOPS.iter().zip(&res).map(|(&(kind, per, frac), r)| json!({
            "kind": kind,
            "iterations": calls / frac,
            "socket_calls_per_iteration": per,
            "modes": modes.iter().zip(r).filter(|(_, v)| !v.is_empty())
                .map(|(m, v)| json!({"mode": m, "stats": run_stats(v.clone())}))
                .collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "bpf_stats": stats,
        "redis": redis,
    }))
}
