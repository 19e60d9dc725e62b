//! The cgroups and threads part of a live Batch: the kernel's cgroup keys turned into paths,
//! each process's cgroup, cgroup memory (read at most once a second per cgroup), removed
//! cgroups noticed, and thread names.

use std::collections::hash_map::Entry;
use std::time::{Duration, Instant};

// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::{HashMap, HashMapExt as _};

use crate::batch::cgroup::{CgroupRow, CgroupStats, ThreadRow};
use crate::batch::{Name, ProcInfo};
use crate::os::cgroup::{CgroupFs, Names, memory_bytes, proc_cgroup};
use crate::os::procinfo::parse_stat_name_start;
use crate::probes::CpuCharge;
use crate::probes::cgroup::{CgCharge, CgRaw};

/// Memory of a cgroup is read again after this long.
const MEM_EVERY: Duration = Duration::from_secs(1);
/// Cgroups whose memory is read per interval, at most (the busiest).
const MEM_ROWS: usize = 64;
/// How often the cgroups seen lately are checked for removal, and for how long after their
/// last charge.
const REMOVED_EVERY: Duration = Duration::from_secs(1);
const RECENT_FOR: Duration = Duration::from_secs(10);
/// Thread names are read again after this long (a thread may rename itself).
const THREAD_NAME_TTL: Duration = Duration::from_secs(5);

pub struct CgroupSide {
    fs: Option<CgroupFs>,
    names: Option<Names>,
    mem: HashMap<u32, (Instant, Option<u64>)>,
    /// pid -> its cgroup path (the kernel's, or /proc's when not charged lately).
    of_pid: HashMap<u32, Name>,
    /// pid -> the kernel key its path in `of_pid` is of (absent: from /proc).
    key_of_pid: HashMap<u32, u32>,
    /// key -> (path, last charged) of cgroups charged lately.
    recent: HashMap<u32, (String, Instant)>,
    removed_checked: Instant,
    /// tid -> (name, start ticks, read at).
    thread_names: HashMap<u32, (String, u64, Instant)>,
    /// Processes that exited in this interval and the one before: forgotten at the end of
    /// each, after the rows that still name them (a dying task may be charged once more in
    /// the next interval, and is filled in again then).
    exited: Vec<u32>,
    exited_before: Vec<u32>,
}

impl CgroupSide {
    pub fn new(fs: Option<CgroupFs>) -> Self {
        Self {
            names: fs.as_ref().map(|f| Names::new(&f.mount)),
            fs,
            mem: HashMap::new(),
            of_pid: HashMap::new(),
            key_of_pid: HashMap::new(),
            recent: HashMap::new(),
            removed_checked: Instant::now(),
            thread_names: HashMap::new(),
            exited: Vec::new(),
            exited_before: Vec::new(),
        }
    }

    /// A process exec'd: forget its cgroup.
    pub fn forget(&mut self, pid: u32) {
        self.of_pid.remove(&pid);
        self.key_of_pid.remove(&pid);
    }

    /// A process exited: forget its cgroup at the end of this interval and of the next.
    /// Forgetting it at once left it cached for good (this interval's rows charge and fill
    /// it in again): with 100 new processes a second, a few hundred KiB a minute, and a
    /// reused pid showed the dead process's cgroup.
    pub fn exited(&mut self, pid: u32) {
        self.exited.push(pid);
    }

    /// The interval's rows are made: forget the processes that exited in it and in the one
    /// before.
    pub fn end_interval(&mut self) {
        let before = std::mem::replace(&mut self.exited_before, std::mem::take(&mut self.exited));
        for &pid in before.iter().chain(&self.exited_before) {
            self.of_pid.remove(&pid);
            self.key_of_pid.remove(&pid);
        }
    }

    /// Entries cached per process (tests).
    #[cfg(test)]
    fn cached(&self) -> (usize, usize) {
        (self.of_pid.len(), self.key_of_pid.len())
    }

    fn path(&mut self, key: u32) -> String {
        self.names
            .as_mut()
            .and_then(|n| n.path(key).map(str::to_owned))
            .unwrap_or_default()
    }

    /// Note each charged process's cgroup (the kernel's key of its heaviest slice).
    pub fn note_processes(&mut self, rows: &[CpuCharge]) {
        if self.names.is_none() {
            return;
        }
        for r in rows.iter().filter(|r| r.aux != 0) {
            // Only a new process, or one that moved, costs a lookup and a string.
            if self.key_of_pid.get(&r.tgid) == Some(&r.aux) {
                continue;
            }
            let p = self.path(r.aux);
            if !p.is_empty() {
                self.of_pid.insert(r.tgid, p.into());
                self.key_of_pid.insert(r.tgid, r.aux);
            }
        }
    }

    /// Fill in `info.cgroup`.
    pub fn fill(&mut self, info: &mut ProcInfo) {
        let Some(fs) = &self.fs else { return };
        if let Some(p) = self.of_pid.get(&info.pid) {
            info.cgroup.clone_from(p);
            return;
        }
        if let Some(p) = proc_cgroup(info.pid, &fs.kind) {
            let p = Name::from(p);
            info.cgroup.clone_from(&p);
            self.of_pid.insert(info.pid, p);
        }
    }

    /// Exec and exit events were lost: a cached cgroup may be a dead process's.
    pub fn clear(&mut self) {
        self.of_pid.clear();
        self.key_of_pid.clear();
    }

