//! Running the `flip` and `cpu_flip` programs with BPF_PROG_TEST_RUN: the one way to write the
//! epoch word with a single atomic instruction in the kernel's own clock, and to run a program
//! on a chosen CPU (BPF_F_TEST_RUN_ON_CPU). aya 0.14 does not wrap this command.

use std::os::fd::AsFd as _;

use aya::{
    Ebpf,
    programs::{ProgramFd, RawTracePoint},
};
use ebee_shared::{cpu::CpuFlipArgs, ctl::Ctl};

use super::{ProbeError, classify, mmap_array::MappedValue, sys};

pub(super) struct Flipper {
    fd: ProgramFd,
}

impl Flipper {
    /// Load the raw_tracepoint program `name`, never to be attached: it runs only when we run
    /// it.
    pub(super) fn load(ebpf: &mut Ebpf, name: &str) -> Result<Self, ProbeError> {
        let prog: &mut RawTracePoint = ebpf
            .program_mut(name)
            .ok_or_else(|| ProbeError::Other(format!("no {name} program")))?
            .try_into()
            .map_err(classify(&format!("{name} program")))?;
        prog.load()
            .map_err(classify(&format!("loading {name} program")))?;
        let fd = prog
            .fd()
            .and_then(|fd| fd.try_clone().map_err(Into::into))
            .map_err(classify(&format!("{name} program fd")))?;
        Ok(Self { fd })
    }

    /// Flip the interval parity; returns the new epoch word, read from the mapped control
    /// block (no second system call).
    pub(super) fn flip(&self, ctl: &MappedValue<Ctl>) -> Result<u64, std::io::Error> {
        self.run::<()>(None, None)?;
        Ok(ctl.word_at::<{ std::mem::offset_of!(Ctl, epoch) }>())
    }

    /// Run the program on `cpu` with `args` as its raw_tracepoint arguments; returns when it
    /// has run there. `ENXIO` means the CPU is offline.
    pub(super) fn run_on_cpu(&self, cpu: u32, args: &CpuFlipArgs) -> Result<(), std::io::Error> {
        self.run(Some(args), Some(cpu))
    }

    fn run<T>(&self, ctx: Option<&T>, cpu: Option<u32>) -> Result<(), std::io::Error> {
        if sys::prog_test_run(self.fd.as_fd(), ctx, cpu)? != 0 {
            return Err(std::io::Error::other("flip program found no map value"));
        }
        Ok(())
    }
}
