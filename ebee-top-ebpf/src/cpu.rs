//! The CPU pipeline: `sched_switch` charges on-CPU time to processes in per-CPU HashPipe
//! sketches and closes each CPU's interval at its first switch after a `flip`; `cpu_flip` is
//! the fallback for a CPU that does not switch in time (see `ebee_shared::cpu`).

use aya_ebpf::{
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_current_task, bpf_get_smp_processor_id,
        bpf_probe_read_kernel,
    },
    macros::{btf_tracepoint, raw_tracepoint},
    programs::{BtfTracePointContext, RawTracePointContext},
};
use ebee_shared::{
    cpu::{BinCfg, CpuSlot, CpuState, CpuTrace, FlipCharge},
    ctl,
};

use crate::maps::{
    CPU_SHADOW0, CPU_SHADOW1, CPU_SKETCH, CPU_STATE, CPU_TRACE, CTL, SHADOW_ON,
    TASK_EXEC_START_OFF, TASK_PID_OFF, TASK_TGID_OFF, TRACE_ON, count_drop, global, sketch,
};
use crate::{atomic_fetch_add, present};

/// The hot path: runs at every context switch on the machine, so it does the least it can.
/// One atomic (the `seq` mark userspace needs to leave an idle CPU alone at a flip) and no
/// clock read (but one per CPU per interval, at the switch that opens it):
/// "now" is the scheduler's own task clock, which it has just written into the switching tasks
/// (see `ebee_shared::cpu`), and the per-CPU state holds the rest. The first switch on a CPU after a flip closes that CPU's interval.
#[btf_tracepoint(function = "sched_switch")]
pub fn sched_switch(ctx: BtfTracePointContext) -> i32 {
    // SAFETY: called by the kernel with the sched_switch arguments.
    crate::exit_code(unsafe { try_sched_switch(&ctx) })
}

