//! `cargo xtask bench servers`: what the servers pipeline (programs on the socket
//! tracepoints) costs, from `ebee-bench servers`: tight loops on CPU 1 (getppid, non-server
//! socket calls over UDP and a self-connected TCP socket, a request/response over loopback TCP)
//! with no monitor, ebee-top without and with the pipeline, the floor of empty socket
//! programs, and pinned mode on the request loop; the programs' own run time per event from
//! BPF statistics; redis-benchmark's requests/s with the pipeline on and off.

use std::fmt::Write as _;

use anyhow::Result;
use serde_json::Value;

use super::{ebee_bench, header, load_avg, median, num, publish, table_head};

/// Median (`stat` "median_ns") or minimum ("min_ns") ns per iteration of `mode` in one
/// loop's results (NaN when it did not run).
fn mode_ns(l: &Value, mode: &str, stat: &str) -> f64 {
    l["modes"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|m| m["mode"] == mode)
        .map_or(f64::NAN, |m| num(&m["stats"][stat]))
}

fn cell(x: f64, signed: bool) -> String {
    match (x.is_finite(), signed) {
        (false, _) => "–".into(),
        (true, true) => format!("{x:+.0}"),
        (true, false) => format!("{x:.0}"),
    }
}

pub fn run(calls: u64, rounds: u32, redis_rounds: u32, redis_requests: u64) -> Result<()> {
    let load = load_avg();
    let v = ebee_bench(&[
        "servers",
        "--calls",
        &calls.to_string(),
        "--rounds",
        &rounds.to_string(),
        "--redis-rounds",
        &redis_rounds.to_string(),
        "--redis-requests",
        &redis_requests.to_string(),
    ])?;
    let mut body = String::new();
    header(
        &mut body,
        "Cost of the servers pipeline (socket tracepoints)",
        &format!(
            "cargo xtask bench servers --calls {calls} --rounds {rounds} --redis-rounds \
             {redis_rounds} --redis-requests {redis_requests}"
        ),
        "",
    )?;
    writeln!(
        body,
        "Load average when it started: {load} (the machine is shared; every mode runs once per \
         round, in turn, so noise hits them alike).\n"
    )?;
    writeln!(
        body,
        "### Wall-clock: loops timed by their own thread CPU clock\n\n\
         `ebee-load syscalls` on CPU 1, ebee-top draining every 50 ms from CPU 0 (so a server \
         gets its histogram slot, as in ebee-top). Loops: **getppid** (no socket call); \
         **udp** a datagram out of one connected UDP socket and into another (2 socket calls); \
         **tcp-self** a byte written to and read back from a TCP socket connected to itself, a \
         TCP socket that is no server connection (2 calls, the costliest non-server path: it \
         reads the port bitmap); **tcp** a request/response over loopback TCP with both ends in \
         the loop (client write, server read, server write, client read: one request, 4 \
         calls). Modes: **none** no eBPF; **servers off** ebee-top with `--no-servers`; \
         **floor** that plus empty programs on sock_recv_length and sock_send_length; \
         **servers on** ebee-top as it runs by default; **pinned self** (tcp only) servers off \
         and the loop pinned, pinned mode's cost for the same server. Median ns per iteration \
         of {rounds} rounds; BPF statistics off. The last column gives on − off and floor − \
         off per socket call again from each mode's fastest run (less of other load in it).\n"
    )?;
    table_head(
        &mut body,
        &[
            "loop",
            "iterations",
            "none",
            "servers off",
            "floor",
            "servers on",
            "pinned self",
            "on − off",
            "on − off per socket call",
            "floor − off per socket call",
            "same two, from the minima",
        ],
    )?;
    let loops = v["loops"].as_array().cloned().unwrap_or_default();
    for l in &loops {
        let per = l["socket_calls_per_iteration"].as_f64().unwrap_or(0.0);
        let m = |mode: &str| mode_ns(l, mode, "median_ns");
        let (none, off, floor, on, pinned) = (
            m("none"),
            m("servers_off"),
            m("floor"),
            m("servers_on"),
            m("pinned_self"),
        );
        let per_call = |x: f64| if per > 0.0 { x / per } else { f64::NAN };
        let lo = |mode: &str| mode_ns(l, mode, "min_ns");
        let (off_lo, floor_lo, on_lo) = (lo("servers_off"), lo("floor"), lo("servers_on"));
        writeln!(
            body,
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} / {} |",
            l["kind"].as_str().unwrap_or("?"),
            l["iterations"],
            cell(none, false),
            cell(off, false),
            cell(floor, false),
            cell(on, false),
            cell(pinned, false),
            cell(on - off, true),
            cell(per_call(on - off), true),
            cell(per_call(floor - off), true),
            cell(per_call(on_lo - off_lo), true),
            cell(per_call(floor_lo - off_lo), true),
        )?;
    }
    writeln!(
        body,
        "\n### BPF run-time statistics: the programs' own time per event\n\n\
         One more run of each socket loop with the kernel's BPF statistics on: the floor \
         programs (servers off) and the pipeline's `sock_recv` + `sock_send`. Both include the \
         statistics' own clock reads, so the difference is what the pipeline's body costs \
         over an empty program; what any program on these tracepoints costs (the trampoline) \
         is the floor − off column above. Other processes' socket calls during a run are in \
         the averages too.\n"
    )?;
    table_head(
        &mut body,
        &[
            "loop",
            "floor ns/run",
            "pipeline ns/run",
            "body per socket call",
            "body per iteration",
        ],
    )?;
    for s in v["bpf_stats"].as_array().into_iter().flatten() {
        let (f, o) = (num(&s["floor_ns_per_run"]), num(&s["on_ns_per_run"]));
        let (fi, oi) = (
            num(&s["floor_ns_per_iteration"]),
            num(&s["on_ns_per_iteration"]),
        );
        writeln!(
            body,
            "| {} | {f:.1} | {o:.1} | {:+.1} | {:+.1} |",
            s["kind"].as_str().unwrap_or("?"),
            o - f,
            oi - fi
        )?;
    }
    let r = &v["redis"];
    writeln!(
        body,
        "\n### redis-benchmark's own requests/s\n\n\
         redis-server and redis-benchmark on loopback (`-c {} -P 1 -t set,get -n {}`, the mean \
         of its SET and GET rates), ebee-top draining every 50 ms; median of {redis_rounds} \
         rounds. With BPF statistics on for one more run, the socket programs took {:.0} ns \
         per request ({:.2} program runs per request: the server's receive and send and the \
         client's), clock reads of the statistics included.\n",
        r["clients"],
        r["requests"],
        num(&r["prog_ns_per_request"]),
        num(&r["prog_runs_per_request"]),
    )?;
    table_head(
        &mut body,
        &["mode", "requests/s (median)", "vs none", "runs"],
    )?;
    let modes = r["modes"].as_array().cloned().unwrap_or_default();
    let rps = |m: &Value| -> (f64, Vec<f64>) {
        let v: Vec<f64> = m["rps"].as_array().into_iter().flatten().map(num).collect();
        (median(v.clone()), v)
    };
    let base = modes.first().map_or(f64::NAN, |m| rps(m).0);
    for m in &modes {
        let (med, all) = rps(m);
        writeln!(
            body,
            "| {} | {med:.0} | {:+.1}% | {} |",
            m["mode"].as_str().unwrap_or("?"),
            (med / base - 1.0) * 100.0,
            all.iter()
                .map(|x| format!("{x:.0}"))
                .collect::<Vec<_>>()
                .join(", ")
        )?;
    }
    writeln!(body)?;
    publish("servers", &body)
}
