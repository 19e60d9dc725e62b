//! Waits and disk I/O, from the context switch: the outgoing thread's growth of its run-queue
//! wait (`sched_info.run_delay`) and disk bytes (`ioac.read_bytes`/`write_bytes`) since it last
//! switched out, charged to its process in the wait and I/O sketches of the interval this CPU
//! writes (the CPU sketch's epoch and parity). Called from `sched_switch`, so it reads no clock
//! and calls no helper: the counters are direct BTF loads, the "last seen" values an inlined
//! array lookup (see `ebee_shared::wait`).

use ebee_shared::{
    cpu::CpuState,
    ctl,
    wait::{
        CULPRIT_UNKNOWN, IoSlot, OFF_RUNNABLE, PF_EXITING, PairSketch, THREAD_SLOTS, ThreadNow,
        WaitOffsets, WaitSlot, off_class, switch_in, switch_out,
    },
};

use crate::maps::{
    IO_SHADOW0, IO_SHADOW1, IO_SKETCH, PAIR_SKETCH, SHADOW_ON, WAIT_OFFSETS, WAIT_SHADOW0,
    WAIT_SHADOW1, WAIT_SKETCH, WAIT_THREADS, global, sketch,
};
use crate::present;

#[inline(always)]
fn offsets() -> WaitOffsets {
    // SAFETY: a valid static; volatile only stops the compiler from folding the defaults in.
    unsafe { core::ptr::read_volatile(&raw const WAIT_OFFSETS) }
}

/// The monotonic time of this switch for the off-CPU split and the culprits: the switch's
/// task-clock stamp `task_now` plus this CPU's offset to the monotonic clock `off` (read once
/// per interval; a clock read per switch cost about 50 ns); 0 when the split is off or no
/// offset was read on this CPU yet (its first switch since loading: a stamp of 0 is never
/// taken for a time).
#[inline(always)]
pub fn offcpu_now(task_now: u64, off: u64) -> u64 {
    if offsets().offcpu_valid != 0 && off != 0 {
        task_now.wrapping_add(off)
    } else {
        0
    }
}

/// Stamp the switch-in of `next` (not the idle task) at `now` (from [`offcpu_now`]), the end
/// of its off-CPU gap.
///
/// # Safety
/// `next` must be the sched_switch tp_btf `next` task pointer.
#[inline(always)]
pub unsafe fn switch_in_of(next: *const u8, now: u64) -> Result<(), i64> {
    let o = offsets();
    if o.offcpu_valid == 0 {
        return Ok(());
    }
    // SAFETY: `next` is the incoming task_struct; the offset comes from the kernel's BTF.
    let tid = unsafe { core::ptr::read_volatile(next.add(o.pid as usize) as *const u32) };
    let seen = present(WAIT_THREADS.get_ptr_mut(tid & (THREAD_SLOTS as u32 - 1)))?;
    // SAFETY: a valid array value; a thread switches in on one CPU at a time (another thread
    // sharing the index can race it, and `switch_in` then leaves the slot alone).
    unsafe { switch_in(&mut *seen, tid, now) };
    Ok(())
}