/// # Safety
/// `ctx` must be a sched_switch tp_btf context: (preempt, prev, next, prev_state).
#[inline(always)]
unsafe fn try_sched_switch(ctx: &BtfTracePointContext) -> Result<u32, i64> {
    let c = present(CTL.get_ptr(0))?;
    let st = present(CPU_STATE.get_ptr_mut(0))?;
    // `seq` is odd while this run may write the interval whose epoch it reads (from here to
    // the closing mark at the end; no return in between). The add is a locked instruction on
    // x86, a full barrier (the fetch variant, fully ordered on every architecture, took the
    // program 8 bytes past 6.1's stack limit; the programs rely on x86's ordering elsewhere
    // too): either this run reads an epoch flipped before the mark, or userspace, reading the
    // mark after its flip, sees it odd (running) or moved on (done), and so never takes an
    // idle CPU's interval as closed while a run there still writes it (`CpuState::seq`).
    // SAFETY: this CPU's value of a per-CPU array (see below).
    unsafe { crate::atomic::atomic_add(&raw mut (*st).seq, 1) };
    // SAFETY: this CPU's value of a per-CPU array. The scheduler calls this program with
    // interrupts off, and `cpu_flip` (the only other writer) runs on this CPU in an IPI or with
    // preemption off, so nothing else touches it while we run.
    let s = unsafe { &mut *st };
    // SAFETY: a valid map value; the epoch word is read with one 8-byte load.
    let epoch = unsafe { core::ptr::read_volatile(&raw const (*c).epoch) };
    let prev: *const u8 = ctx.arg(1);
    let next: *const u8 = ctx.arg(2);
    let exec_start = global(&TASK_EXEC_START_OFF) as usize;
    let tgid = global(&TASK_TGID_OFF) as usize;
    // Direct loads through the BTF-typed task pointers: the offsets are .rodata constants the
    // verifier knows, so it checks each access against task_struct itself (no helper call).
    // SAFETY: `prev` and `next` are the switching task_structs; offsets from the kernel's BTF.
    let (a, b, prev_tgid, next_tgid) = unsafe {
        (
            core::ptr::read_volatile(prev.add(exec_start) as *const u64),
            core::ptr::read_volatile(next.add(exec_start) as *const u64),
            core::ptr::read_volatile(prev.add(tgid) as *const u32),
            core::ptr::read_volatile(next.add(tgid) as *const u32),
        )
    };
    s.running = next_tgid;
    // The scheduler stamped its task clock into the outgoing task (update_curr) and the
    // incoming one (set_next_task) in this very switch; the idle task's stamp is stale, so
    // take the later of the two.
    let now = if a > b { a } else { b };
    // The monotonic clock is read at most once per CPU per interval (below: at the switch
    // that opens it, or at the first switch after `cpu_flip` moved this CPU). In between,
    // "now" in the monotonic clock is this task-clock stamp plus the offset read then (the
    // task clock leaves out IRQ and steal time where the kernel accounts them, so it drifts
    // from the monotonic clock by that much, and the offset is read again every interval).
    // The outgoing thread's switch-out time and the incoming one's switch-in time, in the
    // monotonic clock (0 when the off-CPU split is off, or before this CPU's first offset).
    // Nothing else computed here stays live to the interval's opening below: held all through
    // the switch, it took `sched_switch` past 6.1's 512-byte stack with the pair
    // subprogram's frame.
    let mono = crate::wait::offcpu_now(now, s.clock_off);
    let start = s.last_ts;
    s.last_ts = now;
    if prev_tgid != 0 {
        // SAFETY: `prev` is the sched_switch prev task.
        let cg = unsafe { crate::cgroup::key_of(prev) };
        // SAFETY: a valid map value, the word beside the epoch.
        let tid = if unsafe { core::ptr::read_volatile(&raw const (*c).threads) } != 0 {
            // SAFETY: `prev` is the outgoing task_struct; the offset comes from its BTF.
            unsafe {
                core::ptr::read_volatile(prev.add(global(&TASK_PID_OFF) as usize) as *const u32)
            }
        } else {
            0
        };
        let mut cpu_ns = 0;
        if start != 0 && now > start {
            cpu_ns = now - start;
            charge_or_count(s, prev_tgid, cg, tid, start, now);
        }
        // Before the interval may close below: the outgoing thread's waits and I/O (and its
        // cgroup's share) go to the interval its on-CPU time went to.
        // The tracepoint's `preempt` (a bool) and `prev_state` (an unsigned int).
        let preempt = ctx.arg::<u64>(0) & 0xff != 0;
        let prev_state = ctx.arg::<u64>(3) as u32;
        // SAFETY: `prev` is the sched_switch prev task.
        let wait_ns = match unsafe {
            crate::wait::switch_out_of(s, prev, prev_tgid, preempt, prev_state, mono)
        } {
            Ok(w) => w,
            Err(_) => {
                count_drop(ebee_shared::drops::PROG_ERRORS);
                0
            }
        };
        if crate::cgroup::charge(s, cg, cpu_ns, wait_ns).is_err() {
            count_drop(ebee_shared::drops::PROG_ERRORS);
        }
    }
    if mono != 0 {
        // This switch ends a slice of `prev` (or of the idle task), for the culprits of the
        // waits that end later on this CPU. After the outgoing thread's own wait was charged:
        // its ring ends at its own switch-in.
        s.ring.push(prev_tgid, mono);
    }
    // SAFETY: `next` is the sched_switch next task.
    if next_tgid != 0 && unsafe { crate::wait::switch_in_of(next, mono) }.is_err() {
        count_drop(ebee_shared::drops::PROG_ERRORS);
    }
    if epoch != s.epoch {
        // The first switch on this CPU since the flip: the slice just charged ends this CPU's
        // interval; open the next one here. The epoch goes last, after a compiler fence:
        // userspace reads the closed sketch once it sees the new epoch (x86 keeps stores in
        // order).
        // SAFETY: a valid map value; userspace writes the bins before it flips.
        s.bins = unsafe {
            BinCfg {
                width_ns: core::ptr::read_volatile(&raw const (*c).bin_width_ns),
                recip: core::ptr::read_volatile(&raw const (*c).bin_recip),
                unit_shift: core::ptr::read_volatile(&raw const (*c).bin_unit_shift),
            }
        };
        // Bin 0 starts at the flip itself, not at this switch: a CPU whose first switch comes
        // late (its kick thread waited for the CPU) would otherwise shift every bin of its
        // interval by that delay. The delay is read in the flip's monotonic clock (one clock
        // read per CPU per interval, here only) and taken off this task-clock stamp.
        let mono = crate::now_ns();
        let late = mono.saturating_sub(ctl::flip_ns(epoch));
        s.flip_ts = now.saturating_sub(late);
        s.clock_off = mono.wrapping_sub(now);
        s.off_stale = 0;
        // An empty asm block without `nomem` is a compiler barrier (the BPF backend cannot
        // lower `compiler_fence`).
        // SAFETY: no instructions.
        unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
        // SAFETY: this CPU's value, as above.
        unsafe { core::ptr::write_volatile(&raw mut s.epoch, epoch) };
    } else if s.off_stale != 0 {
        // The first switch after `cpu_flip` moved this CPU (no switch opened its interval, so
        // none read the clock offset): read it here, for that CPU's next `cpu_flip` and the
        // off-CPU split.
        s.clock_off = crate::now_ns().wrapping_sub(now);
        s.off_stale = 0;
    }
    // Every write of the run before the closing mark (x86 keeps stores in order).
    // SAFETY: no instructions (a compiler barrier, as above).
    unsafe { core::arch::asm!("", options(nostack, preserves_flags)) };
    // Found again rather than held through the run: held, the pointer took `sched_switch`
    // 8 bytes past 6.1's stack limit.
    if let Some(st) = CPU_STATE.get_ptr_mut(0) {
        // SAFETY: this CPU's value, as above; only this CPU writes `seq`, with interrupts off.
        unsafe { core::ptr::write_volatile(&raw mut (*st).seq, (*st).seq.wrapping_add(1)) };
    }
    Ok(0)
}

