//! Acting on the processes the operator picked: signals and nice values.
//!
//! A pid on the screen may name another process by the time the operator confirms (the
//! process exited and its pid was reused). So a signal never goes to a pid: a pidfd is opened
//! when the target is chosen, the process behind it is checked against the start time the
//! screen knows it by, and the signal is sent through that pidfd later. A pidfd names one
//! process for good: if that process has exited, the signal fails with ESRCH and nothing else
//! is hit, whatever now holds the pid.
//!
//! A nice value on Linux belongs to each thread, so a process is reniced by renicing every
//! thread in /proc/PID/task, each by the same step from its own value.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A process as the screen knows it: its pid and its start time (clock ticks after boot; 0
/// when unknown), so a reused pid is another process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proc {
    pub pid: u32,
    pub start_ticks: u64,
}

/// Why an action did not happen, as the status line says it.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ActError {
    #[error("has exited")]
    Exited,
    #[error("its pid now belongs to another process")]
    Reused,
    #[error("permission denied ({0})")]
    Permission(&'static str),
    #[error("{0}")]
    Os(String),
}

fn os_error(e: std::io::Error, cap: &'static str) -> ActError {
    match e.raw_os_error() {
        Some(libc::ESRCH) => ActError::Exited,
        Some(libc::EPERM) | Some(libc::EACCES) => ActError::Permission(cap),
        _ => ActError::Os(e.to_string()),
    }
}

/// The start time (clock ticks after boot) of `pid` now, from /proc/PID/stat.
fn start_ticks(pid: u32) -> Option<u64> {
    let text = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    super::procinfo::parse_stat_name_start(&text).map(|(_, s)| s)
}

/// A handle on one process, taken when the operator chose it.
#[derive(Debug)]
pub struct Target {
    pub key: Proc,
    fd: OwnedFd,
}

impl Target {
    /// Open a pidfd for `key.pid` and check that it is the process `key` names (same start
    /// time; a key without one, a process gone before it was read, is taken as it is).
    pub fn open(key: Proc) -> Result<Target, ActError> {
        let pid = libc::pid_t::try_from(key.pid).map_err(|_| ActError::Exited)?;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1; no
        // memory is passed.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        if fd < 0 {
            return Err(os_error(std::io::Error::last_os_error(), "CAP_KILL"));
        }
        let fd = i32::try_from(fd).map_err(|_| ActError::Os("bad pidfd".into()))?;
        // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Checked after opening: the pidfd now holds whichever process had the pid, and that
        // one is the operator's only if it started when the screen says it did.
        if key.start_ticks != 0 {
            match start_ticks(key.pid) {
                Some(s) if s == key.start_ticks => {}
                Some(_) => return Err(ActError::Reused),
                None => return Err(ActError::Exited),
            }
        }
        Ok(Target { key, fd })
    }

    /// Send signal `sig` to the process (never to another that took its pid since).
    pub fn signal(&self, sig: i32) -> Result<(), ActError> {
        // SAFETY: pidfd_send_signal takes our open pidfd, a signal number, a null siginfo
        // (the kernel then fills it as kill(2) would) and flags 0.
        let r = unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                self.fd.as_raw_fd(),
                sig,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        if r < 0 {
            return Err(os_error(std::io::Error::last_os_error(), "CAP_KILL"));
        }
        Ok(())
    }

    /// The process has exited (its pidfd reads as ready).
    pub fn exited(&self) -> bool {
        let mut p = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, a zero timeout.
        let r = unsafe { libc::poll(&mut p, 1, 0) };
        r > 0 && p.revents & libc::POLLIN != 0
    }
}

/// What renicing a process did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reniced {
    /// Threads changed.
    pub threads: usize,
    /// The main thread's nice value before and after.
    pub from: i32,
    pub to: i32,
}

/// The nice value of thread `tid`.
fn nice_of(tid: libc::id_t) -> Result<i32, std::io::Error> {
    // getpriority can return -1 as a value: errno tells an error apart.
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = 0 };
    // SAFETY: plain syscall wrapper, no memory passed.
    let n = unsafe { libc::getpriority(libc::PRIO_PROCESS, tid) };
    let e = std::io::Error::last_os_error();
    if n == -1 && e.raw_os_error().unwrap_or(0) != 0 {
        return Err(e);
    }
    Ok(n)
}

