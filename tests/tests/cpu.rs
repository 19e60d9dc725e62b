//! Privileged tests of the CPU pipeline on the real kernel: ranking, accuracy against
//! /proc/PID/schedstat, exits, the sketch against its exact shadow and its userspace replay.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::io::Read as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use ebee_shared::cpu::{BURST_BINS, CpuSketch, CpuTrace, TRACE_FLIP};
use ebee_tests::{bin, load, privileged, schedstat_ns, spawn_guarded};
use ebee_top::probes::{CpuCharge, ProbeConfig, Probes, RawInterval};

const TICK: Duration = Duration::from_millis(50);

fn probes(cfg: ProbeConfig) -> Probes {
    let mut p = Probes::load(cfg, TICK).expect("loading the eBPF programs");
    p.drain().expect("first drain");
    p
}

fn ns_of(raw: &RawInterval, pid: u32) -> u64 {
    raw.rows.iter().find(|r| r.tgid == pid).map_or(0, |r| r.ns)
}

/// Measure a busy child for `n` intervals of `tick`: (ebee-top per interval, schedstat delta per
/// interval read right before each flip, intervals in which the child ranked first).
fn measure_busy(tick: Duration, n: usize) -> (Vec<u64>, Vec<u64>, usize) {
    let child = load(&["burn", "--duty", "1.0"]);
    let pid = child.pid();
    let mut p = Probes::load(ProbeConfig::default(), tick).expect("loading eBPF");
    std::thread::sleep(Duration::from_millis(200));
    let mut before = schedstat_ns(pid).unwrap();
    p.drain().unwrap();
    let (mut ours, mut truth, mut first) = (Vec::new(), Vec::new(), 0);
    for _ in 0..n {
        std::thread::sleep(tick);
        let now = schedstat_ns(pid).unwrap();
        let raw = p.drain().unwrap();
        // Every CPU switched to the new interval when kicked: none had to be moved by IPI
        // (which would push a running slice into the next interval).
        assert_eq!(raw.handshake_timeouts, 0, "CPUs moved by IPI");
        ours.push(ns_of(&raw, pid));
        truth.push(now - before);
        before = now;
        if raw.rows.first().map(|r| r.tgid) == Some(pid) {
            first += 1;
        }
    }
    (ours, truth, first)
}

// schedstat (the scheduler's sum_exec_runtime) only moves at scheduler ticks while a task keeps
// running: 4 ms steps at HZ=250, so a single 50 ms interval of it is only good to about 8%.
// Hence: per-interval agreement at 500 ms intervals, and at the default 50 ms the sum over 2 s.

#[test]
fn busy_child_ranks_first_and_matches_schedstat() {
    if !privileged("busy_child_ranks_first_and_matches_schedstat") {
        return;
    }
    let (ours, truth, first) = measure_busy(TICK, 40);
    let (a, b): (u64, u64) = (ours.iter().sum(), truth.iter().sum());
    let err = (a as f64 - b as f64).abs() / b as f64;
    assert!(
        err < 0.01,
        "2 s at 50 ms intervals off by {:.2}% against schedstat ({a} vs {b})",
        err * 100.0
    );
    assert!(
        first >= 36,
        "busy child ranked first in only {first}/40 intervals"
    );
}

#[test]
fn busy_child_per_interval_matches_schedstat() {
    if !privileged("busy_child_per_interval_matches_schedstat") {
        return;
    }
    let (ours, truth, first) = measure_busy(Duration::from_millis(500), 6);
    for (o, t) in ours.iter().zip(&truth) {
        let err = (*o as f64 - *t as f64).abs() / *t as f64;
        assert!(
            err < 0.02,
            "interval off by {:.2}%: ebee-top {o} ns, schedstat {t} ns",
            err * 100.0
        );
    }
    assert_eq!(first, 6);
}

#[test]
fn duty_cycles_rank_in_order() {
    if !privileged("duty_cycles_rank_in_order") {
        return;
    }
    let c90 = load(&["burn", "--duty", "0.9", "--period-ms", "10"]);
    let c50 = load(&["burn", "--duty", "0.5", "--period-ms", "10"]);
    let c20 = load(&["burn", "--duty", "0.2", "--period-ms", "10"]);
    let mut p = probes(ProbeConfig::default());
    std::thread::sleep(Duration::from_millis(300));
    p.drain().unwrap();
    let mut sums = [0u64; 3];
    for _ in 0..30 {
        std::thread::sleep(TICK);
        let raw = p.drain().unwrap();
        for (s, c) in sums.iter_mut().zip([&c90, &c50, &c20]) {
            *s += ns_of(&raw, c.pid());
        }
    }
    assert!(
        sums[0] > sums[1] && sums[1] > sums[2] && sums[2] > 0,
        "90/50/20% duty cycles measured as {sums:?} ns"
    );
    // And roughly in proportion: 1.5 s of wall time at 90% is about 1.35 s.
    let total_ms = sums[0] as f64 / 1e6;
    assert!(
        (1000.0..1600.0).contains(&total_ms),
        "90% child got {total_ms:.0} ms of 1500"
    );
}

