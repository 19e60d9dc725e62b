//! BPF atomic instructions. Rust's core offers no read-modify-write atomics on the BPF target,
//! so these are the instructions themselves. Only the fetch variants (`atomic_fetch_add`,
//! `atomic_cmpxchg`) are fully ordered in the BPF memory model (on arm64 too); the plain adds
//! are atomic but unordered, fine for counters, not for handshakes.

/// `*p += v` (64-bit).
///
/// # Safety
/// `p` must be a valid, 8-byte aligned pointer into a map value.
#[inline(always)]
pub unsafe fn atomic_add(p: *mut u64, v: u64) {
    // SAFETY: the caller guarantees `p`; the instruction touches only `*p`.
    unsafe {
        core::arch::asm!(
            "lock *(u64 *)({p} + 0) += {v}",
            p = in(reg) p,
            v = in(reg) v,
            options(nostack),
        )
    }
}

/// `*p += v` (32-bit).
///
/// # Safety
/// `p` must be a valid, 4-byte aligned pointer into a map value.
#[inline(always)]
pub unsafe fn atomic_add32(p: *mut u32, v: u32) {
    // SAFETY: the caller guarantees `p`; the instruction touches only `*p`.
    unsafe {
        core::arch::asm!(
            "lock *(u32 *)({p} + 0) += {v}",
            p = in(reg) p,
            v = in(reg) u64::from(v),
            options(nostack),
        )
    }
}

/// `*p += v`, returning the old value (64-bit).
///
/// # Safety
/// `p` must be a valid, 8-byte aligned pointer into a map value.
#[inline(always)]
pub unsafe fn atomic_fetch_add(p: *mut u64, v: u64) -> u64 {
    let mut r = v;
    // SAFETY: the caller guarantees `p`; the instruction touches only `*p`.
    unsafe {
        core::arch::asm!(
            "{r} = atomic_fetch_add((u64 *)({p} + 0), {r})",
            p = in(reg) p,
            r = inout(reg) r,
            options(nostack),
        )
    }
    r
}

/// If `*p == old`, store `new`; returns the value `*p` had (64-bit compare-and-exchange).
///
/// # Safety
/// `p` must be a valid, 8-byte aligned pointer into a map value.
#[inline(always)]
pub unsafe fn atomic_cmpxchg(p: *mut u64, old: u64, new: u64) -> u64 {
    let mut r0 = old;
    // SAFETY: the caller guarantees `p`; the instruction touches only `*p`.
    unsafe {
        core::arch::asm!(
            "r0 = cmpxchg_64({p} + 0, r0, {n})",
            p = in(reg) p,
            n = in(reg) new,
            inout("r0") r0,
            options(nostack),
        )
    }
    r0
}

/// `*p = v` (64-bit), emitted after every memory access the program makes before it: the asm
/// is a compiler barrier, and the JIT keeps program order. On x86-64 (TSO) that makes it a
/// release store, enough to close a sequence that only this CPU writes. Not on arm64.
///
/// # Safety
/// `p` must be a valid, 8-byte aligned pointer into a map value.
#[inline(always)]
pub unsafe fn store_release_x86(p: *mut u64, v: u64) {
    // SAFETY: the caller guarantees `p`; the instruction touches only `*p`.
    unsafe {
        core::arch::asm!(
            "*(u64 *)({p} + 0) = {v}",
            p = in(reg) p,
            v = in(reg) v,
            options(nostack),
        )
    }
}
