//! Time, the bottom layer: the clocks ebee-top reads (`CLOCK_MONOTONIC`, the kernel's clock for
//! intervals; this process's CPU clock, for its own cost), wall-clock times as the screen
//! writes them, and times in a recording as an operator types them ([`TimeSpec`]).

mod spec;

pub use spec::{TimeSpec, parse_duration_ms};

/// `CLOCK_MONOTONIC` now, ns: the clock of `bpf_ktime_get_ns` and of `Batch::end_ns`.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CPU time of this process (all threads), ns.
pub fn process_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid out-pointer; both clocks ebee-top reads always exist on Linux.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// `HH:MM:SS.mmm` (UTC) of a Unix time in ms.
pub fn fmt_wall(t_ms: u64) -> String {
    let s = t_ms / 1000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        (s / 3600) % 24,
        (s / 60) % 60,
        s % 60,
        t_ms % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_format() {
        assert_eq!(fmt_wall(3_723_004), "01:02:03.004");
    }

    #[test]
    fn clocks_move_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
        assert!(process_cpu_ns() > 0);
    }
}
