//! The metrics endpoint end to end, with the real engines: `promtool check metrics` on a real
//! scrape, a real Prometheus scraping `ebee-top serve` every second and its `rate()` of a
//! child's CPU against /proc/PID/schedstat, garbage and abusive requests, silent connections
//! by the hundred, `--listen` on a port in use, and a real Prometheus scraping over TLS with a
//! client certificate and basic auth from `--web-config` (certificates made with openssl, the
//! hash with htpasswd), and `--listen unix:PATH`: curl over the socket (as root, as a member of
//! its group and as a stranger), its mode and group, a stale socket replaced, a live one, a
//! file, a folder or a symlink refused, the file removed on exit, TLS and auth over it.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ebee_tests::{
    Proc, Serve, bin, free_port, http_get, load, privileged, schedstat_ns, spawn_guarded,
};

fn scrape(addr: &str, accept: Option<&str>) -> (u16, String, String) {
    let h: Vec<String> = accept.map(|a| format!("Accept: {a}")).into_iter().collect();
    let h: Vec<&str> = h.iter().map(String::as_str).collect();
    http_get(addr, "/metrics", &h).expect("scraping ebee-top")
}

#[test]
fn a_scrape_passes_promtool_and_shows_the_busy_child() {
    if !privileged("a_scrape_passes_promtool_and_shows_the_busy_child") {
        return;
    }
    let busy = load(&["burn", "--duty", "0.5", "--period-ms", "10"]);
    let serve = Serve::start(&["-d", "0.2"]);
    std::thread::sleep(Duration::from_millis(1500));
    let (status, head, body) = scrape(&serve.addr, None);
    assert_eq!(status, 200, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{head}"
    );
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; cargo xtask setup installs it)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let o = promtool.wait_with_output().unwrap();
    assert!(
        o.status.success() && o.stdout.is_empty() && o.stderr.is_empty(),
        "promtool check metrics: {}{}\n{body}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let row = format!(
        "ebee_process_cpu_seconds_total{{pid=\"{}\",comm=\"ebee-load\"}} ",
        busy.pid()
    );
    let cpu: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix(&row))
        .unwrap_or_else(|| panic!("no {row} in\n{body}"))
        .parse()
        .unwrap();
    assert!(cpu > 0.2, "half a CPU for over a second gave {cpu} s");
    for name in [
        "ebee_intervals_total",
        "ebee_self_cpu_seconds_total",
        "ebee_self_bpf_run_seconds_total",
        "ebee_losses_total{pipeline=\"cpu\",kind=\"sketch_evictions\"}",
        "ebee_process_resident_memory_bytes{",
        "ebee_metrics_intervals_dropped_total 0",
    ] {
        assert!(body.contains(name), "no {name} in the scrape");
    }
    assert!(!body.contains("cmdline"), "no command lines, ever");
    // OpenMetrics when asked for, as Prometheus asks.
    let (status, head, om) = scrape(
        &serve.addr,
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert_eq!(status, 200);
    assert!(
        head.to_ascii_lowercase()
            .contains("content-type: application/openmetrics-text; version=1.0.0"),
        "{head}"
    );
    assert!(om.ends_with("# EOF\n"));
    assert!(om.contains("# UNIT ebee_process_cpu_seconds seconds"));
    assert_eq!(serve.stop(), Some(0), "SIGTERM ends serve cleanly");
}

