//! Workload generator for ebee-top's tests and benchmarks: CPU burners with a duty cycle,
//! short-lived process storms, skewed mixes of many processes, memory holders, disk I/O, and
//! socket servers and clients.

mod disk;
mod light;
mod mem;
mod net;
mod offcpu;
mod syscalls;
mod threads;

use mem::{MIB, Region};

use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};

#[derive(Parser)]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Burn CPU `duty` of every `period_ms` (duty 1.0: never sleep).
    Burn {
        #[arg(long, default_value_t = 1.0)]
        duty: f64,
        #[arg(long, default_value_t = 10)]
        period_ms: u64,
        /// Stop after this many seconds (default: run until killed).
        #[arg(long)]
        seconds: Option<f64>,
    },
    /// Sleep `idle_ms`, then burn `burst_ms`, repeatedly.
    Bursts {
        #[arg(long)]
        burst_ms: u64,
        #[arg(long)]
        idle_ms: u64,
        #[arg(long)]
        seconds: Option<f64>,
        /// Print `START END CPU` per burst: its CLOCK_MONOTONIC ns at both ends and the
        /// thread's own CPU time in it (CLOCK_THREAD_CPUTIME_ID), ns.
        #[arg(long)]
        log: bool,
    },
    /// Start `procs` light processes, each waking about every `period_ms` (random phase and
    /// jitter) to burn `burn_us` of CPU, for `seconds`.
    Light {
        #[arg(long, default_value_t = 2000)]
        procs: u32,
        #[arg(long, default_value_t = 100)]
        period_ms: u64,
        #[arg(long, default_value_t = 50)]
        burn_us: u64,
        #[arg(long)]
        seconds: f64,
    },
    /// Start `procs` processes that sleep until killed (and stay until this process is killed).
    Idle {
        #[arg(long)]
        procs: u32,
    },
    /// A storm of short-lived processes: `per_s` per second, each burning 5-20 ms of CPU and
    /// exiting, named `ebee-storm`. On exit prints the CPU time the storm used in total (ns,
    /// from getrusage(RUSAGE_CHILDREN), the kernel's own accounting) on stdout.
    Storm {
        #[arg(long, default_value_t = 500)]
        per_s: u32,
        #[arg(long)]
        seconds: f64,
    },
    /// Two processes bounce a byte through a pair of pipes on one CPU; prints the mean wall ns
    /// per context switch (elapsed / (2 * round trips)) and the mean CPU ns per switch (both
    /// processes' CPU time / switches) on stdout, space-separated.
    Pingpong {
        #[arg(long, default_value_t = 200_000)]
        round_trips: u64,
        /// CPU to pin both processes to.
        #[arg(long, default_value_t = 1)]
        cpu: usize,
    },
    /// A tight loop of `calls` syscalls, started by a byte on stdin (so it can be pinned
    /// first); prints the mean ns per loop iteration. `getppid`: one syscall per iteration.
    /// `tcp`: a request/response over loopback TCP per iteration (client write, server read,
    /// server write, client read: four syscalls), connected before the start byte. `tcp-self`:
    /// a byte written to and read back from a TCP socket connected to itself (two socket calls
    /// on a TCP socket that is no server connection). `udp`: a datagram sent on one connected
    /// UDP socket and received on the other (two socket calls).
    Syscalls {
        #[arg(long, default_value_t = 2_000_000)]
        calls: u64,
        #[arg(long, default_value = "getppid")]
        kind: String,
    },
    /// Print how many eBPF programs and maps the kernel holds, all owners (`programs N maps
    /// M`): the kernel matrix checks that ebee-top leaves none behind when it exits.
    BpfObjects,
    /// Sleep `ms` in a loop (nanosleep), forever or for `seconds`.
    Sleeper {
        #[arg(long, default_value_t = 10)]
        ms: u64,
        #[arg(long)]
        seconds: Option<f64>,
    },
    /// Hold `mib` MiB of touched anonymous memory, then obey commands on stdin, one per line,
    /// answering each with `ok` on stdout once done: `grow N` maps and touches N MiB more,
    /// `map N` maps N MiB without touching them and prints `addr 0x...` first (for another
    /// process to fault in), `free` unmaps everything. Prints `ready` once the first `mib`
    /// are touched.
    Hold {
        #[arg(long, default_value_t = 0)]
        mib: u64,
    },
    /// Page-fault loop: map `mib` MiB, touch every page, unmap; `rounds` times. Prints the mean
    /// ns per page (each page is one rss_stat event when faulted in, and fewer when unmapped,
    /// which is batched).
    Faults {
        #[arg(long, default_value_t = 64)]
        mib: u64,
        #[arg(long, default_value_t = 20)]
        rounds: u32,
    },
    /// Start `procs` processes holding Zipf-skewed memory (process i about `top_mib / i^skew`
    /// MiB) that each moves at random between half and one and a half of its share every
    /// 50-300 ms, for `seconds`.
    MemMix {
        #[arg(long, default_value_t = 200)]
        procs: u32,
        #[arg(long, default_value_t = 256.0)]
        top_mib: f64,
        #[arg(long, default_value_t = 1.0)]
        skew: f64,
        #[arg(long)]
        seconds: f64,
    },
    /// Disk I/O through the block layer: write `mib` MiB to `path` in 1 MiB requests (or read
    /// it whole with `--read`), O_DIRECT with `--direct`, fsync'd at the end with `--fsync`.
    /// Starts on a line on stdin, prints `done`, and exits on the next line (or EOF).
    Disk {
        path: std::path::PathBuf,
        #[arg(long, default_value_t = 64)]
        mib: u64,
        #[arg(long)]
        read: bool,
        #[arg(long)]
        direct: bool,
        #[arg(long)]
        fsync: bool,
        /// fsync after every 1 MiB request too.
        #[arg(long)]
        fsync_each: bool,
    },
    /// Two threads handing a token back and forth through a futex-backed condition variable
    /// every `period_ms` (the one without it waits in the futex, interruptibly), for
    /// `seconds`.
    Futex {
        #[arg(long, default_value_t = 5)]
        period_ms: u64,
        #[arg(long)]
        seconds: f64,
    },
    /// vfork a child that sleeps `ms` and exits, in a loop, for `seconds`: the parent waits
    /// for it in `TASK_KILLABLE` (uninterruptible, killable), the "D" state.
    VforkWait {
        #[arg(long, default_value_t = 20)]
        ms: u64,
        #[arg(long)]
        seconds: f64,
    },
    /// A TCP server on 127.0.0.1:`port` answering 4-byte requests with 4 bytes after a delay:
    /// `fast_us`, or `slow_us` for every `slow_every`-th request of a connection. Thread per
    /// connection; with `--split` one thread reads a connection's requests and another answers
    /// them. Each waits by sleeping until `spin_us` before its deadline, then spinning; with
    /// `--fifo` at real-time priority 1 (root), so other load does not delay the answers.
    /// Prints `ready` once listening; runs until killed.
    DelayServer {
        #[arg(long)]
        port: u16,
        #[arg(long, default_value_t = 1_000)]
        fast_us: u64,
        #[arg(long, default_value_t = 10_000)]
        slow_us: u64,
        #[arg(long, default_value_t = 10)]
        slow_every: u64,
        #[arg(long, default_value_t = 0)]
        spin_us: u64,
        #[arg(long)]
        split: bool,
        #[arg(long)]
        fifo: bool,
    },
    /// `conns` keep-alive connections to a `delay-server` on 127.0.0.1:`port`, each sending a
    /// request, waiting for the answer and `think_ms`, for `seconds`; then waits for the answers
    /// still due and prints the number of requests completed.
    DelayClient {
        #[arg(long)]
        port: u16,
        #[arg(long, default_value_t = 8)]
        conns: u32,
        #[arg(long, default_value_t = 0)]
        think_ms: u64,
        #[arg(long)]
        seconds: f64,
    },
    /// Connect to `to` (`tcp:HOST:PORT` or `unix:PATH`), send `send` bytes, read `recv` bytes,
    /// exit.
    Bytes {
        #[arg(long)]
        to: String,
        #[arg(long, default_value_t = 0)]
        send: u64,
        #[arg(long, default_value_t = 0)]
        recv: u64,
    },
    /// `procs` processes writing Zipf-skewed amounts through the page cache (process i about
    /// `top_kib / i^skew` KiB every 50 ms, every tenth also reading back from disk), in `dir`,
    /// for `seconds`.
    IoMix {
        dir: std::path::PathBuf,
        #[arg(long, default_value_t = 40)]
        procs: u32,
        #[arg(long, default_value_t = 2048.0)]
        top_kib: f64,
        #[arg(long, default_value_t = 1.0)]
        skew: f64,
        #[arg(long)]
        seconds: f64,
    },
    /// Start `procs` burners with Zipf-skewed duty cycles (process i burns about
    /// `top_duty / i^skew`), plus `churn_per_s` short-lived processes per second that burn
    /// 5-20 ms each and exit.
    Mix {
        #[arg(long, default_value_t = 200)]
        procs: u32,
        #[arg(long, default_value_t = 0.9)]
        top_duty: f64,
        #[arg(long, default_value_t = 1.0)]
        skew: f64,
        #[arg(long, default_value_t = 50)]
        churn_per_s: u32,
        #[arg(long)]
        seconds: f64,
    },
    /// `threads` threads over `procs` processes with Zipf-skewed duty cycles (the thread of
    /// rank r burns about `top_duty / r^skew`, ranks interleaved over the processes), for
    /// `seconds`.
    Threads {
        #[arg(long, default_value_t = 20)]
        procs: u32,
        #[arg(long, default_value_t = 10_000)]
        threads: u32,
        #[arg(long, default_value_t = 0.3)]
        top_duty: f64,
        #[arg(long, default_value_t = 1.2)]
        skew: f64,
        #[arg(long)]
        seconds: f64,
    },
    /// One process of `threads` (started by it).
    ThreadGroup {
        #[arg(long)]
        index: u32,
        #[arg(long)]
        procs: u32,
        #[arg(long)]
        threads: u32,
        #[arg(long)]
        top_duty: f64,
        #[arg(long)]
        skew: f64,
        #[arg(long)]
        seconds: f64,
    },
}

