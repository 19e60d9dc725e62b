//! Privileged tests of the servers pipeline (issue 12) on the real kernel, against real servers
//! on loopback and their own counters: redis (`INFO stats`) under redis-benchmark, memcached
//! with 4 worker threads (`stats`) under memcslap, nginx (`stub_status`) under wrk; latency
//! percentiles of a server with injected delays (also with 1,000 keep-alive connections, and
//! with requests read by one thread and answered by another) against its client's count;
//! client-only processes never listed; the pinned request model and the always-on one agreeing;
//! network bytes of a process against what it sent and received.
//!
//! Every child is started by `spawn_guarded` (killed on drop, and by the kernel if the test
//! thread dies) and every load is bounded in time. Ports are fixed, below the ephemeral range
//! (32768 up), in 17391..17410, which no other test uses.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::collections::{HashMap, HashSet};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ebee_shared::servers::{HIST_BUCKETS, bucket_low};
use ebee_tests::{Proc, bin, privileged, spawn_guarded};
use ebee_top::model::servers::percentile;
use ebee_top::probes::servers::ServersRaw;
use ebee_top::probes::{ProbeConfig, Probes, RawInterval};

const TICK: Duration = Duration::from_millis(50);

const REDIS_PORT: u16 = 17391;
const MEMCACHED_PORT: u16 = 17392;
const NGINX_PORT: u16 = 17393;
const DELAY_PORT: u16 = 17394;
const DELAY_MANY_PORT: u16 = 17395;
const DELAY_SPLIT_PORT: u16 = 17396;
const CLIENT_REDIS_PORT: u16 = 17397;
const CLIENT_NGINX_PORT: u16 = 17398;
const PINNED_REDIS_PORT: u16 = 17399;
const BYTES_PORT: u16 = 17400;

// ---- Helpers ------------------------------------------------------------------------------

/// Start a program with its output discarded, killed when the guard drops.
fn start(program: &str, args: &[&str]) -> Proc {
    spawn_guarded(
        Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
    .unwrap_or_else(|e| panic!("starting {program}: {e} (cargo xtask test installs it)"))
}

/// Start `ebee-load` with its stdout piped (the delay server says `ready`, the client prints
/// its count).
fn start_load(args: &[&str]) -> Proc {
    spawn_guarded(
        Command::new(bin("ebee-load"))
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped()),
    )
    .unwrap_or_else(|e| panic!("starting ebee-load {args:?}: {e}"))
}

/// Wait until something accepts connections on 127.0.0.1:`port` (at most 5 s).
fn wait_port(port: u16) {
    let t = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "nothing listens on {port}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Load every pipeline (servers on), check the servers pipeline is there, and close the
/// interval that holds the load itself.
fn probes() -> Probes {
    let mut p = Probes::load(ProbeConfig::default(), TICK).expect("loading eBPF");
    assert!(
        p.servers_available(),
        "the socket tracepoints are on this kernel"
    );
    p.drain().unwrap();
    p
}

/// One tick later, the next closed interval and its servers part.
fn next(p: &mut Probes) -> (RawInterval, ServersRaw) {
    std::thread::sleep(TICK);
    let mut raw = p.drain().unwrap();
    let s = raw
        .servers
        .take()
        .expect("the servers part of the interval");
    (raw, s)
}

/// What the servers pipeline said about one process over several intervals.
#[derive(Debug, Default)]
struct Tally {
    requests: u64,
    max_ns: u64,
    /// Its latency histogram summed over the intervals that had one.
    hist: Vec<u64>,
    /// Requests in intervals that had a histogram.
    hist_requests: u64,
    rx_bytes: u64,
    tx_bytes: u64,
    max_conns: u64,
    intervals: u32,
}

impl Tally {
    fn add(&mut self, s: &ServersRaw, tgid: u32) {
        self.intervals += 1;
        if self.hist.is_empty() {
            self.hist = vec![0; HIST_BUCKETS];
        }
        for r in s.servers.iter().filter(|r| r.tgid == tgid) {
            self.requests += r.requests;
            self.max_ns = self.max_ns.max(r.max_ns);
            self.max_conns = self.max_conns.max(r.conns.unwrap_or(0));
            if let Some(h) = &r.hist {
                self.hist_requests += r.requests;
                for (a, &b) in self.hist.iter_mut().zip(h) {
                    *a += u64::from(b);
                }
            }
        }
        for n in s.net.iter().filter(|n| n.tgid == tgid) {
            self.rx_bytes += n.rx_bytes;
            self.tx_bytes += n.tx_bytes;
        }
    }

    /// The non-empty buckets as (low µs, count), for messages.
    fn buckets(&self) -> Vec<(f64, u64)> {
        self.hist
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(b, &c)| (bucket_low(b) as f64 / 1000.0, c))
            .collect()
    }

    fn hist_total(&self) -> u64 {
        self.hist.iter().sum()
    }

    /// Percentile `q` of the summed histogram, in ns.
    fn pct(&self, q: f64) -> u64 {
        let sparse: Vec<(u16, u32)> = self
            .hist
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(b, &c)| (b as u16, u32::try_from(c).unwrap()))
            .collect();
        percentile(&sparse, q).expect("a histogram with requests")
    }
}