    /// The cgroup rows, stats and removals of one interval.
    pub fn rows(
        &mut self,
        raw: &CgRaw,
    ) -> (
        Vec<CgroupRow>,
        Option<Vec<CgroupRow>>,
        Vec<u64>,
        CgroupStats,
    ) {
        let stats = CgroupStats {
            available: self.fs.is_some(),
            hierarchy: self.fs.as_ref().map(CgroupFs::label).unwrap_or_default(),
            evictions: raw.evictions,
            evicted_ns: raw.evicted_ns,
            updates: raw.updates,
            shadow_full: raw.shadow_full,
            threads: raw.threads.is_some(),
            thread_evictions: raw.thread_evictions,
            thread_evicted_ns: raw.thread_evicted_ns,
        };
        if self.fs.is_none() {
            return (Vec::new(), None, Vec::new(), stats);
        }
        let now = Instant::now();
        let mut rows = Vec::with_capacity(raw.cgroups.len());
        for (i, c) in raw.cgroups.iter().enumerate() {
            let path = self.path(c.key);
            let rss_bytes = if i < MEM_ROWS && !path.is_empty() {
                self.memory(c.key, &path, now)
            } else {
                None
            };
            if !path.is_empty() {
                // The path is copied only when the cgroup is new to `recent` or was renamed.
                match self.recent.entry(c.key) {
                    Entry::Occupied(mut e) => {
                        let (p, seen) = e.get_mut();
                        if *p != path {
                            p.clone_from(&path);
                        }
                        *seen = now;
                    }
                    Entry::Vacant(e) => {
                        e.insert((path.clone(), now));
                    }
                }
            }
            rows.push(row(c, path, rss_bytes));
        }
        let exact = raw.cgroups_exact.as_ref().map(|e| {
            e.iter()
                .map(|c| {
                    let p = self.path(c.key);
                    row(c, p, None)
                })
                .collect()
        });
        let removed = self.removed(now);
        (rows, exact, removed, stats)
    }

    fn memory(&mut self, key: u32, path: &str, now: Instant) -> Option<u64> {
        if let Some((at, v)) = self.mem.get(&key)
            && now.duration_since(*at) < MEM_EVERY
        {
            return *v;
        }
        let v = self.fs.as_ref().and_then(|fs| memory_bytes(fs, path));
        self.mem.insert(key, (now, v));
        v
    }

    /// Cgroups charged lately whose directory is gone, once a second.
    fn removed(&mut self, now: Instant) -> Vec<u64> {
        if now.duration_since(self.removed_checked) < REMOVED_EVERY {
            return Vec::new();
        }
        self.removed_checked = now;
        let Some(names) = &self.names else {
            return Vec::new();
        };
        let mut gone = Vec::new();
        self.recent.retain(|key, (path, seen)| {
            if now.duration_since(*seen) > RECENT_FOR {
                return false;
            }
            if names.exists(path) {
                true
            } else {
                gone.push(u64::from(*key));
                false
            }
        });
        for k in &gone {
            self.mem.remove(&(*k as u32));
        }
        self.mem
            .retain(|_, (at, _)| now.duration_since(*at) < RECENT_FOR);
        gone
    }

    /// Thread rows, with their names.
    pub fn threads(&mut self, rows: &[CpuCharge], nbins: usize) -> Vec<ThreadRow> {
        let now = Instant::now();
        let out = rows
            .iter()
            .map(|t| {
                let (comm, start_ticks) = self.thread_name(t.aux, t.tgid, now);
                ThreadRow {
                    tid: t.tgid,
                    pid: t.aux,
                    comm,
                    start_ticks,
                    ns: t.ns,
                    bins: t.bins_upto(nbins),
                }
            })
            .collect();
        self.thread_names
            .retain(|_, (_, _, at)| now.duration_since(*at) < THREAD_NAME_TTL * 4);
        out
    }

    /// A thread's name and start time, read again after [`THREAD_NAME_TTL`].
    fn thread_name(&mut self, pid: u32, tid: u32, now: Instant) -> (String, u64) {
        if let Some((n, start, at)) = self.thread_names.get(&tid)
            && now.duration_since(*at) < THREAD_NAME_TTL
        {
            return (n.clone(), *start);
        }
        let (n, start) = std::fs::read(format!("/proc/{pid}/task/{tid}/stat"))
            .ok()
            .and_then(|b| parse_stat_name_start(&b))
            .unwrap_or_default();
        self.thread_names.insert(tid, (n.clone(), start, now));
        (n, start)
    }
}

fn row(c: &CgCharge, path: String, rss_bytes: Option<u64>) -> CgroupRow {
    CgroupRow {
        id: u64::from(c.key),
        path,
        cpu_ns: c.cpu_ns,
        wait_ns: c.wait_ns,
        rss_bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::os::cgroup::{Want, detect};

    /// A process that exits is filled in by the rows of its last interval (and may be charged
    /// once more in the next): it must not stay cached after that.
    #[test]
    fn an_exited_process_leaves_no_cgroup_behind() {
        let Some(fs) = detect(Want::Auto) else {
            eprintln!("no cgroup hierarchy mounted here; nothing to cache");
            return;
        };
        let mut side = CgroupSide::new(Some(fs));
        let pid = std::process::id();
        let fill = |side: &mut CgroupSide| {
            let mut info = ProcInfo {
                pid,
                ..Default::default()
            };
            side.fill(&mut info);
            info.cgroup
        };
        assert!(!fill(&mut side).is_empty(), "our own cgroup from /proc");
        // The exit event, then this interval's rows, which still name the process.
        side.exited(pid);
        fill(&mut side);
        side.end_interval();
        assert_eq!(side.cached(), (0, 0));
        // Charged once more in the next interval.
        fill(&mut side);
        side.end_interval();
        assert_eq!(side.cached(), (0, 0));
        // A process that lives on stays cached.
        fill(&mut side);
        side.end_interval();
        assert_eq!(side.cached(), (1, 0));
    }
}