#[test]
fn exited_process_leaves_the_ranking() {
    if !privileged("exited_process_leaves_the_ranking") {
        return;
    }
    let mut p = probes(ProbeConfig::default());
    let child = load(&["burn", "--duty", "1.0", "--seconds", "0.3"]);
    let pid = child.pid();
    let mut seen = false;
    let mut exit_seen = false;
    let mut after_exit = Vec::new();
    for _ in 0..20 {
        std::thread::sleep(TICK);
        let raw = p.drain().unwrap();
        if exit_seen {
            after_exit.push(ns_of(&raw, pid));
        }
        seen |= ns_of(&raw, pid) > 0;
        exit_seen |= raw
            .lifecycle
            .iter()
            .any(|e| e.tgid == pid && e.kind == ebee_shared::lifecycle::EVENT_EXIT);
    }
    drop(child);
    assert!(seen, "the child never showed up");
    assert!(exit_seen, "no exit event for the child");
    assert!(after_exit.len() > 5);
    // The exit event fires at the start of do_exit; the dying task still runs its teardown
    // until its last context switch, which may land in the next interval (under load it can
    // be preempted in between). After that, nothing.
    assert!(
        after_exit.iter().skip(1).all(|ns| *ns == 0),
        "the exited child was still charged: {after_exit:?}"
    );
}

#[test]
fn sketch_equals_exact_shadow_when_nothing_is_evicted() {
    if !privileged("sketch_equals_exact_shadow_when_nothing_is_evicted") {
        return;
    }
    let _a = load(&["burn", "--duty", "0.6", "--period-ms", "7"]);
    let _b = load(&["burn", "--duty", "0.3", "--period-ms", "3"]);
    let mut p = probes(ProbeConfig {
        shadow: true,
        trace: false,
        ..Default::default()
    });
    let mut compared = 0;
    for _ in 0..20 {
        std::thread::sleep(TICK);
        let raw = p.drain().unwrap();
        let exact = raw.exact.as_ref().expect("shadow loaded");
        assert_eq!(raw.shadow_full, 0);
        if raw.evictions == 0 {
            let mut a: Vec<(u32, u64)> = raw.rows.iter().map(|r| (r.tgid, r.ns)).collect();
            let mut b: Vec<(u32, u64)> = exact.iter().map(|r| (r.tgid, r.ns)).collect();
            a.sort_unstable();
            b.sort_unstable();
            assert_eq!(a, b, "sketch and shadow disagree without any eviction");
            compared += 1;
        }
    }
    assert!(
        compared > 10,
        "too few intervals without evictions: {compared}"
    );
}

#[test]
fn userspace_replay_of_the_trace_equals_the_kernel_sketch() {
    if !privileged("userspace_replay_of_the_trace_equals_the_kernel_sketch") {
        return;
    }
    let _mix = load(&[
        "mix",
        "--procs",
        "40",
        "--churn-per-s",
        "100",
        "--seconds",
        "5",
    ]);
    let mut p = probes(ProbeConfig {
        shadow: false,
        trace: true,
        ..Default::default()
    });
    let mut updates = 0;
    for _ in 0..20 {
        std::thread::sleep(TICK);
        let raw = p.drain().unwrap();
        assert_eq!(
            raw.trace_lost, 0,
            "trace records lost; the replay would be incomplete"
        );
        let kernel = raw.sketches.as_ref().expect("sketches with trace");
        let trace: &Vec<CpuTrace> = raw.trace.as_ref().expect("trace");
        let mut replay = vec![CpuSketch::default(); kernel.len()];
        // The charges cpu_flip left for userspace are not in the kernel's stages.
        for rec in trace.iter().filter(|r| r.flags & TRACE_FLIP == 0) {
            replay[rec.cpu as usize].add(rec.slot);
        }
        updates += trace.len();
        for (cpu, (k, r)) in kernel.iter().zip(&replay).enumerate() {
            assert_eq!(
                k.stages, r.stages,
                "cpu {cpu}: replay differs from the kernel"
            );
            assert_eq!(
                (k.evicted_ns, k.evictions, k.updates),
                (r.evicted_ns, r.evictions, r.updates)
            );
        }
    }
    assert!(updates > 1000, "only {updates} updates traced");
}

