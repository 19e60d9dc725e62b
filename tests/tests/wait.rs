//! Privileged tests of the waits and disk I/O pipeline on the real kernel: a starved process
//! against /proc/PID/schedstat's run_delay, disk writers and readers against /proc/PID/io,
//! and the sketches against their exact shadows.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::io::{BufRead as _, Write as _};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ebee_tests::{Proc, bin, load, privileged, proc_io, schedstat_runs, schedstat_wait_ns};
use ebee_top::probes::{ProbeConfig, Probes, RawInterval};

const TICK: Duration = Duration::from_millis(50);

fn probes(cfg: ProbeConfig) -> Probes {
    let mut p = Probes::load(cfg, TICK).expect("loading the eBPF programs");
    assert!(
        p.wait_available() && p.io_available(),
        "this kernel has sched_info and task I/O accounting (TOOLCHAIN.md)"
    );
    p.drain().expect("first drain");
    p
}

fn wait_of(raw: &RawInterval, pid: u32) -> u64 {
    raw.waits
        .wait
        .iter()
        .find(|w| w.tgid == pid)
        .map_or(0, |w| w.wait_ns)
}

fn io_of(raw: &RawInterval, pid: u32) -> (u64, u64) {
    raw.waits
        .io
        .iter()
        .find(|w| w.tgid == pid)
        .map_or((0, 0), |w| (w.read_bytes, w.write_bytes))
}

/// `ebee-load` on CPU 1 at niceness `nice`.
fn on_cpu1(nice: i32, args: &[&str]) -> Proc {
    ebee_tests::ebee_load_on(1, nice, args)
}

fn within(ours: u64, truth: u64, tol: f64) -> bool {
    (ours as f64 - truth as f64).abs() <= truth as f64 * tol
}

/// The noisy neighbour: three CPU hogs and a process that needs half a CPU, at a lower
/// priority, share CPU 1. The victim spends most of its time runnable but not running: it
/// ranks above every hog by wait in every second, and its wait over 100 intervals (and each hog's) is what the kernel's
/// own run_delay says over the same window.
#[test]
fn a_starved_process_outranks_the_hogs_by_wait_and_matches_schedstat() {
    if !privileged("a_starved_process_outranks_the_hogs_by_wait_and_matches_schedstat") {
        return;
    }
    let hogs: Vec<Proc> = (0..3)
        .map(|_| on_cpu1(-5, &["burn", "--duty", "1.0", "--seconds", "15"]))
        .collect();
    let victim = on_cpu1(
        0,
        &[
            "burn",
            "--duty",
            "0.5",
            "--period-ms",
            "10",
            "--seconds",
            "15",
        ],
    );
    let mut pids: Vec<u32> = hogs.iter().map(Proc::pid).collect();
    pids.push(victim.pid());
    let mut p = probes(ProbeConfig::default());
    std::thread::sleep(Duration::from_millis(300));
    let truth = |pids: &[u32]| -> Vec<u64> {
        pids.iter()
            .map(|&pid| schedstat_wait_ns(pid).unwrap())
            .collect()
    };
    let before = truth(&pids);
    p.drain().unwrap();
    let mut ours = vec![0u64; pids.len()];
    // Each second's wait per process, as the screen's WAIT% column averages it: a starved
    // thread's wait is charged at the switch-out that ends its run, so single intervals are
    // lumpy.
    let mut seconds: Vec<Vec<u64>> = Vec::new();
    let n = 100;
    let per_second = (Duration::from_secs(1).as_millis() / TICK.as_millis()) as usize;
    let mut after = before.clone();
    for i in 0..n {
        std::thread::sleep(TICK);
        if i == n - 1 {
            after = truth(&pids);
        }
        let raw = p.drain().unwrap();
        if i % per_second == 0 {
            seconds.push(vec![0; pids.len()]);
        }
        let sec = seconds.last_mut().unwrap();
        for (j, &pid) in pids.iter().enumerate() {
            let w = wait_of(&raw, pid);
            ours[j] += w;
            sec[j] += w;
        }
    }
    let v = pids.len() - 1;
    for (s, sec) in seconds.iter().enumerate() {
        assert!(
            sec[..v].iter().all(|h| sec[v] > *h),
            "second {s}: the starved process waited {} ns, the hogs {:?}",
            sec[v],
            &sec[..v]
        );
    }
    for (i, &pid) in pids.iter().enumerate() {
        let t = after[i] - before[i];
        assert!(
            t > 1_000_000_000,
            "pid {pid} waited only {t} ns: no contention?"
        );
        assert!(
            within(ours[i], t, 0.02),
            "pid {pid}: {} ns of wait over {n} intervals against schedstat's {t} ns",
            ours[i]
        );
    }
}

