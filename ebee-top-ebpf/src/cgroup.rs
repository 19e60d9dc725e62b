//! Cgroups and threads, from the context switch: the outgoing thread's cgroup key (four
//! dependent BTF loads, see `ebee_shared::cgroup`), its slice and run-queue wait charged to that
//! cgroup, and, while the per-thread mode is on, its slice charged to the thread in the thread
//! sketch. Called from `sched_switch`, under the CPU pipeline's epoch and parity; `cpu_flip`
//! only reads the cgroup key (`key_of_addr`) and leaves its slice for userspace to charge.

use aya_ebpf::helpers::bpf_probe_read_kernel;
use ebee_shared::{
    cgroup::{CgOffsets, CgSlot},
    cpu::{CpuSlot, CpuState},
    ctl,
};

use crate::maps::{
    CG_OFFSETS, CG_SHADOW0, CG_SHADOW1, CG_SKETCH, SHADOW_ON, THREAD_SHADOW0, THREAD_SHADOW1,
    THREAD_SKETCH, global, sketch,
};
use crate::present;

#[inline(always)]
fn offsets() -> CgOffsets {
    // SAFETY: a valid static; volatile only stops the compiler from folding the defaults in.
    unsafe { core::ptr::read_volatile(&raw const CG_OFFSETS) }
}

/// The cgroup key of `task` (a BTF-typed `task_struct` pointer from the tracepoint), or 0 when
/// cgroups are off.
///
/// # Safety
/// `task` must be the sched_switch tp_btf `prev` (or `next`) task pointer.
#[inline(always)]
pub unsafe fn key_of(task: *const u8) -> u32 {
    let o = offsets();
    if o.on == 0 {
        return 0;
    }
    // Direct loads: the verifier types each pointer from the kernel's BTF and checks every
    // offset against its struct (the `cgroups` pointer is RCU-protected; a tracepoint runs
    // inside the scheduler's RCU read side).
    // SAFETY: offsets from the kernel's BTF, each load through a pointer of the type it names.
    unsafe {
        let ld =
            |p: *const u8, off: u32| core::ptr::read_volatile(p.add(off as usize) as *const u64);
        let cset = ld(task, o.task_cgroups) as *const u8;
        let css = ld(cset, o.css) as *const u8;
        let cgrp = ld(css, o.css_cgroup) as *const u8;
        let kn = ld(cgrp, o.cgroup_kn) as *const u8;
        ld(kn, o.kn_id) as u32
    }
}

/// [`key_of`] for a task address held as a number (`bpf_get_current_task` in `cpu_flip`):
/// checked reads, 0 when any fails.
#[inline(always)]
pub fn key_of_addr(task: u64) -> u32 {
    let o = offsets();
    if o.on == 0 || task == 0 {
        return 0;
    }
    // SAFETY: bpf_probe_read_kernel checks each address and fails cleanly.
    let rd =
        |p: u64, off: u32| unsafe { bpf_probe_read_kernel((p + u64::from(off)) as *const u64) };
    let Ok(cset) = rd(task, o.task_cgroups) else {
        return 0;
    };
    let Ok(css) = rd(cset, o.css) else { return 0 };
    let Ok(cgrp) = rd(css, o.css_cgroup) else {
        return 0;
    };
    let Ok(kn) = rd(cgrp, o.cgroup_kn) else {
        return 0;
    };
    rd(kn, o.kn_id).map(|id| id as u32).unwrap_or(0)
}

/// Charge `cpu_ns` of CPU and `wait_ns` of run-queue wait to cgroup `key` in the interval `s`
/// is writing.
#[inline(always)]
pub fn charge(s: &CpuState, key: u32, cpu_ns: u64, wait_ns: u64) -> Result<(), i64> {
    if key == 0 || (cpu_ns | wait_ns) == 0 {
        return Ok(());
    }
    let parity = ctl::parity(s.epoch) & 1;
    let sk = present(sketch(&CG_SKETCH, s, parity))?;
    // SAFETY: this CPU's entry of the interval's parity, written only by this CPU while its
    // interval is open (see `try_sched_switch`).
    let sk = unsafe { &mut *sk };
    sk.add(CgSlot {
        key,
        flags: 0,
        cpu_ns,
        wait_ns,
    });
    if global(&SHADOW_ON) != 0 {
        let map = if parity == 0 {
            &CG_SHADOW0
        } else {
            &CG_SHADOW1
        };
        match map.get_ptr_mut(key) {
            // SAFETY: a valid per-CPU hash value of this CPU.
            Some(v) => unsafe {
                (*v)[0] += cpu_ns;
                (*v)[1] += wait_ns;
            },
            None => {
                if map.insert(key, [cpu_ns, wait_ns], 0).is_err() {
                    sk.shadow_full += 1;
                }
            }
        }
    }
    Ok(())
}

/// Charge a slice, already binned in `slot` (keyed by process), to thread `tid` in the thread
/// sketch of the interval `s` is writing.
#[inline(always)]
pub fn charge_thread(s: &CpuState, slot: &CpuSlot, tid: u32) -> Result<(), i64> {
    let parity = ctl::parity(s.epoch) & 1;
    let sk = present(sketch(&THREAD_SKETCH, s, parity))?;
    // SAFETY: as in `charge`.
    let sk = unsafe { &mut *sk };
    sk.add(CpuSlot {
        tgid: tid,
        aux: slot.tgid,
        ns: slot.ns,
        bins: slot.bins,
    });
    if global(&SHADOW_ON) != 0 {
        let map = if parity == 0 {
            &THREAD_SHADOW0
        } else {
            &THREAD_SHADOW1
        };
        match map.get_ptr_mut(tid) {
            // SAFETY: a valid per-CPU hash value of this CPU.
            Some(v) => unsafe { *v += slot.ns },
            None => {
                if map.insert(tid, slot.ns, 0).is_err() {
                    sk.shadow_full += 1;
                }
            }
        }
    }
    Ok(())
}