/// A real-time task that never leaves its CPU: ebee-top's kick thread (lowest real-time
/// priority) cannot make that CPU switch, so the IPI fallback closes its intervals. The task
/// must still be charged in every interval it ran, within a scheduler tick of what
/// /proc/PID/schedstat says it ran between the same two drains, and not in one lump at its
/// next switch. It starts before the probes attach, so no switch on its CPU starts the clock:
/// the first IPI must (it did not, and such a task went uncharged until real-time throttling
/// or the fair server first took its CPU away, up to a second later).
#[test]
fn a_real_time_spinner_is_charged_in_every_interval() {
    if !privileged("a_real_time_spinner_is_charged_in_every_interval") {
        return;
    }
    let spinner = rt_spinner("5");
    let pid = spinner.pid();
    std::thread::sleep(Duration::from_millis(50));
    let mut p = probes(ProbeConfig::default());
    p.drain().unwrap();
    let before = schedstat_ns(pid).unwrap();
    let (mut sum, mut prev, mut moved) = (0u64, before, 0);
    // Off by more than this from schedstat: a tick at HZ=100, plus what the two drains' own
    // delays (flip to schedstat read) may differ by.
    const TOLERANCE_NS: u64 = 12_000_000;
    let mut off = Vec::new();
    for i in 0..30 {
        std::thread::sleep(TICK);
        let raw = p.drain().unwrap();
        let now = schedstat_ns(pid).unwrap();
        let (ns, truth) = (ns_of(&raw, pid), now - prev);
        prev = now;
        let len = raw.end_ns - raw.start_ns;
        assert!(
            ns <= len + len / 2,
            "{ns} ns charged in an interval of {len} ns: a lump, not a share"
        );
        if ns.abs_diff(truth) > TOLERANCE_NS {
            off.push(format!(
                "interval {i}: {ns} ns charged, schedstat {truth} ns"
            ));
        }
        sum += ns;
        moved += raw.handshake_timeouts;
    }
    assert!(off.is_empty(), "charged off schedstat:\n{}", off.join("\n"));
    let truth = prev - before;
    let err = (sum as f64 - truth as f64).abs() / truth as f64;
    assert!(
        err < 0.1,
        "{sum} ns over 30 intervals against schedstat's {truth} ns"
    );
    assert!(moved > 0, "the spinner's CPU was never moved by IPI");
}

/// The bins of `pid`'s row among `rows` as (start, end, ns), CLOCK_MONOTONIC (bin `i` of an
/// interval covers `[start + i*w, start + (i+1)*w)`, the last one up to the interval's end).
fn bins_of(raw: &RawInterval, rows: &[CpuCharge], pid: u32, out: &mut Vec<(u64, u64, u64)>) {
    let Some(r) = rows.iter().find(|r| r.tgid == pid) else {
        return;
    };
    let w = raw.bin_width_ns;
    for (i, &ns) in r.bins.iter().enumerate() {
        let start = raw.start_ns + i as u64 * w;
        let end = if i == BURST_BINS - 1 {
            raw.end_ns
        } else {
            (start + w).min(raw.end_ns)
        };
        if start < end {
            out.push((start, end, ns));
        }
    }
}

/// Burst bins against when and how long the process ran by its own clocks: `ebee-load bursts
/// --log` burns 25 ms every 100 ms and prints each burst's CLOCK_MONOTONIC start and end (the
/// clock of the flips) and the thread's CPU time in it. For the process rows, and for the
/// thread rows of the per-thread mode: the bins that overlap a burst hold its CPU time (within
/// 3% and 0.3 ms), and the bins between bursts next to nothing. A bin put in the wrong place by
/// one width fails both.
///
/// Bins are laid out in the scheduler's task clock, which stands still while the hypervisor
/// runs another guest (steal time, excluded from it on this VM): a steal of a few ms on a CPU
/// moves that CPU's later bins of the interval as many ms earlier. So one burst in ten may
/// be off (reported, with the bins around it); the rest must match exactly.
#[test]
fn burst_bins_are_where_and_what_the_process_ran() {
    if !privileged("burst_bins_are_where_and_what_the_process_ran") {
        return;
    }
    let mut p = probes(ProbeConfig::default());
    p.set_threads(true).unwrap();
    let mut child = bursts(&[]);
    let pid = child.pid();
    let (mut procs, mut threads) = (Vec::new(), Vec::new());
    let (mut from, mut to) = (u64::MAX, 0);
    let mut timeouts = 0;
    for _ in 0..60 {
        std::thread::sleep(TICK);
        let raw = p.drain().unwrap();
        timeouts += raw.handshake_timeouts;
        from = from.min(raw.start_ns);
        to = to.max(raw.end_ns);
        bins_of(&raw, &raw.rows, pid, &mut procs);
        bins_of(
            &raw,
            raw.cgroups.threads.as_deref().unwrap_or(&[]),
            pid,
            &mut threads,
        );
    }
    let bursts = burst_log(&mut child, from, to);
    for (what, bins) in [("process", &procs), ("thread", &threads)] {
        check_bursts(what, bins, &bursts, timeouts);
    }
}

