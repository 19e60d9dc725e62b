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

/// The calendar date (year, month 1-12, day 1-31) of a day count since 1970-01-01.
pub fn civil_date(days: u64) -> (i64, u32, u32) {
    // Howard Hinnant's days-to-civil, for days on or after the epoch.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// A length of time as an operator reads it: `45s`, `12m 5s`, `3h 20m`, `2d 4h`.
pub fn fmt_span(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 => format!("{:.1}s", ms as f64 / 1000.0),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86_400 => format!("{}h {}m", s / 3600, s / 60 % 60),
        _ => format!("{}d {}h", s / 86_400, s / 3600 % 24),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wall_clock_format() {
        assert_eq!(fmt_wall(3_723_004), "01:02:03.004");
        assert_eq!(civil_date(0), (1970, 1, 1));
        assert_eq!(civil_date(20_793), (2026, 12, 6));
        assert_eq!(fmt_span(1_500), "1.5s");
        assert_eq!(fmt_span(725_000), "12m 5s");
        assert_eq!(fmt_span(12_000_000), "3h 20m");
        assert_eq!(fmt_span(187_200_000), "2d 4h");
    }

    #[test]
    fn clocks_move_forward() {
        let a = monotonic_ns();
        let b = monotonic_ns();
        assert!(a > 0 && b >= a);
        assert!(process_cpu_ns() > 0);
    }
}