fn burn_until(t: Instant) {
    while Instant::now() < t {
        std::hint::spin_loop();
    }
}

fn burn(duty: f64, period: Duration, stop: Option<Instant>) {
    let mut next = Instant::now();
    loop {
        if stop.is_some_and(|s| Instant::now() >= s) {
            return;
        }
        let busy = period.mul_f64(duty.clamp(0.0, 1.0));
        burn_until(next + busy);
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
}

fn deadline(seconds: Option<f64>) -> Option<Instant> {
    seconds.map(|s| Instant::now() + Duration::from_secs_f64(s))
}

/// A deterministic xorshift, so a mix is the same from run to run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn mix(procs: u32, top_duty: f64, skew: f64, churn_per_s: u32, seconds: f64) {
    let me = std::env::current_exe().unwrap_or_else(|_| "ebee-load".into());
    let mut children = Vec::new();
    for i in 1..=procs {
        let duty = top_duty / f64::from(i).powf(skew);
        // Spread periods so processes do not run in lockstep.
        let period = 10 + (i % 7) * 3;
        if let Ok(c) = std::process::Command::new(&me)
            .args([
                "burn",
                "--duty",
                &format!("{duty:.6}"),
                "--period-ms",
                &period.to_string(),
                "--seconds",
                &format!("{seconds}"),
            ])
            .spawn()
        {
            children.push(c);
        }
    }
    let stop = Instant::now() + Duration::from_secs_f64(seconds);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let gap = if churn_per_s == 0 {
        Duration::MAX
    } else {
        Duration::from_secs(1) / churn_per_s
    };
    let mut next = Instant::now();
    while Instant::now() < stop {
        if churn_per_s > 0 && Instant::now() >= next {
            let ms = 5 + rng.next() % 16;
            // SAFETY: fork in a single-threaded process; the child only spins and _exits.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                burn_until(Instant::now() + Duration::from_millis(ms));
                // SAFETY: leave the child without running the parent's exit handlers.
                unsafe { libc::_exit(0) };
            }
            next += gap;
        }
        // Reap finished short-lived children.
        // SAFETY: waitpid with WNOHANG on any child.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        std::thread::sleep(Duration::from_millis(1).min(gap));
    }
    for mut c in children {
        let _ = c.kill();
        let _ = c.wait();
    }
}

