//! `rate`: a pinned `ebee-load delay-server` (1 ms answers, every tenth after 10 ms) under
//! closed-loop clients that note when each answer arrived: ebee-top's request counts (pinned
//! request model and servers pipeline) against the clients' over the same intervals, and the
//! comparison a user makes from the outside (interval and window rates against the clients'
//! completed count over their run time).

use std::io::{BufRead as _, Read as _, Write as _};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ebee_top::model::Model;
use ebee_top::probes::ProbeConfig;
use ebee_top::source::{Live, Source as _};
use serde_json::json;

fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime with a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn one_run(
    conns: u32,
    seconds: f64,
    split: bool,
    tick: Duration,
) -> anyhow::Result<serde_json::Value> {
    let port = ebee_tests::free_port();
    let port_s = port.to_string();
    let mut args = vec![
        "delay-server",
        "--port",
        &port_s,
        "--fast-us",
        "1000",
        "--slow-us",
        "10000",
        "--slow-every",
        "10",
    ];
    if split {
        args.push("--split");
    }
    let mut cmd = crate::common::ebee_load()?;
    cmd.args(&args).stdout(std::process::Stdio::piped());
    let mut srv = ebee_tests::spawn_guarded(&mut cmd)?;
    let out = srv
        .0
        .stdout
        .take()
        .ok_or_else(|| anyhow::anyhow!("no server stdout"))?;
    let mut ready = String::new();
    std::io::BufReader::new(out).read_line(&mut ready)?;
    anyhow::ensure!(ready.trim() == "ready", "delay-server: {ready:?}");
    let pid = srv.pid();
    let mut live = Live::start(ProbeConfig::default(), tick)?;
    live.set_pins(&[pid])?;
    for _ in 0..3 {
        live.next_batch()?;
    }
    let run = Arc::new(AtomicBool::new(true));
    let done: Arc<Mutex<Vec<u64>>> = Arc::default();
    let mut clients = Vec::new();
    for _ in 0..conns {
        let (run, done) = (run.clone(), done.clone());
        let mut c = TcpStream::connect(("127.0.0.1", port))?;
        c.set_nodelay(true)?;
        clients.push(std::thread::spawn(move || {
            let mut resp = [0u8; 4];
            let mut mine = Vec::new();
            while run.load(Ordering::Relaxed) {
                if c.write_all(b"req!").is_err() || c.read_exact(&mut resp).is_err() {
                    break;
                }
                mine.push(mono_ns());
            }
            done.lock().unwrap_or_else(|e| e.into_inner()).extend(mine);
        }));
    }
    let c0 = mono_ns();
    let mut model = Model::new();
    // (start, end, pinned, servers, interval rps, window rps) of each interval.
    let mut ivs = Vec::new();
    let mut take = |live: &mut Live, model: &mut Model| -> anyhow::Result<()> {
        let b = live
            .next_batch()?
            .ok_or_else(|| anyhow::anyhow!("source ended"))?;
        model.ingest(&b);
        let v = model.qos.view(pid);
        ivs.push((
            b.start_ns,
            b.end_ns,
            b.qos
                .procs
                .iter()
                .filter(|p| p.pid == pid)
                .map(|p| p.requests.requests)
                .sum::<u64>(),
            b.servers
                .iter()
                .filter(|x| x.pid == pid)
                .map(|x| x.requests)
                .sum::<u64>(),
            v.as_ref().map_or(0.0, |v| v.interval.rps),
            v.as_ref().map_or(0.0, |v| v.window.rps),
        ));
        Ok(())
    };
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs_f64(seconds) {
        take(&mut live, &mut model)?;
    }
    run.store(false, Ordering::Relaxed);
    for c in clients {
        let _ = c.join();
    }
    let c1 = mono_ns();
    take(&mut live, &mut model)?;
    drop(srv);
    let mut done = done.lock().unwrap_or_else(|e| e.into_inner()).clone();
    done.sort_unstable();
    anyhow::ensure!(
        done.len() > 100,
        "the clients completed only {}",
        done.len()
    );
    let (first, last) = (done[0], done[done.len() - 1]);
    let (mut client, mut pinned, mut servers, mut span, mut n) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut irps = Vec::new();
    for &(s, e, p, sv, r, _) in ivs.iter().filter(|x| x.0 >= first && x.1 <= last) {
        let lo = done.partition_point(|&t| t < s);
        let hi = done.partition_point(|&t| t < e);
        client += (hi - lo) as u64;
        pinned += p;
        servers += sv;
        span += e - s;
        n += 1;
        irps.push(r);
    }
    // From the outside: the clients' count over their own run, against the mean of the
    // interval rates shown while they ran and the window rate shown when they stopped.
    let client_rps = done.len() as f64 * 1e9 / (c1 - c0) as f64;
    let mean_irps = irps.iter().sum::<f64>() / irps.len().max(1) as f64;
    let window_rps = ivs.iter().rev().find(|x| x.1 <= last).map_or(0.0, |x| x.5);
    Ok(json!({
        "conns": conns, "split": split, "tick_ms": tick.as_millis() as u64,
        "intervals": n, "span_s": span as f64 / 1e9,
        "client": client, "pinned": pinned, "servers": servers,
        "client_total": done.len(),
        "pinned_total": ivs.iter().map(|x| x.2).sum::<u64>(),
        "client_rps": client_rps, "mean_interval_rps": mean_irps, "window_rps": window_rps,
    }))
}

pub fn rate(conns: &[u32], seconds: f64, runs: u32) -> anyhow::Result<serde_json::Value> {
    let mut out = Vec::new();
    for &split in &[false, true] {
        for &c in conns {
            for _ in 0..runs {
                out.push(one_run(c, seconds, split, Duration::from_millis(50))?);
            }
        }
    }
    Ok(json!({"runs": out}))
}
