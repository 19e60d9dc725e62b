//! Privileged tests of the culprits of run-queue waits on the real kernel: who ran on a
//! waiting process's CPU while it waited, against /proc/PID/schedstat (the victim's
//! `run_delay`, the hogs' on-CPU time), which no part of ebee-top computes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::process::{Command, Stdio};
use std::time::Duration;

use ebee_tests::{Proc, privileged, schedstat_wait_ns};
use ebee_top::probes::wait::PairCharge;
use ebee_top::probes::{ProbeConfig, Probes, RawInterval};

const TICK: Duration = Duration::from_millis(50);
const IDLE: u32 = 0;
const UNKNOWN: u32 = u32::MAX;

fn probes() -> Probes {
    let mut p = Probes::load(ProbeConfig::default(), TICK).expect("loading the eBPF programs");
    assert!(
        p.offcpu_available(),
        "this kernel has sched_info and in_iowait (TOOLCHAIN.md)"
    );
    p.drain().expect("first drain");
    p
}

/// `ebee-load` on CPU 1 at niceness `nice`.
fn on_cpu1(nice: i32, args: &[&str]) -> Proc {
    ebee_tests::ebee_load_on(1, nice, args)
}

/// A process that wakes every 4 ms and runs 0.4 ms of it.
fn victim() -> Proc {
    on_cpu1(
        0,
        &[
            "burn",
            "--duty",
            "0.1",
            "--period-ms",
            "4",
            "--seconds",
            "20",
        ],
    )
}

fn pairs_of(raw: &RawInterval, victim: u32) -> impl Iterator<Item = &PairCharge> {
    raw.waits.pairs.iter().filter(move |p| p.victim == victim)
}

/// Drain `n` intervals; returns the victim's wait by culprit, summed.
fn blame(p: &mut Probes, victim: u32, n: usize) -> std::collections::HashMap<u32, u64> {
    let mut by = std::collections::HashMap::new();
    for _ in 0..n {
        std::thread::sleep(TICK);
        let raw = p.drain().unwrap();
        for c in pairs_of(&raw, victim) {
            *by.entry(c.culprit).or_insert(0) += c.wait_ns;
        }
    }
    by
}