fn pingpong(round_trips: u64, cpu: usize) {
    let mut a = [0i32; 2];
    let mut b = [0i32; 2];
    // SAFETY: pipe() fills the arrays; fork in a single-threaded process; the child only
    // reads and writes its pipe ends and _exits.
    unsafe {
        if libc::pipe(a.as_mut_ptr()) != 0 || libc::pipe(b.as_mut_ptr()) != 0 {
            eprintln!("ebee-load: pipe failed");
            std::process::exit(1);
        }
        ebee_tests::pin_to_cpu(cpu);
        let mut byte = 0u8;
        let p = (&mut byte as *mut u8).cast::<libc::c_void>();
        if libc::fork() == 0 {
            for _ in 0..round_trips {
                if libc::read(a[0], p, 1) != 1 || libc::write(b[1], p, 1) != 1 {
                    break;
                }
            }
            libc::_exit(0);
        }
        let cpu0 = process_cpu_ns();
        let t = Instant::now();
        for _ in 0..round_trips {
            if libc::write(a[1], p, 1) != 1 || libc::read(b[0], p, 1) != 1 {
                break;
            }
        }
        let switches = 2.0 * round_trips as f64;
        let wall = t.elapsed().as_nanos() as f64 / switches;
        let mine = process_cpu_ns().saturating_sub(cpu0);
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::wait4(-1, std::ptr::null_mut(), 0, &mut ru);
        let child = (ru.ru_utime.tv_sec as u64 * 1_000_000_000 + ru.ru_utime.tv_usec as u64 * 1000)
            + (ru.ru_stime.tv_sec as u64 * 1_000_000_000 + ru.ru_stime.tv_usec as u64 * 1000);
        // Wall time per switch, and CPU time per switch (both processes): the scheduler
        // charges a switch's tracepoint programs to the task switched in, and CPU time leaves
        // out what the hypervisor stole.
        println!("{wall:.1} {:.1}", (mine + child) as f64 / switches);
    }
}