/// Percent-encode a PromQL query for a URL.
fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn unix_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Ask Prometheus' HTTP API; the `data.result` array.
fn prom_query(addr: &str, q: &str, at: f64) -> Vec<serde_json::Value> {
    let path = format!("/api/v1/query?query={}&time={at:.3}", encode(q));
    let (status, _, body) = http_get(addr, &path, &[]).expect("querying Prometheus");
    assert_eq!(status, 200, "{q}: {body}");
    let v: serde_json::Value = serde_json::from_str(&body).expect("Prometheus answers JSON");
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

/// Linear interpolation of a (unix seconds, ns) log at `t`.
fn at(log: &[(f64, u64)], t: f64) -> f64 {
    let i = log
        .partition_point(|(ts, _)| *ts < t)
        .clamp(1, log.len() - 1);
    let ((t0, v0), (t1, v1)) = (log[i - 1], log[i]);
    v0 as f64 + (v1 as f64 - v0 as f64) * (t - t0) / (t1 - t0)
}

/// redis's own count of the commands it processed (`INFO stats`), over a connection of ours
/// (its INFO commands are counted by redis and by ebee-top alike).
fn redis_commands(c: &mut TcpStream) -> u64 {
    c.write_all(b"INFO stats\r\n").unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    // A bulk reply: `$LEN\r\n` then LEN bytes and `\r\n`.
    loop {
        let n = c.read(&mut chunk).unwrap();
        assert!(n > 0, "redis closed the connection");
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some((head, rest)) = text.split_once("\r\n") {
            let len: usize = head.trim_start_matches('$').parse().unwrap();
            if rest.len() >= len + 2 {
                return rest
                    .lines()
                    .find_map(|l| l.strip_prefix("total_commands_processed:"))
                    .unwrap()
                    .trim()
                    .parse()
                    .unwrap();
            }
        }
    }
}

#[test]
fn prometheus_rate_of_a_child_matches_schedstat() {
    if !privileged("prometheus_rate_of_a_child_matches_schedstat") {
        return;
    }
    let children = [
        load(&["burn", "--duty", "0.3", "--period-ms", "20"]),
        load(&["burn", "--duty", "0.6", "--period-ms", "20"]),
    ];
    // A real server under its own benchmark client, found by the servers pipeline.
    let redis_dir = tempfile::tempdir().unwrap();
    let redis = spawn_guarded(
        Command::new("redis-server")
            .args([
                "--port",
                "17611",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
            ])
            .arg(redis_dir.path())
            .stdout(Stdio::null()),
    )
    .expect("redis-server (cargo xtask setup installs it)");
    let mut info = (0..50)
        .find_map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            TcpStream::connect("127.0.0.1:17611").ok()
        })
        .expect("redis-server answers on 17611");
    let _client = spawn_guarded(
        Command::new("redis-benchmark")
            .args([
                "-p",
                "17611",
                "-c",
                "4",
                "-n",
                "100000000",
                "-t",
                "get",
                "-q",
            ])
            .stdout(Stdio::null()),
    )
    .expect("redis-benchmark");
    let serve = Serve::start(&["-d", "0.1"]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - \
             job_name: ebee-top\n    scrape_interval: 1s\n    scrape_timeout: 900ms\n    \
             static_configs:\n      - targets: ['{}']\n",
            serve.addr
        ),
    )
    .unwrap();
    let prom_addr = format!("127.0.0.1:{}", free_port());
    let _prometheus = Proc(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={prom_addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian package prometheus; cargo xtask setup installs it)"),
    );
    // Wait for its first scrape of ebee-top (it starts, then hands targets to the scrapers
    // after up to 5 s), then log the children's ground truth every 50 ms while it gathers 12 s
    // of scrapes.
    let ready = Instant::now();
    loop {
        let up = http_get(&prom_addr, "/-/ready", &[]).is_ok_and(|(s, _, _)| s == 200)
            && !prom_query(&prom_addr, "ebee_intervals_total", unix_s()).is_empty();
        if up {
            break;
        }
        assert!(
            ready.elapsed() < Duration::from_secs(25),
            "Prometheus has not scraped ebee-top in 25 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let start = Instant::now();
    let mut logs: Vec<Vec<(f64, u64)>> = vec![Vec::new(); children.len()];
    let mut redis_log: Vec<(f64, u64)> = Vec::new();
    while start.elapsed() < Duration::from_secs(12) {
        for (log, c) in logs.iter_mut().zip(&children) {
            log.push((unix_s(), schedstat_ns(c.pid()).unwrap()));
        }
        let t = unix_s();
        let n = redis_commands(&mut info);
        redis_log.push(((t + unix_s()) / 2.0, n));
        std::thread::sleep(Duration::from_millis(50));
    }
    for (log, c) in logs.iter().zip(&children) {
        let sel = format!("ebee_process_cpu_seconds_total{{pid=\"{}\"}}", c.pid());
        // Ask just after the last scrape, so the 10 s window holds ten scrapes and rate()
        // extrapolates their slope over the whole window (a window starting more than 1.1
        // scrape intervals before its first sample is extrapolated only half an interval,
        // which would read a few percent low whatever the counter).
        let recent = prom_query(&prom_addr, &format!("{sel}[5s]"), unix_s());
        let last = recent[0]["values"].as_array().unwrap();
        let t = last[last.len() - 1][0].as_f64().unwrap() + 0.1;
        let rate = prom_query(&prom_addr, &format!("rate({sel}[10s])"), t);
        assert_eq!(rate.len(), 1, "rate({sel}[10s]): {rate:?}");
        let ours: f64 = rate[0]["value"][1].as_str().unwrap().parse().unwrap();
        // The samples rate() used: schedstat's slope between the first and the last of them
        // is the same quantity (rate() extrapolates that slope to the window's edges).
        let raw = prom_query(&prom_addr, &format!("{sel}[10s]"), t);
        let values = raw[0]["values"].as_array().unwrap();
        assert!(
            values.len() >= 8,
            "a 1 s scrape gives ~10 samples in 10 s: {values:?}"
        );
        let ts = |i: usize| values[i][0].as_f64().unwrap();
        let (t0, t1) = (ts(0), ts(values.len() - 1));
        let truth = (at(log, t1) - at(log, t0)) / (t1 - t0) / 1e9;
        let val = |i: usize| values[i][1].as_str().unwrap().parse::<f64>().unwrap();
        eprintln!(
            "samples {}: slope {:.4}, first {t0:.3} last {t1:.3} t {t:.3}",
            values.len(),
            (val(values.len() - 1) - val(0)) / (t1 - t0)
        );
        let err = (ours - truth).abs() / truth;
        eprintln!(
            "pid {}: Prometheus rate {ours:.4} CPU, schedstat {truth:.4} CPU, {:.2}% apart",
            c.pid(),
            err * 100.0
        );
        assert!(
            err < 0.03,
            "pid {}: rate() {ours:.4} vs schedstat {truth:.4} ({:.2}% apart)",
            c.pid(),
            err * 100.0
        );
    }
    // The server's request rate, as Prometheus computes it, against redis's own counter over
    // the same samples; and its p99 from the exported histogram is a latency redis-benchmark
    // on loopback can have.
    let sel = format!("ebee_server_requests_total{{pid=\"{}\"}}", redis.pid());
    let recent = prom_query(&prom_addr, &format!("{sel}[5s]"), unix_s());
    assert!(!recent.is_empty(), "redis is exported as a server: {sel}");
    let last = recent[0]["values"].as_array().unwrap();
    let t = last[last.len() - 1][0].as_f64().unwrap() + 0.1;
    let raw = prom_query(&prom_addr, &format!("{sel}[10s]"), t);
    let values = raw[0]["values"].as_array().unwrap();
    let ts = |i: usize| values[i][0].as_f64().unwrap();
    let val = |i: usize| values[i][1].as_str().unwrap().parse::<f64>().unwrap();
    let (t0, t1) = (ts(0), ts(values.len() - 1));
    let ours = (val(values.len() - 1) - val(0)) / (t1 - t0);
    let truth = (at(&redis_log, t1) - at(&redis_log, t0)) / (t1 - t0);
    let err = (ours - truth).abs() / truth;
    eprintln!(
        "redis: ebee_server_requests_total {ours:.0}/s, INFO {truth:.0}/s, {:.2}% apart",
        err * 100.0
    );
    assert!(
        err < 0.02,
        "requests/s: ours {ours:.0}, redis {truth:.0} ({:.2}% apart)",
        err * 100.0
    );
    let q = format!(
        "histogram_quantile(0.99, rate(ebee_server_request_duration_seconds_bucket{{pid=\"{}\"}}[10s]))",
        redis.pid()
    );
    let p99 = prom_query(&prom_addr, &q, t);
    let p99: f64 = p99[0]["value"][1].as_str().unwrap().parse().unwrap();
    assert!((1e-6..0.1).contains(&p99), "redis p99 on loopback: {p99} s");
    // Prometheus asked for OpenMetrics (it prefers it) and parsed every scrape.
    let (_, _, targets) = http_get(&prom_addr, "/api/v1/targets", &[]).unwrap();
    let v: serde_json::Value = serde_json::from_str(&targets).unwrap();
    let target = &v["data"]["activeTargets"][0];
    assert_eq!(target["health"], "up", "{target}");
    assert_eq!(target["lastError"], "", "{target}");
    assert_eq!(serve.stop(), Some(0));
}

/// Send raw bytes, read what comes back until the server closes (or 10 s).
fn raw_exchange(addr: &str, bytes: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let _ = s.write_all(bytes);
    let mut out = Vec::new();
    let _ = s.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

#[test]
fn garbage_and_abuse_get_clean_http_errors() {
    if !privileged("garbage_and_abuse_get_clean_http_errors") {
        return;
    }
    let serve = Serve::start(&["-d", "0.2"]);
    let a = serve.addr.as_str();
    for (what, req, want) in [
        (
            "binary garbage",
            b"\x00\x01\x02\xff\xfe garbage\r\n\r\n".to_vec(),
            "HTTP/1.1 400",
        ),
        (
            "no HTTP version",
            b"GET /metrics\r\n\r\n".to_vec(),
            "HTTP/1.1 400",
        ),
        (
            "oversized header",
            format!(
                "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
                "a".repeat(64 * 1024)
            )
            .into_bytes(),
            "HTTP/1.1 431",
        ),
        (
            "unknown path",
            b"GET /secret HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
            "HTTP/1.1 404",
        ),
        (
            "POST",
            b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc"
                .to_vec(),
            "HTTP/1.1 405",
        ),
        (
            "DELETE",
            b"DELETE /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
            "HTTP/1.1 405",
        ),
    ] {
        let t = Instant::now();
        let got = raw_exchange(a, &req);
        assert!(got.starts_with(want), "{what}: got {got:?}");
        assert!(
            t.elapsed() < Duration::from_secs(3),
            "{what}: answered and closed in {:?}",
            t.elapsed()
        );
    }
    // A client that starts a request and never finishes it is cut off (HEAD_TIMEOUT, 2 s).
    let t = Instant::now();
    let got = raw_exchange(a, b"GET /metrics HTTP/1.1\r\nHost: x\r\n");
    assert!(
        t.elapsed() < Duration::from_secs(8) && !got.contains("200 OK"),
        "a half-sent request held the connection {:?}: {got:?}",
        t.elapsed()
    );
    // Idle connections never crowd out a request (silent_connections_never_crowd_out_a_scrape
    // below is the siege): with 200 held open, the next one is still served.
    let idle: Vec<TcpStream> = (0..200).map(|_| TcpStream::connect(a).unwrap()).collect();
    let got = raw_exchange(
        a,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    );
    assert!(got.starts_with("HTTP/1.1 200"), "201st connection: {got:?}");
    drop(idle);
    // And it still serves.
    let (status, _, body) = scrape(a, None);
    assert_eq!(status, 200);
    assert!(body.contains("ebee_intervals_total"));
    assert_eq!(serve.stop(), Some(0));
}

/// Keep `n` connections open to `addr` until `stop`, each sending `first` once connected, and
/// open a new one for each the server closes; returns how many were closed by the server.
fn besiege(
    addr: String,
    n: usize,
    first: &'static [u8],
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let mut held: Vec<TcpStream> = Vec::new();
        let mut closed = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            held.retain_mut(|c| {
                let mut b = [0u8; 256];
                let open =
                    matches!(c.read(&mut b), Err(e) if e.kind() == std::io::ErrorKind::WouldBlock);
                closed += usize::from(!open);
                open
            });
            while held.len() < n {
                let Ok(mut c) = TcpStream::connect(&addr) else {
                    break;
                };
                let _ = c.write_all(first);
                c.set_nonblocking(true).unwrap();
                held.push(c);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        closed
    })
}

#[test]
fn silent_connections_never_crowd_out_a_scrape() {
    if !privileged("silent_connections_never_crowd_out_a_scrape") {
        return;
    }
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let serve = Serve::start(&["-d", "0.2"]);
    let stop = Arc::new(AtomicBool::new(false));
    // 200 connections that never send a byte and 200 that send a request line and a header
    // but never the blank line ending the head, each replaced as soon as the server closes it.
    let idle = besiege(serve.addr.clone(), 200, b"", stop.clone());
    let half = besiege(
        serve.addr.clone(),
        200,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n",
        stop.clone(),
    );
    std::thread::sleep(Duration::from_millis(500));
    let mut times = Vec::new();
    let mut bad = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        let t = Instant::now();
        match http_get(&serve.addr, "/metrics", &[]) {
            Ok((200, _, body)) if body.contains("ebee_intervals_total") => {}
            other => bad.push(format!("{other:?}")),
        }
        times.push(t.elapsed().as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(100).saturating_sub(t.elapsed()));
    }
    stop.store(true, Ordering::Relaxed);
    let closed = idle.join().unwrap() + half.join().unwrap();
    times.sort_by(f64::total_cmp);
    // Latency is reported, not asserted (tests never assert wall-clock times).
    eprintln!(
        "{} scrapes under 400 silent connections ({closed} of theirs closed by the server): \
         median {:.2} ms, max {:.2} ms",
        times.len(),
        times[times.len() / 2],
        times[times.len() - 1]
    );
    assert!(bad.is_empty(), "scrapes not answered 200: {bad:?}");
    assert!(
        times.len() >= 40,
        "a scrape every 100 ms for 5 s: {}",
        times.len()
    );
    // More silent connections than the table holds: the server closed some to make room, and
    // counted them; none was refused.
    let (_, _, body) = scrape(&serve.addr, None);
    let value = |reason: &str| -> f64 {
        let row = format!("ebee_metrics_connections_closed_total{{reason=\"{reason}\"}} ");
        body.lines()
            .find_map(|l| l.strip_prefix(&row))
            .unwrap_or_else(|| panic!("no {row} in the scrape"))
            .parse()
            .unwrap()
    };
    assert!(value("evicted") >= 200.0, "evicted {}", value("evicted"));
    assert!(
        closed >= 200,
        "the server closed {closed} silent connections"
    );
    assert_eq!(value("refused"), 0.0);
    assert_eq!(serve.stop(), Some(0));
}

