//! Process metadata from /proc (via the procfs crate), cached per pid and invalidated by the
//! kernel's exec and exit events, so a reused pid never shows a dead process's name. A process
//! that is gone before we look keeps the name its exit event carried.

// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::HashMap;

use crate::batch::{Name, ProcInfo};

/// PF_KTHREAD in /proc/PID/stat flags.
const PF_KTHREAD: u32 = 0x0020_0000;

#[derive(Default)]
pub struct ProcCache {
    known: HashMap<u32, ProcInfo>,
    /// Names from exit events, for processes /proc no longer has: this interval's exits.
    exited: HashMap<u32, String>,
    /// The previous interval's exits: a dying task runs its teardown after the exit event and
    /// may be charged once more in the next interval, which must still show its name.
    exited_before: HashMap<u32, String>,
    /// Processes whose parent exited since the last `take_reparented`: their parent is read
    /// again.
    reparented: Vec<u32>,
    /// Pids /proc did not have when last looked for, and when: a row can name a process that
    /// is gone (a dying thread's last charge, a stale sketch entry), and it is looked for again
    /// only after `MISSING_RETRY`, not on every interval.
    missing: HashMap<u32, std::time::Instant>,
}

/// How long a pid /proc did not have is not looked for again (unless it execs).
const MISSING_RETRY: std::time::Duration = std::time::Duration::from_secs(1);

impl ProcCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The process exec'd: its name and command line changed.
    pub fn on_exec(&mut self, pid: u32) {
        self.known.remove(&pid);
        self.missing.remove(&pid);
    }

    /// The process ended; remember its last name for this interval's rows.
    pub fn on_exit(&mut self, pid: u32, comm: String) {
        self.known.remove(&pid);
        self.exited.insert(pid, comm);
        // Its children now belong to init or a subreaper: read their parent again.
        let before = self.reparented.len();
        self.reparented.extend(
            self.known
                .iter()
                .filter(|(_, p)| p.ppid == Some(pid))
                .map(|(c, _)| *c),
        );
        for c in &self.reparented[before..] {
            self.known.remove(c);
        }
    }

    /// The processes reparented since the last call (their cached parent was dropped).
    pub fn take_reparented(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.reparented)
    }

    /// Events were lost: nothing cached can be trusted.
    pub fn clear(&mut self) {
        self.known.clear();
        self.missing.clear();
    }

    /// Age the exit names: those of two intervals ago are forgotten.
    pub fn end_interval(&mut self) {
        self.exited_before = std::mem::take(&mut self.exited);
        if self.missing.len() > 256 {
            self.missing.retain(|_, t| t.elapsed() < MISSING_RETRY);
        }
    }

    fn exit_name(&self, pid: u32) -> Option<&String> {
        self.exited
            .get(&pid)
            .or_else(|| self.exited_before.get(&pid))
    }

    /// The parent of `pid`, from the cache or /proc (which is then cached).
    pub fn parent(&mut self, pid: u32) -> Option<u32> {
        if let Some(p) = self.known.get(&pid) {
            return p.ppid;
        }
        self.get(pid).ppid
    }

    /// Whether `pid` was found in /proc (and is cached): what else is read of it (its cgroup)
    /// is worth reading.
    pub fn is_known(&self, pid: u32) -> bool {
        self.known.contains_key(&pid)
    }

    /// Metadata of `pid`, from the cache or /proc.
    pub fn get(&mut self, pid: u32) -> ProcInfo {
        if let Some(p) = self.known.get(&pid) {
            return p.clone();
        }
        let found = if self
            .missing
            .get(&pid)
            .is_some_and(|t| t.elapsed() < MISSING_RETRY)
        {
            None
        } else {
            let found = read_proc(pid);
            if found.is_none() {
                self.missing.insert(pid, std::time::Instant::now());
            }
            found
        };
        match found {
            Some(info) => {
                self.missing.remove(&pid);
                // Do not cache a process that is already known to have exited: the pid may
                // come back as another process.
                if self.exit_name(pid).is_none() {
                    self.known.insert(pid, info.clone());
                }
                info
            }
            None => ProcInfo {
                pid,
                comm: self
                    .exit_name(pid)
                    .map(|n| n.as_str().into())
                    .unwrap_or_default(),
                ..Default::default()
            },
        }
    }
}