/// CPU time of this process so far, ns.
fn process_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn idle(procs: u32) {
    let mut pids = Vec::new();
    for _ in 0..procs {
        // SAFETY: fork in a single-threaded process; the child only pauses until killed.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // Die with the parent even when it is SIGKILLed (benchmarks drop workloads so).
            // SAFETY: PR_SET_PDEATHSIG with a signal number.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            loop {
                // SAFETY: pause has no preconditions.
                unsafe { libc::pause() };
            }
        }
        if pid > 0 {
            pids.push(pid);
        }
    }
    eprintln!("ebee-load: {} idle processes", pids.len());
    // Wait for a signal; the children die with us through the process group kill in the
    // benchmark, or here when we get SIGTERM.
    // SAFETY: plain signal/wait calls.
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
        libc::pause();
        for p in &pids {
            libc::kill(*p, libc::SIGKILL);
        }
        while libc::wait(std::ptr::null_mut()) > 0 {}
    }
}

extern "C" fn on_term(_: libc::c_int) {}

fn storm(per_s: u32, seconds: f64) {
    let stop = Instant::now() + Duration::from_secs_f64(seconds);
    let gap = Duration::from_secs(1) / per_s.max(1);
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    let mut next = Instant::now();
    let mut started = 0u64;
    while Instant::now() < stop {
        if Instant::now() >= next {
            let ms = 5 + rng.next() % 16;
            // SAFETY: fork in a single-threaded process; the child names itself, spins, _exits.
            let pid = unsafe { libc::fork() };
            if pid == 0 {
                // SAFETY: PR_SET_NAME with a NUL-terminated name.
                unsafe { libc::prctl(libc::PR_SET_NAME, c"ebee-storm".as_ptr()) };
                burn_until(Instant::now() + Duration::from_millis(ms));
                // SAFETY: leave without the parent's exit handlers.
                unsafe { libc::_exit(0) };
            }
            started += 1;
            next += gap;
        }
        // SAFETY: reap finished children.
        while unsafe { libc::waitpid(-1, std::ptr::null_mut(), libc::WNOHANG) } > 0 {}
        std::thread::sleep(Duration::from_micros(200));
    }
    // SAFETY: reap the rest.
    while unsafe { libc::wait(std::ptr::null_mut()) } > 0 {}
    // SAFETY: a valid out-pointer.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    eprintln!("ebee-load: storm started {started} processes");
    println!("{}", tv(ru.ru_utime) + tv(ru.ru_stime));
}