/// [`charge`], counting a failure in `DROPS[PROG_ERRORS]` without ending the run: the
/// interval bookkeeping after a charge must run whatever became of the slice, as it always
/// did. The one failure that does not end its run (and, measured, a `?` here also made the
/// common switch paths longer).
#[inline(always)]
fn charge_or_count(s: &CpuState, tgid: u32, cgroup: u32, tid: u32, start: u64, end: u64) {
    if charge(s, tgid, cgroup, tid, start, end).is_err() {
        #[allow(
            clippy::incompatible_msrv,
            reason = "the eBPF crate builds with nightly only"
        )]
        core::hint::cold_path();
        count_drop(ebee_shared::drops::PROG_ERRORS);
    }
}

/// Charge the slice `[start, end)` of process `tgid` (in cgroup `cgroup`) to the interval `s`
/// is writing, and to thread `tid` in the thread sketch when `tid` is not 0 (the per-thread
/// mode is on).
#[inline(always)]
fn charge(s: &CpuState, tgid: u32, cgroup: u32, tid: u32, start: u64, end: u64) -> Result<(), i64> {
    let slot = CpuSlot {
        tgid,
        aux: cgroup,
        ns: end - start,
        bins: s.bins.bins_of(
            start.saturating_sub(s.flip_ts),
            end.saturating_sub(s.flip_ts),
        ),
    };
    let parity = ctl::parity(s.epoch);
    let sk = present(sketch(&CPU_SKETCH, s, parity))?;
    // SAFETY: this CPU's entry of the interval's parity; only this CPU writes it while the
    // interval is open, and userspace reads it only once every CPU has moved past it.
    let sk = unsafe { &mut *sk };
    sk.add(slot);
    if tid != 0 {
        crate::cgroup::charge_thread(s, &slot, tid)?;
    }
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
    Ok(())
}

/// The fallback that closes a CPU's interval when no switch did it in time (a CPU ebee-top
/// cannot place a thread on, or one a real-time task keeps busy): run by userspace on that CPU
/// with BPF_PROG_TEST_RUN and BPF_F_TEST_RUN_ON_CPU (an IPI, or directly with preemption off
/// on the caller's own CPU), never attached. Its context is a
/// [`ebee_shared::cpu::CpuFlipArgs`].
///
/// The scheduler's task clock cannot be read "now" here, but the running task's
/// `se.exec_start` is where the scheduler last brought it up to date (at the latest, the last
/// tick): its slice up to there goes to the closing interval, the rest to the new one. So a
/// task that never leaves its CPU still shows in every interval, off by at most a tick. The
/// closing slice is not inserted here but left in the sketch as a [`FlipCharge`], which
/// userspace charges (to the process, cgroup and thread) when it drains the interval.
/// Neither this nor `sched_switch` can interrupt the other on one CPU, so once it returns this
/// CPU writes only the new interval.
#[raw_tracepoint(tracepoint = "ebee_cpu_flip")]
pub fn cpu_flip(ctx: RawTracePointContext) -> i32 {
    crate::exit_code(try_cpu_flip(&ctx))
}

