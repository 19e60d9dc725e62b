//! The one raw `bpf(2)` entry point, for the two things aya 0.14 does not do for us: running a
//! program with BPF_PROG_TEST_RUN (the flips), and map element reads and writes into buffers
//! the caller owns (QoS values too large to copy through the stack).
//!
//! Every command goes through [`bpf`], the only `unsafe` system call of the probes; the
//! wrappers below build the `union bpf_attr` member each command reads.

use std::io;
use std::os::fd::{AsRawFd as _, BorrowedFd};

const BPF_MAP_LOOKUP_ELEM: libc::c_long = 1;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_TEST_RUN: libc::c_long = 10;
/// `flags` bit of BPF_PROG_TEST_RUN: run on `cpu` (raw_tracepoint programs only), by IPI when
/// it is not ours.
const BPF_F_TEST_RUN_ON_CPU: u32 = 1;

/// The element-command member of `union bpf_attr` (include/uapi/linux/bpf.h).
#[repr(C)]
struct ElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// The `test` member of `union bpf_attr` (include/uapi/linux/bpf.h).
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
    ctx_size_in: u32,
    ctx_size_out: u32,
    ctx_in: u64,
    ctx_out: u64,
    flags: u32,
    cpu: u32,
    batch_size: u32,
    _pad: u32,
}

/// `bpf(cmd, attr, sizeof *attr)`.
///
/// # Safety
/// `attr` must be the `#[repr(C)]` member of `union bpf_attr` that `cmd` reads, and every
/// address in it must point at memory valid for what `cmd` does there (read or write, and how
/// many bytes) for the duration of the call.
unsafe fn bpf<A>(cmd: libc::c_long, attr: &mut A) -> io::Result<()> {
    // SAFETY: the caller guarantees `attr` and the memory it points at (see above); the size
    // passed is that of `*attr`, so the kernel reads no further.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_mut(attr),
            std::mem::size_of::<A>() as u32,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Copy element `key` of the map `map` into `value`.
///
/// # Safety
/// `value` must be writable for the map's whole value: its value size, times the number of
/// possible CPUs (each copy rounded up to 8 bytes) for a per-CPU map.
pub(super) unsafe fn map_lookup_elem(
    map: BorrowedFd<'_>,
    key: u32,
    value: *mut u8,
) -> io::Result<()> {
    let mut attr = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: std::ptr::from_ref(&key) as u64,
        value: value as u64,
        flags: 0,
    };
    // SAFETY: the element member for BPF_MAP_LOOKUP_ELEM; `key` is a live u32 (the key size
    // of an array map) and `value` is writable for the whole value (the caller's contract).
    unsafe { bpf(BPF_MAP_LOOKUP_ELEM, &mut attr) }
}

/// Write element `key` of the map `map` from `value`.
///
/// # Safety
/// `value` must be readable for the map's whole value (as for [`map_lookup_elem`]).
pub(super) unsafe fn map_update_elem(
    map: BorrowedFd<'_>,
    key: u32,
    value: *const u8,
) -> io::Result<()> {
    let mut attr = ElemAttr {
        map_fd: map.as_raw_fd() as u32,
        _pad: 0,
        key: std::ptr::from_ref(&key) as u64,
        value: value as u64,
        flags: 0,
    };
    // SAFETY: the element member for BPF_MAP_UPDATE_ELEM; `key` is a live u32 and `value` is
    // readable for the whole value (the caller's contract); the kernel only reads both.
    unsafe { bpf(BPF_MAP_UPDATE_ELEM, &mut attr) }
}

/// Run the program `prog` once with BPF_PROG_TEST_RUN, with `ctx` (if any) as its context, on
/// `cpu` when given (else on the calling CPU). Returns the program's return value.
pub(super) fn prog_test_run<T>(
    prog: BorrowedFd<'_>,
    ctx: Option<&T>,
    cpu: Option<u32>,
) -> io::Result<u32> {
    let mut attr = TestRunAttr {
        prog_fd: prog.as_raw_fd() as u32,
        ..Default::default()
    };
    if let Some(ctx) = ctx {
        attr.ctx_in = std::ptr::from_ref(ctx) as u64;
        attr.ctx_size_in = std::mem::size_of::<T>() as u32;
    }
    if let Some(cpu) = cpu {
        attr.flags = BPF_F_TEST_RUN_ON_CPU;
        attr.cpu = cpu;
    }
    // SAFETY: the `test` member for BPF_PROG_TEST_RUN, with no data buffers and no `ctx_out`;
    // `ctx_in`, when set, points at `ctx_size_in` bytes of a live `T` that the kernel only
    // reads. The kernel writes back only `retval` and `duration`, inside `attr`.
    unsafe { bpf(BPF_PROG_TEST_RUN, &mut attr) }?;
    Ok(attr.retval)
}
