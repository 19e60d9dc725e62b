//! Syscall latency of pinned processes: `sys_enter` stamps the thread's slot, `sys_exit`
//! matches it and adds the latency to the per-syscall counts (per CPU) and histograms of the
//! interval being written.

use ebee_shared::qos::{self, NR_OTHER, NR_SLOTS, PinStat, SYS_HISTS, THREAD_SLOTS, nr};

use crate::maps::{QOS_HIST, QOS_HIST_IDX, QOS_PIN_STATE, QOS_SYS, QOS_THREADS};
use crate::{atomic_add32, atomic_cmpxchg, atomic_fetch_add, present};

/// Syscall `id` of thread `tid` (pin generation `gen_`) begins.
#[inline(always)]
pub(super) fn start(tid: u32, gen_: u32, id: i64) -> Result<(), i64> {
    let ts = present(QOS_THREADS.get_ptr_mut(tid & (THREAD_SLOTS - 1)))?;
    // exit and exit_group never return: leave no open syscall behind for a later thread that
    // gets the same slot.
    let tag = if id < 0 || id as u32 == nr::EXIT || id as u32 == nr::EXIT_GROUP {
        0
    } else {
        qos::thread_tag(gen_, id as u32)
    };
    // SAFETY: a valid array value; only this thread's syscalls write its slot (a thread
    // sharing the slot overwrites it, which the exit side detects by `tid`).
    unsafe {
        (*ts).start_ns = crate::now_ns();
        (*ts).tid = tid;
        (*ts).tag = tag;
    }
    Ok(())
}

/// The syscall of thread `tid` ends at `now`: record its latency in the interval data at
/// `base` (parity and pin slot `slot`) and return its number. None when the syscall's start
/// is not this thread's (counted as unmatched in `pin`): a normal end, not a failure.
#[inline(always)]
pub(super) fn finish(
    tid: u32,
    slot: u32,
    gen_: u32,
    base: u32,
    now: u64,
    pin: *mut PinStat,
) -> Result<Option<u32>, i64> {
    let ts = present(QOS_THREADS.get_ptr_mut(tid & (THREAD_SLOTS - 1)))?;
    // SAFETY: a valid array value (see `start`).
    let (start, stid, tag) = unsafe { ((*ts).start_ns, (*ts).tid, (*ts).tag) };
    if stid != tid || tag == 0 || qos::tag_gen(tag) != gen_ & 0xffff || start > now {
        // SAFETY: this CPU's copy of a per-CPU array value: plain adds.
        unsafe { (*pin).unmatched += 1 };
        return Ok(None);
    }
    // SAFETY: as above; the syscall is closed.
    unsafe { (*ts).tag = 0 };
    let nr = qos::tag_nr(tag);
    let lat = now - start;
    let nrs = if (nr as usize) < NR_SLOTS {
        nr as usize
    } else {
        NR_OTHER
    } & (NR_SLOTS - 1);
    let t = present(QOS_SYS.get_ptr_mut(base))?;
    // SAFETY: this CPU's copy of a per-CPU array value (no other CPU writes it and the
    // program does not nest on one CPU, so plain adds: no locked instruction); `nrs` is
    // below NR_SLOTS.
    unsafe {
        let s = &raw mut (*t).nr[nrs];
        (*s).count += 1;
        (*s).total_ns += lat;
        if lat > (*s).max_ns {
            (*s).max_ns = lat;
        }
    }
    let h = hist_of(slot, nrs, pin)?;
    let t = present(QOS_HIST.get_ptr_mut(base))?;
    let b = qos::bucket(lat);
    // SAFETY: a valid array value; `h` is below SYS_HISTS and `b` below BUCKETS by
    // construction.
    unsafe { atomic_add32(&raw mut (*t).h[h].buckets[b], 1) };
    Ok(Some(nr))
}

/// The histogram of syscall `nrs` of pin slot `slot`, handed out on first use.
#[inline(always)]
fn hist_of(slot: u32, nrs: usize, pin: *mut PinStat) -> Result<usize, i64> {
    let t = present(QOS_HIST_IDX.get_ptr_mut(slot))?;
    // SAFETY: a valid array value; `nrs` is below NR_SLOTS.
    let idx = unsafe { &raw mut (*t).idx[nrs & (NR_SLOTS - 1)] };
    // SAFETY: as above.
    let h = unsafe { core::ptr::read_volatile(idx) };
    if h != 0 {
        return Ok(h as usize & (SYS_HISTS - 1));
    }
    let st = present(QOS_PIN_STATE.get_ptr_mut(slot))?;
    // SAFETY: a valid array value; the counter only grows until userspace resets the slot.
    let n = unsafe { atomic_fetch_add(&raw mut (*st).next_hist, 1) } + 1;
    if n >= SYS_HISTS as u64 {
        // SAFETY: this CPU's copy of a per-CPU array value.
        unsafe { (*pin).hist_full += 1 };
        return Ok(0);
    }
    // Another CPU may have handed one out for the same syscall meanwhile: keep the first.
    // SAFETY: a valid array value; `idx` is 8-byte aligned.
    let old = unsafe { atomic_cmpxchg(idx, 0, n) };
    let h = if old == 0 { n } else { old };
    Ok(h as usize & (SYS_HISTS - 1))
}