/// |a - b| / b.
fn rel(a: u64, b: u64) -> f64 {
    (a as f64 - b as f64).abs() / b.max(1) as f64
}

/// Tgids listed as servers in an interval.
fn server_tgids(s: &ServersRaw) -> impl Iterator<Item = u32> + '_ {
    s.servers.iter().map(|r| r.tgid)
}

/// `INFO stats` total_commands_processed of the redis on `c`.
fn redis_commands(c: &mut BufReader<TcpStream>) -> u64 {
    c.get_mut()
        .write_all(b"*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n")
        .unwrap();
    let mut head = String::new();
    c.read_line(&mut head).unwrap();
    let len: usize = head
        .trim()
        .strip_prefix('$')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("INFO answered {head:?}"));
    let mut body = vec![0u8; len + 2];
    c.read_exact(&mut body).unwrap();
    let body = String::from_utf8_lossy(&body);
    body.lines()
        .find_map(|l| l.strip_prefix("total_commands_processed:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no total_commands_processed in {body}"))
}

fn redis_server(port: u16) -> Proc {
    let port_s = port.to_string();
    let redis = start(
        "redis-server",
        &[
            "--port",
            &port_s,
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
    );
    wait_port(port);
    redis
}

/// redis-benchmark without pipelining, `n` requests of GET and SET from `clients`
/// connections (enough to outlast any test that wants it running; killed on drop).
fn redis_benchmark(port: u16, clients: u32, n: u64) -> Proc {
    start(
        "redis-benchmark",
        &[
            "-p",
            &port.to_string(),
            "-c",
            &clients.to_string(),
            "-n",
            &n.to_string(),
            "-P",
            "1",
            "-t",
            "set,get",
            "-q",
        ],
    )
}

/// memcached's `stats` cmd_get + cmd_set.
fn memcached_get_set(port: u16) -> u64 {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"stats\r\n").unwrap();
    let mut r = BufReader::new(c);
    let mut total = 0;
    loop {
        let mut l = String::new();
        assert!(r.read_line(&mut l).unwrap() > 0, "stats ended early");
        if l.trim() == "END" {
            return total;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        if let ["STAT", "cmd_get" | "cmd_set", v] = f[..] {
            total += v.parse::<u64>().unwrap();
        }
    }
}

/// A one-process nginx (master_process off, so the requests are all its own) serving `www`
/// and `/status` (stub_status) on 127.0.0.1:`port`, everything in `dir`.
fn nginx(dir: &Path, port: u16, sendfile: bool) -> Proc {
    let d = dir.display();
    std::fs::create_dir_all(dir.join("www")).unwrap();
    let conf = format!(
        "master_process off;\ndaemon off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log;\nevents {{ worker_connections 1024; }}\n\
         http {{\n  access_log off;\n  client_body_temp_path {d}/body;\n  proxy_temp_path {d}/proxy;\n\
         sendfile {};\n  keepalive_requests 1000000;\n  keepalive_timeout 60s;\n\
         server {{\n    listen 127.0.0.1:{port};\n    root {d}/www;\n\
         location = /status {{ stub_status; }}\n  }}\n}}\n",
        if sendfile { "on" } else { "off" }
    );
    std::fs::write(dir.join("nginx.conf"), conf).unwrap();
    let p = start(
        "nginx",
        &[
            "-p",
            &d.to_string(),
            "-e",
            &format!("{d}/error.log"),
            "-c",
            &format!("{d}/nginx.conf"),
        ],
    );
    wait_port(port);
    p
}

/// stub_status `requests` (this scrape included: nginx counts a request when it starts).
fn nginx_requests(port: u16) -> u64 {
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    c.write_all(b"GET /status HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .unwrap();
    let mut s = String::new();
    c.read_to_string(&mut s).unwrap();
    // "... server accepts handled requests\n N N N \n..."
    let after = s
        .split("handled requests")
        .nth(1)
        .unwrap_or_else(|| panic!("stub_status said {s:?}"));
    after
        .split_whitespace()
        .nth(2)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("stub_status said {s:?}"))
}

/// Wait for a child to exit by itself (at most `limit`; then it is killed on drop).
fn wait_exit(p: &mut Proc, limit: Duration) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if p.0.try_wait().unwrap().is_some() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// The latencies a delay server measured itself (each request's read returning to its
/// answer's write returning, in ns), sorted: the reference for ebee-top's percentiles. The
/// nominal delays are not one: on a busy machine an answer can leave late, and the server
/// sees that as well as ebee-top does.
fn server_own_latencies(port: u16) -> Vec<u64> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"pct?").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let mut v: Vec<u64> = text.lines().map(|l| l.parse().unwrap()).collect();
    v.sort_unstable();
    v
}

