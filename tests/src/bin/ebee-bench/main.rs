//! Measurements behind `cargo xtask bench ...` that need the library (and root): run by xtask,
//! they print one JSON document on stdout for xtask to tabulate. One module per measurement;
//! `common` and `topk` hold what several share.

mod bursts;
mod common;
mod mem_precision;
mod overhead;
mod precision;
mod qos;
mod rate;
mod record_stats;
mod servers;
mod switch;
mod topk;
mod wait_precision;

use clap::{Parser, Subcommand};

use crate::common::Sampling;

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Precision@k of the CPU sketch against the exact shadow, while a workload runs; plus a
    /// sweep of sketch shapes by replaying the kernel's own update trace in userspace.
    Precision {
        #[command(flatten)]
        sampling: Sampling,
        #[command(flatten)]
        opts: precision::Opts,
    },
    /// Precision@k of the wait and disk I/O sketches against their exact shadows while a
    /// workload runs.
    WaitPrecision {
        #[command(flatten)]
        sampling: Sampling,
    },
    /// Precision@k of the memory sketch against the exact shadow (by RES and by growth) while
    /// a workload runs, its evictions, its maps, and the cost per rss_stat event (BPF stats)
    /// with and without the shadow.
    MemPrecision {
        #[command(flatten)]
        sampling: Sampling,
    },
    /// Burst resolution: watch `pid` for `seconds` at the default interval and report every
    /// burst (a run of non-empty 10 ms bins) with its on-CPU time and span.
    Bursts {
        #[arg(long)]
        pid: u32,
        #[arg(long)]
        seconds: f64,
    },
    /// Added cost per syscall: tight syscall loops (`ebee-load syscalls`) with no monitor,
    /// with ebee-top loaded and nothing pinned, with another process pinned, and pinned
    /// themselves; rounds interleave the modes so machine noise hits them alike.
    Overhead {
        /// Loop iterations per run.
        #[arg(long, default_value_t = 2_000_000)]
        calls: u64,
        /// Rounds (each runs every mode once).
        #[arg(long, default_value_t = 15)]
        rounds: u32,
        /// `getppid` or `tcp`.
        #[arg(long, default_value = "getppid")]
        kind: String,
    },
    /// Added cost per context switch: `ebee-load pingpong` on CPU 1 with no monitor, with an
    /// empty sched_switch program (the floor), with ebee-top (every pipeline, draining every
    /// 50 ms from CPU 0), and with ebee-top and another process pinned; rounds interleave the
    /// modes. Then one run each of the floor and ebee-top with BPF statistics on, for the
    /// programs' own run time per switch.
    Switch {
        /// Round trips per run (two switches each).
        #[arg(long, default_value_t = 300_000)]
        round_trips: u64,
        /// Rounds (each runs every mode once).
        #[arg(long, default_value_t = 9)]
        rounds: u32,
    },
    /// Request QoS of a running redis-server (pinned) under redis-benchmark at several loads:
    /// ebee-top's count and percentiles over each run beside redis-benchmark's own report.
    Qos {
        /// The redis-server to pin.
        #[arg(long)]
        pid: u32,
        /// Its port on 127.0.0.1.
        #[arg(long)]
        port: u16,
        /// Client connections of each load.
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8,16,32,64")]
        clients: Vec<u32>,
        /// Requests per load.
        #[arg(long, default_value_t = 100_000)]
        requests: u64,
    },
    /// A pinned delay server under closed-loop clients: ebee-top's request counts against the
    /// clients' over the same intervals, and the rates a user compares from the outside.
    Rate {
        /// Client connections of each load.
        #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
        conns: Vec<u32>,
        /// Seconds of each run.
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// Runs of each load.
        #[arg(long, default_value_t = 3)]
        runs: u32,
    },
    /// Cost of the servers pipeline: syscall and socket loops on CPU 1 with no monitor,
    /// ebee-top without and with the pipeline, the floor of empty socket programs and (the
    /// request loop) pinned mode; the programs' run time per event from BPF statistics; and
    /// redis-benchmark's requests/s with the pipeline on and off.
    Servers {
        /// getppid iterations per run (the socket loops run a tenth).
        #[arg(long, default_value_t = 2_000_000)]
        calls: u64,
        /// Rounds of the loops (each runs every mode once).
        #[arg(long, default_value_t = 9)]
        rounds: u32,
        /// Rounds of redis-benchmark (each runs every mode once).
        #[arg(long, default_value_t = 5)]
        redis_rounds: u32,
        /// Requests of each redis-benchmark test (SET, then GET).
        #[arg(long, default_value_t = 100_000)]
        redis_requests: u64,
    },
    /// Size and cost of a recording: bytes per interval (key and delta records), raw JSON
    /// bytes, encode and decode time per interval, and a sweep of zstd levels and key spacing
    /// over the same intervals.
    RecordStats {
        #[arg(long)]
        file: std::path::PathBuf,
        /// Only the file's own figures (size, time, records), no re-encoding.
        #[arg(long)]
        quick: bool,
    },
}

fn main() {
    let args = Args::parse();
    let r = match args.cmd {
        Cmd::Precision { sampling: s, opts } => {
            precision::precision(s.interval_ms, s.intervals, opts)
        }
        Cmd::Bursts { pid, seconds } => bursts::bursts(pid, seconds),
        Cmd::WaitPrecision { sampling: s } => {
            wait_precision::wait_precision(s.interval_ms, s.intervals)
        }
        Cmd::MemPrecision { sampling: s } => {
            mem_precision::mem_precision(s.interval_ms, s.intervals)
        }
        Cmd::Overhead {
            calls,
            rounds,
            kind,
        } => overhead::overhead(calls, rounds, &kind),
        Cmd::Switch {
            round_trips,
            rounds,
        } => switch::switch_cost(round_trips, rounds),
        Cmd::Qos {
            pid,
            port,
            clients,
            requests,
        } => qos::qos(pid, port, &clients, requests),
        Cmd::Rate {
            conns,
            seconds,
            runs,
        } => rate::rate(&conns, seconds, runs),
        Cmd::Servers {
            calls,
            rounds,
            redis_rounds,
            redis_requests,
        } => servers::servers(calls, rounds, redis_rounds, redis_requests),
        Cmd::RecordStats { file, quick } => record_stats::record_stats(&file, quick),
    };
    match r {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("ebee-bench: {e:#}");
            std::process::exit(1);
        }
    }
}
