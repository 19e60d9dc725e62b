//! Privileged tests of the culprits of run-queue waits on the real kernel: who ran on a
//! waiting process's CPU while it waited, against /proc/PID/schedstat (the victim's
//! `run_delay`, the hogs' on-CPU time), which no part of ebee-top computes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::process::{Command, Stdio};
use std::time::Duration;

use ebee_tests::{Proc, bin, privileged, schedstat_ns, schedstat_wait_ns};
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
    let c = Command::new("taskset")
        .args(["-c", "1", "nice", "-n", &nice.to_string()])
        .arg(bin("ebee-load"))
        .args(args)
        .stdin(Stdio::null())
        .spawn()
        .expect("taskset and nice (util-linux, coreutils)");
    Proc(c)
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
/// not, add up to its run_delay over the window, and the hogs share the blame as they shared
/// the CPU (their own schedstat on-CPU time over the same window).
#[test]
fn a_victims_waits_are_blamed_on_the_hogs_by_their_cpu_time() {
    if !privileged("a_victims_waits_are_blamed_on_the_hogs_by_their_cpu_time") {
        return;
    }
    let a = on_cpu1(0, &["burn", "--duty", "1.0", "--seconds", "20"]);
    let b = on_cpu1(5, &["burn", "--duty", "1.0", "--seconds", "20"]);
    let v = victim();
    let mut p = probes();
    std::thread::sleep(Duration::from_millis(300));
    let (va, aa, ba) = (
        schedstat_wait_ns(v.pid()).unwrap(),
        schedstat_ns(a.pid()).unwrap(),
        schedstat_ns(b.pid()).unwrap(),
    );
    p.drain().unwrap();
    let by = blame(&mut p, v.pid(), 80);
    let (vb, ab, bb) = (
        schedstat_wait_ns(v.pid()).unwrap(),
        schedstat_ns(a.pid()).unwrap(),
        schedstat_ns(b.pid()).unwrap(),
    );
    let total: u64 = by.values().sum();
    let truth = vb - va;
    assert!(truth > 200_000_000, "the victim waited only {truth} ns");
    assert!(
        (total as f64 - truth as f64).abs() <= truth as f64 * 0.05,
        "blamed {total} ns against run_delay's {truth} ns: {by:?}"
    );
    let (ga, gb) = (
        by.get(&a.pid()).copied().unwrap_or(0),
        by.get(&b.pid()).copied().unwrap_or(0),
    );
    let blamed_a = ga as f64 / (ga + gb) as f64;
    let ran_a = (ab - aa) as f64 / ((ab - aa) + (bb - ba)) as f64;
    assert!(
        (blamed_a - ran_a).abs() <= 0.15 * ran_a,
        "the nice-0 hog took {:.1}% of the hogs' blame but ran {:.1}% of their time: {by:?}",
        blamed_a * 100.0,
        ran_a * 100.0
    );
    // The hogs and the victim are all there is on the CPU: little is left unexplained.
    let unknown = by.get(&UNKNOWN).copied().unwrap_or(0);
    assert!(
        unknown * 5 < total,
        "{unknown} of {total} ns unattributed: {by:?}"
    );
}

/// The victim alone on its CPU, a hog busy on the other: the hog is never blamed (a wait is
/// charged only to what ran on the waiter's own CPU), and the victim's waits on its idle CPU
/// show as wakeup latency.
#[test]
fn a_hog_on_another_cpu_is_never_blamed() {
    if !privileged("a_hog_on_another_cpu_is_never_blamed") {
        return;
    }
    let hog = Proc(
        Command::new("taskset")
            .args(["-c", "0"])
            .arg(bin("ebee-load"))
            .args(["burn", "--duty", "1.0", "--seconds", "20"])
            .stdin(Stdio::null())
            .spawn()
            .expect("taskset"),
    );
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