#[test]
fn a_port_in_use_exits_9_before_anything_loads() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    for args in [
        vec!["-b", "-n", "1", "--listen", &addr],
        vec!["serve", "--listen", &addr],
    ] {
        let mut cmd;
        if root {
            // Without any capability: were anything loaded first, this would be exit code 3.
            cmd = Command::new("setpriv");
            cmd.args(["--bounding-set=-all", "--inh-caps=-all", "--"])
                .arg(bin("ebee-top"));
        } else {
            cmd = Command::new(bin("ebee-top"));
        }
        let o = cmd.args(&args).output().expect("running ebee-top");
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(9), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains(&addr) && err.contains("already in use"),
            "{err}"
        );
        assert!(o.stdout.is_empty());
    }
    drop(taken);
}

#[test]
fn a_pinned_servers_requests_are_exported() {
    if !privileged("a_pinned_servers_requests_are_exported") {
        return;
    }
    // This test process is the server: 4-byte requests, each answered after 1 ms.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in listener.incoming() {
            let Ok(mut c) = c else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4];
                while c.read_exact(&mut buf).is_ok() {
                    std::thread::sleep(Duration::from_millis(1));
                    if c.write_all(&buf).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let me = std::process::id().to_string();
    let serve = Serve::start(&["-d", "0.1", "-p", &me]);
    std::thread::sleep(Duration::from_millis(300));
    const N: usize = 300;
    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut buf = [0u8; 4];
    for _ in 0..N {
        c.write_all(b"ping").unwrap();
        c.read_exact(&mut buf).unwrap();
    }
    drop(c);
    std::thread::sleep(Duration::from_millis(500));
    let (_, _, body) = scrape(&serve.addr, None);
    let value = |name: &str| -> f64 {
        let prefix = format!("{name}{{pid=\"{me}\",comm=\"");
        body.lines()
            .find(|l| l.starts_with(&prefix))
            .and_then(|l| l.rsplit(' ').next())
            .unwrap_or_else(|| panic!("no {prefix} in\n{body}"))
            .parse()
            .unwrap()
    };
    let requests = value("ebee_pinned_requests_total");
    assert_eq!(requests, N as f64, "requests served: {N}");
    assert_eq!(
        value("ebee_pinned_request_duration_seconds_count"),
        requests
    );
    let mean = value("ebee_pinned_request_duration_seconds_sum") / requests;
    assert!(
        (0.001..0.05).contains(&mean),
        "1 ms of work per request, mean {mean} s"
    );
    assert!(value("ebee_pinned_syscalls_total") >= 2.0 * N as f64);
    // The always-on servers pipeline found the same server by itself and counted the same
    // requests (a listening port, keyed by socket instead of descriptor).
    assert_eq!(value("ebee_server_requests_total"), requests);
    let in_hist = value("ebee_server_request_duration_seconds_count");
    assert!(
        in_hist <= requests && in_hist > 0.0,
        "a histogram once the server holds a slot: {in_hist}"
    );
    let mean = value("ebee_server_request_duration_seconds_sum") / in_hist;
    assert!((0.001..0.05).contains(&mean), "mean {mean} s");
    assert_eq!(serve.stop(), Some(0));
}

