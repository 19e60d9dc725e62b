//! The memory pipeline: `rss_stat` (tp_btf on `kmem/rss_stat`) reads the resident pages of the
//! `mm` whose counter changed and records them for the owning process in the per-CPU HashPipe
//! sketch of the interval being written (gauge semantics: see `ebee_shared::mem`).
//!
//! Attribution: the tracepoint fires for whoever changes the counter (the process itself,
//! reclaim, another task touching the mm through `/proc/PID/mem` or a kthread using it), so the
//! process is `mm->owner` (CONFIG_MEMCG), not `current`. When the mm has no owner any more (its
//! last user is tearing it down after exit), the event is charged to `current` only if `current`
//! still uses that mm, and otherwise counted as unattributed.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_current_task_btf, bpf_get_smp_processor_id},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use ebee_shared::{
    ctl,
    mem::{MemCpu, MemOffsets, MemShadow, MemSlot, MemTrace},
};

use crate::maps::{
    CTL, MEM_CPU, MEM_OFFSETS, MEM_SHADOW0, MEM_SHADOW1, MEM_SKETCH, MEM_TRACE, SHADOW_ON,
    TASK_TGID_OFF, TRACE_ON, count_drop, global,
};
use crate::{atomic_fetch_add, present};

#[btf_tracepoint(function = "rss_stat")]
pub fn rss_stat(ctx: BtfTracePointContext) -> i32 {
    // SAFETY: called by the kernel with the rss_stat arguments.
    crate::exit_code(unsafe { try_rss_stat(&ctx) })
}

#[inline(always)]
fn offsets() -> MemOffsets {
    // SAFETY: a valid static; volatile only stops the compiler from folding the defaults in.
    unsafe { core::ptr::read_volatile(&raw const MEM_OFFSETS) }
}

/// `percpu_counter.count` of `mm->rss_stat[member]`, clamped at 0 like the kernel's
/// `percpu_counter_read_positive` (the count is approximate and may dip below zero).
///
/// # Safety
/// `mm` must be the tracepoint's BTF-typed `mm_struct` pointer and `o` its BTF offsets.
#[inline(always)]
unsafe fn counter(mm: *const u8, o: &MemOffsets, member: u32) -> u64 {
    let off = o.rss_count as usize + (member as usize & 3) * o.counter_size as usize;
    // SAFETY: a direct load through the BTF pointer at an offset the verifier knows (a
    // .rodata constant) and checks against `struct mm_struct`.
    let v: i64 = unsafe { core::ptr::read_volatile(mm.add(off) as *const i64) };
    if v < 0 { 0 } else { v as u64 }
}

/// # Safety
/// `ctx` must be a rss_stat tp_btf context: (struct mm_struct *mm, int member).
#[inline(always)]
unsafe fn try_rss_stat(ctx: &BtfTracePointContext) -> Result<u32, i64> {
    let o = offsets();
    // The second tracepoint argument is an int.
    let member: u64 = ctx.arg(1);
    // Swap entries are not resident memory: their changes cannot move RSS.
    if member as u32 == o.swap {
        return Ok(0);
    }
    let st = present(MEM_CPU.get_ptr_mut(0))?;
    // Mark this CPU busy before reading the epoch (a fetch-add is a full barrier): a flip this
    // run does not see is ordered after the mark, and userspace waits for the run to end.
    // SAFETY: this CPU's value of a per-CPU array; the program cannot nest on one CPU.
    unsafe { atomic_fetch_add(&raw mut (*st).seq, 1) };
    // SAFETY: as above; `record` returns normally on every path (a failure too), so the
    // closing mark runs.
    let r = unsafe { record(ctx, &o, &mut *st) };
    // SAFETY: as above.
    unsafe {
        (*st).events += 1;
        atomic_fetch_add(&raw mut (*st).seq, 1);
    }
    r.map(|()| 0)
}

