//! The CPU pipeline: `sched_switch` charges on-CPU time to processes in per-CPU HashPipe
//! sketches; `flip` closes the interval being written.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id},
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext},
};
use ebee_shared::{
    cpu::{BinCfg, CpuSlot, CpuTrace},
    ctl,
};

use crate::atomic_fetch_add;
use crate::maps::{
    CPU_SHADOW0, CPU_SHADOW1, CPU_SKETCH, CPU_STATE, CPU_TRACE, CTL, SHADOW_ON, TASK_TGID_OFF,
    TRACE_ON, count_drop, global,
};

#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    // SAFETY: called by the kernel with the sched_switch arguments.
    match unsafe { try_sched_switch(&ctx) } {
        Ok(()) => 0,
        Err(()) => 0,
    }
}

/// # Safety
/// `ctx` must be a sched_switch tp_btf context: (preempt, prev, next, prev_state).
#[inline(always)]
unsafe fn try_sched_switch(ctx: &BtfTracePointContext) -> Result<(), ()> {
    let st = CPU_STATE.get_ptr_mut(0).ok_or(())?;
    // Mark this CPU busy before reading the epoch. A fetch-add is a full barrier, so a flip
    // that this program does not see is ordered after this mark, and userspace waits for it.
    // SAFETY: `st` points at this CPU's value of a per-CPU array; only this CPU writes it and
    // the program cannot nest on one CPU.
    unsafe { atomic_fetch_add(&raw mut (*st).seq, 1) };

    let c = CTL.get_ptr(0).ok_or(())?;
    // SAFETY: a valid map value; the epoch word is read with one 8-byte load.
    let (epoch, bins) = unsafe {
        (
            core::ptr::read_volatile(&raw const (*c).epoch),
            BinCfg {
                width_ns: (*c).bin_width_ns,
                recip: (*c).bin_recip,
                unit_shift: (*c).bin_unit_shift,
            },
        )
    };
    let now = crate::now_ns();
    let flip = ctl::flip_ns(epoch);
    let parity = ctl::parity(epoch);
    // In sched_switch, `current` is still the outgoing task.
    let prev_tgid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let next: *const u8 = ctx.arg(2);
    // A direct load through the BTF-typed pointer: the offset is a .rodata constant the
    // verifier knows, so it checks the access against task_struct itself (no helper call).
    // SAFETY: `next` is the incoming task_struct; the offset comes from the kernel's BTF.
    let next_tgid: u32 = unsafe {
        core::ptr::read_volatile(next.add(global(&TASK_TGID_OFF) as usize) as *const u32)
    };

    // SAFETY: this CPU's value, see above.
    let s = unsafe { &mut *st };
    let last = s.last_ts;
    if s.epoch_seen != epoch && last != 0 {
        // First switch since a flip: remember the slice that ran across it. Userspace charges
        // its part before the flip to the interval the flip closed (unless it already did).
        s.cross_epoch = epoch;
        s.cross_start = last;
        s.cross_tgid = prev_tgid;
    }
    let start = if last > flip { last } else { flip };
    if prev_tgid != 0 && last != 0 && now > start {
        let slot = CpuSlot {
            tgid: prev_tgid,
            flags: 0,
            ns: now - start,
            bins: bins.bins_of(start - flip, now - flip),
        };
        charge(parity, epoch, slot);
    }
    s.cur_tgid = next_tgid;
    s.last_ts = now;
    s.epoch_seen = epoch;
    s.switches += 1;
    // Done: ordered after every store above, so once userspace sees the even value, the
    // interval this run wrote to is complete.
    // SAFETY: as above.
    unsafe { atomic_fetch_add(&raw mut (*st).seq, 1) };
    Ok(())
}

#[inline(always)]
fn charge(parity: u32, epoch: u64, slot: CpuSlot) {
    let Some(sk) = CPU_SKETCH.get_ptr_mut(parity & 1) else {
        return;
    };
    // SAFETY: this CPU's value of a per-CPU array; only this CPU writes it while the interval
    // is open, and userspace reads it only after the flip and the `seq` handshake.
    let sk = unsafe { &mut *sk };
    sk.add(slot);
    if global(&SHADOW_ON) != 0 {
        let shadow = if parity & 1 == 0 {
            &CPU_SHADOW0
        } else {
            &CPU_SHADOW1
        };
        match shadow.get_ptr_mut(slot.tgid) {
            // SAFETY: a valid per-CPU hash value of this CPU.
            Some(v) => unsafe { *v += slot.ns },
            None => {
                if shadow.insert(slot.tgid, slot.ns, 0).is_err() {
                    sk.shadow_full += 1;
                }
            }
        }
    }
    if global(&TRACE_ON) != 0 {
        let rec = CpuTrace {
            epoch,
            // SAFETY: a plain helper call.
            cpu: unsafe { bpf_get_smp_processor_id() },
            flags: 0,
            slot,
        };
        if CPU_TRACE.output::<CpuTrace>(&rec, 0).is_err() {
            count_drop(ebee_shared::drops::TRACE_LOST);
        }
    }
}

/// Closes the interval being written: run by userspace with BPF_PROG_TEST_RUN, never attached.
/// It flips the parity and stamps the flip time in one atomic exchange.
#[raw_tracepoint(tracepoint = "ebee_flip")]
pub fn flip(_ctx: RawTracePointContext) -> i32 {
    let Some(c) = CTL.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: a valid array value; this program is the only writer of `epoch`.
    let old = unsafe { core::ptr::read_volatile(&raw const (*c).epoch) };
    let now = crate::now_ns();
    let new = (now & !1) | ((old & 1) ^ 1);
    // BPF has no plain atomic store; as the only writer, adding the difference atomically
    // replaces the word in one 8-byte operation (and is a full barrier).
    // SAFETY: as above; an aligned u64 inside the map value.
    unsafe { atomic_fetch_add(&raw mut (*c).epoch, new.wrapping_sub(old)) };
    0
}