#[test]
fn batch_mode_serves_metrics_beside_its_output() {
    if !privileged("batch_mode_serves_metrics_beside_its_output") {
        return;
    }
    use std::io::BufRead as _;
    let addr = format!("127.0.0.1:{}", free_port());
    let mut c = Command::new(bin("ebee-top"))
        .args(["-b", "--format", "json", "-d", "0.1", "--listen", &addr])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
    let mut lines = 0;
    while lines < 5 {
        let mut l = String::new();
        assert!(
            out.read_line(&mut l).unwrap() > 0,
            "batch output ended early"
        );
        serde_json::from_str::<serde_json::Value>(&l).expect("stdout stays JSON Lines");
        lines += 1;
    }
    let (status, _, body) = scrape(&addr, None);
    assert_eq!(status, 200);
    let n: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("ebee_intervals_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(n >= 4.0, "{n} intervals after 5 lines printed");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let o = c.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        std::net::TcpStream::connect(&addr).is_err(),
        "nothing listens after exit"
    );
}

/// Run a command; its stdout (it must succeed).
fn run(cmd: &mut Command) -> String {
    let o = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A CA (`NAME-ca.pem`, `NAME-ca.key`) in `dir`.
fn make_ca(dir: &std::path::Path, name: &str) {
    run(Command::new("openssl")
        .current_dir(dir)
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .args(["ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"])
        .args(["-keyout", &format!("{name}-ca.key")])
        .args(["-out", &format!("{name}-ca.pem")])
        .args(["-subj", &format!("/CN={name} test CA")]));
}

/// A certificate `OUT.pem` with key `OUT.key`, signed by CA `ca`, for `usage` (serverAuth with
/// the SAN 127.0.0.1, or clientAuth).
fn make_cert(dir: &std::path::Path, ca: &str, out: &str, usage: &str) {
    run(Command::new("openssl")
        .current_dir(dir)
        .args([
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-keyout", &format!("{out}.key")])
        .args([
            "-out",
            &format!("{out}.csr"),
            "-subj",
            &format!("/CN={out}"),
        ]));
    let ext = format!("{out}.ext");
    let san = if usage == "serverAuth" {
        "subjectAltName=IP:127.0.0.1\n"
    } else {
        ""
    };
    std::fs::write(
        dir.join(&ext),
        format!("{san}extendedKeyUsage={usage}\nbasicConstraints=CA:FALSE\n"),
    )
    .unwrap();
    run(Command::new("openssl")
        .current_dir(dir)
        .args(["x509", "-req", "-days", "2"])
        .args(["-in", &format!("{out}.csr")])
        .args([
            "-CA",
            &format!("{ca}-ca.pem"),
            "-CAkey",
            &format!("{ca}-ca.key"),
        ])
        .args(["-out", &format!("{out}.pem"), "-extfile", &ext]));
}

/// The serial number of the certificate served at `addr`, as openssl prints it.
fn served_serial(addr: &str, dir: &std::path::Path) -> String {
    let mut s = Command::new("openssl")
        .args(["s_client", "-connect", addr, "-cert"])
        .arg(dir.join("client.pem"))
        .arg("-key")
        .arg(dir.join("client.key"))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = String::new();
    s.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let _ = s.wait();
    let mut x = Command::new("openssl")
        .args(["x509", "-noout", "-serial"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    x.stdin.take().unwrap().write_all(out.as_bytes()).unwrap();
    let o = x.wait_with_output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

fn serial_of(pem: &std::path::Path) -> String {
    run(Command::new("openssl")
        .args(["x509", "-noout", "-serial", "-in"])
        .arg(pem))
    .trim()
    .to_owned()
}

/// curl over TLS with the test's CA and client certificate: (status, headers and body).
fn curl(url: &str, dir: &std::path::Path, user: Option<&str>) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args(["-s", "-i", "--max-time", "10", "--cacert"])
        .arg(dir.join("srv-ca.pem"))
        .arg("--cert")
        .arg(dir.join("client.pem"))
        .arg("--key")
        .arg(dir.join("client.key"));
    if let Some(u) = user {
        c.args(["-u", u]);
    }
    let out = run(c.arg(url));
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, out)
}

#[test]
fn prometheus_scrapes_over_tls_with_a_client_certificate_and_basic_auth() {
    if !privileged("prometheus_scrapes_over_tls_with_a_client_certificate_and_basic_auth") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    make_ca(d, "srv");
    make_ca(d, "cli");
    make_ca(d, "other");
    make_cert(d, "srv", "server", "serverAuth");
    make_cert(d, "cli", "client", "clientAuth");
    make_cert(d, "other", "stranger", "clientAuth");
    let line = run(Command::new("htpasswd").args(["-nbB", "prometheus", "s3cret"]));
    let hash = line
        .trim()
        .strip_prefix("prometheus:")
        .expect("htpasswd -nbB: user:hash");
    assert!(hash.starts_with("$2y$"), "{hash}");
    // The example in deploy/, with this test's files and hash (and a header to look for).
    let example = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/web-config.yml"),
    )
    .unwrap();
    let path = |f: &str| d.join(f).display().to_string();
    let config = example
        .replace(
            "cert_file: tls.crt",
            &format!("cert_file: {}", path("server.pem")),
        )
        .replace(
            "key_file: tls.key",
            &format!("key_file: {}", path("server.key")),
        )
        .replace(
            "client_ca_file: client-ca.crt",
            &format!("client_ca_file: {}", path("cli-ca.pem")),
        )
        .replace("REPLACE-WITH-THE-HASH-FROM-htpasswd", &format!("'{hash}'"))
        .replace("  headers:\n", "  headers:\n    X-Frame-Options: deny\n");
    assert!(!config.contains(": tls."), "{config}");
    let web = d.join("web.yml");
    std::fs::write(&web, config).unwrap();
    let mut child = Command::new(bin("ebee-top"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "-d",
            "0.2",
            "--web-config",
        ])
        .arg(&web)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut err, &mut first).unwrap();
    let addr = first
        .split("https://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .unwrap_or_else(|| panic!("ebee-top serve with TLS said: {first:?}"))
        .to_owned();
    let serve = Proc(child);
    std::thread::spawn(move || {
        let mut rest = String::new();
        while std::io::BufRead::read_line(&mut err, &mut rest).is_ok_and(|n| n > 0) {
            eprint!("ebee-top serve: {rest}");
            rest.clear();
        }
    });
    let url = format!("https://{addr}/metrics");
    let (status, out) = curl(&url, d, Some("prometheus:s3cret"));
    assert_eq!(status, 200, "{out}");
    assert!(
        out.to_ascii_lowercase().contains("x-frame-options: deny"),
        "{out}"
    );
    let (status, out) = curl(&url, d, Some("prometheus:wrong"));
    assert_eq!(status, 401, "{out}");
    assert!(
        out.to_ascii_lowercase().contains("www-authenticate: basic"),
        "{out}"
    );
    assert!(
        !out.contains("ebee_"),
        "no data without the password: {out}"
    );
    // Plain HTTP to the TLS port: no answer with data.
    let plain = raw_exchange(&addr, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
    assert!(!plain.contains("ebee_"), "{plain:?}");
    // Prometheus: one job as it should be, and one for each thing that must fail.
    let tls = |cert: Option<&str>| {
        let mut s = format!(
            "    tls_config:\n      ca_file: {}\n",
            d.join("srv-ca.pem").display()
        );
        if let Some(c) = cert {
            s += &format!(
                "      cert_file: {}\n      key_file: {}\n",
                d.join(format!("{c}.pem")).display(),
                d.join(format!("{c}.key")).display()
            );
        }
        s
    };
    let job = |name: &str, scheme: &str, cert: Option<&str>, pass: &str| {
        format!(
            "  - job_name: {name}\n    scheme: {scheme}\n    scrape_interval: 1s\n    \
             scrape_timeout: 900ms\n{}    basic_auth:\n      username: prometheus\n      \
             password: {pass}\n    static_configs:\n      - targets: ['{addr}']\n",
            tls(cert)
        )
    };
    let config = d.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n{}{}{}{}{}",
            job("good", "https", Some("client"), "s3cret"),
            job("wrong_password", "https", Some("client"), "guess"),
            job("no_client_cert", "https", None, "s3cret"),
            job("other_ca", "https", Some("stranger"), "s3cret"),
            job("plain_http", "http", Some("client"), "s3cret"),
        ),
    )
    .unwrap();
    let prom_addr = format!("127.0.0.1:{}", free_port());
    let _prometheus = Proc(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", d.join("data").display()))
            .arg(format!("--web.listen-address={prom_addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("prometheus (Debian package prometheus; cargo xtask setup installs it)"),
    );
    let jobs = [
        "good",
        "wrong_password",
        "no_client_cert",
        "other_ca",
        "plain_http",
    ];
    let start = Instant::now();
    let ups = loop {
        let ready = http_get(&prom_addr, "/-/ready", &[]).is_ok_and(|(s, _, _)| s == 200);
        let got: Vec<(String, String)> = if ready {
            prom_query(&prom_addr, "up", unix_s())
                .iter()
                .map(|r| {
                    (
                        r["metric"]["job"].as_str().unwrap_or("").to_owned(),
                        r["value"][1].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        } else {
            Vec::new()
        };
        if got.len() == jobs.len() && got.iter().any(|(j, v)| j == "good" && v == "1") {
            break got;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "Prometheus after 30 s: {got:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    for (job, up) in &ups {
        let want = if job == "good" { "1" } else { "0" };
        assert_eq!(up, want, "up{{job={job:?}}}: {ups:?}");
    }
    // Let every job fail a few more times, then see that ebee-top counted them.
    std::thread::sleep(Duration::from_secs(3));
    let (_, _, targets) = http_get(&prom_addr, "/api/v1/targets", &[]).unwrap();
    eprintln!("targets: {targets}");
    let (status, body) = curl(&url, d, Some("prometheus:s3cret"));
    assert_eq!(status, 200);
    let value = |row: &str| -> f64 {
        body.lines()
            .find_map(|l| l.strip_prefix(row))
            .unwrap_or_else(|| panic!("no {row} in the scrape"))
            .trim()
            .parse()
            .unwrap()
    };
    let unauthorized = value("ebee_metrics_unauthorized_requests_total ");
    let tls_failed = value("ebee_metrics_connections_closed_total{reason=\"tls_failed\"} ");
    eprintln!("unauthorized {unauthorized}, TLS failures {tls_failed}");
    assert!(
        unauthorized >= 3.0,
        "wrong passwords counted: {unauthorized}"
    );
    // No client certificate, another CA's, plain HTTP: each at least 3 times.
    assert!(tls_failed >= 9.0, "failed handshakes counted: {tls_failed}");
    assert!(value("ebee_intervals_total ") > 0.0);
    // A certificate replaced on disk is served on the next connection, no restart.
    let before = served_serial(&addr, d);
    assert_eq!(before, serial_of(&d.join("server.pem")));
    let fresh = d.join("fresh");
    std::fs::create_dir(&fresh).unwrap();
    for f in ["srv-ca.pem", "srv-ca.key"] {
        std::fs::copy(d.join(f), fresh.join(f)).unwrap();
    }
    std::thread::sleep(Duration::from_millis(1100));
    make_cert(&fresh, "srv", "server", "serverAuth");
    std::fs::rename(fresh.join("server.key"), d.join("server.key")).unwrap();
    std::fs::rename(fresh.join("server.pem"), d.join("server.pem")).unwrap();
    let after = served_serial(&addr, d);
    assert_ne!(after, before, "the old certificate is still served");
    assert_eq!(after, serial_of(&d.join("server.pem")));
    let (status, _) = curl(&url, d, Some("prometheus:s3cret"));
    assert_eq!(status, 200, "a scrape with the new certificate");
    drop(serve);
}

#[test]
fn a_broken_web_config_exits_10_before_anything_loads() {
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    let key = dir.path().join("k.pem");
    for (yaml, want) in [
        (
            "tls_server_config:\n  cert_file: c.pem\n  key_fil: k.pem\n",
            "unknown field `key_fil`",
        ),
        ("basic_auth_users:\n  prom: secret\n", "not a bcrypt hash"),
        (
            "tls_server_config:\n  cert_file: c.pem\n  key_file: k.pem\n",
            "c.pem",
        ),
        ("tls_server_config: [", "web.yml"),
    ] {
        std::fs::write(&web, yaml).unwrap();
        std::fs::write(&key, "").unwrap();
        for args in [
            vec!["-b", "-n", "1", "--listen", "127.0.0.1:0", "--web-config"],
            vec!["serve", "--listen", "127.0.0.1:0", "--web-config"],
        ] {
            // Without any capability: were anything loaded first, this would be exit code 3.
            // SAFETY: geteuid has no preconditions.
            let mut cmd = if unsafe { libc::geteuid() } == 0 {
                let mut c = Command::new("setpriv");
                c.args(["--bounding-set=-all", "--inh-caps=-all", "--"])
                    .arg(bin("ebee-top"));
                c
            } else {
                Command::new(bin("ebee-top"))
            };
            let o = cmd.args(&args).arg(&web).output().unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(10), "{yaml:?} {args:?}: {err}");
            assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
            assert!(err.contains(want), "{yaml:?}: {err}");
        }
    }
}

/// Base64 of `s` (RFC 4648, with padding), for a Basic credential.
fn b64(s: &str) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for c in s.as_bytes().chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[test]
fn a_flood_of_wrong_passwords_does_not_stall_scrapes() {
    if !privileged("a_flood_of_wrong_passwords_does_not_stall_scrapes") {
        return;
    }
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    assert_eq!(b64("prometheus:s3cret"), "cHJvbWV0aGV1czpzM2NyZXQ=");
    assert_eq!(b64("prometheus:wrong"), "cHJvbWV0aGV1czp3cm9uZw==");
    let dir = tempfile::tempdir().unwrap();
    let line = run(Command::new("htpasswd").args(["-nbB", "prometheus", "s3cret"]));
    let hash = line.trim().strip_prefix("prometheus:").unwrap().to_owned();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
    let serve = Serve::start(&["-d", "0.2", "--web-config", web.to_str().unwrap()]);
    // The scraper's credential is checked once, before the flood (a credential first seen
    // while the flood holds every place in the bcrypt queue would be refused unchecked).
    let good = format!("Authorization: Basic {}", b64("prometheus:s3cret"));
    let (status, head, _) = http_get(&serve.addr, "/metrics", &[&good]).unwrap();
    assert_eq!(status, 200, "{head}");
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let leaked = Arc::new(AtomicU64::new(0));
    // Sixteen clients sending wrong passwords, each one new, as fast as they are answered
    // (more at once than the bcrypt queue holds).
    let flood: Vec<_> = (0..16)
        .map(|t| {
            let (addr, stop, sent, leaked) = (
                serve.addr.clone(),
                stop.clone(),
                sent.clone(),
                leaked.clone(),
            );
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    let cred = format!(
                        "Authorization: Basic {}",
                        b64(&format!("prometheus:w{t}-{n}"))
                    );
                    match http_get(&addr, "/metrics", &[&cred]) {
                        Ok((401, _, _)) => {}
                        Ok(_) => {
                            leaked.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(_) => {}
                    }
                    sent.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let mut times = Vec::new();
    let mut bad = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(5) {
        let t = Instant::now();
        match http_get(&serve.addr, "/metrics", &[&good]) {
            Ok((200, _, body)) if body.contains("ebee_intervals_total") => {}
            other => bad.push(format!("{other:?}")),
        }
        times.push(t.elapsed().as_secs_f64() * 1e3);
        std::thread::sleep(Duration::from_millis(100).saturating_sub(t.elapsed()));
    }
    stop.store(true, Ordering::Relaxed);
    for f in flood {
        f.join().unwrap();
    }
    let sent = sent.load(Ordering::Relaxed);
    times.sort_by(f64::total_cmp);
    eprintln!(
        "{} scrapes beside {sent} wrong passwords in 5 s ({:.0}/s): median {:.2} ms, max {:.2} ms",
        times.len(),
        sent as f64 / 5.0,
        times[times.len() / 2],
        times[times.len() - 1]
    );
    assert!(
        bad.is_empty(),
        "scrapes with the right password not answered 200: {bad:?}"
    );
    assert_eq!(
        leaked.load(Ordering::Relaxed),
        0,
        "a wrong password was let in"
    );
    let (status, head, _) = http_get(&serve.addr, "/metrics", &[]).unwrap();
    assert_eq!(status, 401, "{head}");
    assert!(
        head.to_ascii_lowercase()
            .contains("www-authenticate: basic"),
        "{head}"
    );
    let (_, _, body) = http_get(&serve.addr, "/metrics", &[&good]).unwrap();
    let unauthorized: f64 = body
        .lines()
        .find_map(|l| l.strip_prefix("ebee_metrics_unauthorized_requests_total "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        unauthorized >= sent as f64 * 0.9,
        "{unauthorized} counted of {sent}"
    );
    assert_eq!(serve.stop(), Some(0));
}

/// `ebee-top ARGS` with its first stderr line (the "serving" line for `serve`), its stderr
/// drained afterwards so it never blocks.
fn start_with_line(args: &[&str]) -> (Proc, String) {
    let mut child = Command::new(bin("ebee-top"))
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut err, &mut first).unwrap();
    std::thread::spawn(move || {
        let mut rest = String::new();
        while std::io::BufRead::read_line(&mut err, &mut rest).is_ok_and(|n| n > 0) {
            eprint!("ebee-top: {rest}");
            rest.clear();
        }
    });
    (Proc(child), first)
}

/// curl over the unix socket `sock`, as `who` (setpriv arguments, empty for root), with extra
/// curl arguments: (curl's exit code, HTTP status, body).
fn curl_unix(
    sock: &std::path::Path,
    url: &str,
    who: &[&str],
    extra: &[&str],
) -> (i32, u16, String) {
    let mut c = if who.is_empty() {
        Command::new("curl")
    } else {
        let mut c = Command::new("setpriv");
        c.args(who).arg("--").arg("curl");
        c
    };
    let o = c
        .args([
            "-s",
            "--max-time",
            "10",
            "-w",
            "\n%{http_code}",
            "--unix-socket",
        ])
        .arg(sock)
        .args(extra)
        .arg(url)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    let (body, code) = out.rsplit_once('\n').unwrap_or(("", &out));
    (
        o.status.code().unwrap_or(-1),
        code.trim().parse().unwrap_or(0),
        body.to_owned(),
    )
}

/// The gid of a group in /etc/group.
fn gid(group: &str) -> u32 {
    std::fs::read_to_string("/etc/group")
        .unwrap()
        .lines()
        .find_map(|l| {
            let mut f = l.split(':');
            (f.next()? == group).then(|| f.nth(1)?.parse().ok())?
        })
        .unwrap_or_else(|| panic!("no group {group} in /etc/group"))
}

#[test]
fn serve_and_batch_mode_serve_metrics_over_a_unix_socket() {
    if !privileged("serve_and_batch_mode_serve_metrics_over_a_unix_socket") {
        return;
    }
    use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _, PermissionsExt as _};
    let dir = tempfile::tempdir().unwrap();
    // Others may pass through the folder (to reach the socket); the socket's mode decides.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let sock = dir.path().join("metrics.sock");
    let listen = format!("unix:{}", sock.display());
    // A socket left by a run that was killed: nobody listens, so it is replaced.
    drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
    let (serve, line) = start_with_line(&[
        "serve",
        "--listen",
        &listen,
        "--listen-group",
        "daemon",
        "-d",
        "0.2",
    ]);
    assert!(
        line.contains(&format!("http://localhost/metrics over {listen}")),
        "{line}"
    );
    let m = std::fs::symlink_metadata(&sock).unwrap();
    assert!(m.file_type().is_socket());
    assert_eq!(m.mode() & 0o7777, 0o660, "mode");
    assert_eq!((m.uid(), m.gid()), (0, gid("daemon")), "owner and group");
    let url = "http://localhost/metrics";
    let deadline = Instant::now() + Duration::from_secs(10);
    let body = loop {
        let (rc, status, body) = curl_unix(&sock, url, &[], &[]);
        if rc == 0 && status == 200 && body.contains("ebee_intervals_total") {
            break body;
        }
        assert!(Instant::now() < deadline, "curl: {rc} {status} {body}");
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        body.lines().any(|l| l.starts_with("# TYPE ebee_")),
        "the exposition format: {body}"
    );
    // The mode and group are what let a collector in: `nobody` may connect only as a member
    // of the socket's group.
    let member = ["--reuid=nobody", "--regid=nogroup", "--groups=daemon"];
    let (rc, status, _) = curl_unix(&sock, url, &member, &[]);
    assert_eq!((rc, status), (0, 200), "a member of the group");
    let stranger = ["--reuid=nobody", "--regid=nogroup", "--clear-groups"];
    let (rc, status, _) = curl_unix(&sock, url, &stranger, &[]);
    assert_eq!(
        (rc, status),
        (7, 0),
        "not in the group: connecting is refused (curl exit 7)"
    );
    // A second run on the same, live, socket is refused and leaves it alone.
    let o = Command::new(bin("ebee-top"))
        .args(["serve", "--listen", &listen])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(9), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(err.contains("already in use"), "{err}");
    assert_eq!(curl_unix(&sock, url, &[], &[]).1, 200, "still served");
    assert_eq!(terminate(serve), Some(0));
    assert!(
        std::fs::symlink_metadata(&sock).is_err(),
        "the socket file is removed on exit"
    );
    // Batch mode beside it: the same socket (mode 0660, the group we run as), removed after.
    let mut c = Command::new(bin("ebee-top"))
        .args([
            "-b", "--format", "json", "-d", "0.1", "-n", "40", "--listen", &listen,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(c.stdout.take().unwrap());
    let mut l = String::new();
    std::io::BufRead::read_line(&mut out, &mut l).unwrap();
    serde_json::from_str::<serde_json::Value>(&l).expect("stdout stays JSON Lines");
    let m = std::fs::symlink_metadata(&sock).unwrap();
    assert_eq!((m.mode() & 0o7777, m.gid()), (0o660, 0));
    let (rc, status, body) = curl_unix(&sock, url, &[], &[]);
    assert_eq!((rc, status), (0, 200), "{body}");
    assert!(body.contains("ebee_intervals_total"));
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut out, &mut rest).unwrap();
    let o = c.wait_with_output().unwrap();
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        std::fs::symlink_metadata(&sock).is_err(),
        "removed after -b -n"
    );
}

#[test]
fn a_unix_socket_path_holding_anything_else_is_refused_before_anything_loads() {
    use std::os::unix::fs::FileTypeExt as _;
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let file = d.join("file");
    std::fs::write(&file, "precious").unwrap();
    let folder = d.join("folder");
    std::fs::create_dir(&folder).unwrap();
    let stale = d.join("stale.sock");
    drop(std::os::unix::net::UnixListener::bind(&stale).unwrap());
    let link = d.join("link.sock");
    std::os::unix::fs::symlink(&stale, &link).unwrap();
    let fresh = d.join("fresh.sock");
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ebee = |args: &[&str]| {
        let mut cmd = if root {
            // Without any capability: were anything loaded first, this would be exit code 3.
            let mut c = Command::new("setpriv");
            c.args(["--bounding-set=-all", "--inh-caps=-all", "--"])
                .arg(bin("ebee-top"));
            c
        } else {
            Command::new(bin("ebee-top"))
        };
        let o = cmd.args(args).output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
        assert!(o.stdout.is_empty());
        (o.status.code(), err)
    };
    let unix = |p: &std::path::Path| format!("unix:{}", p.display());
    for (path, want) in [
        (&file, "a regular file is there"),
        (&folder, "a directory is there"),
        (&link, "a symbolic link is there"),
    ] {
        for mode in [&["serve"][..], &["-b", "-n", "1"]] {
            let (code, err) = ebee(&[mode, &["--listen", &unix(path)]].concat());
            assert_eq!(code, Some(9), "{path:?}: {err}");
            assert!(err.contains(want), "{err}");
        }
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "precious");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(
        std::fs::symlink_metadata(&stale)
            .unwrap()
            .file_type()
            .is_socket()
    );
    // An unknown group, or a group for a TCP port: usage errors, and nothing is made.
    let (code, err) = ebee(&[
        "serve",
        "--listen",
        &unix(&fresh),
        "--listen-group",
        "no-such-group-here",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("no group \"no-such-group-here\""), "{err}");
    let (code, err) = ebee(&[
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--listen-group",
        "daemon",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("only with --listen unix:PATH"), "{err}");
    let mut left: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        ["file", "folder", "link.sock", "stale.sock"],
        "nothing made"
    );
}

#[test]
fn tls_and_basic_auth_apply_over_the_unix_socket() {
    if !privileged("tls_and_basic_auth_apply_over_the_unix_socket") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    make_ca(d, "srv");
    make_cert(d, "srv", "server", "serverAuth");
    let line = run(Command::new("htpasswd").args(["-nbB", "prometheus", "s3cret"]));
    let hash = line.trim().strip_prefix("prometheus:").unwrap().to_owned();
    let web = d.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.pem\n  key_file: server.key\n\
             basic_auth_users:\n  prometheus: '{hash}'\n"
        ),
    )
    .unwrap();
    let sock = d.join("m.sock");
    let listen = format!("unix:{}", sock.display());
    let (serve, line) = start_with_line(&[
        "serve",
        "--listen",
        &listen,
        "-d",
        "0.2",
        "--web-config",
        web.to_str().unwrap(),
    ]);
    assert!(
        line.contains(&format!("https://localhost/metrics over {listen}")),
        "{line}"
    );
    let ca = d.join("srv-ca.pem");
    let ca = ca.to_str().unwrap();
    // The certificate names 127.0.0.1: curl checks it against the URL's host.
    let url = "https://127.0.0.1/metrics";
    let (rc, status, body) = curl_unix(
        &sock,
        url,
        &[],
        &["--cacert", ca, "-u", "prometheus:s3cret"],
    );
    assert_eq!((rc, status), (0, 200), "{body}");
    assert!(body.contains("ebee_intervals_total"));
    let (rc, status, _) = curl_unix(&sock, url, &[], &["--cacert", ca, "-u", "prometheus:nope"]);
    assert_eq!((rc, status), (0, 401), "a wrong password");
    // Plain HTTP to the TLS socket: no HTTP answer, only a TLS alert and the end.
    let (_, status, body) = curl_unix(&sock, "http://localhost/metrics", &[], &[]);
    assert_eq!(status, 0, "{body}");
    // Both counted (the counters reach the snapshot with the next interval).
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (_, _, body) = curl_unix(
            &sock,
            url,
            &[],
            &["--cacert", ca, "-u", "prometheus:s3cret"],
        );
        let value = |prefix: &str| -> f64 {
            body.lines()
                .find_map(|l| l.strip_prefix(prefix))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0.0)
        };
        let tls_failed =
            value("ebee_metrics_connections_closed_total{reason=\"tls_failed\"} ") >= 1.0;
        let unauthorized = value("ebee_metrics_unauthorized_requests_total ") == 1.0;
        if tls_failed && unauthorized {
            break;
        }
        assert!(Instant::now() < deadline, "not counted:\n{body}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(terminate(serve), Some(0));
    assert!(std::fs::symlink_metadata(&sock).is_err(), "removed on exit");
}

/// SIGTERM to a child, then its exit code.
fn terminate(mut p: Proc) -> Option<i32> {
    // SAFETY: signalling our own child, not yet reaped.
    unsafe { libc::kill(p.pid() as i32, libc::SIGTERM) };
    p.0.wait().ok().and_then(|s| s.code())
}
