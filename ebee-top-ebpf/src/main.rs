//! The in-kernel half of ebee-top: tp_btf and raw_tracepoint programs only (this kernel family
//! has no kprobes and refuses fentry). Each entry point is a thin wrapper around a `try_*`
//! body; all maps live in `maps.rs`; all sizes and algorithms come from `ebee-shared`.
#![no_std]
#![no_main]
// Inline assembly on the BPF target (the atomic instructions in atomic.rs).
#![feature(asm_experimental_arch)]

mod atomic;
mod bench;
mod cpu;
mod lifecycle;
mod maps;
mod mem;
mod qos;

pub use atomic::{atomic_add, atomic_add32, atomic_cmpxchg, atomic_fetch_add, store_release_x86};

/// `CLOCK_MONOTONIC` now, in ns.
#[inline(always)]
pub fn now_ns() -> u64 {
    // SAFETY: a helper without arguments or side effects.
    unsafe { aya_ebpf::helpers::bpf_ktime_get_ns() }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // Unreachable in verified code: the verifier rejects any path that could get here.
    loop {}
}

/// GPL-compatible licence, required for the tracing helpers we call.
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
