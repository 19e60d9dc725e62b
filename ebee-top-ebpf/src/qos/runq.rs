//! Run-queue waits of pinned processes: each time one of their threads got a CPU, how long it
//! had waited, in a histogram per pin slot and interval. Fed from `sched_switch` (see
//! `crate::wait`): a pinned thread's growth of `run_delay` between two switch-outs is the wait
//! before the run that just ended. Threads leave CPUs anywhere, so the adds are atomic.

use ebee_shared::qos::{self, MAX_PINS};

use crate::maps::QOS_RUNQ;
use crate::{atomic_add, atomic_add32, atomic_cmpxchg, present};

/// Record one wait of `wait_ns` of pin slot `slot` in the interval of parity `parity`.
#[inline(always)]
pub fn record(parity: u32, slot: u32, wait_ns: u64) -> Result<(), i64> {
    let i = (parity & 1) * MAX_PINS as u32 + (slot & (MAX_PINS as u32 - 1));
    let r = present(QOS_RUNQ.get_ptr_mut(i))?;
    let b = qos::bucket(wait_ns);
    // SAFETY: a valid array value, written by several CPUs: atomic adds, and the maximum by
    // compare-and-swap (two tries; a lost race loses only a maximum, never a count).
    unsafe {
        atomic_add(&raw mut (*r).count, 1);
        atomic_add(&raw mut (*r).total_ns, wait_ns);
        atomic_add32(&raw mut (*r).hist.buckets[b], 1);
        let max = &raw mut (*r).max_ns;
        let mut seen = core::ptr::read_volatile(max);
        let mut tries = 0;
        while seen < wait_ns && tries < 2 {
            seen = atomic_cmpxchg(max, seen, wait_ns);
            tries += 1;
        }
    }
    Ok(())
}
