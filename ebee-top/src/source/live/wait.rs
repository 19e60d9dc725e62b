//! The kernel's waits and disk I/O of one interval as the Batch's rows and counters.

use crate::batch::wait::{IoRow, OffCpuRow, WaitRow, WaitStats};
use crate::probes::wait::{IoCharge, WaitCharge, WaitRaw};

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
    }
}