/// A SCHED_FIFO 50 task spinning on CPU 1 for `seconds`.
fn rt_spinner(seconds: &str) -> ebee_tests::Proc {
    ebee_tests::Proc(
        Command::new("taskset")
            .args(["-c", "1", "chrt", "-f", "50"])
            .arg(bin("ebee-load"))
            .args(["burn", "--duty", "1.0", "--seconds", seconds])
            .spawn()
            .expect("taskset/chrt (util-linux)"),
    )
}

/// `ebee-load bursts --log`, 25 ms every 100 ms for 3 s, started through `wrap` (a command
/// and its arguments, or nothing).
fn bursts(wrap: &[&str]) -> ebee_tests::Proc {
    let mut cmd = match wrap.split_first() {
        Some((prog, args)) => {
            let mut c = Command::new(prog);
            c.args(args).arg(bin("ebee-load"));
            c
        }
        None => Command::new(bin("ebee-load")),
    };
    cmd.args(["bursts", "--burst-ms", "25", "--idle-ms", "75"])
        .args(["--seconds", "3", "--log"])
        .stdout(Stdio::piped());
    spawn_guarded(&mut cmd).unwrap()
}

/// The bursts `ebee-load bursts --log` printed (start, end, thread CPU ns), those inside
/// `[from, to]`; at least 20 of them.
fn burst_log(child: &mut ebee_tests::Proc, from: u64, to: u64) -> Vec<(u64, u64, u64)> {
    let mut log = String::new();
    child
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut log)
        .unwrap();
    let bursts: Vec<(u64, u64, u64)> = log
        .lines()
        .map(|l| {
            let v: Vec<u64> = l.split(' ').map(|x| x.parse().unwrap()).collect();
            (v[0], v[1], v[2])
        })
        .filter(|&(s, e, _)| s >= from && e <= to)
        .collect();
    assert!(
        bursts.len() >= 20,
        "only {} bursts in the window",
        bursts.len()
    );
    bursts
}

/// The bins that overlap each burst hold its CPU time (within 3% and 0.3 ms), but for at most
/// one burst in ten (reported); the bins between bursts next to nothing.
fn check_bursts(what: &str, bins: &[(u64, u64, u64)], bursts: &[(u64, u64, u64)], timeouts: u64) {
    let overlaps = |b: &(u64, u64, u64), s: u64, e: u64| b.0 < e && s < b.1;
    let held =
        |s: u64, e: u64| -> u64 { bins.iter().filter(|b| overlaps(b, s, e)).map(|b| b.2).sum() };
    let close = |ours: u64, cpu: u64| ours.abs_diff(cpu) <= cpu * 3 / 100 + 300_000;
    let mut off = Vec::new();
    for &(s, e, cpu) in bursts {
        if close(held(s, e), cpu) {
            continue;
        }
        let around: Vec<_> = bins
            .iter()
            .filter(|b| overlaps(b, s - 20_000_000, e + 20_000_000))
            .collect();
        eprintln!(
            "{what}: a burst of {cpu} ns from {s} to {e}: bins around it {around:?} \
             ({timeouts} CPUs moved by IPI)"
        );
        // Steal time moves bins earlier by up to a bin width; and full suites on this VM
        // showed bursts with 2 to 4 ms more in their bins than their own CPU clock read
        // (cause not found). Such a burst is reported above and counted.
        off.push(s);
    }
    assert!(
        off.len() * 10 <= bursts.len(),
        "{what}: {} of {} bursts are off",
        off.len(),
        bursts.len()
    );
    // Between bursts (inside the window the log covers): a wakeup and a write each time.
    let (first, last) = (bursts[0].0, bursts[bursts.len() - 1].1);
    let between: u64 = bins
        .iter()
        .filter(|b| b.0 >= first && b.1 <= last)
        .filter(|b| !bursts.iter().any(|&(s, e, _)| overlaps(b, s, e)))
        .map(|b| b.2)
        .sum();
    let total: u64 = bursts.iter().map(|b| b.2).sum();
    eprintln!(
        "{what}: {} bursts, {total} ns in them, {between} ns in bins between them",
        bursts.len()
    );
    // Bins moved by steal (above) leave their burst's time in the bin before.
    assert!(
        between <= total / 100 + total * off.len() as u64 / bursts.len() as u64,
        "{what}: {between} ns in bins between bursts"
    );
}