/// # Safety
/// As [`try_rss_stat`]; `st` is this CPU's state.
#[inline(always)]
unsafe fn record(ctx: &BtfTracePointContext, o: &MemOffsets, st: &mut MemCpu) -> Result<(), i64> {
    let c = present(CTL.get_ptr(0))?;
    // SAFETY: a valid map value; the epoch word is read with one 8-byte load.
    let epoch = unsafe { core::ptr::read_volatile(&raw const (*c).epoch) };
    let parity = ctl::parity(epoch);

    // The first tracepoint argument is the BTF-typed mm_struct.
    let mm: *const u8 = ctx.arg(0);
    // SAFETY: `mm` and the offsets as above.
    let pages =
        unsafe { counter(mm, o, o.file) + counter(mm, o, o.anon) + counter(mm, o, o.shmem) };
    // Most events repeat the previous reading (the global count moves once per percpu batch):
    // nothing new to record, skip the attribution and the sketch.
    if st.repeats(epoch, mm as u64, pages) {
        st.repeats += 1;
        return Ok(());
    }

    let sk = present(MEM_SKETCH.get_ptr_mut(st.entry[(parity & 1) as usize]))?;
    // SAFETY: this CPU's entry of the parity; only this CPU writes it while the interval is
    // open, and userspace reads it only after the flip and the `seq` handshake.
    let sk = unsafe { &mut *sk };
    let tgid_off = global(&TASK_TGID_OFF) as usize;
    let mut tgid = 0u32;
    if o.has_owner != 0 {
        // SAFETY: direct BTF loads: `mm->owner` (a task_struct pointer, maybe NULL; the
        // verifier turns a NULL dereference into a load of 0) and its tgid.
        unsafe {
            let owner: *const u8 =
                core::ptr::read_volatile(mm.add(o.mm_owner as usize) as *const *const u8);
            if !owner.is_null() {
                tgid = core::ptr::read_volatile(owner.add(tgid_off) as *const u32);
            }
        }
    }
    if tgid == 0 {
        // No owner (exit teardown, or a kernel without CONFIG_MEMCG): `current`, if the mm
        // is its own.
        // SAFETY: a helper without arguments; the result is a trusted task_struct pointer.
        let cur = unsafe { bpf_get_current_task_btf() } as *const u8;
        // SAFETY: a direct BTF load of `current->mm`.
        let cur_mm: *const u8 =
            unsafe { core::ptr::read_volatile(cur.add(o.task_mm as usize) as *const *const u8) };
        if cur_mm == mm {
            tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
        }
    }
    if tgid == 0 {
        sk.unattributed += 1;
        return Ok(());
    }

    st.last_epoch = epoch;
    st.last_mm = mm as u64;
    st.last_pages = pages;
    let pages = if pages > u32::MAX as u64 {
        u32::MAX
    } else {
        pages as u32
    };
    let ts = crate::now_ns();
    let slot = MemSlot::reading(tgid, pages, ts);
    sk.add(slot);
    if global(&TRACE_ON) != 0 {
        let rec = MemTrace {
            epoch,
            // SAFETY: a plain helper call.
            cpu: unsafe { bpf_get_smp_processor_id() },
            flags: 0,
            slot,
        };
        if MEM_TRACE.output::<MemTrace>(&rec, 0).is_err() {
            count_drop(ebee_shared::drops::TRACE_LOST);
        }
    }

    if global(&SHADOW_ON) != 0 {
        let shadow = if parity & 1 == 0 {
            &MEM_SHADOW0
        } else {
            &MEM_SHADOW1
        };
        let v = MemShadow {
            pages: pages as u64,
            ts,
        };
        match shadow.get_ptr_mut(tgid) {
            // SAFETY: a valid per-CPU hash value of this CPU; newest wins (one CPU, in order).
            Some(p) => unsafe { *p = v },
            None => {
                if shadow.insert(tgid, v, 0).is_err() {
                    sk.shadow_full += 1;
                }
            }
        }
    }
    Ok(())
}
