//! Times within a recording, as an operator types them (`--from`, `--to`, the replay's "go to"
//! prompt): an offset from the start or the end, a time of day as the screen shows it (UTC) or
//! in local time, a date and time (for a folder of recordings spanning days), or an absolute
//! Unix time.

use std::fmt;

/// A point in a recording, before it is resolved against the recording's span.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSpec {
    /// `+DUR`: after the first interval.
    FromStart(u64),
    /// `-DUR`: before the last interval.
    FromEnd(u64),
    /// `HH:MM[:SS[.mmm]]`: a UTC time of day, ms since midnight.
    TimeOfDay(u64),
    /// `HH:MM[:SS[.mmm]] local`: a time of day in the local time zone, ms since midnight.
    LocalTimeOfDay(u64),
    /// `@SECS`, or a date and time (`YYYY-MM-DD HH:MM[:SS]`, UTC or local): Unix time, ms.
    Unix(u64),
}

/// Which clock a time of day or a date is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Zone {
    Utc,
    Local,
}

/// Split a trailing zone off `s`: `Z` or `UTC` (the default: what the screen shows), `local`
/// or `L`.
fn zone(s: &str) -> (&str, Zone) {
    let t = s.trim_end();
    let lower = t.to_ascii_lowercase();
    for (suffix, z) in [
        ("local", Zone::Local),
        ("utc", Zone::Utc),
        ("l", Zone::Local),
        ("z", Zone::Utc),
    ] {
        if lower.ends_with(suffix) {
            return (t[..t.len() - suffix.len()].trim_end(), z);
        }
    }
    (t, Zone::Utc)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (the days-from-civil algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Unix ms of a local date and time `ms_of_day` after midnight of `y-m-d` (the zone's rules,
/// summer time included, from the C library).
fn local_to_unix(y: i64, m: i64, d: i64, ms_of_day: u64) -> Option<u64> {
    let secs = (ms_of_day / 1000) as i64;
    // SAFETY: `tm` is a plain C struct; zeroed is a valid value of it.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    tm.tm_year = (y - 1900) as libc::c_int;
    tm.tm_mon = (m - 1) as libc::c_int;
    tm.tm_mday = d as libc::c_int;
    tm.tm_hour = (secs / 3600) as libc::c_int;
    tm.tm_min = (secs / 60 % 60) as libc::c_int;
    tm.tm_sec = (secs % 60) as libc::c_int;
    tm.tm_isdst = -1;
    // SAFETY: a valid, initialised tm; mktime normalises it in place.
    let t = unsafe { libc::mktime(&mut tm) };
    (t >= 0).then(|| t as u64 * 1000 + ms_of_day % 1000)
}

/// The local calendar date of Unix ms `t`.
fn local_date(t_ms: u64) -> (i64, i64, i64) {
    let t = (t_ms / 1000) as libc::time_t;
    // SAFETY: zeroed tm is valid; localtime_r writes into it and reads only `t`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    // SAFETY: both pointers are valid for the call.
    unsafe { libc::localtime_r(&t, &mut tm) };
    (
        i64::from(tm.tm_year) + 1900,
        i64::from(tm.tm_mon) + 1,
        i64::from(tm.tm_mday),
    )
}

/// `HH:MM[:SS[.mmm]]`: ms after midnight.
fn time_of_day(s: &str) -> Result<u64, String> {
    let parts: Vec<&str> = s.split(':').collect();
    let bad = || format!("'{s}' is not a time of day (HH:MM or HH:MM:SS)");
    if !(2..=3).contains(&parts.len()) {
        return Err(bad());
    }
    let int = |p: &str, max: u64| {
        p.parse::<u64>()
            .ok()
            .filter(|v| *v < max && !p.is_empty() && p.len() <= 2)
            .ok_or_else(bad)
    };
    let h = int(parts[0], 24)?;
    let m = int(parts[1], 60)?;
    let sec = match parts.get(2) {
        Some(p) => secs_ms(p).ok().filter(|v| *v < 60_000).ok_or_else(bad)?,
        None => 0,
    };
    Ok(h * 3_600_000 + m * 60_000 + sec)
}

/// `YYYY-MM-DD HH:MM[:SS]` (or with `T`): the date and the ms after its midnight.
fn date_time(s: &str) -> Option<Result<(i64, i64, i64, u64), String>> {
    let b = s.as_bytes();
    if b.len() < 11 || b[4] != b'-' || b[7] != b'-' || !(b[10] == b' ' || b[10] == b'T') {
        return None;
    }
    let num = |r: &str| r.parse::<i64>().map_err(|_| format!("'{s}' is not a date"));
    let parse = || -> Result<(i64, i64, i64, u64), String> {
        let (y, m, d) = (num(&s[..4])?, num(&s[5..7])?, num(&s[8..10])?);
        if !(1970..=9999).contains(&y) || !(1..=12).contains(&m) || !(1..=31).contains(&d) {
            return Err(format!("'{s}' is not a date"));
        }
        Ok((y, m, d, time_of_day(s[11..].trim())?))
    };
    Some(parse())
}

const DAY_MS: u64 = 86_400_000;

/// Parse a duration: `90`, `90s`, `2.5s`, `500ms`, `5m`, `1h30m`, `1:30` (m:s), `1:02:03`.
pub fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if s.contains(':') {
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() > 3 {
            return Err(format!("'{s}' has too many ':'"));
        }
        // Hours, minutes and seconds: each part is 60 of the next.
        let mut total = 0u64;
        for (i, p) in parts.iter().enumerate() {
            let v = if i + 1 == parts.len() {
                secs_ms(p)?
            } else {
                p.parse::<u64>()
                    .map_err(|_| format!("'{p}' is not a number"))?
                    .saturating_mul(1000)
            };
            total = total.saturating_mul(60).saturating_add(v);
        }
        return Ok(total);
    }
    let mut total = 0u64;
    let mut rest = s;
    let mut any = false;
    while !rest.is_empty() {
        let num_end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        if num_end == 0 {
            return Err(format!("'{s}' is not a duration (like 90s, 5m, 1h30m)"));
        }
        let (num, tail) = rest.split_at(num_end);
        let unit_end = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, tail) = tail.split_at(unit_end);
        let mult = match unit {
            "" | "s" => 1000.0,
            "ms" => 1.0,
            "m" | "min" => 60_000.0,
            "h" => 3_600_000.0,
            "d" => DAY_MS as f64,
            _ => return Err(format!("unknown unit '{unit}' in '{s}' (ms, s, m, h, d)")),
        };
        let v: f64 = num
            .parse()
            .map_err(|_| format!("'{num}' is not a number"))?;
        let ms = v * mult;
        if !ms.is_finite() || !(0.0..=1e15).contains(&ms) {
            return Err(format!("'{s}' is out of range"));
        }
        total = total.saturating_add(ms.round() as u64);
        rest = tail;
        any = true;
    }
    if !any {
        return Err(format!("'{s}' is not a duration"));
    }
    Ok(total)
}

fn secs_ms(p: &str) -> Result<u64, String> {
    let v: f64 = p.parse().map_err(|_| format!("'{p}' is not a number"))?;
    if !v.is_finite() || !(0.0..1e12).contains(&v) {
        return Err(format!("'{p}' is out of range"));
    }
    Ok((v * 1000.0).round() as u64)
}

impl std::str::FromStr for TimeSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        if let Some(d) = s.strip_prefix('+') {
            return Ok(Self::FromStart(parse_duration_ms(d)?));
        }
        if let Some(d) = s.strip_prefix('-') {
            return Ok(Self::FromEnd(parse_duration_ms(d)?));
        }
        if let Some(u) = s.strip_prefix('@') {
            return Ok(Self::Unix(secs_ms(u)?));
        }
        let (t, z) = zone(s);
        if let Some(dt) = date_time(t) {
            let (y, m, d, tod) = dt?;
            return match z {
                Zone::Utc => {
                    let days = days_from_civil(y, m, d).max(0) as u64;
                    Ok(Self::Unix(days * DAY_MS + tod))
                }
                Zone::Local => local_to_unix(y, m, d, tod)
                    .map(Self::Unix)
                    .ok_or_else(|| format!("'{s}' is not a local time")),
            };
        }
        if t.contains(':') {
            let ms = time_of_day(t)?;
            return Ok(match z {
                Zone::Utc => Self::TimeOfDay(ms),
                Zone::Local => Self::LocalTimeOfDay(ms),
            });
        }
        Err(format!(
            "'{s}' is not a time: use HH:MM[:SS] (UTC, as on screen), HH:MM local, \
             YYYY-MM-DD HH:MM (UTC, or add 'local'), +DUR from the start, -DUR before the end, \
             or @UNIX_SECONDS"
        ))
    }
}