#[inline(always)]
fn try_cpu_flip(ctx: &RawTracePointContext) -> Result<u32, i64> {
    let st = present(CPU_STATE.get_ptr_mut(0))?;
    // SAFETY: this CPU's value; see `try_sched_switch` for why nothing else writes it now.
    let s = unsafe { &mut *st };
    let epoch = ctx.arg::<u64>(0);
    if s.epoch == epoch {
        return Ok(0);
    }
    let c = present(CTL.get_ptr(0))?;
    // SAFETY: plain helper calls, and a valid map value.
    let (pid_tgid, task, threads) = unsafe {
        (
            bpf_get_current_pid_tgid(),
            bpf_get_current_task(),
            core::ptr::read_volatile(&raw const (*c).threads),
        )
    };
    let cur = (pid_tgid >> 32) as u32;
    // What runs here, for userspace's next flip: a CPU where no switch has happened since
    // attaching (a real-time spinner that started before) still says idle, and an idle CPU is
    // left alone at a flip (`CpuState::seq`) where a busy one must be moved.
    s.running = cur;
    if cur != 0 && task != 0 {
        let at = task + global(&TASK_EXEC_START_OFF) as u64;
        // SAFETY: bpf_probe_read_kernel checks the address and fails cleanly.
        if let Ok(upto) = unsafe { bpf_probe_read_kernel(at as *const u64) } {
            let start = s.last_ts;
            if start == 0 {
                // No switch on this CPU since attaching (a task that has held it since
                // before ebee-top started): start the clock here, or that task would go
                // uncharged until it leaves the CPU, which a real-time spinner may never do.
                s.last_ts = upto;
            } else if upto > start {
                // Left in the closing interval's sketch for userspace to charge (see
                // `FlipCharge`): at most one slice per CPU per interval.
                let flip = FlipCharge {
                    tgid: cur,
                    cgroup: crate::cgroup::key_of_addr(task),
                    tid: if threads != 0 { pid_tgid as u32 } else { 0 },
                    reserved: 0,
                    start: start.saturating_sub(s.flip_ts),
                    end: upto.saturating_sub(s.flip_ts),
                };
                match sketch(&CPU_SKETCH, s, ctl::parity(s.epoch)) {
                    // SAFETY: this CPU's entry of the closing interval, which only this CPU
                    // writes until userspace reads it after this run.
                    Some(sk) => unsafe { (*sk).flip = flip },
                    None => count_drop(ebee_shared::drops::PROG_ERRORS),
                }
                s.last_ts = upto;
            }
        }
    }
    s.bins = BinCfg {
        width_ns: ctx.arg::<u64>(1),
        recip: ctx.arg::<u64>(2),
        unit_shift: ctx.arg::<u64>(3),
    };
    // Bin 0 starts at the flip, in this CPU's task clock: the flip's monotonic time less the
    // clock offset last read at a switch (off by the steal time since, a few ms at worst).
    // Without an offset, the slice start (before the flip by up to a tick for a running task,
    // but by as long as the CPU has idled for an idle one). Never after the running task's
    // slice start (its time would fall before bin 0), never before an idle CPU's.
    let off = s.clock_off;
    s.flip_ts = if off == 0 {
        s.last_ts
    } else {
        let at = ctl::flip_ns(epoch).wrapping_sub(off);
        match (cur != 0, at > s.last_ts) {
            (true, true) | (false, false) => s.last_ts,
            _ => at,
        }
    };
    s.off_stale = 1;
    s.epoch = epoch;
    Ok(0)
}

/// Closes the interval being written: run by userspace with BPF_PROG_TEST_RUN, never attached.
/// It flips the parity and stamps the flip time in one atomic exchange.
#[raw_tracepoint(tracepoint = "ebee_flip")]
pub fn flip(_ctx: RawTracePointContext) -> i32 {
    crate::exit_code(try_flip())
}

#[inline(always)]
fn try_flip() -> Result<u32, i64> {
    let c = present(CTL.get_ptr_mut(0))?;
    // SAFETY: a valid array value; this program is the only writer of `epoch`.
    let old = unsafe { core::ptr::read_volatile(&raw const (*c).epoch) };
    let now = crate::now_ns();
    let new = (now & !1) | ((old & 1) ^ 1);
    // BPF has no plain atomic store; as the only writer, adding the difference atomically
    // replaces the word in one 8-byte operation (and is a full barrier).
    // SAFETY: as above; an aligned u64 inside the map value.
    unsafe { atomic_fetch_add(&raw mut (*c).epoch, new.wrapping_sub(old)) };
    Ok(0)
}
