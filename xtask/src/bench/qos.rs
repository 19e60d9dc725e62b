//! `cargo xtask bench overhead` and `cargo xtask bench qos`: what the syscall hooks cost every
//! process, and how ebee-top's request QoS of redis-server follows redis-benchmark's report.

use std::fmt::Write as _;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result};
use serde_json::Value;

use crate::bench::{ebee_bench, machine, write_section};
use crate::util::output;

fn load_avg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "?".into())
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

pub fn overhead(calls: u64, rounds: u32) -> Result<()> {
    let mut body = String::new();
    writeln!(body, "## Syscall overhead of the QoS hooks\n")?;
    writeln!(
        body,
        "Command: `cargo xtask bench overhead --calls {calls} --rounds {rounds}`  "
    )?;
    writeln!(body, "Machine: {}  ", machine())?;
    writeln!(
        body,
        "Load average when it started: {} (the machine is shared; every mode runs once per \
         round, in turn, so noise hits them alike).\n",
        load_avg()
    )?;
    writeln!(
        body,
        "A tight loop in `ebee-load syscalls` timed by its own thread CPU clock. Modes: \
         **none** no eBPF loaded; **loaded** ebee-top's programs loaded and nothing pinned (no \
         syscall hook attached); **empty hooks** empty tp_btf programs on sys_enter and sys_exit \
         (the floor of any enter/exit design); **pinned other** ebee-top's hooks attached because \
         another process is pinned (what every unpinned process pays); **pinned self** the loop \
         itself pinned. No drain runs during a loop; BPF run-time statistics are off (ebee-top \
         turns them off while anything is pinned).\n"
    )?;
    for (kind, calls, what) in [
        ("getppid", calls, "one getppid per iteration"),
        (
            "tcp",
            calls / 10,
            "a request/response over loopback TCP per iteration (4 syscalls: write, read, \
             write, read on a connected pair; the server side counts as a request)",
        ),
    ] {
        let v = ebee_bench(&[
            "overhead",
            "--calls",
            &calls.to_string(),
            "--rounds",
            &rounds.to_string(),
            "--kind",
            kind,
        ])?;
        writeln!(body, "### `{kind}`: {what}, {calls} iterations per run\n")?;
        writeln!(
            body,
            "| mode | median ns/iteration | min | added (median) | added per syscall |"
        )?;
        writeln!(body, "|---|---|---|---|---|")?;
        let modes = v["modes"].as_array().cloned().unwrap_or_default();
        let base = modes
            .first()
            .map(|m| f(&m["stats"]["median_ns"]))
            .unwrap_or(f64::NAN);
        let per = if kind == "tcp" { 4.0 } else { 1.0 };
        for m in &modes {
            let med = f(&m["stats"]["median_ns"]);
            writeln!(
                body,
                "| {} | {:.1} | {:.1} | {:+.1} | {:+.1} |",
                m["mode"].as_str().unwrap_or("?"),
                med,
                f(&m["stats"]["min_ns"]),
                med - base,
                (med - base) / per
            )?;
        }
        writeln!(body)?;
    }
    print!("{body}");
    write_section("overhead", &body)
}

/// redis-server on loopback, killed when dropped.
struct Redis(Child);
impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn pearson(x: &[f64], y: &[f64]) -> f64 {
    let n = x.len().min(y.len()) as f64;
    if n < 2.0 {
        return f64::NAN;
    }
    let mx = x.iter().sum::<f64>() / n;
    let my = y.iter().sum::<f64>() / n;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (a, b) in x.iter().zip(y) {
        sxy += (a - mx) * (b - my);
        sxx += (a - mx) * (a - mx);
        syy += (b - my) * (b - my);
    }
    sxy / (sxx * syy).sqrt()
}

