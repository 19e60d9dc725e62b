//! Privileged tests of the servers pipeline on the real kernel.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ebee_tests::privileged;
use ebee_top::probes::{ProbeConfig, Probes};

const TICK: Duration = Duration::from_millis(50);

#[test]
fn smoke_redis_requests_are_counted() {
    if !privileged("smoke_redis_requests_are_counted") {
        return;
    }
    let mut redis = Command::new("redis-server")
        .args(["--port", "7391", "--save", "", "--appendonly", "no"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut p = Probes::load(ProbeConfig::default(), TICK).unwrap();
    assert!(p.servers_available());
    p.drain().unwrap();
    let mut bench = Command::new("redis-benchmark")
        .args(["-p", "7391", "-n", "20000", "-c", "4", "-t", "get", "-q"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t = Instant::now();
    let (mut req, mut hist) = (0u64, 0u64);
    while t.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(TICK);
        let raw = p.drain().unwrap();
        let s = raw.servers.unwrap();
        for r in &s.servers {
            eprintln!(
                "server {} req {} max {} conns {:?} hist {:?}",
                r.tgid,
                r.requests,
                r.max_ns,
                r.conns,
                r.hist
                    .as_ref()
                    .map(|h| h.iter().map(|&c| c as u64).sum::<u64>())
            );
            if r.tgid == redis.id() {
                req += r.requests;
                hist += r
                    .hist
                    .as_ref()
                    .map_or(0, |h| h.iter().map(|&c| c as u64).sum());
            }
        }
        eprintln!(
            "net {:?} upd {}",
            &s.net[..s.net.len().min(3)],
            s.net_updates
        );
    }
    bench.wait().unwrap();
    redis.kill().unwrap();
    redis.wait().unwrap();
    eprintln!("redis requests {req} in hist {hist}");
    assert!(req > 19_000, "{req}");
}
