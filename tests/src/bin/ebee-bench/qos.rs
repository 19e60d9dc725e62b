//! `qos`: request QoS of a running redis-server, pinned, under redis-benchmark (GET) at several
//! loads: ebee-top's request count and latency percentiles, summed over each run's intervals,
//! beside redis-benchmark's own CSV report of the same run.

use std::time::Duration;

use ebee_top::probes::ProbeConfig;
use serde_json::json;

/// One redis-benchmark run (GET) with ebee-top draining beside it.
fn qos_load(
    live: &mut ebee_top::source::Live,
    pid: u32,
    port: u16,
    clients: u32,
    requests: u64,
) -> anyhow::Result<serde_json::Value> {
    use ebee_top::source::Source as _;
    let mut bench = std::process::Command::new("redis-benchmark")
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "get",
            "-n",
            &requests.to_string(),
            "-c",
            &clients.to_string(),
            "--csv",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let mut hist = vec![0u64; ebee_shared::qos::BUCKETS];
    let (mut count, mut max_ns, mut syscalls, mut ns) = (0u64, 0u64, 0u64, 0u64);
    let mut add = |b: &ebee_top::batch::Batch| {
        for s in b.qos.procs.iter().filter(|s| s.pid == pid) {
            count += s.requests.requests;
            max_ns = max_ns.max(s.requests.max_ns);
            syscalls += s.syscalls.iter().map(|x| x.count).sum::<u64>();
            for &(i, c) in &s.requests.hist {
                hist[usize::from(i)] += u64::from(c);
            }
        }
        ns += b.interval_ns();
    };
    loop {
        let b = live
            .next_batch()?
            .ok_or_else(|| anyhow::anyhow!("source ended"))?;
        add(&b);
        if bench.try_wait()?.is_some() {
            break;
        }
    }
    // Answers sent just before the client finished are in the next interval.
    let b = live
        .next_batch()?
        .ok_or_else(|| anyhow::anyhow!("source ended"))?;
    add(&b);
    let out = bench.wait_with_output()?;
    let csv = String::from_utf8_lossy(&out.stdout);
    // "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",
    // "p99_latency_ms","max_latency_ms"
    let row: Vec<f64> = csv
        .lines()
        .find(|l| l.starts_with("\"GET"))
        .ok_or_else(|| anyhow::anyhow!("no GET row in redis-benchmark output: {csv}"))?
        .split(',')
        .skip(1)
        .map(|f| f.trim_matches('"').parse().unwrap_or(f64::NAN))
        .collect();
    let get = |i: usize| row.get(i).copied().unwrap_or(f64::NAN);
    let h = ebee_top::model::qos::to_hdr(&hist);
    let q = |p: f64| h.as_ref().map(|h| h.value_at_quantile(p) as f64 / 1e3);
    let client_rps = get(0);
    Ok(json!({
        "clients": clients,
        "requests": requests,
        "client": {"rps": client_rps, "avg_ms": get(1), "p50_ms": get(3), "p95_ms": get(4),
                   "p99_ms": get(5), "max_ms": get(6)},
        "ebee": {
            "requests": count,
            // The run lasted requests / client_rps seconds by the client's own clock.
            "rps": if client_rps > 0.0 { count as f64 * client_rps / requests as f64 } else { f64::NAN },
            "p50_us": q(0.5), "p90_us": q(0.9), "p99_us": q(0.99), "p999_us": q(0.999),
            "max_us": max_ns as f64 / 1e3,
            "syscalls": syscalls,
            "drained_s": ns as f64 / 1e9,
        },
    }))
}

pub fn qos(
    pid: u32,
    port: u16,
    clients: &[u32],
    requests: u64,
) -> anyhow::Result<serde_json::Value> {
    use ebee_top::source::Source as _;
    let mut live =
        ebee_top::source::Live::start(ProbeConfig::default(), Duration::from_millis(100))?;
    live.set_pins(&[pid])?;
    let mut loads = Vec::new();
    for &c in clients {
        loads.push(qos_load(&mut live, pid, port, c, requests)?);
    }
    Ok(json!({"pid": pid, "loads": loads}))
}
