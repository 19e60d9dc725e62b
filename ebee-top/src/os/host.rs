//! What the header shows about the machine (host, kernel, uptime, load, CPU and memory totals,
//! each CPU's time by kind, memory and swap), read from /proc on a thread of its own once a
//! second, off the render path. Batch mode reads /proc/stat and /proc/meminfo through the same
//! parsers once per interval.

use std::time::Duration;

use procfs::Current as _;

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
    /// Each online CPU's time since the previous reading, by CPU number; empty on the first
    /// reading (or when /proc/stat has no per-CPU lines).
    pub cpus: Vec<CpuShare>,
    /// Memory and swap from /proc/meminfo; None when it cannot be read.
    pub mem: Option<MemInfo>,
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

/// One CPU's counters from a /proc/stat line, in clock ticks (USER_HZ). A field an older kernel
/// does not print (iowait before 2.5.41, irq and softirq before 2.6.0, steal before 2.6.11) is
/// 0. `guest` and `guest_nice` are not kept: the kernel already counts them inside `user` and
/// `nice`, so adding them would count that time twice.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTicks {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

impl CpuTicks {
    fn parse<'a>(mut fields: impl Iterator<Item = &'a str>) -> Option<Self> {
        let mut next = |required: bool| match fields.next() {
            Some(f) => f.parse::<u64>().ok(),
            None if required => None,
            None => Some(0),
        };
        Some(Self {
            user: next(true)?,
            nice: next(true)?,
            system: next(true)?,
            idle: next(true)?,
            iowait: next(false)?,
            irq: next(false)?,
            softirq: next(false)?,
            steal: next(false)?,
        })
    }

    fn total(&self) -> u64 {
        self.user
            + self.nice
            + self.system
            + self.idle
            + self.iowait
            + self.irq
            + self.softirq
            + self.steal
    }

    /// Each counter's growth since `before` (a counter that went back, as after a CPU came
    /// back online, counts as no growth).
    fn since(&self, before: &Self) -> Self {
        Self {
            user: self.user.saturating_sub(before.user),
            nice: self.nice.saturating_sub(before.nice),
            system: self.system.saturating_sub(before.system),
            idle: self.idle.saturating_sub(before.idle),
            iowait: self.iowait.saturating_sub(before.iowait),
            irq: self.irq.saturating_sub(before.irq),
            softirq: self.softirq.saturating_sub(before.softirq),
            steal: self.steal.saturating_sub(before.steal),
        }
    }
}

/// The CPU lines of /proc/stat: the all-CPU line and each online CPU's, by number.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatCpus {
    pub all: CpuTicks,
    pub cpus: Vec<(u32, CpuTicks)>,
}

/// The CPU lines of /proc/stat; None when there is no readable all-CPU line. A per-CPU line
/// that does not parse is left out (only online CPUs have one, so numbers can have gaps).
pub fn parse_stat(text: &[u8]) -> Option<StatCpus> {
    let text = std::str::from_utf8(text).ok()?;
    let mut all = None;
    let mut cpus = Vec::new();
    for line in text.lines() {
        let mut fields = line.split_ascii_whitespace();
        let Some(name) = fields.next() else { continue };
        let Some(n) = name.strip_prefix("cpu") else {
            // The CPU lines come first; the rest of the file is other counters.
            if all.is_some() {
                break;
            }
            continue;
        };
        if n.is_empty() {
            all = CpuTicks::parse(fields);
        } else if let (Ok(cpu), Some(t)) = (n.parse::<u32>(), CpuTicks::parse(fields)) {
            cpus.push((cpu, t));
        }
    }
    Some(StatCpus { all: all?, cpus })
}

/// A CPU's time over an interval by kind, in percent of that CPU's time (0..100 each).
/// `user` includes nice (and so guest time, which the kernel counts in user and nice); `irq`
/// includes softirq. Busy is everything but idle: iowait counts as busy here, and is shown as
/// its own part so it can be told apart.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuShare {
    pub cpu: u32,
    pub user: f64,
    pub system: f64,
    pub iowait: f64,
    pub irq: f64,
    pub steal: f64,
}

impl CpuShare {
    /// The share of the counters' growth from `before` to `now`; None when no tick passed
    /// (an interval shorter than the kernel's clock tick says nothing about the CPU).
    pub fn between(cpu: u32, before: &CpuTicks, now: &CpuTicks) -> Option<Self> {
        let d = now.since(before);
        let total = d.total();
        if total == 0 {
            return None;
        }
        let pct = |v: u64| v as f64 * 100.0 / total as f64;
        Some(Self {
            cpu,
            user: pct(d.user + d.nice),
            system: pct(d.system),
            iowait: pct(d.iowait),
            irq: pct(d.irq + d.softirq),
            steal: pct(d.steal),
        })
    }

