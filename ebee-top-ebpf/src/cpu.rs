//! The CPU pipeline: `sched_switch` charges on-CPU time to processes in per-CPU HashPipe
//! sketches; `cpu_flip` closes a CPU's interval (see `ebee_shared::cpu`); `flip` writes the
//! global epoch word the memory and QoS pipelines use.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_get_smp_processor_id},
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext},
};
use ebee_shared::{
    cpu::{BinCfg, CpuSlot, CpuState, CpuTrace},
    ctl,
};

use crate::atomic_fetch_add;
use crate::maps::{
    CPU_SHADOW0, CPU_SHADOW1, CPU_SKETCH, CPU_STATE, CPU_TRACE, CTL, SHADOW_ON, TASK_TGID_OFF,
    TRACE_ON, count_drop, global,
};

/// The hot path: runs at every context switch on the machine, so it does the least it can.
/// No atomics and no global reads: the per-CPU state holds everything it needs, and only
/// programs running on this CPU with interrupts off (this one and `cpu_flip`) touch it.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    // SAFETY: called by the kernel with the sched_switch arguments.
    unsafe { try_sched_switch(&ctx) };
    0
}

/// # Safety
/// `ctx` must be a sched_switch tp_btf context: (preempt, prev, next, prev_state).
#[inline(always)]
unsafe fn try_sched_switch(ctx: &BtfTracePointContext) {
    let Some(st) = CPU_STATE.get_ptr_mut(0) else {
        return;
    };
    // SAFETY: this CPU's value of a per-CPU array. The scheduler calls this program with
    // interrupts off, and `cpu_flip` (the only other writer) runs on this CPU in an IPI or with
    // preemption off, so nothing else touches it while we run.
    let s = unsafe { &mut *st };
    let now = crate::now_ns();
    let prev: *const u8 = ctx.arg(1);
    // A direct load through the BTF-typed pointer: the offset is a .rodata constant the
    // verifier knows, so it checks the access against task_struct itself (no helper call).
    // SAFETY: `prev` is the outgoing task_struct; the offset comes from the kernel's BTF.
    let prev_tgid: u32 = unsafe {
        core::ptr::read_volatile(prev.add(global(&TASK_TGID_OFF) as usize) as *const u32)
    };
    let start = s.last_ts;
    s.last_ts = now;
    if prev_tgid != 0 && now > start {
        charge(s, prev_tgid, start, now);
    }
}

/// Charge the slice `[start, end)` of process `tgid` to the interval `s` is writing.
#[inline(always)]
fn charge(s: &CpuState, tgid: u32, start: u64, end: u64) {
    let slot = CpuSlot {
        tgid,
        flags: 0,
        ns: end - start,
        bins: s.bins.bins_of(
            start.saturating_sub(s.flip_ts),
            end.saturating_sub(s.flip_ts),
        ),
    };
    let parity = ctl::parity(s.epoch);
    let Some(sk) = CPU_SKETCH.get_ptr_mut(parity & 1) else {
        return;
    };
    // SAFETY: this CPU's value of a per-CPU array; only this CPU writes it while the interval
    // is open, and userspace reads it only after every CPU's `cpu_flip` has returned.
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
            epoch: s.epoch,
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

/// Closes this CPU's interval and opens the next: run by userspace on each CPU in turn with
/// BPF_PROG_TEST_RUN and BPF_F_TEST_RUN_ON_CPU (an IPI, or directly with preemption off on the
/// caller's own CPU), never attached. Its context is a [`ebee_shared::cpu::CpuFlipArgs`].
///
/// It charges the task running here (interrupted by the IPI; `current`) from the last switch
/// to now, to the interval being closed, then starts the next interval now. Because neither
/// this program nor `sched_switch` can interrupt the other on one CPU, the split is exact and
/// needs no handshake: once the call returns, this CPU writes only the new interval.
#[raw_tracepoint(tracepoint = "ebee_cpu_flip")]
pub fn cpu_flip(ctx: RawTracePointContext) -> i32 {
    let Some(st) = CPU_STATE.get_ptr_mut(0) else {
        return 1;
    };
    // SAFETY: this CPU's value; see `try_sched_switch` for why nothing else writes it now.
    let s = unsafe { &mut *st };
    let now = crate::now_ns();
    // SAFETY: a plain helper call.
    let cur = (bpf_get_current_pid_tgid() >> 32) as u32;
    let start = s.last_ts;
    if cur != 0 && start != 0 && now > start {
        charge(s, cur, start, now);
    }
    s.epoch = ctx.arg::<u64>(0);
    s.bins = BinCfg {
        width_ns: ctx.arg::<u64>(1),
        recip: ctx.arg::<u64>(2),
        unit_shift: ctx.arg::<u64>(3),
    };
    s.flip_ts = now;
    s.last_ts = now;
    0
}

/// An empty `sched_switch` program, attached only by `cargo xtask bench switch` to measure
/// the floor any sched_switch program pays (the trampoline and BPF statistics).
#[btf_tracepoint(function = "sched_switch")]
pub fn floor_switch(_ctx: BtfTracePointContext) -> i32 {
    0
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
