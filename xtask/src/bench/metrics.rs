//! `cargo xtask bench metrics`: does the metrics endpoint slow the drain? `ebee-top -b
//! --listen` runs with `--latency-report` twice for the same time, with a redis-server under
//! redis-benchmark so there is a server and work to fold: once with nobody scraping, once with
//! 100 connections held open and 20 scrapes a second, once besieged (200 silent connections and
//! 200 half-sent requests, each replaced as soon as the server closes it, and the same
//! scrapes). The drain's latency (kernel close of an interval to its Batch) and the time to the
//! line being written are compared; the scraper's own response times and the scrapes not
//! answered 200 are reported beside them. With `--tls`, [`super::metrics_tls`] runs the
//! endpoint locked with TLS and basic auth, abused, instead.

use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result};
use serde_json::Value;

use super::{Workload, as_root, header, load_avg, median, publish, table_head};

pub const ADDR: &str = "127.0.0.1:19477";
const REDIS_PORT: &str = "17601";

/// Which load the endpoint is under.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Idle,
    Scraped,
    Besieged,
}

/// Keep `n` connections open that sent `first`, replacing each the server closes, until
/// `stop`; returns how many it replaced.
pub fn besiege(
    n: usize,
    first: &'static [u8],
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut held: Vec<TcpStream> = Vec::new();
        let mut closed = 0;
        while !stop.load(Ordering::Relaxed) {
            held.retain_mut(|c| {
                let mut b = [0u8; 256];
                let open =
                    matches!(c.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
                closed += usize::from(!open);
                open
            });
            while held.len() < n {
                let Ok(mut c) = TcpStream::connect(ADDR) else {
                    break;
                };
                let _ = c.write_all(first);
                if c.set_nonblocking(true).is_ok() {
                    held.push(c);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        closed
    })
}

/// One GET /metrics on a new connection: (ms to the whole body, status was 200).
fn scrape_once() -> Option<f64> {
    let t = Instant::now();
    let mut c = TcpStream::connect(ADDR).ok()?;
    c.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut buf = Vec::new();
    c.read_to_end(&mut buf).ok()?;
    buf.starts_with(b"HTTP/1.1 200")
        .then(|| t.elapsed().as_secs_f64() * 1e3)
}

/// Run ebee-top for `seconds` under `mode`. Returns its latency report, the scrape times (ms)
/// and the scrapes not answered 200.
fn run_once(
    seconds: u64,
    mode: Mode,
    report: &std::path::Path,
) -> Result<(Value, Vec<f64>, usize)> {
    let n = (seconds * 20).to_string();
    let mut top = Workload(
        as_root("ebee-top")
            .args(["-b", "--format", "json", "-d", "0.05", "-n", &n])
            .args(["--listen", ADDR, "--latency-report"])
            .arg(report)
            .stdout(Stdio::null())
            .spawn()
            .context("starting ebee-top")?,
    );
    std::thread::sleep(Duration::from_secs(2));
    let stop = Arc::new(AtomicBool::new(false));
    let mut idle = Vec::new();
    let mut times = Vec::new();
    let mut failed = 0;
    let mut siege = Vec::new();
    if mode == Mode::Besieged {
        siege.push(besiege(200, b"", stop.clone()));
        siege.push(besiege(
            200,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\n",
            stop.clone(),
        ));
    }
    if mode != Mode::Idle {
        if mode == Mode::Scraped {
            for _ in 0..100 {
                if let Ok(c) = TcpStream::connect(ADDR) {
                    idle.push(c);
                }
            }
        }
        let st = stop.clone();
        let h = std::thread::spawn(move || {
            let mut v = Vec::new();
            let mut failed = 0;
            let mut next = Instant::now();
            while !st.load(Ordering::Relaxed) {
                match scrape_once() {
                    Some(ms) => v.push(ms),
                    None => failed += 1,
                }
                next += Duration::from_millis(50);
                if let Some(d) = next.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
            }
            (v, failed)
        });
        let status = top.0.wait().context("waiting for ebee-top")?;
        stop.store(true, Ordering::Relaxed);
        (times, failed) = h.join().unwrap_or_default();
        for h in siege {
            let _ = h.join();
        }
        anyhow::ensure!(status.success(), "ebee-top failed ({status})");
    } else {
        let status = top.0.wait().context("waiting for ebee-top")?;
        anyhow::ensure!(status.success(), "ebee-top failed ({status})");
    }
    drop(idle);
    let text = std::fs::read_to_string(report).context("reading the latency report")?;
    Ok((serde_json::from_str(&text)?, times, failed))
}

pub fn ms(v: &Value) -> String {
    v.as_f64()
        .map_or_else(|| "n/a".into(), |us| format!("{:.2}", us / 1000.0))
}

/// redis-server on its own port (files in `dir`) and redis-benchmark's GETs against it, so the
/// servers pipeline has work; both stopped on drop.
pub fn start_redis(dir: &std::path::Path) -> Result<(Workload, Workload)> {
    let redis = Workload(
        Command::new("redis-server")
            .args(["--port", REDIS_PORT, "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(dir)
            .stdout(Stdio::null())
            .spawn()
            .context("starting redis-server (apt-get install redis-server)")?,
    );
    std::thread::sleep(Duration::from_millis(500));
    let bench = Workload(
        Command::new("redis-benchmark")
            .args(["-p", REDIS_PORT, "-n", "1000000000", "-c", "8", "-q"])
            .args(["-t", "get"])
            .stdout(Stdio::null())
            .spawn()
            .context("starting redis-benchmark")?,
    );
    Ok((redis, bench))
}

pub fn run(seconds: u64) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("ebee-bench-metrics-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let (_redis, _bench) = start_redis(&dir)?;
    let mut body = String::new();
    let cmd = format!("cargo xtask bench metrics --seconds {seconds}");
    let note = format!("  \nLoad average when it started: {}", load_avg());
    header(
        &mut body,
        "Metrics endpoint: the drain under scrapes",
        &cmd,
        &note,
    )?;
    writeln!(
        body,
        "`ebee-top -b --format json -d 0.05 --listen {ADDR} --latency-report` for {seconds} s, \
         redis-server under redis-benchmark (8 clients) beside it so the servers pipeline has \
         work. **idle**: nobody scrapes. **scraped**: 100 connections held open the whole \
         time and 20 scrapes a second (each a new connection, `Connection: close`). \
         **besieged**: 200 connections that never send a byte and 200 that send a request \
         line and a header but never the blank line, each replaced as soon as the server \
         closes it, and the same 20 scrapes a second. drain: from the kernel closing an \
         interval to its Batch; shown: to its JSON line written; failed: scrapes not \
         answered 200 (or not at all).\n"
    )?;
    table_head(
        &mut body,
        &[
            "mode",
            "intervals",
            "drain p50 ms",
            "drain p99 ms",
            "drain max ms",
            "shown p99 ms",
            "scrapes",
            "failed",
            "scrape p50 ms",
            "scrape max ms",
        ],
    )?;
    for (name, mode) in [
        ("idle", Mode::Idle),
        ("scraped", Mode::Scraped),
        ("besieged", Mode::Besieged),
    ] {
        let report = dir.join(format!("{name}.json"));
        let (r, times, failed) = run_once(seconds, mode, &report)?;
        let max = times.iter().copied().fold(f64::NAN, f64::max);
        writeln!(
            body,
            "| {name} | {} | {} | {} | {} | {} | {} | {failed} | {} | {} |",
            r["drain"]["count"],
            ms(&r["drain"]["p50_us"]),
            ms(&r["drain"]["p99_us"]),
            ms(&r["drain"]["max_us"]),
            ms(&r["shown"]["p99_us"]),
            times.len(),
            if times.is_empty() {
                "–".into()
            } else {
                format!("{:.2}", median(times.clone()))
            },
            if times.is_empty() {
                "–".into()
            } else {
                format!("{max:.2}")
            },
        )?;
    }
    writeln!(body)?;
    publish("metrics", &body)
}
