//! The kernel's waits and disk I/O of one interval as the Batch's rows and counters.

use crate::batch::wait::{IoRow, WaitRow, WaitStats};
use crate::probes::wait::{IoCharge, WaitCharge, WaitRaw};

pub(super) fn wait_rows(c: &[WaitCharge]) -> Vec<WaitRow> {
    c.iter()
        .map(|w| WaitRow {
            pid: w.tgid,
            ns: w.wait_ns,
        })
        .collect()
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

pub(super) fn stats(raw: &WaitRaw, available: bool, io_available: bool) -> WaitStats {
    WaitStats {
        available,
        io_available,
        evictions: raw.wait_evictions,
        evicted_ns: raw.wait_evicted_ns,
        io_evictions: raw.io_evictions,
        io_evicted_bytes: raw.io_evicted_bytes,
        thread_misses: raw.thread_misses,
        shadow_full: raw.shadow_full,
    }
}
