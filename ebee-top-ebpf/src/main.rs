//! The in-kernel half of ebee-top: tp_btf and raw_tracepoint programs only (this kernel family
//! has no kprobes and refuses fentry). Each entry point is a thin wrapper around a `try_*`
//! body whose failures are counted ([`exit_code`]); the benchmark-only programs are apart in
//! `bench.rs`; all maps live in `maps.rs`; all sizes and algorithms come from `ebee-shared`.
#![no_std]
#![no_main]
// Inline assembly on the BPF target (the atomic instructions in atomic.rs).
#![feature(asm_experimental_arch)]

mod atomic;
mod bench;
mod cgroup;
mod cpu;
mod lifecycle;
mod maps;
mod mem;
mod qos;
mod servers;
mod wait;

pub use atomic::{atomic_add, atomic_add32, atomic_cmpxchg, atomic_fetch_add, store_release_x86};

/// The `Err` of a `try_*` body when a map value that cannot be missing was (-ENOENT): a lookup
/// in an array at a fixed or masked index, which the verifier still makes us check.
pub const MISSING: i64 = -2;

/// `p`, or [`MISSING`]: for the map lookups that cannot fail. The failure is marked cold, so
/// the compiler lays out the code and picks registers for the path that runs: without the
/// hint, the error exits made the hot paths of `sched_switch` and `sys_exit` longer.
#[inline(always)]
pub fn present<T>(p: Option<T>) -> Result<T, i64> {
    match p {
        Some(v) => Ok(v),
        None => {
            #[allow(
                clippy::incompatible_msrv,
                reason = "the eBPF crate builds with nightly only"
            )]
            core::hint::cold_path();
            Err(MISSING)
        }
    }
}

/// The return value of an entry point whose `try_*` body returned `r`: the body's own value,
/// or 1 for a failed run, which is counted in `DROPS[PROG_ERRORS]`. The count is what shows a
/// failure that "cannot happen": the program macros of aya-ebpf 0.2 drop this value and
/// return 0 to the kernel (so a BPF_PROG_TEST_RUN of `flip` or `cpu_flip` always sees 0).
#[inline(always)]
pub fn exit_code(r: Result<u32, i64>) -> i32 {
    match r {
        Ok(v) => v as i32,
        Err(_) => {
            maps::count_drop(ebee_shared::drops::PROG_ERRORS);
            1
        }
    }
}

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