/// CPU time of the calling thread, ns.
fn thread_cpu_ns() -> u64 {
    cpu_clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// A clock's reading, ns (a CPU-time clock such as `CLOCK_THREAD_CPUTIME_ID`, or
/// `CLOCK_MONOTONIC`, the clock of the kernel's timestamps).
fn cpu_clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; these clocks always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn die(e: &dyn std::fmt::Display) -> ! {
    eprintln!("ebee-load: {e}");
    std::process::exit(1);
}

fn main() {
    let args = Args::parse();
    match args.cmd {
        Cmd::Syscalls { calls, kind } => syscalls::syscalls(calls, &kind),
        Cmd::BpfObjects => {
            // An entry that cannot be read (gone meanwhile) is still counted: it existed.
            let programs = aya::programs::loaded_programs().count();
            let maps = aya::maps::loaded_maps().count();
            println!("programs {programs} maps {maps}");
        }
        Cmd::Sleeper { ms, seconds } => {
            let stop = deadline(seconds);
            while stop.is_none_or(|s| Instant::now() < s) {
                std::thread::sleep(Duration::from_millis(ms));
            }
        }
        Cmd::Burn {
            duty,
            period_ms,
            seconds,
        } => burn(duty, Duration::from_millis(period_ms), deadline(seconds)),
        Cmd::Bursts {
            burst_ms,
            idle_ms,
            seconds,
            log,
        } => {
            use std::io::Write as _;
            let stop = deadline(seconds);
            let mut out = std::io::stdout();
            while stop.is_none_or(|s| Instant::now() < s) {
                std::thread::sleep(Duration::from_millis(idle_ms));
                let (t0, c0) = (cpu_clock_ns(libc::CLOCK_MONOTONIC), thread_cpu_ns());
                burn_until(Instant::now() + Duration::from_millis(burst_ms));
                let (t1, c1) = (cpu_clock_ns(libc::CLOCK_MONOTONIC), thread_cpu_ns());
                if log {
                    let _ = writeln!(out, "{t0} {t1} {}", c1 - c0);
                    let _ = out.flush();
                }
            }
        }
        Cmd::Pingpong { round_trips, cpu } => pingpong(round_trips, cpu),
        Cmd::Idle { procs } => idle(procs),
        Cmd::Light {
            procs,
            period_ms,
            burn_us,
            seconds,
        } => light::run(procs, period_ms, burn_us, seconds),
        Cmd::Hold { mib } => mem::hold(mib),
        Cmd::Faults { mib, rounds } => {
            let len = mib as usize * MIB;
            let t = Instant::now();
            for _ in 0..rounds {
                if let Some(r) = Region::map(len) {
                    r.touch(0, len);
                }
            }
            let pages = (len / 4096) as f64 * f64::from(rounds);
            println!("{:.1}", t.elapsed().as_nanos() as f64 / pages.max(1.0));
        }
        Cmd::MemMix {
            procs,
            top_mib,
            skew,
            seconds,
        } => mem::mem_mix(procs, top_mib, skew, seconds),
        Cmd::Storm { per_s, seconds } => storm(per_s, seconds),
        Cmd::Disk {
            path,
            mib,
            read,
            direct,
            fsync,
            fsync_each,
        } => disk::run(&path, mib, read, direct, fsync, fsync_each),
        Cmd::Futex { period_ms, seconds } => {
            offcpu::futex(Duration::from_millis(period_ms), deadline(Some(seconds)))
        }
        Cmd::VforkWait { ms, seconds } => {
            offcpu::vfork_wait(Duration::from_millis(ms), deadline(Some(seconds)))
        }
        Cmd::IoMix {
            dir,
            procs,
            top_kib,
            skew,
            seconds,
        } => disk::io_mix(&dir, procs, top_kib, skew, seconds),
        Cmd::DelayServer {
            port,
            fast_us,
            slow_us,
            slow_every,
            spin_us,
            split,
            fifo,
        } => net::delay_server(port, fast_us, slow_us, slow_every, spin_us, split, fifo),
        Cmd::DelayClient {
            port,
            conns,
            think_ms,
            seconds,
        } => net::delay_client(port, conns, think_ms, seconds),
        Cmd::Bytes { to, send, recv } => net::bytes(&to, send, recv),
        Cmd::Mix {
            procs,
            top_duty,
            skew,
            churn_per_s,
            seconds,
        } => mix(procs, top_duty, skew, churn_per_s, seconds),
        Cmd::Threads {
            procs,
            threads,
            top_duty,
            skew,
            seconds,
        } => threads::run(procs.max(1), threads, top_duty, skew, seconds),
        Cmd::ThreadGroup {
            index,
            procs,
            threads,
            top_duty,
            skew,
            seconds,
        } => threads::group(index, procs.max(1), threads, top_duty, skew, seconds),
    }
}