    pub fn busy(&self) -> f64 {
        self.user + self.system + self.iowait + self.irq + self.steal
    }
}

/// Each CPU's share from `before` to `now`, for the CPUs in both readings, by number.
pub fn shares(before: &StatCpus, now: &StatCpus) -> Vec<CpuShare> {
    now.cpus
        .iter()
        .filter_map(|(cpu, t)| {
            let (_, b) = before.cpus.iter().find(|(c, _)| c == cpu)?;
            CpuShare::between(*cpu, b, t)
        })
        .collect()
}

/// Keeps the last /proc/stat reading and gives each CPU's share since it.
#[derive(Default)]
pub struct StatSampler {
    last: Option<StatCpus>,
}

impl StatSampler {
    /// A sampler whose first `read` gives the shares since now.
    pub fn start() -> Self {
        let mut s = Self::default();
        s.read();
        s
    }

    /// The shares since the previous reading; None on the first reading, or when /proc/stat
    /// could not be read now or then.
    pub fn read(&mut self) -> Option<StatShares> {
        let now = std::fs::read("/proc/stat")
            .ok()
            .and_then(|s| parse_stat(&s));
        self.step(now)
    }

    fn step(&mut self, now: Option<StatCpus>) -> Option<StatShares> {
        let before = std::mem::replace(&mut self.last, now);
        let (before, now) = (before?, self.last.as_ref()?);
        Some(StatShares {
            all: CpuShare::between(0, &before.all, &now.all),
            cpus: shares(&before, now),
        })
    }
}

/// The CPUs' time between two readings of /proc/stat.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatShares {
    /// All CPUs together (its `cpu` is 0); None when no tick passed.
    pub all: Option<CpuShare>,
    /// Each CPU in both readings whose counters moved, by number.
    pub cpus: Vec<CpuShare>,
}

/// Memory and swap from /proc/meminfo, in bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemInfo {
    pub total: u64,
    pub free: u64,
    /// MemAvailable; on a kernel without it (before 3.14), free + buffers + cached, as
    /// free(1) estimates it there.
    pub available: u64,
    pub buffers: u64,
    /// The page cache and the slab memory the kernel can reclaim: Cached + SReclaimable,
    /// what free(1) shows as cache and htop as cache.
    pub cached: u64,
    pub swap_total: u64,
    pub swap_free: u64,
}

impl MemInfo {
    /// Memory in use by programs and the kernel: MemTotal - MemFree - Buffers - Cached -
    /// SReclaimable, as free(1) and htop compute it (so page cache and reclaimable slab are
    /// not counted as used).
    pub fn used(&self) -> u64 {
        self.total
            .saturating_sub(self.free)
            .saturating_sub(self.buffers)
            .saturating_sub(self.cached)
    }

    /// SwapTotal - SwapFree, as free(1) computes it.
    pub fn swap_used(&self) -> u64 {
        self.swap_total.saturating_sub(self.swap_free)
    }
}

/// /proc/meminfo's memory and swap lines; None without MemTotal. A line an older kernel does
/// not print (SReclaimable before 2.6.19, MemAvailable before 3.14) counts as 0 (MemAvailable:
/// estimated, see [`MemInfo::available`]).
pub fn parse_meminfo(text: &[u8]) -> Option<MemInfo> {
    let text = std::str::from_utf8(text).ok()?;
    let (mut total, mut available) = (None, None);
    let mut m = MemInfo::default();
    let mut reclaimable = 0;
    for line in text.lines() {
        let Some((key, rest)) = line.split_once(':') else {
            continue;
        };
        let mut f = rest.split_ascii_whitespace();
        let Some(Ok(v)) = f.next().map(str::parse::<u64>) else {
            continue;
        };
        // Every line with a size is in kB (KiB, in fact); the counts (HugePages_*) have no unit.
        let bytes = match f.next() {
            Some("kB") => v.saturating_mul(1024),
            _ => continue,
        };
        match key {
            "MemTotal" => total = Some(bytes),
            "MemFree" => m.free = bytes,
            "MemAvailable" => available = Some(bytes),
            "Buffers" => m.buffers = bytes,
            "Cached" => m.cached = bytes,
            "SReclaimable" => reclaimable = bytes,
            "SwapTotal" => m.swap_total = bytes,
            "SwapFree" => m.swap_free = bytes,
            _ => {}
        }
    }
    m.total = total?;
    m.cached = m.cached.saturating_add(reclaimable);
    m.available = available.unwrap_or(m.free + m.buffers + m.cached);
    Some(m)
}