/// Percentile `q` of sorted samples (nearest rank).
fn nearest_rank(sorted: &[u64], q: f64) -> u64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The count an `ebee-load delay-client` printed when it finished.
fn client_count(mut c: Proc) -> u64 {
    let mut out = String::new();
    c.0.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    assert!(c.0.wait().unwrap().success(), "the client failed");
    out.trim()
        .parse()
        .unwrap_or_else(|_| panic!("the client printed {out:?}"))
}

/// Start an `ebee-load delay-server` and wait until it listens. `spin`: its answers leave
/// within a few µs of their deadline (it spins the last 150 µs of each wait, at real-time
/// priority: the tests of percentiles want the true latencies at 1 ms and 10 ms, not a
/// sleep's overshoot or the wait for a CPU on a busy machine).
fn delay_server(port: u16, split: bool, spin: bool) -> Proc {
    let port_s = port.to_string();
    let mut args = vec!["delay-server", "--port", &port_s];
    if spin {
        args.extend(["--spin-us", "150", "--fifo"]);
    }
    if split {
        args.push("--split");
    }
    let mut s = start_load(&args);
    let mut line = String::new();
    BufReader::new(s.0.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    s
}

/// Run `ebee-load delay-client` against a delay server while draining; return what the
/// pipeline said about the server over the whole run and the client's own count.
fn run_delay_clients(
    p: &mut Probes,
    server: u32,
    port: u16,
    conns: u32,
    think_ms: u32,
) -> (Tally, u64) {
    let mut client = start_load(&[
        "delay-client",
        "--port",
        &port.to_string(),
        "--conns",
        &conns.to_string(),
        "--think-ms",
        &think_ms.to_string(),
        "--seconds",
        "3",
    ]);
    let mut t = Tally::default();
    let deadline = Instant::now() + Duration::from_secs(20);
    while client.0.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "the client did not finish");
        let (_, s) = next(p);
        t.add(&s, server);
    }
    // The last answers were sent before the client read them: two more intervals hold them.
    for _ in 0..2 {
        let (_, s) = next(p);
        t.add(&s, server);
    }
    (t, client_count(client))
}

// ---- Servers against their own counters ---------------------------------------------------