/// Change the nice value of every thread of `key` by `delta` (each from its own value,
/// clamped to -20..=19). The process is checked by start time first, as for a signal.
pub fn renice(key: Proc, delta: i32) -> Result<Reniced, ActError> {
    let target = Target::open(key)?;
    let cap = "CAP_SYS_NICE";
    let main = libc::id_t::from(key.pid);
    let from = nice_of(main).map_err(|e| os_error(e, cap))?;
    let dir = std::fs::read_dir(format!("/proc/{}/task", key.pid)).map_err(|_| ActError::Exited)?;
    let mut tids: Vec<libc::id_t> = dir
        .filter_map(|d| d.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    let mut threads = 0;
    let mut first_err = None;
    for tid in tids {
        let now = match nice_of(tid) {
            Ok(n) => n,
            // A thread that ended meanwhile.
            Err(_) => continue,
        };
        let new = (now + delta).clamp(-20, 19);
        if new == now {
            threads += 1;
            continue;
        }
        // SAFETY: plain syscall wrapper, no memory passed.
        let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, new) };
        if r == 0 {
            threads += 1;
        } else {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::ESRCH) && first_err.is_none() {
                first_err = Some(os_error(e, cap));
            }
        }
    }
    if target.exited() {
        return Err(ActError::Exited);
    }
    if threads == 0
        && let Some(e) = first_err
    {
        return Err(e);
    }
    let to = nice_of(main).map_err(|e| os_error(e, cap))?;
    Ok(Reniced { threads, from, to })
}

/// The signals the menu offers, the ones operators reach for first on top, then the rest by
/// number.
pub const SIGNALS: &[(i32, &str)] = &[
    (libc::SIGTERM, "TERM"),
    (libc::SIGKILL, "KILL"),
    (libc::SIGHUP, "HUP"),
    (libc::SIGINT, "INT"),
    (libc::SIGQUIT, "QUIT"),
    (libc::SIGSTOP, "STOP"),
    (libc::SIGCONT, "CONT"),
    (libc::SIGUSR1, "USR1"),
    (libc::SIGUSR2, "USR2"),
    (libc::SIGILL, "ILL"),
    (libc::SIGTRAP, "TRAP"),
    (libc::SIGABRT, "ABRT"),
    (libc::SIGBUS, "BUS"),
    (libc::SIGFPE, "FPE"),
    (libc::SIGSEGV, "SEGV"),
    (libc::SIGPIPE, "PIPE"),
    (libc::SIGALRM, "ALRM"),
    (libc::SIGSTKFLT, "STKFLT"),
    (libc::SIGCHLD, "CHLD"),
    (libc::SIGTSTP, "TSTP"),
    (libc::SIGTTIN, "TTIN"),
    (libc::SIGTTOU, "TTOU"),
    (libc::SIGURG, "URG"),
    (libc::SIGXCPU, "XCPU"),
    (libc::SIGXFSZ, "XFSZ"),
    (libc::SIGVTALRM, "VTALRM"),
    (libc::SIGPROF, "PROF"),
    (libc::SIGWINCH, "WINCH"),
    (libc::SIGIO, "IO"),
    (libc::SIGPWR, "PWR"),
    (libc::SIGSYS, "SYS"),
];

/// The name of signal `sig` (`TERM`), or its number.
pub fn signal_name(sig: i32) -> String {
    SIGNALS
        .iter()
        .find(|(n, _)| *n == sig)
        .map_or_else(|| sig.to_string(), |(_, s)| (*s).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn own_key() -> Proc {
        let pid = std::process::id();
        Proc {
            pid,
            start_ticks: start_ticks(pid).unwrap_or(0),
        }
    }

    #[test]
    fn a_target_is_checked_by_its_start_time() {
        let key = own_key();
        assert!(Target::open(key).is_ok());
        let other = Proc {
            start_ticks: key.start_ticks + 1,
            ..key
        };
        assert_eq!(Target::open(other).unwrap_err(), ActError::Reused);
    }

    #[test]
    fn a_signal_reaches_a_child_and_an_exited_one_is_said_to_be() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let key = Proc {
            pid,
            start_ticks: start_ticks(pid).unwrap(),
        };
        let t = Target::open(key).unwrap();
        assert!(!t.exited());
        t.signal(libc::SIGTERM).unwrap();
        let st = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc::SIGTERM));
        // Reaped: the pidfd names a process that is gone, whoever has the pid now.
        assert!(t.exited());
        assert_eq!(t.signal(libc::SIGTERM).unwrap_err(), ActError::Exited);
    }

    #[test]
    fn every_signal_has_one_name() {
        let mut nums: Vec<i32> = SIGNALS.iter().map(|s| s.0).collect();
        nums.sort_unstable();
        nums.dedup();
        assert_eq!(nums.len(), SIGNALS.len());
        assert_eq!(signal_name(libc::SIGTERM), "TERM");
        assert_eq!(signal_name(64), "64");
        assert_eq!(SIGNALS[0].1, "TERM");
    }
}