/// /proc/meminfo, read now.
pub fn meminfo() -> Option<MemInfo> {
    parse_meminfo(&std::fs::read("/proc/meminfo").ok()?)
}

/// Reads HostInfo; keeps the previous /proc/stat reading for the CPU shares.
#[derive(Default)]
pub struct HostReader {
    stat: StatSampler,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
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
        let StatShares { all, cpus } = self.stat.read().unwrap_or_default();
        let mem = meminfo();
        HostInfo {
            hostname: read("/proc/sys/kernel/hostname").trim().to_string(),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            uptime_s: uptime as u64,
            load,
            cpu_busy_pct: all.map(|a| a.busy()),
            mem_total_kib: mem.map_or(0, |m| m.total / 1024),
            mem_avail_kib: mem.map_or(0, |m| m.available / 1024),
            cpus,
            mem,
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

    /// A 6.x kernel's /proc/stat: ten fields per CPU line, two CPUs numbered 0 and 2 (CPU 1
    /// is offline, so it has no line).
    const STAT: &str = "cpu  10 0 5 80 5 0 0 0 0 0\n\
                        cpu0 1 2 3 4 5 6 7 8 0 0\n\
                        cpu2 100 0 50 800 0 0 0 0 30 0\n\
                        intr 0\nctxt 100\nbtime 1700000000\nprocesses 50\n\
                        procs_running 1\nprocs_blocked 0\n";

    #[test]
    fn parses_proc_stat() {
        let s = parse_stat(STAT.as_bytes()).unwrap();
        assert_eq!(
            s.all,
            CpuTicks {
                user: 10,
                system: 5,
                idle: 80,
                iowait: 5,
                ..Default::default()
            }
        );
        assert_eq!(s.cpus.len(), 2);
        assert_eq!(s.cpus[0].0, 0);
        assert_eq!(
            s.cpus[0].1,
            CpuTicks {
                user: 1,
                nice: 2,
                system: 3,
                idle: 4,
                iowait: 5,
                irq: 6,
                softirq: 7,
                steal: 8,
            }
        );
        // Numbered as the kernel numbers it; guest (30) is already inside user (100).
        assert_eq!(s.cpus[1].0, 2);
        assert_eq!(s.cpus[1].1.total(), 950);
        assert_eq!(parse_stat(b"garbage"), None);
        assert_eq!(parse_stat(b"cpu  1 2 x 4\n"), None);
    }

    /// Kernels before 2.6.11 print no steal, before 2.6.0 no irq and softirq, before 2.5.41 no
    /// iowait: what is missing is 0, and the shares still add up.
    #[test]
    fn a_kernel_with_fewer_fields() {
        let old = parse_stat(b"cpu  10 0 5 80\ncpu0 10 0 5 80\npage 1 2\n").unwrap();
        assert_eq!(old.cpus[0].1.total(), 95);
        assert_eq!(old.cpus[0].1.steal, 0);
        let seven = parse_stat(b"cpu  1 2 3 4 5 6 7\ncpu0 1 2 3 4 5 6 7\n").unwrap();
        assert_eq!(seven.cpus[0].1.softirq, 7);
        assert_eq!(seven.cpus[0].1.steal, 0);
        let later = parse_stat(b"cpu  20 0 10 160\ncpu0 20 0 10 160\n").unwrap();
        let s = shares(&old, &later);
        assert_eq!(s.len(), 1);
        // 15 busy ticks of 95.
        assert!((s[0].busy() - 15.0 * 100.0 / 95.0).abs() < 1e-9, "{s:?}");
        assert_eq!((s[0].iowait, s[0].irq, s[0].steal), (0.0, 0.0, 0.0));
    }

    #[test]
    fn shares_over_an_interval() {
        let before =
            parse_stat(b"cpu  0 0 0 0 0 0 0 0\ncpu0 0 0 0 0 0 0 0 0\ncpu1 5 0 0 5 0 0 0 0\n")
                .unwrap();
        // CPU 0: 40 user + 10 nice, 20 system, 10 idle, 5 iowait, 5 irq + 5 softirq, 5 steal of
        // 100 ticks; CPU 1 did not move (a tick shorter than the interval); CPU 3 is new.
        let now = parse_stat(
            b"cpu  50 0 20 10 5 5 5 5\ncpu0 40 10 20 10 5 5 5 5 7 0\n\
              cpu1 5 0 0 5 0 0 0 0\ncpu3 1 0 0 1 0 0 0 0\n",
        )
        .unwrap();
        let s = shares(&before, &now);
        assert_eq!(s.len(), 1, "{s:?}");
        let c = s[0];
        assert_eq!(c.cpu, 0);
        assert_eq!(
            (c.user, c.system, c.iowait, c.irq, c.steal),
            (50.0, 20.0, 5.0, 10.0, 5.0)
        );
        assert_eq!(c.busy(), 90.0);
        // A counter that went back counts as no growth, never as a huge one.
        let back = CpuShare::between(
            0,
            &CpuTicks {
                user: 100,
                idle: 10,
                ..Default::default()
            },
            &CpuTicks {
                user: 50,
                idle: 20,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!((back.user, back.busy()), (0.0, 0.0));
    }

    #[test]
    fn the_sampler_needs_two_readings() {
        let mut s = StatSampler::default();
        assert_eq!(s.step(parse_stat(b"cpu  0 0 0 10\ncpu0 0 0 0 10\n")), None);
        let got = s
            .step(parse_stat(b"cpu  10 0 0 20\ncpu0 10 0 0 20\n"))
            .unwrap();
        assert_eq!(got.all.map(|a| a.busy()), Some(50.0));
        assert_eq!(got.cpus.len(), 1);
        // An unreadable /proc/stat: nothing now, and nothing next time either (no reading to
        // take the difference from), never a share made up from one side.
        assert_eq!(s.step(None), None);
        assert_eq!(
            s.step(parse_stat(b"cpu  20 0 0 30\ncpu0 20 0 0 30\n")),
            None
        );
        assert!(
            s.step(parse_stat(b"cpu  30 0 0 40\ncpu0 30 0 0 40\n"))
                .is_some()
        );
    }

    const MEMINFO: &str = "MemTotal:       24000000 kB\nMemFree:        1000000 kB\n\
        MemAvailable:   12000000 kB\nBuffers:        200000 kB\nCached:         8000000 kB\n\
        SwapCached:     0 kB\nActive:         0 kB\nSwapTotal:      2000000 kB\n\
        SwapFree:       1500000 kB\nShmem:          100 kB\nSlab:           600000 kB\n\
        SReclaimable:   500000 kB\nSUnreclaim:     100000 kB\nHugePages_Total:       0\n\
        Hugepagesize:       2048 kB\n";

    #[test]
    fn parses_meminfo() {
        let m = parse_meminfo(MEMINFO.as_bytes()).unwrap();
        const K: u64 = 1024;
        assert_eq!(m.total, 24_000_000 * K);
        assert_eq!(m.available, 12_000_000 * K);
        assert_eq!(m.buffers, 200_000 * K);
        // Cached + SReclaimable.
        assert_eq!(m.cached, 8_500_000 * K);
        // 24.0M - 1.0M free - 0.2M buffers - 8.0M cached - 0.5M reclaimable slab, in kB.
        assert_eq!(m.used(), 14_300_000 * K);
        assert_eq!(m.swap_used(), 500_000 * K);
        assert_eq!(parse_meminfo(b"Nope: 1 kB\n"), None);
        assert_eq!(parse_meminfo(b"\xff\xfe"), None);
    }

    /// A kernel before 3.14 (no MemAvailable) and before 2.6.19 (no SReclaimable).
    #[test]
    fn meminfo_of_an_older_kernel() {
        let m = parse_meminfo(
            b"MemTotal:  1000 kB\nMemFree:  100 kB\nBuffers:  50 kB\nCached:  250 kB\n\
              SwapTotal:  0 kB\nSwapFree:  0 kB\n",
        )
        .unwrap();
        assert_eq!(m.cached, 250 * 1024);
        assert_eq!(m.available, 400 * 1024, "free + buffers + cached");
        assert_eq!(m.used(), 600 * 1024);
        assert_eq!(m.swap_used(), 0);
    }

    #[test]
    fn reads_itself() {
        let mut r = HostReader::new();
        let h = r.read();
        assert!(!h.kernel.is_empty() && h.mem_total_kib > 0);
        assert!(h.cpus.is_empty(), "no shares from one reading");
        let m = h.mem.expect("/proc/meminfo");
        assert!(m.used() > 0 && m.used() < m.total);
        std::thread::sleep(Duration::from_millis(30));
        let h = r.read();
        // This machine's CPUs each have a line; every share is a percentage.
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        assert!(h.cpus.len() <= n, "{:?}", h.cpus);
        for c in &h.cpus {
            assert!((0.0..=100.0 + 1e-9).contains(&c.busy()), "{c:?}");
        }
        // This kernel has PSI (TOOLCHAIN.md); each share is a percentage.
        let p = h.psi.expect("/proc/pressure");
        assert!(
            [p.cpu, p.io, p.memory]
                .iter()
                .all(|v| (0.0..=100.0).contains(v))
        );
    }
}