/// redis-benchmark (no pipelining: one command per request) against redis-server: the
/// requests counted over a window of steady load match the growth of redis's own
/// total_commands_processed over the same window. The window's ends are a drain followed at
/// once by an INFO, so what slips past either end is a few ms of traffic at each, and the two
/// ends' slips cancel at a steady rate.
#[test]
fn redis_requests_match_info_stats() {
    if !privileged("redis_requests_match_info_stats") {
        return;
    }
    let redis = redis_server(REDIS_PORT);
    let mut p = probes();
    let bench = redis_benchmark(REDIS_PORT, 8, 100_000_000);
    let mut info = BufReader::new(TcpStream::connect(("127.0.0.1", REDIS_PORT)).unwrap());
    // Let the benchmark reach steady load (its connections made, its CONFIG queries done).
    for _ in 0..10 {
        let (_, s) = next(&mut p);
        assert!(server_tgids(&s).all(|t| t != bench.pid()));
    }
    p.drain().unwrap();
    let before = redis_commands(&mut info);
    let mut t = Tally::default();
    for _ in 0..50 {
        let (_, s) = next(&mut p);
        assert!(
            server_tgids(&s).all(|t| t != bench.pid()),
            "redis-benchmark is a client"
        );
        t.add(&s, redis.pid());
    }
    let after = redis_commands(&mut info);
    drop(bench);
    let redis_count = after - before;
    eprintln!(
        "redis: ebee-top {} requests, INFO total_commands_processed +{redis_count} over {} \
         intervals ({} with a histogram)",
        t.requests, t.intervals, t.hist_requests
    );
    assert!(
        redis_count > 2_000,
        "only {redis_count} commands: no steady load"
    );
    assert!(
        rel(t.requests, redis_count) <= 0.02,
        "ebee-top counted {} requests, redis {redis_count} commands",
        t.requests
    );
    assert!(
        t.hist_total() > 0,
        "redis held a histogram slot in the window"
    );
}

/// memcached with 4 worker threads under memcslap (4 client threads; it loads keys with
/// SETs, then GETs them): the requests of the whole run match the growth of memcached's
/// cmd_get + cmd_set. The window is the whole run: counters read before memcslap starts and
/// after it ended and its last answers were drained.
#[test]
fn memcached_requests_match_its_stats() {
    if !privileged("memcached_requests_match_its_stats") {
        return;
    }
    let port = MEMCACHED_PORT.to_string();
    let mc = start(
        "memcached",
        &[
            "-p",
            &port,
            "-l",
            "127.0.0.1",
            "-U",
            "0",
            "-t",
            "4",
            "-u",
            "root",
            "-c",
            "1024",
        ],
    );
    wait_port(MEMCACHED_PORT);
    let mut p = probes();
    let before = memcached_get_set(MEMCACHED_PORT);
    p.drain().unwrap();
    let mut slap = start(
        "memcslap",
        &[
            &format!("--servers=127.0.0.1:{port}"),
            "--concurrency=4",
            "--execute-number=25000",
            "--test=get",
        ],
    );
    let mut t = Tally::default();
    let deadline = Instant::now() + Duration::from_secs(12);
    while slap.0.try_wait().unwrap().is_none() && Instant::now() < deadline {
        let (_, s) = next(&mut p);
        assert!(server_tgids(&s).all(|t| t != slap.pid()));
        t.add(&s, mc.pid());
    }
    drop(slap);
    for _ in 0..3 {
        let (_, s) = next(&mut p);
        t.add(&s, mc.pid());
    }
    let mc_count = memcached_get_set(MEMCACHED_PORT) - before;
    eprintln!(
        "memcached: ebee-top {} requests (max {} connections), stats cmd_get+cmd_set +{mc_count}",
        t.requests, t.max_conns
    );
    assert!(mc_count > 10_000, "only {mc_count} commands");
    assert!(
        rel(t.requests, mc_count) <= 0.02,
        "ebee-top counted {} requests, memcached {mc_count}",
        t.requests
    );
}

