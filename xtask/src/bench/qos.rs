//! `cargo xtask bench qos`: ebee-top's request QoS of a redis-server it pins, beside
//! redis-benchmark's own report, at several client counts (`ebee-bench qos`), with the
//! correlation of the two across the sweep.

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context as _, Result};
use serde_json::Value;

use super::{Workload, ebee_bench, header, load_avg, num, publish, table_head};
use crate::util::output;

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

pub fn run(clients: &str, requests: u64) -> Result<()> {
    let port: u16 = 6391;
    // redis-server on loopback, killed when dropped.
    let redis = Workload(
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
    header(
        &mut body,
        "Request QoS of redis-server against redis-benchmark",
        &format!("cargo xtask bench qos --clients {clients} --requests {requests}"),
        "",
    )?;
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
    table_head(
        &mut body,
        &[
            "clients",
            "client rps",
            "ebee-top rps",
            "count / sent",
            "client p50 ms",
            "ebee-top p50 ms",
            "client p99 ms",
            "ebee-top p99 ms",
            "ebee-top p99.9 ms",
            "client max ms",
            "ebee-top max ms",
        ],
    )?;
    let loads = v["loads"].as_array().cloned().unwrap_or_default();
    let (mut c50, mut e50, mut c99, mut e99, mut crps, mut erps) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for l in &loads {
        let c = &l["client"];
        let e = &l["ebee"];
        let ms = |v: &Value| num(v) / 1000.0;
        writeln!(
            body,
            "| {} | {:.0} | {:.0} | {:.4} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} |",
            l["clients"],
            num(&c["rps"]),
            num(&e["rps"]),
            num(&e["requests"]) / num(&l["requests"]),
            num(&c["p50_ms"]),
            ms(&e["p50_us"]),
            num(&c["p99_ms"]),
            ms(&e["p99_us"]),
            ms(&e["p999_us"]),
            num(&c["max_ms"]),
            ms(&e["max_us"]),
        )?;
        c50.push(num(&c["p50_ms"]));
        e50.push(ms(&e["p50_us"]));
        c99.push(num(&c["p99_ms"]));
        e99.push(ms(&e["p99_us"]));
        crps.push(num(&c["rps"]));
        erps.push(num(&e["rps"]));
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
    publish("qos", &body)
}
