//! The QoS pipeline: `sys_enter` and `sys_exit` (tp_btf, one program per hook) follow the
//! syscalls of pinned processes only. Userspace attaches them when the first process is pinned
//! and detaches them when the last pin goes, so with nothing pinned no syscall pays anything.
//!
//! This module is the hooks: the pin check every syscall pays and the per-CPU handshake of
//! the runs that write interval data. What a pinned syscall records is below it:
//! [`latency`] (per-syscall counts and histograms) and [`request`] (the request model).
//!
//! Every other process pays the pin check. At `sys_enter`: one word chosen by the thread's
//! `pt_regs` address (its kernel stack) in the cache of stacks found unpinned under the
//! current pin generation (`ebee_shared::qos::StackCache`), and nothing else when it matches.
//! Otherwise one helper call for the tgid and one bit of a bitmap indexed by tgid (an inlined
//! array lookup); only a set bit goes on to the pin table (eight compares in one cache line)
//! for the slot and generation, and a clear one fills the cache entry. At `sys_exit`: one byte
//! chosen by the same address, set by the `sys_enter` of pinned threads, and no helper call
//! when it is 0.

mod latency;
mod request;
pub(crate) mod runq;

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_task_pt_regs},
    macros::btf_tracepoint,
    programs::BtfTracePointContext,
};
use ebee_shared::{
    ctl,
    qos::{self, MAX_PINS, OPEN_SLOTS, PIN_BIT_WORDS, STACK_SLOTS, pin_entry},
};

use crate::maps::{CTL, QOS_CPU, QOS_OPEN, QOS_PIN, QOS_PIN_BITS, QOS_PINS, QOS_STACKS};
use crate::{atomic_fetch_add, present, store_release_x86};

/// The pin slot and generation of `tgid`, if it is pinned.
#[inline(always)]
pub(crate) fn pinned(tgid: u32) -> Result<Option<(u32, u32)>, i64> {
    // The bitmap first: every syscall of every process comes here, and for all but the
    // pinned ones one word and one bit settle it. A bit set for a pin being removed only
    // sends the call on to the table, which is the truth.
    let w = present(QOS_PIN_BITS.get_ptr((tgid >> 6) & (PIN_BIT_WORDS - 1)))?;
    // SAFETY: a valid array value; userspace rewrites it while programs run.
    if unsafe { core::ptr::read_volatile(w) } & (1u64 << (tgid & 63)) == 0 {
        return Ok(None);
    }
    let t = present(QOS_PINS.get_ptr(0))?;
    let mut i = 0;
    while i < MAX_PINS {
        // SAFETY: `t` is the array's one value; `i` is below the array length. A volatile read
        // of each word: userspace rewrites the table while programs run.
        let e = unsafe { core::ptr::read_volatile(&raw const (*t).pins[i]) };
        if e as u32 == tgid {
            return Ok(Some((i as u32, (e >> 32) as u32)));
        }
        i += 1;
    }
    Ok(None)
}

/// `regs` less the address of a map value `t`, as a plain number. The verifier forbids shifts
/// and masks on a pointer but, for a privileged program, turns the difference of two pointers
/// into a number: with `t` fixed, it names the thread's stack just as well. The subtraction
/// is written out so the compiler cannot fold it into the shifts that follow.
#[inline(always)]
fn stack_key(regs: u64, t: u64) -> u64 {
    let mut d = regs;
    // SAFETY: register arithmetic only.
    unsafe {
        core::arch::asm!(
            "{d} -= {t}",
            d = inout(reg) d,
            t = in(reg) t,
            options(pure, nomem, nostack),
        )
    };
    d
}

/// The open-syscall filter byte of the thread whose `struct pt_regs` is at `regs`.
#[inline(always)]
fn open_byte(regs: u64) -> Result<*mut u8, i64> {
    let t = present(QOS_OPEN.get_ptr_mut(0))?;
    let d = stack_key(regs, t as u64);
    // SAFETY: `t` is the array's one value; the index is masked below OPEN_SLOTS.
    Ok(unsafe {
        (&raw mut (*t).b)
            .cast::<u8>()
            .add(qos::open_slot(d) & (OPEN_SLOTS - 1))
    })
}

/// The unpinned-stack cache entry of the thread whose `struct pt_regs` is at `regs`, and the
/// value it has when that thread was found unpinned under the current generation.
#[inline(always)]
fn stack_entry(regs: u64) -> Result<(*mut u64, u64), i64> {
    let c = present(QOS_STACKS.get_ptr_mut(0))?;
    let d = stack_key(regs, c as u64);
    // SAFETY: `c` is the array's one value; userspace rewrites the generation while programs
    // run (one 8-byte load).
    let generation = unsafe { core::ptr::read_volatile(&raw const (*c).generation) };
    // SAFETY: as above; the index is masked below STACK_SLOTS.
    let e = unsafe {
        (&raw mut (*c).e)
            .cast::<u64>()
            .add(qos::stack_slot(d) & (STACK_SLOTS - 1))
    };
    Ok((e, qos::stack_entry(d, generation)))
}

/// A thread ends: its stack may soon be another thread's, so its cache entry goes. Called
/// from `sched_process_exit` (every thread), with the exiting task.
#[inline(always)]
pub(crate) fn forget_stack(task: *const u8) -> Result<(), i64> {
    // SAFETY: a helper call on the BTF task pointer of the tracepoint.
    let regs = unsafe { bpf_task_pt_regs(task as *mut _) } as u64;
    if regs == 0 {
        return Ok(());
    }
    let (e, mine) = stack_entry(regs)?;
    // SAFETY: a valid array value. Only a matching entry is cleared (another live thread may
    // own the slot); a stale one of this stack can never match again (generation).
    unsafe {
        if core::ptr::read_volatile(e) & !qos::STACK_GEN_MASK == mine & !qos::STACK_GEN_MASK {
            core::ptr::write_volatile(e, 0);
        }
    }
    Ok(())
}

