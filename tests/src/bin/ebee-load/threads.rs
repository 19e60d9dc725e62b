//! Many threads with Zipf-skewed duty cycles across several processes, for the per-thread
//! mode's precision test: thread `t` of process `p` (of `procs`) has rank `t * procs + p + 1`
//! over all threads and burns about `top_duty / rank^skew` of the time, so the heaviest
//! threads are spread over every process.

use std::os::unix::process::CommandExt as _;
use std::time::{Duration, Instant};

use super::{burn_until, die};

/// The duty cycle of the thread of `rank` (from 1).
pub fn duty(rank: u32, top_duty: f64, skew: f64) -> f64 {
    top_duty / f64::from(rank).powf(skew)
}

/// Start `procs` processes of `threads / procs` threads each and wait for them (or kill them
/// after `seconds`).
pub fn run(procs: u32, threads: u32, top_duty: f64, skew: f64, seconds: f64) {
    let me = std::env::current_exe().unwrap_or_else(|_| "ebee-load".into());
    let mut children = Vec::new();
    for p in 0..procs {
        let mut cmd = std::process::Command::new(&me);
        // SAFETY: the closure runs in the child between fork and exec and only calls prctl,
        // which is async-signal-safe. The groups die with this process (a test that kills the
        // load leaves no thread group burning).
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        match cmd
            .args([
                "thread-group",
                "--index",
                &p.to_string(),
                "--procs",
                &procs.to_string(),
                "--threads",
                &threads.to_string(),
                "--top-duty",
                &top_duty.to_string(),
                "--skew",
                &skew.to_string(),
                "--seconds",
                &seconds.to_string(),
            ])
            .spawn()
        {
            Ok(c) => children.push(c),
            Err(e) => die(&format!("starting a thread group: {e}")),
        }
    }
    for mut c in children {
        let _ = c.wait();
    }
}

/// One process of [`run`]: its share of the threads, each burning its duty cycle with a
/// period of 200 to 290 ms (few wakeups, so 10,000 threads fit on two CPUs), until `seconds`.
/// Prints `ready` once every thread has started.
pub fn group(index: u32, procs: u32, threads: u32, top_duty: f64, skew: f64, seconds: f64) {
    let stop = Instant::now() + Duration::from_secs_f64(seconds);
    let mine: Vec<u32> = (0..threads)
        .filter(|i| i % procs == index)
        .map(|i| i + 1)
        .collect();
    let mut handles = Vec::with_capacity(mine.len());
    for rank in mine {
        let d = duty(rank, top_duty, skew);
        let period = Duration::from_millis(200 + u64::from(rank % 10) * 10);
        let h = std::thread::Builder::new()
            .stack_size(64 * 1024)
            .spawn(move || {
                let busy = period.mul_f64(d.min(1.0));
                // Start at a different point of the period in each thread.
                let mut next = Instant::now() + period.mul_f64(f64::from(rank % 97) / 97.0);
                while Instant::now() < stop {
                    let now = Instant::now();
                    if next > now {
                        std::thread::sleep(next - now);
                    }
                    burn_until(Instant::now() + busy);
                    next += period;
                }
            });
        match h {
            Ok(h) => handles.push(h),
            Err(e) => die(&format!("starting thread {rank}: {e}")),
        }
    }
    println!("ready");
    for h in handles {
        let _ = h.join();
    }
}