/// An `ebee-load disk` process, driven line by line.
struct Disk {
    proc: Proc,
    done: mpsc::Receiver<()>,
}

impl Disk {
    fn start(args: &[&str]) -> Self {
        let mut c = Command::new(bin("ebee-load"))
            .arg("disk")
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting ebee-load disk");
        let out = c.stdout.take().unwrap();
        let (tx, done) = mpsc::channel();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines() {
                if l.is_ok_and(|l| l == "done") {
                    let _ = tx.send(());
                }
            }
        });
        Self {
            proc: Proc(c),
            done,
        }
    }

    fn step(&mut self) {
        let w = self.proc.0.stdin.as_mut().unwrap();
        w.write_all(b"go\n").unwrap();
        w.flush().unwrap();
    }
}

/// Run one disk workload under the probes: (ours, /proc/PID/io's growth, intervals in which it
/// had I/O, intervals in which it ranked first by I/O).
fn measure_disk(p: &mut Probes, args: &[&str]) -> ((u64, u64), (u64, u64), usize, usize) {
    let mut d = Disk::start(args);
    let pid = d.proc.pid();
    // Let it block on stdin once, so the kernel side has seen the thread before it starts.
    std::thread::sleep(Duration::from_millis(100));
    p.drain().unwrap();
    let before = proc_io(pid).unwrap();
    d.step();
    let (mut r, mut w, mut busy, mut first) = (0, 0, 0, 0);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut finished = None;
    loop {
        std::thread::sleep(TICK);
        if finished.is_none() && d.done.try_recv().is_ok() {
            finished = Some(Instant::now());
        }
        let late = finished.is_some_and(|t| t.elapsed() > Duration::from_millis(200));
        let after = late.then(|| proc_io(pid).unwrap());
        let raw = p.drain().unwrap();
        let (dr, dw) = io_of(&raw, pid);
        r += dr;
        w += dw;
        if dr + dw > 0 {
            busy += 1;
            if raw.waits.io.first().map(|c| c.tgid) == Some(pid) {
                first += 1;
            }
        }
        if let Some(a) = after {
            d.step();
            return ((r, w), (a.0 - before.0, a.1 - before.1), busy, first);
        }
        assert!(
            Instant::now() < deadline,
            "the disk workload did not finish"
        );
    }
}

/// Disk bytes against /proc/PID/io: an O_DIRECT writer and reader, and a buffered writer that
/// fsyncs; the O_DIRECT writer, which uses next to no CPU, ranks first by I/O while CPU hogs
/// run beside it.
#[test]
fn disk_bytes_match_proc_io_and_a_quiet_writer_ranks_first() {
    if !privileged("disk_bytes_match_proc_io_and_a_quiet_writer_ranks_first") {
        return;
    }
    // O_DIRECT needs a disk-backed file system: /var/tmp, not a tmpfs /tmp.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let file = dir.path().join("direct");
    let file = file.to_str().unwrap();
    let buffered = dir.path().join("buffered");
    let buffered = buffered.to_str().unwrap();
    let _hogs: Vec<Proc> = (0..2)
        .map(|_| load(&["burn", "--duty", "1.0", "--seconds", "30"]))
        .collect();
    let mut p = probes(ProbeConfig::default());
    for (what, args) in [
        ("O_DIRECT writer", vec![file, "--mib", "200", "--direct"]),
        ("O_DIRECT reader", vec![file, "--read", "--direct"]),
        ("buffered writer", vec![buffered, "--mib", "64", "--fsync"]),
    ] {
        let (ours, truth, busy, first) = measure_disk(&mut p, &args);
        let moved = truth.0.max(truth.1);
        assert!(moved >= 60 << 20, "{what}: only {truth:?} bytes moved");
        assert!(
            within(ours.0, truth.0, 0.02) && within(ours.1, truth.1, 0.02),
            "{what}: (read, written) {ours:?} against /proc/PID/io's {truth:?}"
        );
        if what == "O_DIRECT writer" {
            assert!(
                busy > 0 && first * 10 >= busy * 9,
                "{what} ranked first by I/O in only {first} of the {busy} intervals it wrote in"
            );
        }
    }
}