/// The pin table entry of `slot`, read again.
#[inline(always)]
fn pinned_at(slot: u32) -> Result<u64, i64> {
    let t = present(QOS_PINS.get_ptr(0))?;
    // SAFETY: `t` is the array's one value; the index is masked below MAX_PINS.
    Ok(unsafe { core::ptr::read_volatile(&raw const (*t).pins[slot as usize & (MAX_PINS - 1)]) })
}

#[btf_tracepoint(function = "sys_enter")]
pub fn sys_enter(ctx: BtfTracePointContext) -> i32 {
    crate::exit_code(try_sys_enter(&ctx))
}

#[inline(always)]
fn try_sys_enter(ctx: &BtfTracePointContext) -> Result<u32, i64> {
    let regs: u64 = ctx.arg(0);
    // The generation is read (in `stack_entry`) before the bitmap: userspace sets a new pin's
    // bit before it writes the new generation, so an entry made from a bitmap without the bit
    // carries the old generation and never matches again.
    let (e, unpinned) = stack_entry(regs)?;
    // SAFETY: a valid array value, written by any CPU (8-byte loads and stores).
    if unsafe { core::ptr::read_volatile(e) } == unpinned {
        return Ok(0);
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let Some((_, gen_)) = pinned((pid_tgid >> 32) as u32)? else {
        // SAFETY: as above.
        unsafe { core::ptr::write_volatile(e, unpinned) };
        return Ok(0);
    };
    let id: i64 = ctx.arg(1);
    let o = open_byte(regs)?;
    // SAFETY: a valid array value. Written once per stack, so the line stays shared.
    unsafe {
        if core::ptr::read_volatile(o) == 0 {
            core::ptr::write_volatile(o, 1);
        }
    }
    latency::start(pid_tgid as u32, gen_, id)?;
    Ok(0)
}

#[btf_tracepoint(function = "sys_exit")]
pub fn sys_exit(ctx: BtfTracePointContext) -> i32 {
    // SAFETY: called by the kernel with the sys_exit arguments (regs, ret).
    crate::exit_code(unsafe { try_sys_exit(&ctx) })
}

/// # Safety
/// `ctx` must be the sys_exit tp_btf context.
#[inline(always)]
unsafe fn try_sys_exit(ctx: &BtfTracePointContext) -> Result<u32, i64> {
    // A thread whose stack never had a pinned syscall returns here, before any helper call:
    // the sys_enter of every pinned syscall set this byte (the same thread has the same
    // `regs` at both ends). A syscall begun before the pin is not seen at all.
    let regs: u64 = ctx.arg(0);
    let o = open_byte(regs)?;
    // SAFETY: a valid array value.
    if unsafe { core::ptr::read_volatile(o) } == 0 {
        return Ok(0);
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let tgid = (pid_tgid >> 32) as u32;
    let Some((slot, gen_)) = pinned(tgid)? else {
        return Ok(0);
    };
    let cpu = present(QOS_CPU.get_ptr_mut(0))?;
    // Mark this CPU busy before reading the epoch (a full barrier), as the CPU pipeline does:
    // userspace waits for the mark to clear before it reads the interval it just closed.
    // SAFETY: this CPU's value of a per-CPU array; the program does not nest on one CPU.
    let seq = unsafe { atomic_fetch_add(&raw mut (*cpu).seq, 1) };
    // Check the pin again now that this CPU is marked: userspace clears a slot's data only
    // after removing the pin and waiting for every marked CPU, so a run that passed the first
    // check just before the removal must not write into the slot's next owner. Whatever
    // happens, the mark is cleared below: a failure is returned only after that.
    let r = match pinned_at(slot) {
        // SAFETY: the caller's guarantee.
        Ok(e) if e == pin_entry(tgid, gen_) => unsafe {
            exit_body(ctx, pid_tgid, tgid, slot, gen_)
        },
        Ok(_) => Ok(()),
        Err(e) => Err(e),
    };
    // Clear the mark. Only this CPU writes it (the kernel does not run a program again on a
    // CPU where it is running), so a plain store after the body's writes suffices on x86-64,
    // whose stores are seen in order: no second locked instruction. (QoS is x86-64 only:
    // userspace refuses to pin on other architectures.)
    // SAFETY: as above.
    unsafe { store_release_x86(&raw mut (*cpu).seq, seq.wrapping_add(2)) };
    r.map(|()| 0)
}

/// A pinned syscall ends, on a marked CPU: its latency, then what it means to the request
/// model.
///
/// # Safety
/// `ctx` must be the sys_exit tp_btf context.
#[inline(always)]
unsafe fn exit_body(
    ctx: &BtfTracePointContext,
    pid_tgid: u64,
    tgid: u32,
    slot: u32,
    gen_: u32,
) -> Result<(), i64> {
    let now = crate::now_ns();
    let c = present(CTL.get_ptr(0))?;
    // SAFETY: a valid map value; the epoch word is read with one 8-byte load.
    let epoch = unsafe { core::ptr::read_volatile(&raw const (*c).epoch) };
    let parity = ctl::parity(epoch);
    let base = parity * MAX_PINS as u32 + slot;
    let pin = present(QOS_PIN.get_ptr_mut(base))?;
    let Some(nr) = latency::finish(pid_tgid as u32, slot, gen_, base, now, pin)? else {
        return Ok(());
    };
    // SAFETY: the caller's guarantee.
    unsafe { request::on_exit(ctx, nr, tgid, slot, gen_, now, pin) }
}
