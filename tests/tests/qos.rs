//! Privileged tests of the QoS pipeline on the real kernel: request throughput and latency of a
//! TCP server against its clients' count and its own clock, the syscall histogram of a sleep
//! loop, exits of pinned processes, and that nothing hooks syscalls while nothing is pinned.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ebee_tests::{ebee_top, load, privileged};
use ebee_top::model::Model;
use ebee_top::probes::ProbeConfig;
use ebee_top::source::{Live, Source};

const TICK: Duration = Duration::from_millis(100);

/// A thread-per-connection server: each request is 4 bytes naming a delay in µs; the server
/// sleeps that long and answers 4 bytes. It records its own read-to-write time per request.
fn server(stop: Arc<AtomicBool>) -> (u16, Arc<Mutex<Vec<u64>>>) {
    server_at(stop, None)
}

/// Raise this process's soft descriptor limit to `max` (or its hard limit if lower).
fn allow_fds_up_to(max: u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a valid rlimit.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut r), 0);
        if r.rlim_cur < max {
            r.rlim_cur = max.min(r.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &r), 0);
        }
    }
}

/// [`server`], with each accepted connection moved to a descriptor numbered `high` or above
/// when given (the original number is closed).
fn server_at(stop: Arc<AtomicBool>, high: Option<i32>) -> (u16, Arc<Mutex<Vec<u64>>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let own = Arc::new(Mutex::new(Vec::new()));
    let own2 = own.clone();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(c) = c else { return };
            let mut c = match high {
                None => c,
                Some(min) => {
                    use std::os::fd::{FromRawFd as _, IntoRawFd as _};
                    let low = c.into_raw_fd();
                    // SAFETY: `low` is an open descriptor this thread owns; the new one is
                    // owned by the returned stream, and `low` is closed once.
                    unsafe {
                        let hi = libc::fcntl(low, libc::F_DUPFD_CLOEXEC, min);
                        assert!(hi >= min, "F_DUPFD: {}", std::io::Error::last_os_error());
                        libc::close(low);
                        TcpStream::from_raw_fd(hi)
                    }
                }
            };
            let own = own2.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let _ = c.set_nodelay(true);
                let mut req = [0u8; 4];
                while !stop.load(Ordering::Relaxed) && c.read_exact(&mut req).is_ok() {
                    let t0 = Instant::now();
                    std::thread::sleep(Duration::from_micros(u64::from(u32::from_le_bytes(req))));
                    if c.write_all(b"done").is_err() {
                        return;
                    }
                    own.lock().unwrap().push(t0.elapsed().as_nanos() as u64);
                }
            });
        }
    });
    (port, own)
}

/// Exact percentile of a sample (nearest rank).
fn pct(v: &mut [u64], q: f64) -> f64 {
    v.sort_unstable();
    let i = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len()) - 1;
    v[i] as f64 / 1000.0
}

