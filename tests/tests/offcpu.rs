//! Privileged tests of the off-CPU split (issue 29) on the real kernel, each against a source
//! this project did not write: an O_DIRECT writer's I/O-blocked time against delay accounting
//! (`/proc/PID/stat` field 42, `delayacct_blkio_ticks`); a nanosleep loop's and a futex
//! ping-pong's sleep against wall time less CPU and run-queue wait (`/proc/PID/task/*/schedstat`);
//! a vfork parent, which the kernel shows in the "D" state, as blocked; and `--no-culprits`.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a failed step is a failed test

use std::io::{BufRead as _, Write as _};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ebee_tests::{Proc, bin, load, privileged, schedstat_ns, schedstat_wait_ns};
use ebee_top::probes::{ProbeConfig, Probes, RawInterval};

const TICK: Duration = Duration::from_millis(50);

fn probes(cfg: ProbeConfig) -> Probes {
    let mut p = Probes::load(cfg, TICK).expect("loading the eBPF programs");
    p.drain().expect("first drain");
    p
}

/// (I/O-blocked, blocked, sleeping) ns of `pid` in one interval.
fn offcpu_of(raw: &RawInterval, pid: u32) -> [u64; 3] {
    raw.waits
        .wait
        .iter()
        .find(|w| w.tgid == pid)
        .map_or([0; 3], |w| [w.io_ns, w.blocked_ns, w.sleep_ns])
}

fn add(a: &mut [u64; 3], b: [u64; 3]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x += y;
    }
}

fn rel_err(ours: u64, truth: u64) -> f64 {
    (ours as f64 - truth as f64).abs() / truth as f64
}

/// The kernel's view of a whole process at one instant: when, its threads' on-CPU and
/// run-queue ns (schedstat), and how many threads it has.
struct Reading {
    at: Instant,
    cpu: u64,
    wait: u64,
    threads: u64,
}

fn reading(pid: u32) -> Reading {
    Reading {
        at: Instant::now(),
        cpu: schedstat_ns(pid).unwrap(),
        wait: schedstat_wait_ns(pid).unwrap(),
        threads: std::fs::read_dir(format!("/proc/{pid}/task"))
            .unwrap()
            .count() as u64,
    }
}

/// Drain every tick for `span`, from a drain just before the first reading to one just
/// before the last: the sum of `pid`'s split, and the process's time neither on a CPU nor in
/// a run queue by schedstat over the same window (threads x wall - CPU - run-queue wait).
/// `each` is called once per tick (to sample the process's state).
fn window(p: &mut Probes, pid: u32, span: Duration, mut each: impl FnMut()) -> ([u64; 3], u64) {
    p.drain().unwrap();
    let a = reading(pid);
    let mut sum = [0; 3];
    while a.at.elapsed() < span {
        std::thread::sleep(TICK);
        each();
        add(&mut sum, offcpu_of(&p.drain().unwrap(), pid));
    }
    let b = reading(pid);
    assert_eq!(
        a.threads, b.threads,
        "the thread count changed in the window"
    );
    let wall = (b.at - a.at).as_nanos() as u64;
    let off = (wall * a.threads)
        .saturating_sub(b.cpu - a.cpu)
        .saturating_sub(b.wait - a.wait);
    (sum, off)
}

/// A nanosleep loop: its sleep is its wall time less its CPU and run-queue wait (within 2%),
/// and none of it is blocked.
#[test]
fn a_nanosleep_loop_sleeps_its_wall_time_less_cpu_and_run_delay() {
    if !privileged("a_nanosleep_loop_sleeps_its_wall_time_less_cpu_and_run_delay") {
        return;
    }
    let mut p = probes(ProbeConfig::default());
    assert!(p.offcpu_available(), "this kernel has in_iowait in its BTF");
    let sleeper = load(&["sleeper", "--ms", "1", "--seconds", "8"]);
    std::thread::sleep(Duration::from_millis(300));
    let ([io, blocked, sleep], truth) =
        window(&mut p, sleeper.pid(), Duration::from_secs(3), || {});
    eprintln!(
        "nanosleep loop: sleep {sleep} ns, io {io}, blocked {blocked}; schedstat says \
         {truth} ns off CPU ({:.3}% apart)",
        rel_err(sleep, truth) * 100.0
    );
    assert!(truth > 2_000_000_000, "the loop slept {truth} ns in 3 s");
    assert!(
        rel_err(sleep, truth) <= 0.02,
        "sleep {sleep} ns against {truth} ns by schedstat"
    );
    assert!(io + blocked <= truth / 1000, "io {io}, blocked {blocked}");
}