impl fmt::Display for TimeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FromStart(ms) => write!(f, "+{:.3}s", *ms as f64 / 1000.0),
            Self::FromEnd(ms) => write!(f, "-{:.3}s", *ms as f64 / 1000.0),
            Self::TimeOfDay(ms) => write!(f, "{}", super::fmt_wall(*ms)),
            Self::LocalTimeOfDay(ms) => write!(f, "{} local", super::fmt_wall(*ms)),
            Self::Unix(ms) => write!(f, "@{:.3}", *ms as f64 / 1000.0),
        }
    }
}

impl TimeSpec {
    /// The Unix time in ms this names, for a recording spanning `first_ms..=last_ms`. A time
    /// of day is its latest occurrence in the recording (the page at 03:10 is about 02:47 of
    /// the same night, not of a week before); when the recording holds no such time, the first
    /// occurrence after its start.
    pub fn resolve(&self, first_ms: u64, last_ms: u64) -> u64 {
        match *self {
            Self::FromStart(d) => first_ms.saturating_add(d),
            Self::FromEnd(d) => last_ms.saturating_sub(d),
            Self::Unix(t) => t,
            Self::TimeOfDay(tod) => latest(first_ms, last_ms, |day_of| {
                let day = day_of - day_of % DAY_MS;
                Some(day + tod)
            }),
            Self::LocalTimeOfDay(tod) => latest(first_ms, last_ms, |day_of| {
                let (y, m, d) = local_date(day_of);
                local_to_unix(y, m, d, tod)
            }),
        }
    }
}