/// nginx (one process, static files, keep-alive) under wrk: the requests of the whole run
/// match the growth of stub_status `requests`, less our own scrapes (the first one is closed
/// into the interval drained before the run; the second comes after the last drain and is in
/// nginx's count, so it is taken off). With `sendfile on` the file bodies go out through
/// sendfile, and the socket tracepoints see them: nginx's transmitted bytes match what wrk
/// received.
#[test]
fn nginx_requests_match_stub_status() {
    if !privileged("nginx_requests_match_stub_status") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ng = nginx(dir.path(), NGINX_PORT, true);
    std::fs::write(dir.path().join("www/page.html"), vec![b'x'; 16 << 10]).unwrap();
    let mut p = probes();
    let before = nginx_requests(NGINX_PORT);
    p.drain().unwrap();
    let mut wrk = start(
        "wrk",
        &[
            "-t",
            "2",
            "-c",
            "16",
            "-d",
            "3s",
            &format!("http://127.0.0.1:{NGINX_PORT}/page.html"),
        ],
    );
    let (mut t, mut client) = (Tally::default(), Tally::default());
    let deadline = Instant::now() + Duration::from_secs(15);
    while wrk.0.try_wait().unwrap().is_none() && Instant::now() < deadline {
        let (_, s) = next(&mut p);
        assert!(server_tgids(&s).all(|t| t != wrk.pid()), "wrk is a client");
        t.add(&s, ng.pid());
        client.add(&s, wrk.pid());
    }
    let wrk_pid = wrk.pid();
    drop(wrk);
    for _ in 0..3 {
        let (_, s) = next(&mut p);
        t.add(&s, ng.pid());
        client.add(&s, wrk_pid);
    }
    let ng_count = nginx_requests(NGINX_PORT) - before - 1;
    eprintln!(
        "nginx: ebee-top {} requests, stub_status +{ng_count}; nginx tx {} B rx {} B, wrk rx {} \
         B tx {} B",
        t.requests, t.tx_bytes, t.rx_bytes, client.rx_bytes, client.tx_bytes
    );
    assert!(ng_count > 2_000, "only {ng_count} requests");
    assert!(
        rel(t.requests, ng_count) <= 0.02,
        "ebee-top counted {} requests, stub_status {ng_count}",
        t.requests
    );
    // Each response is 16 KiB of body plus headers: sendfile's bytes are charged to nginx.
    assert!(t.tx_bytes >= ng_count * (16 << 10), "{} B", t.tx_bytes);
    assert!(
        rel(t.tx_bytes, client.rx_bytes) <= 0.02,
        "nginx sent {} B, wrk received {} B",
        t.tx_bytes,
        client.rx_bytes
    );
}

// ---- Latency ------------------------------------------------------------------------------

/// Requests answered after 1 ms, every tenth after 10 ms, 4 keep-alive connections one request
/// after the other (few, so the server's spinning leaves the machine's 2 CPUs room): the
/// count matches the client's, and the histogram's p50 and p99 match the latencies the server
/// measured itself (the nominal 1 and 10 ms are not a reference: a busy machine makes some
/// answers late, and both see that).
#[test]
fn delayed_server_percentiles_and_count() {
    if !privileged("delayed_server_percentiles_and_count") {
        return;
    }
    let server = delay_server(DELAY_PORT, false, true);
    let mut p = probes();
    let (t, client) = run_delay_clients(&mut p, server.pid(), DELAY_PORT, 4, 0);
    let own = server_own_latencies(DELAY_PORT);
    let (p50, p99) = (t.pct(0.5), t.pct(0.99));
    let (own50, own99) = (nearest_rank(&own, 0.5), nearest_rank(&own, 0.99));
    eprintln!(
        "delay server: ebee-top {} requests ({} in histograms), client {client}; p50 {p50} ns, \
         p99 {p99} ns, max {} ns; the server's own p50 {own50} ns, p99 {own99} ns; \
         buckets (low µs, count) {:?}",
        t.requests,
        t.hist_total(),
        t.max_ns,
        t.buckets()
    );
    assert!(client > 2_000, "the client completed only {client}");
    assert!(
        rel(t.requests, client) <= 0.02,
        "ebee-top {} requests, the client {client}",
        t.requests
    );
    // All but the first intervals (before the server had a histogram slot) are in histograms.
    assert!(
        t.hist_total() * 10 >= t.requests * 7,
        "{} of {}",
        t.hist_total(),
        t.requests
    );
    assert_eq!(t.hist_total(), t.hist_requests);
    assert_as_the_server_measured(client, &own, (p50, p99));
}

/// The server answered every request the client completed, and ebee-top's p50 and p99
/// (interpolated in a histogram bucket) match the server's own (exact, `own` sorted): within
/// the histogram's resolution, a bucket being at most 1/8 of its lower bound, plus 2% for the
/// few µs between the syscalls ebee-top sees and the server's clock reads.
fn assert_as_the_server_measured(client: u64, own: &[u64], (p50, p99): (u64, u64)) {
    assert_eq!(
        own.len() as u64,
        client,
        "the server answered what the client completed"
    );
    for (what, ebee, q) in [("p50", p50, 0.5), ("p99", p99, 0.99)] {
        let theirs = nearest_rank(own, q);
        assert!(
            rel(ebee, theirs) <= 0.125 + 0.02,
            "{what}: ebee-top {ebee} ns, the server's own {theirs} ns"
        );
    }
}