fn read_proc(pid: u32) -> Option<ProcInfo> {
    let p = procfs::process::Process::new(pid as i32).ok()?;
    let stat = p.stat().ok()?;
    let cmdline = p.cmdline().map(|v| v.join(" ")).unwrap_or_default();
    // Only the real uid is wanted: procfs's full `status` parse costs a hundred times more
    // than finding one line.
    let uid = p
        .open_relative("status")
        .ok()
        .and_then(|f| real_uid(std::io::BufReader::new(f)));
    Some(ProcInfo {
        pid,
        start_ticks: stat.starttime,
        comm: stat.comm.into(),
        cmdline: cmdline.into(),
        uid,
        kthread: stat.flags & PF_KTHREAD != 0,
        cgroup: Name::default(),
        tgid: None,
        ppid: u32::try_from(stat.ppid).ok(),
    })
}

/// The real uid in a /proc/PID/status text: the first number of its `Uid:` line.
fn real_uid(r: impl std::io::BufRead) -> Option<u32> {
    r.lines()
        .map_while(Result::ok)
        .find_map(|l| l.strip_prefix("Uid:").map(str::to_owned))?
        .split_ascii_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The name and start time (clock ticks after boot) in a /proc/PID/stat or
/// /proc/PID/task/TID/stat text: `TID (NAME) STATE ...`, the start time being field 22. The name
/// may hold spaces and parentheses, so it ends at the last `)`.
pub fn parse_stat_name_start(text: &[u8]) -> Option<(String, u64)> {
    let open = text.iter().position(|&b| b == b'(')?;
    let close = text.iter().rposition(|&b| b == b')')?;
    if close < open {
        return None;
    }
    let name = String::from_utf8_lossy(&text[open + 1..close]).into_owned();
    let rest = std::str::from_utf8(&text[close + 1..]).ok()?;
    let start = rest.split_ascii_whitespace().nth(19)?.parse().ok()?;
    Some((name, start))
}

/// `comm` bytes from the kernel (NUL padded) as a string.
pub fn comm_str(comm: &[u8]) -> String {
    let end = comm.iter().position(|b| *b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_real_uid_is_the_first_of_the_uid_line() {
        let status = "Name:\tbash\nUmask:\t0022\nUid:\t1000\t0\t0\t0\nGid:\t5\t5\t5\t5\n";
        assert_eq!(real_uid(status.as_bytes()), Some(1000));
        assert_eq!(real_uid("Name:\tx\n".as_bytes()), None);
        assert_eq!(real_uid("Uid:\tx\n".as_bytes()), None);
    }

    #[test]
    fn a_missing_pid_is_not_looked_for_on_every_call() {
        let mut c = ProcCache::new();
        // No such pid (above pid_max).
        let pid = 1 << 30;
        assert!(c.get(pid).comm.is_empty());
        assert!(c.missing.contains_key(&pid));
        assert!(!c.is_known(pid));
        // An exec of that pid makes it worth a look at once.
        c.on_exec(pid);
        assert!(!c.missing.contains_key(&pid));
        // This process is found and cached.
        let me = std::process::id();
        assert!(!c.get(me).comm.is_empty());
        assert!(c.is_known(me));
    }

    #[test]
    fn a_stat_line_gives_its_name_and_start_time() {
        let line = b"4242 (we(ird) name) S 1 4242 4242 0 -1 4194560 123 0 0 0 5 6 0 0 20 0 3 0 \
                     98765 1000000 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
        assert_eq!(
            parse_stat_name_start(line),
            Some(("we(ird) name".to_owned(), 98765))
        );
        assert_eq!(parse_stat_name_start(b"4242 (short) S 1"), None);
        assert_eq!(parse_stat_name_start(b""), None);
        assert_eq!(parse_stat_name_start(b") x ("), None);
    }

    #[test]
    fn reads_itself_and_caches() {
        let me = std::process::id();
        let mut c = ProcCache::new();
        let a = c.get(me);
        assert_eq!(a.pid, me);
        assert!(!a.comm.is_empty());
        assert!(a.start_ticks > 0);
        assert!(!a.kthread);
        assert_eq!(c.get(me), a);
    }

    #[test]
    fn exited_process_keeps_its_last_name() {
        let mut c = ProcCache::new();
        // pid_max is at most 4194304; this pid cannot exist.
        c.on_exit(5_000_000, "shortlived".into());
        assert_eq!(&*c.get(5_000_000).comm, "shortlived");
        // Its teardown may be charged in the next interval: the name is still there.
        c.end_interval();
        assert_eq!(&*c.get(5_000_000).comm, "shortlived");
        c.end_interval();
        assert_eq!(&*c.get(5_000_000).comm, "");
    }

    #[test]
    fn comm_is_trimmed_at_nul() {
        assert_eq!(comm_str(b"bash\0\0\0\0\0\0\0\0\0\0\0\0"), "bash");
        assert_eq!(comm_str(b"0123456789abcdef"), "0123456789abcdef");
    }
}