pub fn qos(clients: &str, requests: u64) -> Result<()> {
    let port: u16 = 6391;
    let redis = Redis(
        Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &port.to_string(),
                "--save",
                "",
                "--appendonly",
                "no",
                "--daemonize",
                "no",
            ])
            .stdout(Stdio::null())
            .spawn()
            .context("starting redis-server (apt-get install redis-server)")?,
    );
    // Wait until it answers.
    let mut up = false;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        if output(Command::new("redis-cli").args(["-p", &port.to_string(), "ping"]))
            .is_some_and(|s| s.contains("PONG"))
        {
            up = true;
            break;
        }
    }
    anyhow::ensure!(up, "redis-server did not answer on port {port}");
    let version = output(Command::new("redis-server").arg("--version")).unwrap_or_default();
    let v = ebee_bench(&[
        "qos",
        "--pid",
        &redis.0.id().to_string(),
        "--port",
        &port.to_string(),
        "--clients",
        clients,
        "--requests",
        &requests.to_string(),
    ])?;
    drop(redis);

    let mut body = String::new();
    writeln!(
        body,
        "## Request QoS of redis-server against redis-benchmark\n"
    )?;
    writeln!(
        body,
        "Command: `cargo xtask bench qos --clients {clients} --requests {requests}`  "
    )?;
    writeln!(body, "Machine: {}  ", machine())?;
    writeln!(
        body,
        "Load average when it started: {}; {}  ",
        load_avg(),
        version.trim()
    )?;
    writeln!(
        body,
        "redis-server on 127.0.0.1 (no persistence), pinned by ebee-top (100 ms intervals); \
         for each load `redis-benchmark -t get -n {requests} -c C --csv`. ebee-top's numbers are \
         summed over the intervals of each run: requests counted (and its rps = count x the \
         client's rps / {requests}, i.e. over the client's own run time), latency percentiles \
         from the merged request histograms. The client's latency is its round trip.\n"
    )?;
    writeln!(
        body,
        "| clients | client rps | ebee-top rps | count / sent | client p50 ms | ebee-top p50 ms | client p99 ms | ebee-top p99 ms | ebee-top p99.9 ms | client max ms | ebee-top max ms |"
    )?;
    writeln!(body, "|---|---|---|---|---|---|---|---|---|---|---|")?;
    let loads = v["loads"].as_array().cloned().unwrap_or_default();
    let (mut c50, mut e50, mut c99, mut e99, mut crps, mut erps) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for l in &loads {
        let c = &l["client"];
        let e = &l["ebee"];
        let ms = |v: &Value| f(v) / 1000.0;
        writeln!(
            body,
            "| {} | {:.0} | {:.0} | {:.4} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            l["clients"],
            f(&c["rps"]),
            f(&e["rps"]),
            f(&e["requests"]) / f(&l["requests"]),
            f(&c["p50_ms"]),
            ms(&e["p50_us"]),
            f(&c["p99_ms"]),
            ms(&e["p99_us"]),
            ms(&e["p999_us"]),
            f(&c["max_ms"]),
            ms(&e["max_us"]),
        )?;
        c50.push(f(&c["p50_ms"]));
        e50.push(ms(&e["p50_us"]));
        c99.push(f(&c["p99_ms"]));
        e99.push(ms(&e["p99_us"]));
        crps.push(f(&c["rps"]));
        erps.push(f(&e["rps"]));
    }
    writeln!(
        body,
        "\nPearson correlation across the sweep, client vs ebee-top: rps {:.3}, p50 {:.3}, p99 {:.3}.\n",
        pearson(&crps, &erps),
        pearson(&c50, &e50),
        pearson(&c99, &e99)
    )?;
    writeln!(
        body,
        "The offset: ebee-top times a request from the end of the `read` that brought it to the \
         end of the `write` that answered it, inside redis. The client's time adds both trips \
         through the loopback stack, the wait in the socket buffer before redis's event loop \
         reads it (it serves the other ready clients first), and redis-benchmark's own event \
         loop. So ebee-top's latencies are lower and grow with load more slowly; what they show \
         is redis's service time, which is what a server-side monitor can see.\n"
    )?;
    print!("{body}");
    write_section("qos", &body)
}
