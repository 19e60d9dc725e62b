//! What the details popup shows about one process, read from /proc when the popup opens
//! (never while drawing), and the user names of uids, read once at start.

/// The details popup's content for one process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Details {
    pub pid: u32,
    pub comm: String,
    pub cmdline: String,
    pub user: String,
    pub threads: Option<i64>,
    /// Start time, as seconds after boot.
    pub start_s: Option<f64>,
    pub cgroup: String,
    pub state: String,
    /// Why /proc could not tell more (the process is gone or is another one now).
    pub note: Option<String>,
}

/// Every user name by uid, from /etc/passwd (empty when it cannot be read).
pub fn users() -> std::collections::HashMap<u32, String> {
    std::fs::read_to_string("/etc/passwd")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let id: u32 = f.nth(1)?.parse().ok()?;
            Some((id, name.to_string()))
        })
        .collect()
}

/// The uid of `user`: a name from /etc/passwd, or a number (any uid, as top takes it).
pub fn uid_of(user: &str, users: &std::collections::HashMap<u32, String>) -> Option<u32> {
    if let Some((id, _)) = users.iter().find(|(_, n)| n.as_str() == user) {
        return Some(*id);
    }
    user.parse().ok()
}

/// User name of a uid from /etc/passwd, or the number.
pub fn user_name(uid: u32) -> String {
    users().remove(&uid).unwrap_or_else(|| uid.to_string())
}

/// The cgroup path from /proc/PID/cgroup: the unified (v2) one, else the distinct v1 paths.
fn cgroup_of(text: &str) -> String {
    if let Some(p) = text.lines().find_map(|l| l.strip_prefix("0::")) {
        return p.to_string();
    }
    let mut paths: Vec<&str> = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .collect();
    paths.sort_unstable();
    paths.dedup();
    if paths.len() > 1 {
        paths.retain(|p| *p != "/");
    }
    paths.join(" ")
}

/// Read a process's details now. `start_ticks` (0 = unknown) guards against a reused pid.
pub fn details(pid: u32, start_ticks: u64) -> Details {
    let mut d = Details {
        pid,
        ..Default::default()
    };
    let Ok(p) = procfs::process::Process::new(pid as i32) else {
        d.note = Some("the process has exited; /proc has no more about it".into());
        return d;
    };
    let Ok(stat) = p.stat() else {
        d.note = Some("the process has exited; /proc has no more about it".into());
        return d;
    };
    if start_ticks != 0 && stat.starttime != start_ticks {
        d.note = Some("the process has exited (its pid now belongs to another)".into());
        return d;
    }
    d.comm = stat.comm.clone();
    d.state = stat.state.to_string();
    d.threads = Some(stat.num_threads);
    d.start_s = Some(stat.starttime as f64 / procfs::ticks_per_second() as f64);
    d.cmdline = p.cmdline().map(|v| v.join(" ")).unwrap_or_default();
    d.user = p
        .status()
        .map(|s| user_name(s.ruid))
        .unwrap_or_else(|_| "?".into());
    d.cgroup =
        cgroup_of(&std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default());
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_prefers_the_unified_path() {
        assert_eq!(
            cgroup_of("0::/system.slice/x.service\n"),
            "/system.slice/x.service"
        );
        assert_eq!(cgroup_of("1:cpu:/\n2:memory:/a\n3:pids:/a\n"), "/a");
        assert_eq!(cgroup_of(""), "");
    }

    #[test]
    fn reads_itself() {
        let d = details(std::process::id(), 0);
        assert!(d.note.is_none() && d.threads.unwrap_or(0) >= 1);
        assert!(details(5_000_000, 0).note.is_some());
        assert_eq!(user_name(0), "root");
    }
}
