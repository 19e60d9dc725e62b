//! `light`: many processes that each wake now and then and run briefly, the background of a
//! busy machine (daemons, agents, shells) that fills a per-interval sketch with small keys.

use std::time::{Duration, Instant};

use super::{Rng, burn_until};

/// Start `procs` processes; each wakes every `period_ms` (its phase and a jitter of up to a
/// quarter period drawn at random, so wakes spread evenly over time) and burns `burn_us` of
/// CPU, for `seconds`. Returns once every child has exited.
pub fn run(procs: u32, period_ms: u64, burn_us: u64, seconds: f64) {
    let stop = Instant::now() + Duration::from_secs_f64(seconds);
    let period = Duration::from_millis(period_ms.max(1));
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    let mut started = 0u32;
    for _ in 0..procs {
        let seed = rng.next() | 1;
        // SAFETY: fork in a single-threaded process; the child only sleeps, spins and _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // Die with the parent even when it is SIGKILLed.
            // SAFETY: PR_SET_PDEATHSIG with a signal number.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            child(seed, period, Duration::from_micros(burn_us), stop);
            // SAFETY: leave without the parent's exit handlers.
            unsafe { libc::_exit(0) };
        }
        if pid > 0 {
            started += 1;
        }
    }
    eprintln!("ebee-load: {started} light processes");
    // SAFETY: reap every child; they stop by themselves at `stop`.
    while unsafe { libc::wait(std::ptr::null_mut()) } > 0 {}
}

fn child(seed: u64, period: Duration, burn: Duration, stop: Instant) {
    let mut rng = Rng(seed);
    let p = period.as_micros().max(1) as u64;
    let mut next = Instant::now() + Duration::from_micros(rng.next() % p);
    while next < stop {
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        }
        burn_until(Instant::now() + burn);
        let jitter = rng.next() % (p / 2 + 1);
        next += Duration::from_micros(p - p / 4 + jitter);
    }
}
