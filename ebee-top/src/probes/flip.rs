//! Running the `flip` and `cpu_flip` programs with BPF_PROG_TEST_RUN: the one way to write the
//! epoch word with a single atomic instruction in the kernel's own clock, and to run a program
//! on a chosen CPU (BPF_F_TEST_RUN_ON_CPU). aya 0.14 does not wrap this command.

use std::os::fd::{AsFd as _, AsRawFd as _};

use aya::{
    maps::{Array, MapData},
    programs::{ProgramFd, RawTracePoint},
};
use ebee_shared::{cpu::CpuFlipArgs, ctl::Ctl};

const BPF_PROG_TEST_RUN: libc::c_long = 10;
/// `flags` bit: run on `cpu` (raw_tracepoint programs only), by IPI when it is not ours.
const BPF_F_TEST_RUN_ON_CPU: u32 = 1;

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

pub(super) struct Flipper {
    fd: ProgramFd,
}

impl Flipper {
    pub(super) fn new(prog: &RawTracePoint) -> Result<Self, aya::programs::ProgramError> {
        let fd = prog.fd()?.try_clone()?;
        Ok(Self { fd })
    }

    /// Flip the interval parity; returns the new epoch word.
    pub(super) fn flip(&self, ctl: &Array<MapData, Ctl>) -> Result<u64, std::io::Error> {
        self.run(TestRunAttr {
            prog_fd: self.fd.as_fd().as_raw_fd() as u32,
            ..Default::default()
        })?;
        ctl.get(&0, 0)
            .map(|c| c.epoch)
            .map_err(|e| std::io::Error::other(e.to_string()))
    }

    /// Run the program on `cpu` with `args` as its raw_tracepoint arguments; returns when it
    /// has run there. `ENXIO` means the CPU is offline.
    pub(super) fn run_on_cpu(&self, cpu: u32, args: &CpuFlipArgs) -> Result<(), std::io::Error> {
        self.run(TestRunAttr {
            prog_fd: self.fd.as_fd().as_raw_fd() as u32,
            ctx_in: std::ptr::from_ref(args) as u64,
            ctx_size_in: std::mem::size_of::<CpuFlipArgs>() as u32,
            flags: BPF_F_TEST_RUN_ON_CPU,
            cpu,
            ..Default::default()
        })
    }

    fn run(&self, mut attr: TestRunAttr) -> Result<(), std::io::Error> {
        // SAFETY: `attr` is a valid, initialised `bpf_attr.test` that outlives the call, and
        // `ctx_in`, when set, points at `ctx_size_in` readable bytes that outlive it too; the
        // kernel reads them and writes back only `retval` and `duration`.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_PROG_TEST_RUN,
                &mut attr as *mut TestRunAttr,
                std::mem::size_of::<TestRunAttr>() as u32,
            )
        };
        if rc < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if attr.retval != 0 {
            return Err(std::io::Error::other("flip program found no map value"));
        }
        Ok(())
    }
}
