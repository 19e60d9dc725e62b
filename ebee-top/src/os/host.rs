//! What the header shows about the machine (host, kernel, uptime, load, CPU and memory totals),
//! read from /proc by the procfs crate on a thread of its own once a second, off the render
//! path.

use std::time::Duration;

use procfs::{Current as _, FromRead as _, FromReadSI as _};

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
    /// Pressure stall information, `some` avg10 (% of the last 10 s in which at least one task
    /// was stalled) for CPU, I/O and memory; None where the kernel has no PSI.
    pub psi: Option<Psi>,
}

/// PSI `some avg10` of the three resources, in percent.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Psi {
    pub cpu: f32,
    pub io: f32,
    pub memory: f32,
}

/// PSI from /proc/pressure, when the kernel has it (CONFIG_PSI, not disabled at boot).
fn psi() -> Option<Psi> {
    Some(Psi {
        cpu: procfs::CpuPressure::current().ok()?.some.avg10,
        io: procfs::IoPressure::current().ok()?.some.avg10,
        memory: procfs::MemoryPressure::current().ok()?.some.avg10,
    })
}

/// Reads HostInfo; keeps the previous /proc/stat totals for the CPU share.
#[derive(Default)]
pub struct HostReader {
    last_cpu: Option<(u64, u64)>,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// (busy, total) ticks of all CPUs from /proc/stat's first line.
fn cpu_totals(stat: &[u8]) -> Option<(u64, u64)> {
    let t = procfs::KernelStats::from_read(stat, procfs::current_system_info())
        .ok()?
        .total;
    // user nice system idle iowait irq softirq steal (guest is inside user).
    let opt = |v: Option<u64>| v.unwrap_or(0);
    let idle = t.idle + opt(t.iowait);
    let total = t.user + t.nice + t.system + idle + opt(t.irq) + opt(t.softirq) + opt(t.steal);
    Some((total.saturating_sub(idle), total))
}

/// (total, available) memory in KiB from /proc/meminfo; zeros when it cannot be parsed.
fn mem_kib(meminfo: &[u8]) -> (u64, u64) {
    match procfs::Meminfo::from_read(meminfo) {
        Ok(m) => (m.mem_total / 1024, m.mem_available.unwrap_or(0) / 1024),
        Err(_) => (0, 0),
    }
}

impl HostReader {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn read(&mut self) -> HostInfo {
        let load = procfs::LoadAverage::current()
            .map(|l| [l.one, l.five, l.fifteen].map(f64::from))
            .unwrap_or_default();
        let uptime = procfs::Uptime::current().map_or(0.0, |u| u.uptime);
        let now = cpu_totals(&std::fs::read("/proc/stat").unwrap_or_default());
        let busy = match (self.last_cpu, now) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
                Some(b1.saturating_sub(b0) as f64 * 100.0 / (t1 - t0) as f64)
            }
            _ => None,
        };
        self.last_cpu = now;
        let (mem_total_kib, mem_avail_kib) =
            mem_kib(&std::fs::read("/proc/meminfo").unwrap_or_default());
        HostInfo {
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            uptime_s: uptime as u64,
            load,
            cpu_busy_pct: busy,
            mem_total_kib,
            mem_avail_kib,
            psi: psi(),
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

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  10 0 5 80 5 0 0 0 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n\
                        intr 0\nctxt 100\nbtime 1700000000\nprocesses 50\n\
                        procs_running 1\nprocs_blocked 0\n";

    const MEMINFO: &str = "MemTotal:       24000000 kB\nMemFree:        1000 kB\n\
        MemAvailable:   12000 kB\nBuffers:        0 kB\nCached:         0 kB\n\
        SwapCached:     0 kB\nActive:         0 kB\nInactive:       0 kB\n\
        Active(anon):   0 kB\nInactive(anon): 0 kB\nActive(file):   0 kB\n\
        Inactive(file): 0 kB\nUnevictable:    0 kB\nMlocked:        0 kB\n\
        SwapTotal:      0 kB\nSwapFree:       0 kB\nDirty:          0 kB\n\
        Writeback:      0 kB\nAnonPages:      0 kB\nMapped:         0 kB\n\
        Shmem:          0 kB\nSlab:           0 kB\nSReclaimable:   0 kB\n\
        SUnreclaim:     0 kB\nKernelStack:    0 kB\nPageTables:     0 kB\n\
        NFS_Unstable:   0 kB\nBounce:         0 kB\nWritebackTmp:   0 kB\n\
        CommitLimit:    0 kB\nCommitted_AS:   0 kB\nVmallocTotal:   0 kB\n\
        VmallocUsed:    0 kB\nVmallocChunk:   0 kB\n";

    #[test]
    fn parses_proc_stat_and_meminfo() {
        assert_eq!(cpu_totals(STAT.as_bytes()), Some((15, 100)));
        assert_eq!(cpu_totals(b"garbage"), None);
        assert_eq!(mem_kib(MEMINFO.as_bytes()), (24_000_000, 12_000));
        assert_eq!(mem_kib(b"Nope: 1 kB\n"), (0, 0));
    }

    #[test]
    fn reads_itself() {
        let mut r = HostReader::new();
        let h = r.read();
        assert!(!h.kernel.is_empty() && h.mem_total_kib > 0);
        // This kernel has PSI (TOOLCHAIN.md); each share is a percentage.
        let p = h.psi.expect("/proc/pressure");
        assert!(
            [p.cpu, p.io, p.memory]
                .iter()
                .all(|v| (0.0..=100.0).contains(v))
        );
    }
}