/// With nothing evicted, the sketches hold exactly what the exact shadows hold, interval by
/// interval, under a mix of 60 processes and short-lived ones.
#[test]
fn sketches_equal_exact_shadows_when_nothing_is_evicted() {
    if !privileged("sketches_equal_exact_shadows_when_nothing_is_evicted") {
        return;
    }
    let _mix = load(&[
        "mix",
        "--procs",
        "60",
        "--churn-per-s",
        "20",
        "--seconds",
        "10",
    ]);
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = dir.path().join("w");
    let mut d = Disk::start(&[f.to_str().unwrap(), "--mib", "64", "--fsync"]);
    let mut p = probes(ProbeConfig {
        shadow: true,
        ..Default::default()
    });
    std::thread::sleep(Duration::from_millis(300));
    p.drain().unwrap();
    d.step();
    let (mut compared, mut with_io) = (0, 0);
    for _ in 0..40 {
        std::thread::sleep(TICK);
        let raw = p.drain().unwrap();
        let w = &raw.waits;
        assert_eq!(w.shadow_full, 0);
        if w.wait_evictions == 0 {
            let mut exact = w.wait_exact.clone().unwrap();
            // The sketch also holds processes that only slept or blocked (the off-CPU split).
            exact.retain(|c| c.wait_ns | c.io_ns | c.blocked_ns | c.sleep_ns != 0);
            assert_eq!(w.wait, exact, "wait sketch against its shadow");
            compared += usize::from(!w.wait.is_empty());
        }
        if w.io_evictions == 0 {
            let mut exact = w.io_exact.clone().unwrap();
            exact.retain(|c| c.read_bytes + c.write_bytes != 0);
            assert_eq!(w.io, exact, "I/O sketch against its shadow");
            with_io += usize::from(!w.io.is_empty());
        }
    }
    assert!(
        compared >= 30,
        "only {compared} intervals had waits to compare"
    );
    assert!(with_io >= 1, "no interval had disk I/O to compare");
}

/// A pinned process's run-queue waits, one per time a thread got a CPU: as many as the
/// timeslices /proc/PID/schedstat counts, and together as long as its run_delay grew.
#[test]
fn a_pinned_process_run_queue_waits_match_schedstat() {
    if !privileged("a_pinned_process_run_queue_waits_match_schedstat") {
        return;
    }
    let _hogs: Vec<Proc> = (0..2)
        .map(|_| on_cpu1(0, &["burn", "--duty", "1.0", "--seconds", "10"]))
        .collect();
    let victim = on_cpu1(
        0,
        &[
            "burn",
            "--duty",
            "0.3",
            "--period-ms",
            "5",
            "--seconds",
            "10",
        ],
    );
    let pid = victim.pid();
    let mut p = probes(ProbeConfig::default());
    p.set_pins(&[pid]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // Two drains: the first interval after the pin may hold a thread's first sighting.
    p.drain().unwrap();
    let (runs0, wait0) = (
        schedstat_runs(pid).unwrap(),
        schedstat_wait_ns(pid).unwrap(),
    );
    p.drain().unwrap();
    let (mut count, mut total, mut max) = (0u64, 0u64, 0u64);
    let n = 40;
    let (mut runs1, mut wait1) = (runs0, wait0);
    for i in 0..n {
        std::thread::sleep(TICK);
        if i == n - 1 {
            (runs1, wait1) = (
                schedstat_runs(pid).unwrap(),
                schedstat_wait_ns(pid).unwrap(),
            );
        }
        let raw = p.drain().unwrap();
        let q = raw
            .qos
            .iter()
            .find(|q| q.pid == pid)
            .expect("the pinned process");
        count += q.runq.count;
        total += q.runq.total_ns;
        max = max.max(q.runq.max_ns);
        assert_eq!(
            q.runq
                .hist
                .buckets
                .iter()
                .map(|&c| u64::from(c))
                .sum::<u64>(),
            q.runq.count,
            "every wait is in the histogram"
        );
    }
    let (runs, wait) = (runs1 - runs0, wait1 - wait0);
    assert!(runs > 100, "only {runs} timeslices: no contention?");
    assert!(
        within(count, runs, 0.02),
        "{count} waits recorded against schedstat's {runs} timeslices"
    );
    assert!(
        within(total, wait, 0.02),
        "{total} ns of recorded waits against schedstat's run_delay growth of {wait} ns"
    );
    assert!(max > 0 && max <= wait);
}
