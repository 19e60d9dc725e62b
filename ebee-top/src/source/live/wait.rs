//! The kernel's waits and disk I/O of one interval as the Batch's rows and counters.

// foldhash, not SipHash: the keys are pids the kernel chose (see `source::live`).
use foldhash::{HashMap, HashMapExt as _};

use crate::batch::wait::{
    CAUSED_ROWS, CULPRIT_IDLE, CULPRIT_UNKNOWN, IoRow, OffCpuRow, WAIT_BY_ROWS, WaitByRow, WaitRow,
    WaitStats,
};
use crate::probes::wait::{IoCharge, PairCharge, WaitCharge, WaitRaw};

/// The heaviest (victim, culprit) pairs (the wait of those left out is in the stats).
pub(super) fn wait_by_rows(p: &[PairCharge]) -> Vec<WaitByRow> {
    p.iter()
        .take(WAIT_BY_ROWS)
        .map(|c| WaitByRow {
            pid: c.victim,
            culprit: c.culprit,
            ns: c.wait_ns,
        })
        .collect()
}

/// The wait each process caused other processes (all pairs; a process's threads delaying one
/// another are its own business), heaviest first: the [`CAUSED_ROWS`] heaviest, and the wait
/// the others caused.
pub(super) fn caused_rows(p: &[PairCharge]) -> (Vec<WaitRow>, u64) {
    let mut by: HashMap<u32, u64> = HashMap::new();
    for c in p {
        if c.culprit != CULPRIT_IDLE && c.culprit != CULPRIT_UNKNOWN && c.culprit != c.victim {
            *by.entry(c.culprit).or_default() += c.wait_ns;
        }
    }
    let mut v: Vec<WaitRow> = by
        .into_iter()
        .map(|(pid, ns)| WaitRow { pid, ns })
        .collect();
    v.sort_by(|a, b| b.ns.cmp(&a.ns).then(a.pid.cmp(&b.pid)));
    let rest = v.iter().skip(CAUSED_ROWS).map(|r| r.ns).sum();
    v.truncate(CAUSED_ROWS);
    (v, rest)
}

/// The processes that waited for a CPU (the sketch also holds those that only slept).
pub(super) fn wait_rows(c: &[WaitCharge]) -> Vec<WaitRow> {
    c.iter()
        .filter(|w| w.wait_ns != 0)
        .map(|w| WaitRow {
            pid: w.tgid,
            ns: w.wait_ns,
        })
        .collect()
}

/// The processes with off-CPU time, most held up (I/O-blocked + blocked) first.
pub(super) fn offcpu_rows(c: &[WaitCharge]) -> Vec<OffCpuRow> {
    let mut v: Vec<OffCpuRow> = c
        .iter()
        .filter(|w| w.io_ns | w.blocked_ns | w.sleep_ns != 0)
        .map(|w| OffCpuRow {
            pid: w.tgid,
            io_ns: w.io_ns,
            blocked_ns: w.blocked_ns,
            sleep_ns: w.sleep_ns,
        })
        .collect();
    crate::batch::wait::sort_offcpu(&mut v);
    v
}

pub(super) fn io_rows(c: &[IoCharge]) -> Vec<IoRow> {
    c.iter()
        .map(|r| IoRow {
            pid: r.tgid,
            read_bytes: r.read_bytes,
            write_bytes: r.write_bytes,
        })
        .collect()
}

pub(super) fn stats(
    raw: &WaitRaw,
    caused_rest_ns: u64,
    available: bool,
    io_available: bool,
    offcpu_available: bool,
) -> WaitStats {
    WaitStats {
        available,
        io_available,
        offcpu_available,
        evictions: raw.wait_evictions,
        evicted_ns: raw.wait_evicted_ns,
        evicted_off_ns: raw.wait_evicted_off_ns,
        io_evictions: raw.io_evictions,
        io_evicted_bytes: raw.io_evicted_bytes,
        thread_misses: raw.thread_misses,
        shadow_full: raw.shadow_full,
        attributed_ns: raw.attributed_ns,
        wakeup_latency_ns: raw.idle_ns,
        unattributed_ns: raw.unknown_ns,
        wait_by_rest_ns: raw.pairs.iter().skip(WAIT_BY_ROWS).map(|c| c.wait_ns).sum(),
        caused_rest_ns,
        wait_by_evictions: raw.pair_evictions,
        wait_by_evicted_ns: raw.pair_evicted_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The 50 heaviest culprits are kept and the rest summed: kept plus rest is every wait
    /// one process caused another, without the idle CPU, the unattributed and a process's own.
    #[test]
    fn caused_keeps_the_heaviest_and_sums_the_rest() {
        let pair = |victim, culprit, wait_ns| PairCharge {
            victim,
            culprit,
            wait_ns,
        };
        let mut p: Vec<PairCharge> = (1..=80u32).map(|c| pair(1000, c, u64::from(c))).collect();
        p.push(pair(1000, 7, 5));
        p.push(pair(7, 7, 999));
        p.push(pair(1000, CULPRIT_IDLE, 999));
        p.push(pair(1000, CULPRIT_UNKNOWN, 999));
        let (rows, rest) = caused_rows(&p);
        assert_eq!(rows.len(), CAUSED_ROWS);
        assert_eq!(rows[0], WaitRow { pid: 80, ns: 80 });
        assert!(rows.windows(2).all(|w| w[0].ns >= w[1].ns));
        let all: u64 = (1..=80).sum::<u64>() + 5;
        assert_eq!(rows.iter().map(|r| r.ns).sum::<u64>() + rest, all);
        // 7 caused 7 + 5, which puts it below the 50 heaviest (31..=80).
        assert!(rows.iter().all(|r| r.pid >= 31));
        assert_eq!(rest, (1..=30).sum::<u64>() + 5);
    }
}