/// Client threads, each sending one request after the other to 127.0.0.1:`port` and waiting
/// for its answer; request `i` of client `k` asks the server for `service_us(k, i)` of work.
struct Clients {
    run: Arc<AtomicBool>,
    sent: Arc<AtomicU64>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Clients {
    fn start(n: u32, port: u16, service_us: fn(u32, u32) -> u32) -> Self {
        let run = Arc::new(AtomicBool::new(true));
        let sent = Arc::new(AtomicU64::new(0));
        let threads = (0..n)
            .map(|k| {
                let (run, sent) = (run.clone(), sent.clone());
                std::thread::spawn(move || {
                    let mut c = TcpStream::connect(("127.0.0.1", port)).unwrap();
                    c.set_nodelay(true).unwrap();
                    let mut resp = [0u8; 4];
                    let mut i = 0;
                    while run.load(Ordering::Relaxed) {
                        c.write_all(&service_us(k, i).to_le_bytes()).unwrap();
                        c.read_exact(&mut resp).unwrap();
                        sent.fetch_add(1, Ordering::Relaxed);
                        i += 1;
                    }
                })
            })
            .collect();
        Self { run, sent, threads }
    }

    /// Stop every client; the requests they completed.
    fn stop(self) -> u64 {
        self.run.store(false, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        self.sent.load(Ordering::Relaxed)
    }
}

#[test]
fn tcp_server_rps_and_latency_match_its_clients() {
    if !privileged("tcp_server_rps_and_latency_match_its_clients") {
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let (port, own) = server(stop.clone());
    let mut live = Live::start(ProbeConfig::default(), TICK).expect("loading eBPF");
    // The server is this test process: pin ourselves.
    live.set_pins(&[std::process::id()]).unwrap();
    let mut model = Model::new();
    for _ in 0..3 {
        model.ingest(&live.next_batch().unwrap().unwrap());
    }
    // Four clients, each one request after the other: 60% at 2 ms, 40% at 20 ms.
    let clients = Clients::start(4, port, |k, i| if (k + i) % 5 < 3 { 2_000 } else { 20_000 });
    // About 3 s of traffic, inside the model's 10 s window.
    let mut requests = 0;
    let mut n_batches = 0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(3) {
        let b = live.next_batch().unwrap().unwrap();
        requests += b.qos.procs.iter().map(|p| p.requests.requests).sum::<u64>();
        model.ingest(&b);
        n_batches += 1;
    }
    let client = clients.stop();
    // One more interval collects the answers sent after the last one.
    for _ in 0..3 {
        let b = live.next_batch().unwrap().unwrap();
        requests += b.qos.procs.iter().map(|p| p.requests.requests).sum::<u64>();
        model.ingest(&b);
    }
    stop.store(true, Ordering::Relaxed);
    assert!(n_batches >= 20, "only {n_batches} intervals");
    assert!(client > 200, "the clients completed only {client} requests");
    let err = (requests as f64 - client as f64).abs() / client as f64;
    assert!(
        err <= 0.05,
        "ebee-top counted {requests} requests, the clients {client}"
    );

    let v = model
        .qos
        .view(std::process::id())
        .expect("a QoS view of ourselves");
    assert!(v.server, "the test process serves requests: {v:?}");
    // The window holds the whole run: its rate times its span is the count.
    assert!(v.window.span_s < 10.1);
    let in_window = v.window.rps * v.window.span_s;
    assert!(
        (in_window - client as f64).abs() / (client as f64) <= 0.05,
        "window rps {} over {} s vs {client} requests",
        v.window.rps,
        v.window.span_s
    );
    let mut own = own.lock().unwrap().clone();
    let (p50, p99) = (pct(&mut own, 0.5), pct(&mut own, 0.99));
    let (e50, e99) = (v.window.p50_us.unwrap(), v.window.p99_us.unwrap());
    assert!(
        (2000.0..2000.0 * 1.5).contains(&p50) && (20000.0..20000.0 * 1.5).contains(&p99),
        "the server's own p50 {p50} µs, p99 {p99} µs: the machine is too loaded for this test"
    );
    assert!(
        (e50 - p50).abs() / p50 <= 0.10,
        "p50: ebee-top {e50} µs, server {p50} µs"
    );
    assert!(
        (e99 - p99).abs() / p99 <= 0.10,
        "p99: ebee-top {e99} µs, server {p99} µs"
    );
    // The syscalls the model followed are there too.
    let names: Vec<&str> = v.top_syscalls.iter().map(|s| s.name.as_str()).collect();
    assert!(
        names.contains(&"read") || names.contains(&"recvfrom"),
        "{names:?}"
    );
}

#[test]
fn a_pinned_sleep_loop_shows_its_sleep() {
    if !privileged("a_pinned_sleep_loop_shows_its_sleep") {
        return;
    }
    let child = load(&["sleeper", "--ms", "10"]);
    let mut live = Live::start(ProbeConfig::default(), TICK).expect("loading eBPF");
    live.set_pins(&[child.pid()]).unwrap();
    let mut model = Model::new();
    for _ in 0..15 {
        model.ingest(&live.next_batch().unwrap().unwrap());
    }
    let v = model
        .qos
        .view(child.pid())
        .expect("a QoS view of the sleeper");
    assert!(!v.server, "a sleep loop answers no requests");
    let sleep = v
        .top_syscalls
        .iter()
        .find(|s| s.name == "clock_nanosleep" || s.name == "nanosleep")
        .unwrap_or_else(|| panic!("no sleep syscall in {:?}", v.top_syscalls));
    assert_eq!(
        v.top_syscalls[0].nr, sleep.nr,
        "the sleep takes the most time"
    );
    // 1.5 s of 10 ms sleeps (minus the overshoot of each).
    assert!(
        (100..=155).contains(&sleep.count),
        "{} sleeps in {} s",
        sleep.count,
        v.window.span_s
    );
    let p50 = sleep.p50_us.unwrap();
    assert!((10_000.0..13_000.0).contains(&p50), "sleep p50 {p50} µs");
    // The histogram puts the mass at 10 ms and above.
    let bins = model.qos.hist_bins(
        child.pid(),
        ebee_top::model::qos::HistOf::Syscall(sleep.nr),
        4,
    );
    let total: u64 = bins.iter().map(|b| b.count).sum();
    let at_sleep: u64 = bins
        .iter()
        .filter(|b| b.hi_ns > 10_000_000 && b.lo_ns < 14_000_000)
        .map(|b| b.count)
        .sum();
    assert_eq!(total, sleep.count);
    assert!(
        at_sleep * 10 >= total * 9,
        "only {at_sleep} of {total} sleeps near 10 ms: {bins:?}"
    );
}

#[test]
fn an_exited_pin_is_reported_once_then_dropped_and_hooks_come_off() {
    if !privileged("an_exited_pin_is_reported_once_then_dropped_and_hooks_come_off") {
        return;
    }
    let mut live = Live::start(ProbeConfig::default(), TICK).expect("loading eBPF");
    assert!(
        !live.probes().syscalls_attached(),
        "nothing pinned, no hook"
    );
    let child = load(&["sleeper", "--ms", "5", "--seconds", "0.6"]);
    let pid = child.pid();
    live.set_pins(&[pid]).unwrap();
    assert!(live.probes().syscalls_attached());
    let mut exited_reports = 0;
    let mut seen_after = 0;
    let mut syscalls_before_exit = 0;
    for _ in 0..20 {
        let b = live.next_batch().unwrap().unwrap();
        for s in b.qos.procs.iter().filter(|s| s.pid == pid) {
            if exited_reports > 0 {
                seen_after += 1;
            }
            syscalls_before_exit += s.syscalls.iter().map(|x| x.count).sum::<u64>();
            if s.exited {
                assert!(s.last);
                exited_reports += 1;
            }
        }
    }
    drop(child);
    assert_eq!(exited_reports, 1, "the exit is reported exactly once");
    assert_eq!(seen_after, 0, "nothing after the exit");
    assert!(syscalls_before_exit > 50);
    assert!(live.pins().is_empty(), "dropped from the pin table");
    assert!(
        !live.probes().syscalls_attached(),
        "the last pin went: the syscall hooks are detached"
    );
}

#[test]
fn a_process_pinned_after_running_unpinned_under_the_hooks_is_followed() {
    if !privileged("a_process_pinned_after_running_unpinned_under_the_hooks_is_followed") {
        return;
    }
    // `sys_enter` caches the stacks of threads it found unpinned; a new pin must end that.
    let mut live = Live::start(ProbeConfig::default(), TICK).expect("loading eBPF");
    let a = load(&["sleeper", "--ms", "5"]);
    live.set_pins(&[a.pid()]).unwrap();
    let b = load(&["sleeper", "--ms", "5"]);
    for _ in 0..5 {
        let batch = live.next_batch().unwrap().unwrap();
        assert!(batch.qos.procs.iter().all(|s| s.pid != b.pid()));
    }
    live.set_pins(&[a.pid(), b.pid()]).unwrap();
    let mut b_calls = 0;
    for _ in 0..10 {
        let batch = live.next_batch().unwrap().unwrap();
        for s in batch.qos.procs.iter().filter(|s| s.pid == b.pid()) {
            b_calls += s.syscalls.iter().map(|x| x.count).sum::<u64>();
        }
    }
    // 1 s of 5 ms sleeps: about 180 (with each sleep's overshoot).
    assert!(
        b_calls > 100,
        "only {b_calls} syscalls of the new pin in 1 s"
    );
}

#[test]
fn unpinning_detaches_and_a_missing_pid_is_refused() {
    if !privileged("unpinning_detaches_and_a_missing_pid_is_refused") {
        return;
    }
    let mut live = Live::start(ProbeConfig::default(), TICK).expect("loading eBPF");
    let a = load(&["sleeper", "--ms", "5"]);
    live.set_pins(&[a.pid()]).unwrap();
    assert!(live.probes().syscalls_attached());
    // pid_max is at most 4194304: this pid cannot exist. The pin set stays as it was.
    assert!(live.set_pins(&[a.pid(), 5_000_000]).is_err());
    assert_eq!(live.pins(), &[a.pid()]);
    live.next_batch().unwrap();
    live.set_pins(&[]).unwrap();
    assert!(!live.probes().syscalls_attached());
    // The unpinned process is reported one last time.
    let b = live.next_batch().unwrap().unwrap();
    let last: Vec<_> = b.qos.procs.iter().filter(|s| s.pid == a.pid()).collect();
    assert_eq!(last.len(), 1);
    assert!(last[0].last && !last[0].exited);
    let b = live.next_batch().unwrap().unwrap();
    assert!(b.qos.procs.is_empty());
}

#[test]
fn cli_missing_pid_exits_5_with_one_line() {
    if !privileged("cli_missing_pid_exits_5_with_one_line") {
        return;
    }
    let (code, out, err) = ebee_top(&["-b", "-n", "1", "-p", "4999999"]);
    assert_eq!(code, 5, "stderr: {err}");
    assert!(out.is_empty());
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("4999999"), "{err}");
}

#[test]
fn cli_json_has_a_qos_entry_per_pinned_process() {
    if !privileged("cli_json_has_a_qos_entry_per_pinned_process") {
        return;
    }
    let child = load(&["sleeper", "--ms", "10"]);
    let pid = child.pid().to_string();
    let (code, out, err) =
        ebee_top(&["-b", "-n", "4", "-d", "0.1", "--format", "json", "-p", &pid]);
    assert_eq!(code, 0, "stderr: {err}");
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let q = last["qos"].as_array().expect("qos: array");
    assert_eq!(q.len(), 1);
    let q = &q[0];
    assert_eq!(q["pid"].as_u64(), Some(u64::from(child.pid())));
    assert_eq!(q["comm"], "ebee-load");
    for k in ["syscalls_per_s", "rps"] {
        assert!(q[k].is_f64(), "{k}");
    }
    for k in ["p50_us", "p99_us", "p999_us", "max_us"] {
        assert!(q[k].is_null(), "{k}: a sleeper answers no requests");
    }
    let top = q["top_syscalls"].as_array().unwrap();
    assert!(
        top[0]["name"].as_str().unwrap().contains("sleep"),
        "{top:?}"
    );
    assert!(top[0]["p50_us"].as_f64().unwrap() > 9_000.0);
}

/// Descriptors from `FD_SLOTS` (1024) up keep their request state in the hash, not the
/// fd-indexed array: requests on them are counted all the same.
#[test]
fn requests_on_descriptors_above_1024_are_counted() {
    if !privileged("requests_on_descriptors_above_1024_are_counted") {
        return;
    }
    allow_fds_up_to(4096);
    let stop = Arc::new(AtomicBool::new(false));
    let (port, _own) = server_at(stop.clone(), Some(2000));
    let mut live = Live::start(ProbeConfig::default(), TICK).expect("loading eBPF");
    live.set_pins(&[std::process::id()]).unwrap();
    for _ in 0..2 {
        live.next_batch().unwrap().unwrap();
    }
    let clients = Clients::start(2, port, |_, _| 500);
    let mut requests = 0;
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(2) {
        let b = live.next_batch().unwrap().unwrap();
        requests += b.qos.procs.iter().map(|p| p.requests.requests).sum::<u64>();
    }
    let client = clients.stop();
    for _ in 0..3 {
        let b = live.next_batch().unwrap().unwrap();
        requests += b.qos.procs.iter().map(|p| p.requests.requests).sum::<u64>();
    }
    stop.store(true, Ordering::Relaxed);
    assert!(client > 200, "the clients completed only {client} requests");
    let err = (requests as f64 - client as f64).abs() / client as f64;
    assert!(
        err <= 0.05,
        "ebee-top counted {requests} requests, the clients {client}"
    );
}

/// `CLOCK_MONOTONIC` now, ns: the clock of the kernel's interval bounds (`bpf_ktime_get_ns`).
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime with a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// What one closed-loop run against a pinned `ebee-load delay-server` gave, summed over the
/// intervals that lie wholly inside the clients' run (first to last completed request).
struct SameSpan {
    /// Requests the clients saw completed inside those intervals.
    client: u64,
    /// Requests the pinned request model counted in them.
    pinned: u64,
    /// Requests the servers pipeline counted for the server in them.
    servers: u64,
    /// Their summed length, ns.
    span_ns: u64,
    intervals: usize,
}

impl SameSpan {
    /// At least 40 whole intervals and 2,000 requests (4 clients, about 1.9 ms per request
    /// each), and both pipelines' counts within 2% of the clients'; `what` tells the case.
    fn assert_within_2pct(&self, what: &str) {
        let r = self;
        assert!(r.intervals >= 40, "only {} whole intervals", r.intervals);
        assert!(r.client > 2_000, "the clients completed only {}", r.client);
        let s = r.span_ns as f64 / 1e9;
        for (pipeline, n) in [("pinned", r.pinned), ("servers", r.servers)] {
            let ratio = n as f64 / r.client as f64;
            assert!(
                (ratio - 1.0).abs() <= 0.02,
                "{pipeline}{what}: ebee-top {n} requests ({:.1}/s), the clients {} ({:.1}/s) in \
                 the same {} intervals ({s:.3} s)",
                n as f64 / s,
                r.client,
                r.client as f64 / s,
                r.intervals
            );
        }
    }
}

/// Pin a delay server answering after 1 ms (every tenth request after 10 ms), run `conns`
/// closed-loop clients for `secs`, each noting when each answer arrived, with 50 ms
/// intervals; compare the counts over the same intervals. `split`: the server reads with one
/// thread and answers with another, on a duplicate of the connection's descriptor.
/// `connect_first`: the clients connect (and the server accepts and duplicates) before the
/// server is pinned.
fn closed_loop_same_span(conns: u32, secs: u64, split: bool, connect_first: bool) -> SameSpan {
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
    let mut cmd = std::process::Command::new(ebee_tests::bin("ebee-load"));
    cmd.args(&args).stdout(std::process::Stdio::piped());
    let mut srv = ebee_tests::spawn_guarded(&mut cmd).unwrap();
    let mut ready = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(srv.0.stdout.take().unwrap()),
        &mut ready,
    )
    .unwrap();
    assert_eq!(ready.trim(), "ready");
    let connect = move || {
        let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
        c.set_nodelay(true).unwrap();
        c
    };
    let mut early: Vec<Option<TcpStream>> =
        (0..conns).map(|_| connect_first.then(connect)).collect();
    if connect_first {
        // Time for the server to accept and duplicate each connection's descriptor.
        std::thread::sleep(Duration::from_millis(300));
    }
    let mut live =
        Live::start(ProbeConfig::default(), Duration::from_millis(50)).expect("loading eBPF");
    live.set_pins(&[srv.pid()]).unwrap();
    for _ in 0..3 {
        live.next_batch().unwrap().unwrap();
    }
    let run = Arc::new(AtomicBool::new(true));
    let done: Arc<Mutex<Vec<u64>>> = Arc::default();
    let clients: Vec<_> = early
        .iter_mut()
        .map(|early| {
            let (run, done) = (run.clone(), done.clone());
            let early = early.take();
            std::thread::spawn(move || {
                let mut c = early.unwrap_or_else(connect);
                let mut resp = [0u8; 4];
                let mut mine = Vec::new();
                while run.load(Ordering::Relaxed) {
                    c.write_all(b"req!").unwrap();
                    c.read_exact(&mut resp).unwrap();
                    mine.push(mono_ns());
                }
                done.lock().unwrap().extend(mine);
            })
        })
        .collect();
    // (start, end, pinned, servers) of each interval.
    let mut ivs = Vec::new();
    let mut take = |live: &mut Live| {
        let b = live.next_batch().unwrap().unwrap();
        let pid = srv.pid();
        let pinned = b.qos.procs.iter().filter(|p| p.pid == pid);
        let servers = b.servers.iter().filter(|x| x.pid == pid);
        ivs.push((
            b.start_ns,
            b.end_ns,
            pinned.map(|p| p.requests.requests).sum::<u64>(),
            servers.map(|x| x.requests).sum::<u64>(),
        ));
    };
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(secs) {
        take(&mut live);
    }
    run.store(false, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    take(&mut live);
    let mut done = done.lock().unwrap().clone();
    done.sort_unstable();
    let (first, last) = (done[0], done[done.len() - 1]);
    let mut out = SameSpan {
        client: 0,
        pinned: 0,
        servers: 0,
        span_ns: 0,
        intervals: 0,
    };
    for &(s, e, pinned, servers) in ivs.iter().filter(|(s, e, ..)| *s >= first && *e <= last) {
        // Answers that arrived in [s, e): the client reads each a few µs after the server's
        // send returned, so a request straddles a bound only in that gap.
        let lo = done.partition_point(|&t| t < s);
        let hi = done.partition_point(|&t| t < e);
        out.client += (hi - lo) as u64;
        out.pinned += pinned;
        out.servers += servers;
        out.span_ns += e - s;
        out.intervals += 1;
    }
    out
}

/// A closed-loop client against a pinned server (1 ms answers, every tenth after 10 ms): the
/// pinned request rate and the servers pipeline's agree with the client's own count over the
/// same intervals, within 2% (the issue this guards measured 7% and 11% too many).
#[test]
fn pinned_request_rate_matches_a_closed_loop_client_over_the_same_intervals() {
    if !privileged("pinned_request_rate_matches_a_closed_loop_client_over_the_same_intervals") {
        return;
    }
    closed_loop_same_span(4, 3, false, false).assert_within_2pct("");
}

/// A server that reads each connection's requests with one thread and answers them with
/// another, on a duplicate of the descriptor (`ebee-load delay-server --split`): the pinned
/// request model counts each request once, as the clients and the servers pipeline do, whether
/// the duplicates were made while pinned (followed at the `fcntl(F_DUPFD_CLOEXEC)` call) or
/// before the pin (found sharing one open file at their first receive or send).
#[test]
fn requests_answered_on_a_duplicated_descriptor_are_counted() {
    if !privileged("requests_answered_on_a_duplicated_descriptor_are_counted") {
        return;
    }
    for connect_first in [false, true] {
        closed_loop_same_span(4, 3, true, connect_first)
            .assert_within_2pct(&format!(" (connected before the pin: {connect_first})"));
    }
}