/// 1,000 concurrent keep-alive connections (each a request every ~100 ms): every request is
/// counted, and all 1,000 connections are seen open at once.
#[test]
fn a_thousand_keepalive_connections_are_all_counted() {
    if !privileged("a_thousand_keepalive_connections_are_all_counted") {
        return;
    }
    let server = delay_server(DELAY_MANY_PORT, false, false);
    let mut p = probes();
    let (t, client) = run_delay_clients(&mut p, server.pid(), DELAY_MANY_PORT, 1000, 100);
    eprintln!(
        "1,000 connections: ebee-top {} requests, client {client}, at most {} connections",
        t.requests, t.max_conns
    );
    assert!(client > 5_000, "the client completed only {client}");
    assert!(
        rel(t.requests, client) <= 0.02,
        "ebee-top {} requests, the client {client}",
        t.requests
    );
    assert!(
        (1000..=1001).contains(&t.max_conns),
        "{} connections",
        t.max_conns
    );
}

/// Requests read by one thread and answered by another (the request state is the socket's,
/// whichever thread does the I/O): counted like the others, and the same percentiles.
#[test]
fn requests_read_by_one_thread_and_answered_by_another() {
    if !privileged("requests_read_by_one_thread_and_answered_by_another") {
        return;
    }
    let server = delay_server(DELAY_SPLIT_PORT, true, true);
    let mut p = probes();
    let (t, client) = run_delay_clients(&mut p, server.pid(), DELAY_SPLIT_PORT, 4, 0);
    let own = server_own_latencies(DELAY_SPLIT_PORT);
    let (p50, p99) = (t.pct(0.5), t.pct(0.99));
    let (own50, own99) = (nearest_rank(&own, 0.5), nearest_rank(&own, 0.99));
    eprintln!(
        "split server: ebee-top {} requests, client {client}; p50 {p50} ns, p99 {p99} ns; \
         the server's own p50 {own50} ns, p99 {own99} ns; buckets (low µs, count) {:?}",
        t.requests,
        t.buckets()
    );
    assert!(client > 2_000, "the client completed only {client}");
    assert!(
        rel(t.requests, client) <= 0.02,
        "ebee-top {} requests, the client {client}",
        t.requests
    );
    assert_as_the_server_measured(client, &own, (p50, p99));
}

// ---- What is not a server -----------------------------------------------------------------

