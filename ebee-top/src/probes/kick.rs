//! One sleeping thread per CPU, pinned there, that userspace wakes to make that CPU switch
//! tasks: the CPU pipeline closes a CPU's interval at its first context switch after a flip
//! (`ebee_shared::cpu`), and a busy CPU running one task may not switch for a long time.
//!
//! Waking the thread is the switch: the scheduler puts it on its CPU, and `sched_switch` runs
//! there. The threads are SCHED_FIFO when allowed, so the switch comes at once even on a CPU
//! that is busy. They do nothing else, and each wake costs two context switches on its CPU.

use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

/// The threads; dropping it stops and joins them.
pub(super) struct Kickers {
    /// Per CPU: the eventfd its thread waits on, or None when no thread could be placed there
    /// (offline, or outside our CPU set).
    fds: Vec<Option<Arc<OwnedFd>>>,
    threads: Vec<JoinHandle<()>>,
    stop: Arc<AtomicBool>,
}

impl Kickers {
    /// Start one thread on each of `ncpus` CPUs that we may run on.
    pub(super) fn start(ncpus: usize) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let mut fds = Vec::with_capacity(ncpus);
        let mut threads = Vec::new();
        for cpu in 0..ncpus {
            let Some(fd) = eventfd() else {
                fds.push(None);
                continue;
            };
            let fd = Arc::new(fd);
            let (tx, rx) = std::sync::mpsc::channel();
            let stop2 = Arc::clone(&stop);
            let fd2 = Arc::clone(&fd);
            let spawned = std::thread::Builder::new()
                .name(format!("ebee-kick/{cpu}"))
                // It only blocks in read(): a small stack is plenty, even with hundreds of CPUs.
                .stack_size(64 * 1024)
                .spawn(move || {
                    let placed = pin_to(cpu);
                    let _ = tx.send(placed);
                    if placed {
                        realtime();
                        wait_loop(&fd2, &stop2);
                    }
                });
            match spawned {
                Ok(h) => {
                    let placed = rx.recv().unwrap_or(false);
                    threads.push(h);
                    fds.push(placed.then_some(fd));
                }
                Err(_) => fds.push(None),
            }
        }
        Self { fds, threads, stop }
    }

    /// Whether `cpu` has a thread.
    pub(super) fn has(&self, cpu: usize) -> bool {
        self.fds.get(cpu).is_some_and(Option::is_some)
    }

    /// Wake the thread of `cpu` (no-op without one).
    pub(super) fn kick(&self, cpu: usize) {
        if let Some(Some(fd)) = self.fds.get(cpu) {
            signal(fd);
        }
    }
}

impl Drop for Kickers {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for fd in self.fds.iter().flatten() {
            signal(fd);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn eventfd() -> Option<OwnedFd> {
    // SAFETY: eventfd has no memory preconditions; a non-negative result is a new fd we own.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
    // SAFETY: `fd` is a fresh, valid descriptor owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

fn signal(fd: &OwnedFd) {
    let one: u64 = 1;
    // SAFETY: writes 8 bytes from a valid u64 to an eventfd we own.
    unsafe { libc::write(fd.as_raw_fd(), (&raw const one).cast(), 8) };
}

fn wait_loop(fd: &OwnedFd, stop: &AtomicBool) {
    let mut buf: u64 = 0;
    while !stop.load(Ordering::Acquire) {
        // SAFETY: reads 8 bytes into a valid u64 from an eventfd we own; blocks until kicked.
        let n = unsafe { libc::read(fd.as_raw_fd(), (&raw mut buf).cast(), 8) };
        if n < 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return;
        }
    }
}

/// Pin the calling thread to `cpu`; false if it may not run there.
fn pin_to(cpu: usize) -> bool {
    if cpu >= libc::CPU_SETSIZE as usize {
        return false;
    }
    // SAFETY: a zeroed cpu_set_t is the empty set; CPU_SET gets an index below CPU_SETSIZE and
    // sched_setaffinity a valid pointer and its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

/// Make the calling thread SCHED_FIFO at the lowest real-time priority, when allowed, so a
/// wake preempts whatever runs on its CPU. Without it the wake still switches, a little later.
fn realtime() {
    let p = libc::sched_param { sched_priority: 1 };
    // SAFETY: a valid sched_param for the calling thread (pid 0).
    unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether this process may run on `cpu` (its affinity mask).
    fn allowed(cpu: usize) -> bool {
        // SAFETY: a zeroed cpu_set_t is valid; sched_getaffinity fills it for this process.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0
                && libc::CPU_ISSET(cpu, &set)
        }
    }

    #[test]
    fn threads_start_take_kicks_and_stop() {
        let k = Kickers::start(1);
        // A thread is placed on every CPU we may run on, no fewer.
        assert_eq!(k.has(0), allowed(0));
        for _ in 0..100 {
            k.kick(0);
        }
        // No thread for a CPU that does not exist, and kicking it is harmless.
        assert!(!k.has(5000));
        k.kick(5000);
        // Dropping joins every thread: this must not hang.
        drop(k);
    }
}
