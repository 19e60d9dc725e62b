//! Times within a recording, as an operator types them (`--from`, `--to`, the replay's "go to"
//! prompt): an offset from the start or the end, a time of day as the screen shows it (UTC),
//! or an absolute Unix time.

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
    /// `@SECS`: Unix time, ms.
    Unix(u64),
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
        if s.contains(':') {
            let ms = parse_duration_ms(s)?;
            if ms >= DAY_MS {
                return Err(format!("'{s}' is not a time of day"));
            }
            return Ok(Self::TimeOfDay(ms));
        }
        Err(format!(
            "'{s}' is not a time: use HH:MM[:SS] (UTC, as on screen), +DUR from the start, \
             -DUR before the end, or @UNIX_SECONDS"
        ))
    }
}

impl fmt::Display for TimeSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::FromStart(ms) => write!(f, "+{:.3}s", *ms as f64 / 1000.0),
            Self::FromEnd(ms) => write!(f, "-{:.3}s", *ms as f64 / 1000.0),
            Self::TimeOfDay(ms) => write!(f, "{}", super::fmt_wall(*ms)),
            Self::Unix(ms) => write!(f, "@{:.3}", *ms as f64 / 1000.0),
        }
    }
}

impl TimeSpec {
    /// The Unix time in ms this names, for a recording spanning `first_ms..=last_ms`. A time
    /// of day is taken on the first day of the recording at or after its start.
    pub fn resolve(&self, first_ms: u64, last_ms: u64) -> u64 {
        match *self {
            Self::FromStart(d) => first_ms.saturating_add(d),
            Self::FromEnd(d) => last_ms.saturating_sub(d),
            Self::Unix(t) => t,
            Self::TimeOfDay(tod) => {
                let day = first_ms - first_ms % DAY_MS;
                let t = day + tod;
                if t + 1000 < first_ms { t + DAY_MS } else { t }
            }
        }
    }
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
        assert!("soon".parse::<TimeSpec>().is_err());
    }
}
