//! Benchmark-only programs: empty programs on the hot hooks, so `cargo xtask bench` can measure
//! the floor any program there pays (the trampoline, the syscall slow path) on this machine.
//! ebee-top never attaches them (nor loads them): only the benchmarks do, through ebee-bench,
//! so they measure with the very object ebee-top runs.
//!
//! They stay empty, without the `try_*` body of the other entry points: nothing in them can
//! fail, and an empty program is what they measure.

use aya_ebpf::{macros::btf_tracepoint, programs::BtfTracePointContext};

/// An empty `sys_enter` program: the floor of any enter/exit design (`cargo xtask bench
/// overhead`).
#[btf_tracepoint(function = "sys_enter")]
pub fn floor_enter(_ctx: BtfTracePointContext) -> i32 {
    0
}

/// An empty `sys_exit` program (see `floor_enter`).
#[btf_tracepoint(function = "sys_exit")]
pub fn floor_exit(_ctx: BtfTracePointContext) -> i32 {
    0
}

/// An empty `sched_switch` program: the floor any sched_switch program pays (`cargo xtask
/// bench switch`).
#[btf_tracepoint(function = "sched_switch")]
pub fn floor_switch(_ctx: BtfTracePointContext) -> i32 {
    0
}

/// An empty `sock_recv_length` program: the floor any program on the socket tracepoints pays
/// (`cargo xtask bench servers`).
#[btf_tracepoint(function = "sock_recv_length")]
pub fn floor_recv(_ctx: BtfTracePointContext) -> i32 {
    0
}

/// An empty `sock_send_length` program (see `floor_recv`).
#[btf_tracepoint(function = "sock_send_length")]
pub fn floor_send(_ctx: BtfTracePointContext) -> i32 {
    0
}