/// A victim and two CPU hogs at nice 0 and 5 share CPU 1: the victim's waits, attributed and
/// not, add up to its run_delay over the window, and the blame is split between the hogs as
/// the scheduler's own tracepoints, recorded by perf, say they ran while it waited.
///
/// Not as their CPU time: EEVDF lets a waking task preempt a nice-5 hog (a later virtual
/// deadline) sooner than a nice-0 one, so the victim waits longer behind the nice-0 hog than
/// its share of the CPU (measured: 93% of the blame for 75% of the hogs' time).
#[test]
fn a_victims_waits_are_blamed_on_the_hogs_that_ran_in_them() {
    if !privileged("a_victims_waits_are_blamed_on_the_hogs_that_ran_in_them") {
        return;
    }
    let a = on_cpu1(0, &["burn", "--duty", "1.0", "--seconds", "20"]);
    let b = on_cpu1(5, &["burn", "--duty", "1.0", "--seconds", "20"]);
    let v = victim();
    let mut p = probes();
    std::thread::sleep(Duration::from_millis(300));
    let data = std::env::temp_dir().join(format!("ebee-culprits-{}.perf", std::process::id()));
    let mut perf = Command::new("perf")
        .args([
            "record",
            "-q",
            "-a",
            "-e",
            "sched:sched_switch",
            "-e",
            "sched:sched_wakeup",
        ])
        .arg("-o")
        .arg(&data)
        .args(["--", "sleep", "4"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("perf (linux-perf)");
    // perf attaches in well under a second; our window starts inside its span.
    std::thread::sleep(Duration::from_millis(500));
    let va = schedstat_wait_ns(v.pid()).unwrap();
    p.drain().unwrap();
    let by = blame(&mut p, v.pid(), 60);
    let vb = schedstat_wait_ns(v.pid()).unwrap();
    assert!(perf.wait().unwrap().success(), "perf record failed");
    let total: u64 = by.values().sum();
    let truth = vb - va;
    assert!(truth > 200_000_000, "the victim waited only {truth} ns");
    assert!(
        (total as f64 - truth as f64).abs() <= truth as f64 * 0.05,
        "blamed {total} ns against run_delay's {truth} ns: {by:?}"
    );
    let script = Command::new("perf")
        .args(["script", "-F", "cpu,time,event,trace", "-i"])
        .arg(&data)
        .output()
        .expect("perf script");
    let _ = std::fs::remove_file(&data);
    let trace = perf_blame(&String::from_utf8_lossy(&script.stdout), v.pid(), 1);
    let share = |m: &std::collections::HashMap<u32, u64>| {
        let (x, y) = (
            m.get(&a.pid()).copied().unwrap_or(0) as f64,
            m.get(&b.pid()).copied().unwrap_or(0) as f64,
        );
        x / (x + y)
    };
    let (ours, theirs) = (share(&by), share(&trace));
    eprintln!(
        "victim waited {truth} ns (run_delay), blamed {total} ns; the nice-0 hog's share of the \
         hogs' blame: ours {:.1}%, perf's {:.1}%",
        ours * 100.0,
        theirs * 100.0
    );
    assert!(
        theirs > 0.0 && (ours - theirs).abs() <= 0.15 * theirs,
        "the nice-0 hog took {:.1}% of the hogs' blame; perf's trace says {:.1}%: ours {by:?}, perf's {trace:?}",
        ours * 100.0,
        theirs * 100.0
    );
    // The hogs and the victim are all there is on the CPU: little is left unexplained.
    let unknown = by.get(&UNKNOWN).copied().unwrap_or(0);
    assert!(
        unknown * 5 < total,
        "{unknown} of {total} ns unattributed: {by:?}"
    );
}

/// From `perf script` lines of sched_switch and sched_wakeup: each wait of thread `victim` on
/// CPU `cpu` (from its wakeup there, or its switch-out while runnable, to its switch-in) split
/// over the threads that ran on that CPU meanwhile, in ns.
fn perf_blame(script: &str, victim: u32, cpu: u32) -> std::collections::HashMap<u32, u64> {
    let mut by = std::collections::HashMap::new();
    let mut running: Option<(u32, f64)> = None; // who runs on `cpu`, since when
    let mut waiting: Option<f64> = None; // the victim is runnable since
    let value = |t: &str, key: &str| -> Option<String> {
        t.split_whitespace()
            .rev()
            .find_map(|w| w.strip_prefix(key).map(str::to_owned))
    };
    for l in script.lines() {
        let Some((head, trace)) = l.split_once(": sched:") else {
            continue;
        };
        let mut h = head.split_whitespace();
        let on: u32 = h
            .next()
            .and_then(|c| c.trim_matches(['[', ']']).parse().ok())
            .unwrap_or(u32::MAX);
        let Some(t) = h
            .next()
            .and_then(|t| t.trim_end_matches(':').parse::<f64>().ok())
        else {
            continue;
        };
        if let Some(w) = trace.strip_prefix("sched_wakeup: ") {
            let pid: Option<u32> = value(w, "pid=").and_then(|p| p.parse().ok());
            let target: Option<u32> = value(w, "target_cpu=").and_then(|c| c.parse().ok());
            if pid == Some(victim) && target == Some(cpu) && waiting.is_none() {
                waiting = Some(t);
            }
        } else if let Some(sw) = trace.strip_prefix("sched_switch: ") {
            if on != cpu {
                continue;
            }
            let Some((prev, next)) = sw.split_once(" ==> ") else {
                continue;
            };
            let prev_pid: Option<u32> = value(prev, "prev_pid=").and_then(|p| p.parse().ok());
            let next_pid: Option<u32> = value(next, "next_pid=").and_then(|p| p.parse().ok());
            let state = value(prev, "prev_state=").unwrap_or_default();
            // The slice that ends here, charged for the part inside the victim's wait.
            if let (Some((who, since)), Some(w)) = (running, waiting)
                && who != victim
            {
                let from = if since > w { since } else { w };
                if t > from {
                    *by.entry(who).or_insert(0) += ((t - from) * 1e9) as u64;
                }
            }
            if prev_pid == Some(victim) && state.starts_with('R') {
                waiting = Some(t);
            }
            if next_pid == Some(victim) {
                waiting = None;
            }
            running = next_pid.map(|p| (p, t));
        }
    }
    by
}

/// The victim alone on its CPU, a hog busy on the other: the hog is never blamed (a wait is
/// charged only to what ran on the waiter's own CPU), and the victim's waits on its idle CPU
/// show as wakeup latency.
#[test]
fn a_hog_on_another_cpu_is_never_blamed() {
    if !privileged("a_hog_on_another_cpu_is_never_blamed") {
        return;
    }
    let hog = ebee_tests::ebee_load_on(0, 0, &["burn", "--duty", "1.0", "--seconds", "20"]);
    let v = victim();
    let mut p = probes();
    std::thread::sleep(Duration::from_millis(300));
    p.drain().unwrap();
    let idle0 = cpu1_idle_ticks();
    let by = blame(&mut p, v.pid(), 40);
    let idle = cpu1_idle_ticks() - idle0;
    let total: u64 = by.values().sum();
    assert!(total > 0, "the victim never waited: {by:?}");
    assert_eq!(
        by.get(&hog.pid()),
        None,
        "the hog on CPU 0 was blamed for waits on CPU 1: {by:?}"
    );
    // Where CPU 1 idled (half the window or more, by /proc/stat), the victim woke on an idle
    // CPU: wakeup latency. (On a machine that keeps CPU 1 busy there may be none.)
    if idle >= 100 {
        assert!(
            by.get(&IDLE).is_some_and(|&ns| ns > 0),
            "CPU 1 idled {idle} ticks but no wakeup latency: {by:?}"
        );
    }
}

/// Idle time of CPU 1 so far, in USER_HZ ticks (/proc/stat).
fn cpu1_idle_ticks() -> u64 {
    let s = std::fs::read_to_string("/proc/stat").unwrap();
    let l = s.lines().find(|l| l.starts_with("cpu1 ")).unwrap();
    l.split_whitespace().nth(4).unwrap().parse().unwrap()
}