/// Two threads that wait for each other in a futex (and sleep while holding the token): all
/// their time off a CPU is sleep, as schedstat counts it (within 2%), none blocked.
#[test]
fn a_thread_waiting_in_a_futex_is_sleeping() {
    if !privileged("a_thread_waiting_in_a_futex_is_sleeping") {
        return;
    }
    let mut p = probes(ProbeConfig::default());
    let pair = load(&["futex", "--period-ms", "5", "--seconds", "8"]);
    std::thread::sleep(Duration::from_millis(300));
    let ([io, blocked, sleep], truth) = window(&mut p, pair.pid(), Duration::from_secs(3), || {});
    eprintln!(
        "futex pair: sleep {sleep} ns, io {io}, blocked {blocked}; schedstat says {truth} ns \
         off CPU ({:.3}% apart)",
        rel_err(sleep, truth) * 100.0
    );
    // Two threads for 3 s, each waiting half the time in the futex and sleeping the other.
    assert!(truth > 5_000_000_000, "the pair was off CPU {truth} ns");
    assert!(
        rel_err(sleep, truth) <= 0.02,
        "sleep {sleep} ns against {truth} ns by schedstat"
    );
    assert!(io + blocked <= truth / 1000, "io {io}, blocked {blocked}");
}

/// A parent that waits for vfork children (20 ms each) is in the "D" state, as /proc says
/// when sampled, and its time off a CPU is blocked (not I/O, not sleep): at least 90% of what
/// schedstat counts, the rest being its short waitpid sleeps and the fork itself.
#[test]
fn a_vfork_parent_in_the_d_state_is_blocked() {
    if !privileged("a_vfork_parent_in_the_d_state_is_blocked") {
        return;
    }
    let mut p = probes(ProbeConfig::default());
    let parent = load(&["vfork-wait", "--ms", "20", "--seconds", "8"]);
    let pid = parent.pid();
    std::thread::sleep(Duration::from_millis(300));
    let (mut samples, mut in_d) = (0, 0);
    let ([io, blocked, sleep], truth) = window(&mut p, pid, Duration::from_secs(3), || {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let state = stat.rsplit_once(") ").unwrap().1.chars().next();
        samples += 1;
        in_d += u32::from(state == Some('D'));
    });
    eprintln!(
        "vfork parent: blocked {blocked} ns, io {io}, sleep {sleep}; schedstat says {truth} ns \
         off CPU; /proc said D in {in_d} of {samples} samples"
    );
    assert!(
        in_d * 10 >= samples * 8,
        "the parent was in D in only {in_d} of {samples} samples"
    );
    assert!(truth > 2_000_000_000, "the parent was off CPU {truth} ns");
    assert!(
        blocked as f64 >= truth as f64 * 0.9 && blocked as f64 <= truth as f64 * 1.02,
        "blocked {blocked} ns against {truth} ns off CPU by schedstat"
    );
    assert_eq!(io, 0, "a vfork wait is not an I/O wait");
}

/// `/proc/sys/kernel/task_delayacct`, set for the test and put back after.
struct DelayAcct(String);

impl DelayAcct {
    const PATH: &str = "/proc/sys/kernel/task_delayacct";

    fn on() -> Self {
        let was = std::fs::read_to_string(Self::PATH).expect("delay accounting (task_delayacct)");
        std::fs::write(Self::PATH, "1").unwrap();
        Self(was.trim().to_owned())
    }
}

impl Drop for DelayAcct {
    fn drop(&mut self) {
        let _ = std::fs::write(Self::PATH, &self.0);
    }
}

/// Field 42 of /proc/PID/stat: the main thread's block I/O delay, in clock ticks.
fn blkio_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields from 3 (the state) on follow the command name's closing parenthesis.
    let rest = stat.rsplit_once(") ").unwrap().1;
    rest.split_whitespace()
        .nth(42 - 3)
        .unwrap()
        .parse()
        .unwrap()
}