/// Charge the outgoing thread `prev` (of process `tgid`, not the idle task) in the interval `s`
/// is writing: its run-queue wait and disk bytes since its last switch-out, and the off-CPU
/// time before this slice by reason. `preempt` and `prev_state` are the tracepoint's, `now`
/// from [`offcpu_now`]. Returns the run-queue wait charged (for its cgroup), 0 when none.
///
/// # Safety
/// `prev` must be the sched_switch tp_btf `prev` task pointer.
#[inline(always)]
pub unsafe fn switch_out_of(
    s: &CpuState,
    prev: *const u8,
    tgid: u32,
    preempt: bool,
    prev_state: u32,
    now: u64,
) -> Result<u64, i64> {
    let o = offsets();
    if o.wait_valid == 0 && o.io_valid == 0 {
        return Ok(0);
    }
    // Direct loads through the BTF-typed task pointer at .rodata offsets (checked by the
    // verifier against task_struct); a half that is off reads nothing.
    // SAFETY: `prev` is the outgoing task_struct; the offsets come from the kernel's BTF.
    let now = unsafe {
        let ld = |off: u32| core::ptr::read_volatile(prev.add(off as usize) as *const u64);
        ThreadNow {
            tid: core::ptr::read_volatile(prev.add(o.pid as usize) as *const u32),
            exiting: core::ptr::read_volatile(prev.add(o.flags as usize) as *const u32)
                & PF_EXITING
                != 0,
            run_delay: if o.wait_valid != 0 {
                ld(o.run_delay)
            } else {
                0
            },
            read_bytes: if o.io_valid != 0 { ld(o.read_bytes) } else { 0 },
            write_bytes: if o.io_valid != 0 {
                ld(o.write_bytes)
            } else {
                0
            },
            now_ns: now,
            class: if o.offcpu_valid != 0 {
                // `in_iowait` is a bit field: the verifier lets a program read the byte that
                // holds it as a scalar.
                let iow = core::ptr::read_volatile(prev.add(o.in_iowait as usize));
                off_class(preempt, prev_state, iow as u32 & o.iowait_mask != 0)
            } else {
                OFF_RUNNABLE
            },
        }
    };
    let seen = present(WAIT_THREADS.get_ptr_mut(now.tid & (THREAD_SLOTS as u32 - 1)))?;
    let parity = ctl::parity(s.epoch) & 1;
    // SAFETY: a valid array value; only the CPU this thread switches out on writes its slot
    // (another thread with the same index can race it, which at worst costs both a delta).
    let d = unsafe { switch_out(&mut *seen, &now) };
    let Some(d) = d else {
        if o.wait_valid != 0 {
            let sk = present(sketch(&WAIT_SKETCH, s, parity))?;
            // SAFETY: this CPU's entry of the interval's parity, written only by this CPU while
            // its interval is open (see `try_sched_switch`).
            unsafe { (*sk).thread_misses += 1 };
        }
        return Ok(0);
    };
    if o.wait_valid != 0
        && let Some((slot, _)) = crate::qos::pinned(tgid)?
    {
        // A pinned process: this wait goes to its run-queue histogram too (0 included: the
        // thread got the CPU at once).
        crate::qos::runq::record(parity, slot, d.wait_ns)?;
    }
    if o.offcpu_valid != 0 && d.wait_ns != 0 {
        // Who made it wait: the slices this CPU ran in the wait, by overlap (the wait ended
        // at its switch-in here, and it has held this CPU since).
        let sk = present(sketch(&PAIR_SKETCH, s, parity))?;
        // SAFETY: as for the wait sketch below.
        let sk = unsafe { &mut *sk };
        let left = s.ring.blame(d.in_ns, d.wait_ns, |culprit, ns| {
            pair_add(sk, tgid, culprit, ns)
        });
        if left != 0 {
            pair_add(sk, tgid, CULPRIT_UNKNOWN, left);
        }
    }
    if d.wait_ns | d.io_ns | d.blocked_ns | d.sleep_ns != 0 {
        let sk = present(sketch(&WAIT_SKETCH, s, parity))?;
        // SAFETY: as above.
        unsafe {
            (*sk).add(WaitSlot {
                tgid,
                flags: 0,
                wait_ns: d.wait_ns,
                io_ns: d.io_ns,
                blocked_ns: d.blocked_ns,
                sleep_ns: d.sleep_ns,
            })
        };
        if global(&SHADOW_ON) != 0 {
            let map = if parity == 0 {
                &WAIT_SHADOW0
            } else {
                &WAIT_SHADOW1
            };
            let add = [d.wait_ns, d.io_ns, d.blocked_ns, d.sleep_ns];
            match map.get_ptr_mut(tgid) {
                // SAFETY: a valid per-CPU hash value of this CPU.
                Some(v) => unsafe {
                    (*v)[0] += add[0];
                    (*v)[1] += add[1];
                    (*v)[2] += add[2];
                    (*v)[3] += add[3];
                },
                None => {
                    if map.insert(tgid, add, 0).is_err() {
                        // SAFETY: as above.
                        unsafe { (*sk).shadow_full += 1 };
                    }
                }
            }
        }
    }
    if d.read_bytes | d.write_bytes != 0 {
        let sk = present(sketch(&IO_SKETCH, s, parity))?;
        // SAFETY: as above.
        unsafe {
            (*sk).add(IoSlot {
                tgid,
                flags: 0,
                read_bytes: d.read_bytes,
                write_bytes: d.write_bytes,
            })
        };
        if global(&SHADOW_ON) != 0 {
            let map = if parity == 0 {
                &IO_SHADOW0
            } else {
                &IO_SHADOW1
            };
            match map.get_ptr_mut(tgid) {
                // SAFETY: a valid per-CPU hash value of this CPU.
                Some(v) => unsafe {
                    (*v)[0] += d.read_bytes;
                    (*v)[1] += d.write_bytes;
                },
                None => {
                    if map.insert(tgid, [d.read_bytes, d.write_bytes], 0).is_err() {
                        // SAFETY: as above.
                        unsafe { (*sk).shadow_full += 1 };
                    }
                }
            }
        }
    }
    Ok(d.wait_ns)
}

/// One charge to the (victim, culprit) sketch, as a BPF subprogram of its own: inlined five
/// times it took more stack than `sched_switch` has.
#[inline(never)]
fn pair_add(sk: &mut PairSketch, victim: u32, culprit: u32, ns: u64) {
    sk.add(victim, culprit, ns);
}