/// The latest `at(day)` not after `last` (a second of slack) that is not before `first`; else
/// the first one at or after `first`. `at` gives the time on the day holding its argument.
fn latest(first: u64, last: u64, at: impl Fn(u64) -> Option<u64>) -> u64 {
    let slack = 1000;
    let mut day = last;
    // Walk back a day at a time from the last day to the first (bounded: a week of files
    // is seven steps, a corrupt span at most a few thousand).
    for _ in 0..20_000 {
        if let Some(t) = at(day)
            && t <= last + slack
        {
            if t + slack >= first {
                return t;
            }
            break;
        }
        if day < first || day < DAY_MS {
            break;
        }
        day -= DAY_MS;
    }
    // Nothing within: the first occurrence at or after the start.
    let mut day = first;
    for _ in 0..3 {
        if let Some(t) = at(day)
            && t + slack >= first
        {
            return t;
        }
        day += DAY_MS;
    }
    first
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration_ms("90"), Ok(90_000));
        assert_eq!(parse_duration_ms("90s"), Ok(90_000));
        assert_eq!(parse_duration_ms("2.5s"), Ok(2_500));
        assert_eq!(parse_duration_ms("500ms"), Ok(500));
        assert_eq!(parse_duration_ms("1h30m"), Ok(5_400_000));
        assert_eq!(parse_duration_ms("1:30"), Ok(90_000));
        assert_eq!(parse_duration_ms("1:02:03.5"), Ok(3_723_500));
        for bad in ["", "x", "5y", "1:2:3:4", "-3", "1e400s", "s"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn specs_resolve_within_the_recording() {
        // 2023-11-14 22:13:20 UTC .. +2 h (crosses midnight).
        let first = 1_700_000_000_000;
        let last = first + 7_200_000;
        let p = |s: &str| s.parse::<TimeSpec>().unwrap().resolve(first, last);
        assert_eq!(p("+10s"), first + 10_000);
        assert_eq!(p("-1m"), last - 60_000);
        assert_eq!(p("@1700000001"), first + 1000);
        assert_eq!(p("22:13:30"), first + 10_000);
        // After midnight: the next day.
        assert_eq!(p("00:00:00"), first + 6_400_000);
        assert!("25:00:00".parse::<TimeSpec>().is_err());
        assert!("12:60".parse::<TimeSpec>().is_err());
        assert_eq!(
            "02:47".parse::<TimeSpec>(),
            Ok(TimeSpec::TimeOfDay(10_020_000))
        );
        // A date and time, UTC by default or with Z / UTC.
        assert_eq!(p("2023-11-14 22:13:30"), first + 10_000);
        assert_eq!(p("2023-11-14T22:13:30Z"), first + 10_000);
        assert_eq!(p("2023-11-14 22:13:30 UTC"), first + 10_000);
        for bad in [
            "2023-13-01 10:00",
            "2023-11-14 25:00",
            "2023-11-14 10",
            "2023-1-14 10:00",
        ] {
            assert!(bad.parse::<TimeSpec>().is_err(), "{bad}");
        }
        assert!("soon".parse::<TimeSpec>().is_err());
    }

    #[test]
    fn a_time_of_day_is_its_latest_occurrence_in_a_folder_of_days() {
        // Three days: 2023-11-12 00:00 .. 2023-11-14 22:13:20 UTC.
        let last = 1_700_000_000_000;
        let first = last - last % DAY_MS - 2 * DAY_MS;
        let p = |s: &str| s.parse::<TimeSpec>().unwrap().resolve(first, last);
        let day3 = last - last % DAY_MS;
        assert_eq!(p("02:47"), day3 + 2 * 3_600_000 + 47 * 60_000);
        // Later in the day than the last interval: the day before.
        assert_eq!(p("23:00"), day3 - DAY_MS + 23 * 3_600_000);
        assert_eq!(p("+1h"), first + 3_600_000);
    }

    #[test]
    fn local_times_follow_the_zone() {
        // The local zone of the test process; whatever it is, a local time of day and the
        // same local date and time name the same instant, and a time zone's day is 23-25 h.
        let first = 1_700_000_000_000;
        let last = first + 3 * DAY_MS;
        let tod = "10:30 local".parse::<TimeSpec>().unwrap();
        assert!(matches!(tod, TimeSpec::LocalTimeOfDay(37_800_000)));
        let t = tod.resolve(first, last);
        assert!(t <= last + 1000 && t + DAY_MS + 3_600_000 > last, "{t}");
        let (y, m, d) = local_date(t);
        let again = format!("{y:04}-{m:02}-{d:02} 10:30 local")
            .parse::<TimeSpec>()
            .unwrap();
        assert_eq!(again, TimeSpec::Unix(t));
        assert!(matches!(
            "10:30L".parse::<TimeSpec>(),
            Ok(TimeSpec::LocalTimeOfDay(_))
        ));
        assert!(matches!(
            "10:30Z".parse::<TimeSpec>(),
            Ok(TimeSpec::TimeOfDay(_))
        ));
    }
}
