//! Off-CPU workloads of known kind, for the off-CPU split's tests: threads that sleep in a
//! futex (interruptible), and a parent that waits for a vfork child (uninterruptible).

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::die;

/// Two threads take turns: each waits on the condition variable (a futex wait, in
/// `TASK_INTERRUPTIBLE`) until the other hands it the token, holds it `period`, and hands it
/// back. Nothing else waits, so the process's off-CPU time is futex sleep and the holder's
/// nanosleep.
pub fn futex(period: Duration, stop: Option<Instant>) {
    let turn = Arc::new((Mutex::new(0u32), Condvar::new()));
    let run = move |me: u32, turn: Arc<(Mutex<u32>, Condvar)>| {
        let (lock, cv) = &*turn;
        loop {
            let mut t = lock.lock().unwrap_or_else(|e| e.into_inner());
            while *t != me {
                t = cv.wait(t).unwrap_or_else(|e| e.into_inner());
            }
            drop(t);
            if stop.is_some_and(|s| Instant::now() >= s) {
                let mut t = lock.lock().unwrap_or_else(|e| e.into_inner());
                // Let the other thread out too.
                *t = u32::MAX;
                cv.notify_all();
                return;
            }
            std::thread::sleep(period);
            let mut t = lock.lock().unwrap_or_else(|e| e.into_inner());
            if *t == u32::MAX {
                return;
            }
            *t = 1 - me;
            cv.notify_all();
        }
    };
    let other = {
        let turn = Arc::clone(&turn);
        std::thread::spawn(move || run(1, turn))
    };
    run(0, turn);
    let _ = other.join();
}

/// vfork a child that sleeps `ms` and exits, until `stop`. The parent is suspended in
/// `wait_for_vfork_done` (`TASK_KILLABLE`: uninterruptible with `TASK_WAKEKILL`, no I/O
/// wait) until the child exits. It is `clone(CLONE_VFORK)` without `CLONE_VM`: the parent
/// waits just as for `vfork()`, but the child runs on a copy of the memory, as after `fork()`,
/// so nothing it does can corrupt the parent (why `libc::vfork` is deprecated in Rust).
pub fn vfork_wait(ms: Duration, stop: Option<Instant>) {
    let ts = libc::timespec {
        tv_sec: ms.as_secs() as libc::time_t,
        tv_nsec: ms.subsec_nanos() as libc::c_long,
    };
    while stop.is_none_or(|s| Instant::now() < s) {
        // SAFETY: a fork-like clone of a single-threaded process; the child makes two raw
        // system calls and `_exit`s.
        let pid = unsafe {
            libc::syscall(
                libc::SYS_clone,
                libc::CLONE_VFORK | libc::SIGCHLD,
                0usize,
                0usize,
                0usize,
                0usize,
            )
        };
        match pid {
            0 => {
                // SAFETY: raw system calls in the child, see above.
                unsafe {
                    libc::syscall(
                        libc::SYS_nanosleep,
                        &raw const ts,
                        std::ptr::null_mut::<libc::timespec>(),
                    );
                    libc::_exit(0);
                }
            }
            -1 => die(&std::io::Error::last_os_error()),
            pid => {
                let mut status = 0;
                // SAFETY: waiting for our own child.
                unsafe { libc::waitpid(pid as libc::pid_t, &mut status, 0) };
            }
        }
    }
}
