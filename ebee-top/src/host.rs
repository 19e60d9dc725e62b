//! What the header shows about the machine (host, kernel, uptime, load, CPU and memory
//! totals) and what the details popup shows about one process, both read from /proc off the
//! render path: the host by its own thread once a second, a process's details when the popup
//! opens.

use std::time::Duration;

/// The machine, as /proc saw it at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HostInfo {
    pub hostname: String,
    pub kernel: String,
    pub uptime_s: u64,
    pub load: [f64; 3],
    /// Busy share of all CPUs since the previous reading, 0..100; None on the first.
    pub cpu_busy_pct: Option<f64>,
    pub mem_total_kib: u64,
    pub mem_avail_kib: u64,
}

/// Reads HostInfo; keeps the previous /proc/stat totals for the CPU share.
#[derive(Default)]
pub struct HostReader {
    last_cpu: Option<(u64, u64)>,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// (busy, total) jiffies of all CPUs from /proc/stat's first line.
fn cpu_totals(stat: &str) -> Option<(u64, u64)> {
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is inside user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some((total.saturating_sub(idle), total))
}

fn meminfo_kib(meminfo: &str, key: &str) -> u64 {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|r| r.trim_start_matches(':').split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

impl HostReader {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn read(&mut self) -> HostInfo {
        let load: Vec<f64> = read("/proc/loadavg")
            .split_whitespace()
            .take(3)
            .filter_map(|x| x.parse().ok())
            .collect();
        let uptime = read("/proc/uptime")
            .split_whitespace()
            .next()
            .and_then(|x| x.parse::<f64>().ok())
            .unwrap_or(0.0);
        let now = cpu_totals(&read("/proc/stat"));
        let busy = match (self.last_cpu, now) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
                Some(b1.saturating_sub(b0) as f64 * 100.0 / (t1 - t0) as f64)
            }
            _ => None,
        };
        self.last_cpu = now;
        let mem = read("/proc/meminfo");
        HostInfo {
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            uptime_s: uptime as u64,
            load: [
                load.first().copied().unwrap_or(0.0),
                load.get(1).copied().unwrap_or(0.0),
                load.get(2).copied().unwrap_or(0.0),
            ],
            cpu_busy_pct: busy,
            mem_total_kib: meminfo_kib(&mem, "MemTotal"),
            mem_avail_kib: meminfo_kib(&mem, "MemAvailable"),
        }
    }
}

/// Read the host once a second and hand it to `send` until it returns false.
pub fn spawn(mut send: impl FnMut(HostInfo) -> bool + Send + 'static) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("host".into())
        .spawn(move || {
            let mut r = HostReader::new();
            loop {
                if !send(r.read()) {
                    return;
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })?;
    Ok(())
}

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
    read("/etc/passwd")
        .lines()
        .filter_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let id: u32 = f.nth(1)?.parse().ok()?;
            Some((id, name.to_string()))
        })
        .collect()
}

/// User name of a uid from /etc/passwd, or the number.
pub fn user_name(uid: u32) -> String {
    read("/etc/passwd")
        .lines()
        .find_map(|l| {
            let mut f = l.split(':');
            let name = f.next()?;
            let id: u32 = f.nth(1)?.parse().ok()?;
            (id == uid).then(|| name.to_string())
        })
        .unwrap_or_else(|| uid.to_string())
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
    d.cgroup = cgroup_of(&read(&format!("/proc/{pid}/cgroup")));
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_and_meminfo() {
        assert_eq!(
            cpu_totals("cpu  10 0 5 80 5 0 0 0 0 0\ncpu0 1 2 3"),
            Some((15, 100))
        );
        assert_eq!(cpu_totals("garbage"), None);
        let m = "MemTotal:       24000000 kB\nMemAvailable:   12000 kB\n";
        assert_eq!(meminfo_kib(m, "MemTotal"), 24_000_000);
        assert_eq!(meminfo_kib(m, "MemAvailable"), 12_000);
        assert_eq!(meminfo_kib(m, "Nope"), 0);
    }

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
        let mut r = HostReader::new();
        let h = r.read();
        assert!(!h.kernel.is_empty() && h.mem_total_kib > 0);
        let d = details(std::process::id(), 0);
        assert!(d.note.is_none() && d.threads.unwrap_or(0) >= 1);
        assert!(details(5_000_000, 0).note.is_some());
        assert_eq!(user_name(0), "root");
    }
}
