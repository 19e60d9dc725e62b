//! The per-process values of /proc/PID/stat that change while a process runs and are not in a
//! Batch (nice, priority, state, threads, parent), read about once a second for the rows on
//! screen by a thread of the front-end, and sent to the UI loop: never while drawing.

use std::collections::HashMap;

/// What /proc/PID/stat says of one process (or thread).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcStat {
    /// R, S, D, Z, T, t, X, I...
    pub state: char,
    pub ppid: i32,
    /// The kernel's priority field (20 + nice for normal tasks, negative for real-time).
    pub priority: i64,
    pub nice: i64,
    pub threads: i64,
}

/// Parse a /proc/PID/stat line: the values above and the start time (field 22). The name may
/// hold spaces and parentheses, so the fields start after the last `)`.
pub fn parse(text: &[u8]) -> Option<(ProcStat, u64)> {
    let close = text.iter().rposition(|&b| b == b')')?;
    let rest = std::str::from_utf8(&text[close + 1..]).ok()?;
    // Fields from 3 (state) on: index 0 is field 3.
    let f: Vec<&str> = rest.split_ascii_whitespace().collect();
    let field = |n: usize| f.get(n - 3).copied();
    let st = ProcStat {
        state: field(3)?.chars().next()?,
        ppid: field(4)?.parse().ok()?,
        priority: field(18)?.parse().ok()?,
        nice: field(19)?.parse().ok()?,
        threads: field(20)?.parse().ok()?,
    };
    Some((st, field(22)?.parse().ok()?))
}

/// /proc/PID/stat of `pid` (a thread id works too), if it is still the process that started at
/// `start_ticks` (0: unknown, not checked): a reused pid gives None.
pub fn read(pid: u32, start_ticks: u64) -> Option<ProcStat> {
    let mut buf = [0u8; 4096];
    let text = super::read_small(&format!("/proc/{pid}/stat"), &mut buf)?;
    let (st, start) = parse(text)?;
    (start_ticks == 0 || start == start_ticks).then_some(st)
}

/// Read each of `keys` ((pid, start ticks) pairs); the ones gone are left out.
pub fn read_all(keys: &[(u32, u64)]) -> HashMap<(u32, u64), ProcStat> {
    keys.iter()
        .filter_map(|&(pid, start)| Some(((pid, start), read(pid, start)?)))
        .collect()
}

/// The machine's boot time (seconds since the Unix epoch, `btime` in /proc/stat) and clock
/// ticks per second: what turns a start time in ticks into a time of day.
pub fn boot_clock() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/stat").ok()?;
    let btime = text
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse()
        .ok()?;
    let tck = procfs::ticks_per_second();
    (tck > 0).then_some((btime, tck))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_with_an_odd_name() {
        let line = b"4242 (we(ird) n) S 77 4242 4242 0 -1 4194560 123 0 0 0 5 6 0 0 25 5 3 0 \
                     98765 1000000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0\n";
        let (st, start) = parse(line).unwrap();
        assert_eq!(
            st,
            ProcStat {
                state: 'S',
                ppid: 77,
                priority: 25,
                nice: 5,
                threads: 3
            }
        );
        assert_eq!(start, 98765);
        assert_eq!(parse(b"1 (x) S 1 2"), None);
        assert_eq!(parse(b""), None);
    }

    #[test]
    fn reads_itself_and_refuses_another_start_time() {
        let me = std::process::id();
        let (_, start) = parse(&std::fs::read("/proc/self/stat").unwrap()).unwrap();
        let st = read(me, start).unwrap();
        assert!("RSD".contains(st.state), "{st:?}");
        assert!(st.threads >= 1);
        assert_eq!(st.ppid as u32, std::os::unix::process::parent_id());
        assert_eq!(read(me, start + 1), None);
        let (btime, tck) = boot_clock().unwrap();
        assert!(btime > 1_000_000_000 && tck > 0);
    }
}
