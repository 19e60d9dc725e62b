//! Privileged tests of the memory pipeline on the real kernel: resident memory from the
//! rss_stat tracepoint against /proc/PID/status VmRSS, growth in the interval it happened,
//! ranking order, seeding of processes that never change, attribution of a change made by
//! another process, and the sketch against its exact shadow.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use ebee_tests::{Proc, bin, privileged};
use ebee_top::batch::Batch;
use ebee_top::model::Model;
use ebee_top::probes::ProbeConfig;
use ebee_top::source::{Live, Source};

const TICK: Duration = Duration::from_millis(50);
const MIB: u64 = 1 << 20;

/// An `ebee-load hold` child driven through its stdin and stdout.
struct Holder {
    proc: Proc,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
}

impl Holder {
    fn start(mib: u64) -> Self {
        let mut c = Command::new(bin("ebee-load"))
            .args(["hold", "--mib", &mib.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("starting ebee-load hold");
        let stdin = c.stdin.take().unwrap();
        let stdout = BufReader::new(c.stdout.take().unwrap());
        let mut h = Self {
            proc: Proc(c),
            stdin,
            stdout,
        };
        assert_eq!(h.line(), "ready");
        h
    }

    fn pid(&self) -> u32 {
        self.proc.pid()
    }

    fn line(&mut self) -> String {
        let mut s = String::new();
        self.stdout.read_line(&mut s).unwrap();
        s.trim().to_owned()
    }

    /// Send a command and wait until it is done; returns the lines printed before `ok`.
    fn cmd(&mut self, c: &str) -> Vec<String> {
        writeln!(self.stdin, "{c}").unwrap();
        self.stdin.flush().unwrap();
        let mut out = Vec::new();
        loop {
            let l = self.line();
            assert!(!l.is_empty(), "ebee-load hold ended during {c:?}");
            if l == "ok" {
                return out;
            }
            out.push(l);
        }
    }
}

/// VmRSS of a process in bytes, from /proc/PID/status.
fn vmrss(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = s
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

fn live(shadow: bool) -> Live {
    Live::start(
        ProbeConfig {
            shadow,
            ..Default::default()
        },
        TICK,
    )
    .expect("loading the eBPF programs")
}

fn next(src: &mut Live, m: &mut Model) -> Batch {
    let b = src.next_batch().unwrap().unwrap();
    assert!(b.mem_stats.available, "the memory pipeline is not attached");
    m.ingest(&b);
    b
}

fn within(ours: u64, truth: u64, rel: f64, abs: u64) -> bool {
    let d = ours.abs_diff(truth);
    d <= abs || d as f64 <= truth as f64 * rel
}

/// The child's position in the model's RES ranking, and whether every process ranked above it
/// really holds about as much or more (/proc), so the check holds beside other big processes
/// (compilers run on the test machines).
fn rank_is_right(m: &Model, pid: u32) -> (Option<usize>, bool) {
    let top = m.mem.sketch.top_rss(usize::MAX);
    let pos = top.iter().position(|e| e.pid == pid);
    let Some(p) = pos else { return (None, false) };
    let mine = top[p].rss_bytes;
    let above_ok = top[..p]
        .iter()
        .all(|e| vmrss(e.pid).is_none_or(|v| v as f64 >= mine as f64 * 0.98));
    (pos, above_ok)
}

#[test]
fn a_256_mib_child_ranks_first_matches_vmrss_and_drops_after_munmap() {
    if !privileged("a_256_mib_child_ranks_first_matches_vmrss_and_drops_after_munmap") {
        return;
    }
    let mut h = Holder::start(0);
    let mut src = live(false);
    let mut m = Model::new();
    next(&mut src, &mut m);
    h.cmd("grow 256");
    let mut ok = false;
    for i in 0..2 {
        next(&mut src, &mut m);
        let truth = vmrss(h.pid()).unwrap();
        let ours = m.mem.sketch.rss_of(h.pid()).unwrap_or(0);
        let (pos, above_ok) = rank_is_right(&m, h.pid());
        eprintln!(
            "interval {i}: ours {ours} VmRSS {truth} rank {pos:?} (above it all bigger: {above_ok})"
        );
        if above_ok && within(ours, truth, 0.02, 0) {
            ok = true;
            break;
        }
    }
    assert!(ok, "256 MiB child not ranked right within two intervals");
    assert!(m.mem.sketch.rss_of(h.pid()).unwrap() >= 256 * MIB);

    h.cmd("free");
    let mut dropped = false;
    for _ in 0..2 {
        next(&mut src, &mut m);
        let truth = vmrss(h.pid()).unwrap();
        let ours = m.mem.sketch.rss_of(h.pid()).unwrap_or(0);
        eprintln!("after munmap: ours {ours} VmRSS {truth}");
        if ours < 16 * MIB && within(ours, truth, 0.02, 256 * 1024) {
            dropped = true;
            break;
        }
    }
    assert!(dropped, "RSS did not drop after munmap");
}

#[test]
fn a_64_mib_burst_shows_as_growth_in_its_interval() {
    if !privileged("a_64_mib_burst_shows_as_growth_in_its_interval") {
        return;
    }
    let mut h = Holder::start(16);
    let mut src = live(false);
    let mut m = Model::new();
    next(&mut src, &mut m);
    next(&mut src, &mut m);
    // The burst runs entirely between two flips: after one interval is closed and before the
    // next one is.
    h.cmd("grow 64");
    let b = next(&mut src, &mut m);
    let row = b
        .mem
        .iter()
        .find(|r| r.pid == h.pid())
        .expect("the burst's process is in the interval's rows");
    assert!(
        within(row.rss_delta_bytes.unsigned_abs(), 64 * MIB, 0.02, 0) && row.rss_delta_bytes > 0,
        "growth {} bytes, expected 64 MiB",
        row.rss_delta_bytes
    );
    let g = m.mem.sketch.top_growth(usize::MAX);
    let e = g.iter().find(|e| e.pid == h.pid()).unwrap();
    assert!(e.growth_per_s > 0.0);
    // Every process ranked above it in growth really grew more.
    assert!(
        g.iter()
            .take_while(|x| x.pid != h.pid())
            .all(|x| x.rss_delta_bytes >= e.rss_delta_bytes)
    );
    // And the next interval, which saw no change, shows none.
    next(&mut src, &mut m);
    let e = m.mem.sketch.top_rss(usize::MAX);
    let e = e.iter().find(|e| e.pid == h.pid()).unwrap();
    assert_eq!(e.rss_delta_bytes, 0);
    assert!(within(e.rss_bytes, vmrss(h.pid()).unwrap(), 0.02, 0));
}

#[test]
fn ten_children_rank_in_exact_order_in_sketch_and_shadow() {
    if !privileged("ten_children_rank_in_exact_order_in_sketch_and_shadow") {
        return;
    }
    let mut src = live(true);
    let mut m = Model::new();
    next(&mut src, &mut m);
    // Started after the probes: every MiB arrives through rss_stat, none through the seed.
    let kids: Vec<Holder> = (1..=10).map(|i| Holder::start(10 * i)).collect();
    next(&mut src, &mut m);
    next(&mut src, &mut m);
    let mine = |v: &ebee_top::model::mem::MemView| -> Vec<u32> {
        v.top_rss(usize::MAX)
            .iter()
            .map(|e| e.pid)
            .filter(|p| kids.iter().any(|k| k.pid() == *p))
            .collect()
    };
    let want: Vec<u32> = kids.iter().rev().map(Holder::pid).collect();
    assert_eq!(mine(&m.mem.sketch), want, "sketch order");
    assert_eq!(
        mine(m.mem.exact.as_ref().expect("exact shadow rows")),
        want,
        "shadow order"
    );
    for (i, k) in kids.iter().enumerate() {
        let ours = m.mem.sketch.rss_of(k.pid()).unwrap();
        let truth = vmrss(k.pid()).unwrap();
        assert!(
            within(ours, truth, 0.02, 0),
            "child {i}: ours {ours} VmRSS {truth}"
        );
        assert!(ours >= (10 * (i as u64 + 1)) * MIB);
    }
}

#[test]
fn processes_that_never_change_rank_from_the_first_interval() {
    if !privileged("processes_that_never_change_rank_from_the_first_interval") {
        return;
    }
    // Allocated before ebee-top starts and never touched again: only the /proc seed knows it.
    let h = Holder::start(128);
    let mut src = live(false);
    let mut m = Model::new();
    let b = next(&mut src, &mut m);
    assert_eq!(b.seq, 1);
    let ours = m.mem.sketch.rss_of(h.pid()).expect("seeded from /proc");
    let truth = vmrss(h.pid()).unwrap();
    assert!(within(ours, truth, 0.02, 0), "ours {ours} VmRSS {truth}");
    let (pos, above_ok) = rank_is_right(&m, h.pid());
    assert!(pos.is_some() && above_ok, "rank {pos:?}");
    // It is in the first batch's rows, so a replay from there ranks it too.
    assert!(b.mem.iter().any(|r| r.pid == h.pid()));
}

#[test]
fn memory_faulted_in_by_another_process_is_charged_to_the_owner() {
    if !privileged("memory_faulted_in_by_another_process_is_charged_to_the_owner") {
        return;
    }
    let mut h = Holder::start(0);
    let out = h.cmd("map 32");
    let addr = out
        .iter()
        .find_map(|l| l.strip_prefix("addr 0x"))
        .and_then(|a| usize::from_str_radix(a, 16).ok())
        .expect("address of the untouched mapping");
    let mut src = live(false);
    let mut m = Model::new();
    next(&mut src, &mut m);
    let me = std::process::id();
    let my_rss = m.mem.sketch.rss_of(me).unwrap_or(0);
    // This process writes one byte into every page of the child's mapping: the page faults
    // happen in our context (`current` is us) on the child's mm.
    let one = [1u8];
    let pages = 32 * MIB as usize / 4096;
    for chunk in (0..pages).collect::<Vec<_>>().chunks(512) {
        let local = [libc::iovec {
            iov_base: one.as_ptr() as *mut libc::c_void,
            iov_len: 1,
        }];
        let remote: Vec<libc::iovec> = chunk
            .iter()
            .map(|p| libc::iovec {
                iov_base: (addr + p * 4096) as *mut libc::c_void,
                iov_len: 1,
            })
            .collect();
        for r in remote {
            // SAFETY: valid iovec arrays of length 1 that outlive the call.
            let n = unsafe { libc::process_vm_writev(h.pid() as i32, local.as_ptr(), 1, &r, 1, 0) };
            assert_eq!(
                n,
                1,
                "process_vm_writev: {}",
                std::io::Error::last_os_error()
            );
        }
    }
    next(&mut src, &mut m);
    let truth = vmrss(h.pid()).unwrap();
    assert!(truth >= 32 * MIB, "the child's pages are resident");
    let ours = m.mem.sketch.rss_of(h.pid()).unwrap_or(0);
    assert!(
        within(ours, truth, 0.02, 0),
        "child charged {ours}, VmRSS {truth}"
    );
    // And not to us: our own RSS did not grow by the child's 32 MiB.
    let mine_now = m.mem.sketch.rss_of(me).unwrap_or(0);
    assert!(
        mine_now < my_rss + 16 * MIB,
        "the writer was charged: {my_rss} -> {mine_now}"
    );
}

#[test]
fn userspace_replay_of_the_trace_gives_the_kernels_sketches() {
    use ebee_shared::hashpipe;
    use ebee_shared::mem::{MEM_SLOTS, MEM_STAGES, MemSlot};
    use ebee_top::probes::Probes;
    if !privileged("userspace_replay_of_the_trace_gives_the_kernels_sketches") {
        return;
    }
    let mut h = Holder::start(0);
    let mut p = Probes::load(
        ProbeConfig {
            trace: true,
            ..Default::default()
        },
        TICK,
    )
    .expect("loading the eBPF programs");
    p.drain().unwrap();
    let mut updates = 0;
    for i in 0..6 {
        if i % 2 == 0 {
            h.cmd("grow 8");
        } else {
            std::thread::sleep(TICK);
        }
        let raw = p.drain().unwrap();
        let mem = raw.mem.expect("memory pipeline attached");
        let trace = mem.trace.expect("trace loaded");
        let sketches = mem.sketches.expect("sketches kept with the trace");
        let mut replay = vec![[[MemSlot::default(); MEM_SLOTS]; MEM_STAGES]; sketches.len()];
        for r in &trace {
            let _ = hashpipe::update(&mut replay[r.cpu as usize], r.slot);
        }
        for (cpu, (k, u)) in sketches.iter().zip(&replay).enumerate() {
            assert!(
                k.stages == *u,
                "interval {i}, CPU {cpu}: replay differs from the kernel"
            );
        }
        assert_eq!(trace.len() as u64, mem.updates, "every update traced");
        updates += mem.updates;
    }
    assert!(updates > 0, "no memory updates seen");
    assert_eq!(p.drain().unwrap().trace_lost, 0);
}

#[test]
fn sketch_equals_exact_shadow_when_nothing_is_evicted() {
    use ebee_top::probes::Probes;
    if !privileged("sketch_equals_exact_shadow_when_nothing_is_evicted") {
        return;
    }
    let _mix = ebee_tests::load(&[
        "mem-mix",
        "--procs",
        "60",
        "--top-mib",
        "64",
        "--seconds",
        "8",
    ]);
    std::thread::sleep(Duration::from_millis(500));
    let mut p = Probes::load(
        ProbeConfig {
            shadow: true,
            ..Default::default()
        },
        TICK,
    )
    .expect("loading the eBPF programs");
    p.drain().unwrap();
    let (mut compared, mut readings) = (0, 0);
    for _ in 0..30 {
        std::thread::sleep(TICK);
        let mem = p.drain().unwrap().mem.expect("memory pipeline attached");
        assert_eq!(mem.shadow_full, 0);
        if mem.evictions > 0 {
            continue;
        }
        let key = |v: &[ebee_top::probes::mem::MemReading]| -> Vec<(u32, u64, u64)> {
            v.iter().map(|r| (r.tgid, r.pages, r.ts)).collect()
        };
        assert_eq!(
            key(&mem.readings),
            key(mem.exact.as_deref().unwrap()),
            "sketch and shadow disagree in an interval without evictions"
        );
        compared += 1;
        readings += mem.readings.len();
    }
    assert!(
        compared >= 20,
        "only {compared} intervals without evictions"
    );
    assert!(readings > 100, "only {readings} readings compared");
}

/// GROWTH/s against /proc: a process growing 20 MiB/s in 2 MiB steps for 2 s. Summed over the
/// intervals, the growth per second the Model shows times each interval's length is the growth
/// VmRSS shows over the same window (read right after the drains that bound it), within 5%.
#[test]
fn growth_per_second_matches_vmrss_over_the_same_window() {
    if !privileged("growth_per_second_matches_vmrss_over_the_same_window") {
        return;
    }
    let mut h = Holder::start(8);
    let mut src = live(false);
    let mut m = Model::new();
    next(&mut src, &mut m);
    next(&mut src, &mut m);
    let rss0 = vmrss(h.pid()).unwrap();
    let (mut grown, mut span_ns) = (0.0f64, 0u64);
    for _ in 0..20 {
        h.cmd("grow 2");
        for _ in 0..2 {
            let b = next(&mut src, &mut m);
            span_ns += b.interval_ns();
            let shown = m
                .mem
                .sketch
                .top_rss(usize::MAX)
                .into_iter()
                .find(|e| e.pid == h.pid())
                .map_or(0.0, |e| e.growth_per_s);
            grown += shown * b.interval_ns() as f64 / 1e9;
        }
    }
    let rss1 = vmrss(h.pid()).unwrap();
    let secs = span_ns as f64 / 1e9;
    let (ours, truth) = (grown / secs, (rss1 - rss0) as f64 / secs);
    eprintln!(
        "growth: shown {:.2} MiB/s, VmRSS {:.2} MiB/s over {secs:.2} s",
        ours / MIB as f64,
        truth / MIB as f64
    );
    assert!(truth > 10.0 * MIB as f64, "the child grew: {truth}");
    assert!(
        (ours - truth).abs() <= truth * 0.05,
        "GROWTH/s {ours:.0} vs VmRSS {truth:.0} B/s"
    );
}