/// The same on a CPU that no switch moves to the next interval: a real-time spinner holds CPU 1
/// until ebee-top gives up kicking it (three misses in a row) and moves it by IPI at every
/// drain; then, while it still does, the bursts run there: a flip that finds them running
/// moves that CPU by IPI, one that finds it idle leaves it there (see the test below).
/// Bin 0 must still start at the flip (it started where the CPU last went idle, up to an
/// interval earlier, and bursts landed bins late).
#[test]
fn burst_bins_are_right_on_a_cpu_moved_by_ipi() {
    if !privileged("burst_bins_are_right_on_a_cpu_moved_by_ipi") {
        return;
    }
    let mut p = probes(ProbeConfig::default());
    let spinner = rt_spinner("0.6");
    let mut moved_in_a_row = 0;
    for _ in 0..40 {
        std::thread::sleep(TICK);
        let raw = p.drain().unwrap();
        moved_in_a_row = if raw.handshake_timeouts > 0 {
            moved_in_a_row + 1
        } else {
            0
        };
        if moved_in_a_row >= 4 {
            break;
        }
    }
    assert!(moved_in_a_row >= 4, "the spinner's CPU was not given up on");
    drop(spinner);
    let mut child = bursts(&["taskset", "-c", "1"]);
    let pid = child.pid();
    let mut procs = Vec::new();
    let (mut from, mut to, mut moved, mut n) = (u64::MAX, 0, 0, 0);
    for _ in 0..60 {
        std::thread::sleep(TICK);
        let raw = p.drain().unwrap();
        // Given up on (a miss) and moved by `cpu_flip`, or idle at the flip and left there.
        moved += usize::from(raw.handshake_timeouts > 0 || raw.idle_left > 0);
        n += 1;
        from = from.min(raw.start_ns);
        to = to.max(raw.end_ns);
        bins_of(&raw, &raw.rows, pid, &mut procs);
    }
    assert!(
        moved * 10 >= n * 9,
        "CPU 1 was moved by IPI or left idle in only {moved} of {n} drains"
    );
    let bursts = burst_log(&mut child, from, to);
    check_bursts("process", &procs, &bursts, moved as u64);
}

/// An idle CPU is left alone at the flip, neither kicked nor moved by IPI (`CpuState::seq`):
/// its next switch, out of idle, opens the new interval. The bursts of a process that runs
/// there a quarter of the time must still land in the right bins of the right intervals, and
/// nothing in between. The drain runs on CPU 0, so CPU 1 is never its own.
#[test]
fn burst_bins_are_right_on_a_cpu_left_idle_at_the_flip() {
    if !privileged("burst_bins_are_right_on_a_cpu_left_idle_at_the_flip") {
        return;
    }
    ebee_tests::pin_to_cpu(0);
    let mut p = probes(ProbeConfig::default());
    let mut child = bursts(&["taskset", "-c", "1"]);
    let pid = child.pid();
    let mut procs = Vec::new();
    let (mut from, mut to, mut left, mut moved, mut n) = (u64::MAX, 0, 0, 0, 0);
    for _ in 0..60 {
        std::thread::sleep(TICK);
        let raw = p.drain().unwrap();
        left += usize::from(raw.idle_left > 0);
        moved += raw.handshake_timeouts;
        n += 1;
        from = from.min(raw.start_ns);
        to = to.max(raw.end_ns);
        bins_of(&raw, &raw.rows, pid, &mut procs);
    }
    // The bursts take a quarter of CPU 1; the machine's other tasks some more.
    assert!(
        left * 2 >= n,
        "CPU 1 was left idle at only {left} of {n} flips"
    );
    let bursts = burst_log(&mut child, from, to);
    check_bursts("process", &procs, &bursts, moved);
}