/// An O_DIRECT writer that fsyncs every 1 MiB request: its I/O-blocked time against the
/// kernel's delay accounting of block I/O waits over the same run, within 15% (see the assert).
#[test]
fn an_odirect_writer_is_io_blocked_as_delay_accounting_says() {
    if !privileged("an_odirect_writer_is_io_blocked_as_delay_accounting_says") {
        return;
    }
    let _acct = DelayAcct::on();
    let mut p = probes(ProbeConfig::default());
    // O_DIRECT needs a disk-backed file system: /var/tmp, not a tmpfs /tmp.
    let dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let file = dir.path().join("direct");
    let mut c = Command::new(bin("ebee-load"))
        .args(["disk", file.to_str().unwrap(), "--mib", "3072"])
        .args(["--direct", "--fsync", "--fsync-each"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("starting ebee-load disk");
    let out = c.stdout.take().unwrap();
    let mut writer = Proc(c);
    let pid = writer.pid();
    let (tx, done) = mpsc::channel();
    std::thread::spawn(move || {
        for l in std::io::BufReader::new(out).lines() {
            if l.is_ok_and(|l| l == "done") {
                let _ = tx.send(());
            }
        }
    });
    let mut step = || {
        let w = writer.0.stdin.as_mut().unwrap();
        w.write_all(b"go\n").unwrap();
        w.flush().unwrap();
    };
    // Let it block on stdin once, so the kernel side has seen the thread before it starts.
    std::thread::sleep(Duration::from_millis(200));
    p.drain().unwrap();
    let before = blkio_ticks(pid);
    step();
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut finished = None;
    let mut ours = [0; 3];
    let mut runq = 0;
    let after = loop {
        std::thread::sleep(TICK);
        if finished.is_none() && done.try_recv().is_ok() {
            finished = Some(Instant::now());
        }
        // Once it printed `done` and blocked on stdin again (which charged its last I/O wait).
        let late = finished.is_some_and(|t| t.elapsed() > Duration::from_millis(200));
        let after = late.then(|| blkio_ticks(pid));
        let raw = p.drain().unwrap();
        add(&mut ours, offcpu_of(&raw, pid));
        runq += raw
            .waits
            .wait
            .iter()
            .find(|w| w.tgid == pid)
            .map_or(0, |w| w.wait_ns);
        if let Some(a) = after {
            break a;
        }
        assert!(Instant::now() < deadline, "the writer did not finish");
    };
    step();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let truth = (after - before) * 1_000_000_000 / hz;
    let [io, blocked, sleep] = ours;
    eprintln!(
        "O_DIRECT writer: io {io} ns, blocked {blocked}, sleep {sleep}, run-queue {runq}; delay accounting says \
         {truth} ns ({} ticks at {hz} Hz; {:.2}% apart)",
        after - before,
        rel_err(io, truth) * 100.0
    );
    assert!(
        truth >= 500_000_000,
        "the writer waited only {truth} ns for I/O: ticks too coarse to compare"
    );
    // 15%: two fresh-clone CI checks measured ours 6.2% and 7.3% above delay accounting
    // (1.253 s against 118 ticks, 1.019 s against 95), runs by hand under 5%; the cause of
    // the excess is not found yet (issue 29's note). Counting the sleeps or the run-queue
    // wait as I/O would be off by far more.
    assert!(
        rel_err(io, truth) <= 0.15,
        "io {io} ns against delay accounting's {truth} ns"
    );
}

/// `--no-culprits`: the split is off, nothing is charged to it, and the rest still works.
#[test]
fn no_culprits_turns_the_split_off() {
    if !privileged("no_culprits_turns_the_split_off") {
        return;
    }
    let mut p = probes(ProbeConfig {
        no_culprits: true,
        ..Default::default()
    });
    assert!(!p.offcpu_available());
    let sleeper = load(&["sleeper", "--ms", "1", "--seconds", "3"]);
    std::thread::sleep(Duration::from_millis(300));
    let mut waits = 0;
    for _ in 0..20 {
        std::thread::sleep(TICK);
        let raw = p.drain().unwrap();
        assert!(
            raw.waits
                .wait
                .iter()
                .all(|w| w.io_ns + w.blocked_ns + w.sleep_ns == 0)
        );
        waits += raw.waits.wait.len();
    }
    assert!(waits > 0, "run-queue waits are still charged");
    drop(sleeper);
}
