//! `cargo xtask bench rate`: a pinned delay server (1 ms answers, every tenth after 10 ms)
//! under closed-loop clients (`ebee-bench rate`): ebee-top's request counts against the
//! clients' own over the same intervals, and the rates a user compares from the outside.

use std::fmt::Write as _;

use anyhow::Result;

use super::{ebee_bench, header, load_avg, num, publish, table_head};

pub fn run(conns: &str, seconds: f64, runs: u32) -> Result<()> {
    let v = ebee_bench(&[
        "rate",
        "--conns",
        conns,
        "--seconds",
        &seconds.to_string(),
        "--runs",
        &runs.to_string(),
    ])?;
    let mut body = String::new();
    header(
        &mut body,
        "Pinned request rate against a closed-loop client",
        &format!("cargo xtask bench rate --conns {conns} --seconds {seconds} --runs {runs}"),
        "",
    )?;
    writeln!(body, "Load average when it started: {}  ", load_avg())?;
    writeln!(
        body,
        "`ebee-load delay-server` (answers 1 ms after each request, every tenth 10 ms after), \
         pinned; C closed-loop client threads (send, wait for the answer, send again), each \
         noting the CLOCK_MONOTONIC time of every answer; 50 ms intervals. **Same span**: the \
         intervals wholly inside the clients' run, ebee-top's count in them over the answers \
         the clients got in the same `[start, end)` (pinned request model, and the servers \
         pipeline). **From outside**: the clients' completed count over their own run time, \
         against the mean of the interval rates and the window rate ebee-top showed when they \
         stopped (what the report of 7% and 11% compared). `split`: the server reads with one \
         thread and answers with another, on a duplicated descriptor.\n"
    )?;
    table_head(
        &mut body,
        &[
            "server",
            "clients",
            "intervals",
            "client req/s",
            "same span: pinned / client",
            "same span: servers / client",
            "outside: mean interval rps / client",
            "outside: window rps / client",
        ],
    )?;
    for r in v["runs"].as_array().cloned().unwrap_or_default() {
        let c = num(&r["client"]);
        let crps = num(&r["client_rps"]);
        writeln!(
            body,
            "| {} | {} | {} | {:.0} | {:.4} | {:.4} | {:.4} | {:.4} |",
            if r["split"].as_bool() == Some(true) {
                "split"
            } else {
                "thread per connection"
            },
            r["conns"],
            r["intervals"],
            c / num(&r["span_s"]),
            num(&r["pinned"]) / c,
            num(&r["servers"]) / c,
            num(&r["mean_interval_rps"]) / crps,
            num(&r["window_rps"]) / crps,
        )?;
    }
    writeln!(body)?;
    publish("rate", &body)
}