/// redis-benchmark and a loop of curl processes do socket I/O (their bytes are charged) but
/// answer no requests: they are never listed as servers, while the servers they talk to are.
#[test]
fn client_only_processes_are_not_servers() {
    if !privileged("client_only_processes_are_not_servers") {
        return;
    }
    let redis = redis_server(CLIENT_REDIS_PORT);
    let dir = tempfile::tempdir().unwrap();
    let ng = nginx(dir.path(), CLIENT_NGINX_PORT, true);
    std::fs::write(dir.path().join("www/index.html"), b"hello\n").unwrap();
    let mut p = probes();
    let mut bench = redis_benchmark(CLIENT_REDIS_PORT, 4, 20_000);
    let bench_pid = bench.pid();
    let (mut servers, mut net) = (HashSet::new(), HashMap::<u32, u64>::new());
    let mut see = |s: &ServersRaw| {
        servers.extend(server_tgids(s));
        for n in &s.net {
            *net.entry(n.tgid).or_default() += n.rx_bytes + n.tx_bytes;
        }
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while bench.0.try_wait().unwrap().is_none() && Instant::now() < deadline {
        see(&next(&mut p).1);
    }
    drop(bench);
    // curl, one process per request, closed into intervals as they go.
    let mut curls = Vec::new();
    for _ in 0..40 {
        let mut c = start(
            "curl",
            &[
                "-s",
                "-o",
                "/dev/null",
                &format!("http://127.0.0.1:{CLIENT_NGINX_PORT}/index.html"),
            ],
        );
        curls.push(c.pid());
        assert!(wait_exit(&mut c, Duration::from_secs(5)), "curl hung");
        see(&next(&mut p).1);
    }
    for _ in 0..2 {
        see(&next(&mut p).1);
    }
    assert!(servers.contains(&redis.pid()), "redis is a server");
    assert!(servers.contains(&ng.pid()), "nginx is a server");
    assert!(net.get(&bench_pid).copied().unwrap_or(0) > 0, "bench bytes");
    assert!(
        !servers.contains(&bench_pid),
        "redis-benchmark listed as a server"
    );
    let curl_bytes: u64 = curls.iter().filter_map(|c| net.get(c)).sum();
    assert!(curl_bytes > 0, "curl's socket bytes are charged");
    let listed: Vec<u32> = curls
        .iter()
        .copied()
        .filter(|c| servers.contains(c))
        .collect();
    assert!(
        listed.is_empty(),
        "curl processes listed as servers: {listed:?}"
    );
}

// ---- Pinned and always-on -----------------------------------------------------------------

/// A pinned redis-server (the syscall hooks' request model) and the always-on socket
/// pipeline, over the same intervals: the same requests within 2%.
#[test]
fn pinned_and_always_on_agree() {
    if !privileged("pinned_and_always_on_agree") {
        return;
    }
    let redis = redis_server(PINNED_REDIS_PORT);
    let mut p = probes();
    p.set_pins(&[redis.pid()]).unwrap();
    let bench = redis_benchmark(PINNED_REDIS_PORT, 4, 100_000_000);
    for _ in 0..8 {
        next(&mut p);
    }
    let (mut pinned, mut t) = (0u64, Tally::default());
    for _ in 0..40 {
        let (raw, s) = next(&mut p);
        t.add(&s, redis.pid());
        pinned += raw
            .qos
            .iter()
            .filter(|q| q.pid == redis.pid())
            .map(|q| q.pin.requests)
            .sum::<u64>();
    }
    drop(bench);
    eprintln!(
        "pinned redis: pinned model {pinned} requests, always-on {}",
        t.requests
    );
    assert!(pinned > 2_000, "only {pinned} pinned requests");
    assert!(
        rel(t.requests, pinned) <= 0.02,
        "always-on {} requests, pinned {pinned}",
        t.requests
    );
}

// ---- Network bytes ------------------------------------------------------------------------

/// A process sends 8 MiB and receives 3 MiB over TCP, then over a Unix stream socket: its
/// `net` row says so within 2%, and so does ours (the other end).
#[test]
fn network_bytes_match_what_was_sent_and_received() {
    if !privileged("network_bytes_match_what_was_sent_and_received") {
        return;
    }
    const SEND: u64 = 8 << 20;
    const RECV: u64 = 3 << 20;
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("bytes.sock");
    let tcp = std::net::TcpListener::bind(("127.0.0.1", BYTES_PORT)).unwrap();
    let unix = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let mut p = probes();
    for to in [
        format!("tcp:127.0.0.1:{BYTES_PORT}"),
        format!("unix:{}", sock.display()),
    ] {
        /// Our end: read what it sends, answer `RECV` bytes.
        fn serve(mut c: impl std::io::Read + std::io::Write) -> u64 {
            let mut buf = vec![0u8; 64 << 10];
            let mut got = 0u64;
            while got < SEND {
                let n = c.read(&mut buf).unwrap();
                assert!(n > 0, "closed after {got} bytes");
                got += n as u64;
            }
            c.write_all(&vec![7u8; RECV as usize]).unwrap();
            got
        }
        let mut child = start_load(&[
            "bytes",
            "--to",
            &to,
            "--send",
            &SEND.to_string(),
            "--recv",
            &RECV.to_string(),
        ]);
        let pid = child.pid();
        let got = if to.starts_with("tcp:") {
            serve(tcp.accept().unwrap().0)
        } else {
            serve(unix.accept().unwrap().0)
        };
        assert_eq!(got, SEND);
        assert!(wait_exit(&mut child, Duration::from_secs(10)));
        assert!(child.0.wait().unwrap().success());
        let (mut t, mut me) = (Tally::default(), Tally::default());
        for _ in 0..3 {
            let (_, s) = next(&mut p);
            t.add(&s, pid);
            me.add(&s, std::process::id());
        }
        eprintln!(
            "{to}: ebee-load tx {} rx {}, this test rx {} tx {}",
            t.tx_bytes, t.rx_bytes, me.rx_bytes, me.tx_bytes
        );
        assert!(rel(t.tx_bytes, SEND) <= 0.02, "{to}: tx {}", t.tx_bytes);
        assert!(rel(t.rx_bytes, RECV) <= 0.02, "{to}: rx {}", t.rx_bytes);
        assert!(
            rel(me.rx_bytes, SEND) <= 0.02,
            "{to}: our rx {}",
            me.rx_bytes
        );
        assert!(
            rel(me.tx_bytes, RECV) <= 0.02,
            "{to}: our tx {}",
            me.tx_bytes
        );
    }
}
