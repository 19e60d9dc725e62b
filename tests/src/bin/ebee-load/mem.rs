//! Memory workloads: resident regions that grow and shrink (`hold`) and a Zipf-skewed mix of
//! processes holding memory (`mem-mix`), for the memory pipeline's tests and benchmarks.

use std::time::{Duration, Instant};

use super::{Rng, die, on_term};

pub const MIB: usize = 1 << 20;

/// An anonymous private mapping whose pages are touched (so they are resident).
pub struct Region {
    ptr: *mut u8,
    len: usize,
}

impl Region {
    pub fn map(len: usize) -> Option<Self> {
        if len == 0 {
            return None;
        }
        // SAFETY: a fresh anonymous mapping; no existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return None;
        }
        Some(Self { ptr: p.cast(), len })
    }

    /// Make pages `[from, to)` (bytes) resident by writing one byte in each.
    pub fn touch(&self, from: usize, to: usize) {
        let mut off = from;
        while off < to.min(self.len) {
            // SAFETY: inside the mapping; a volatile write so the page is really faulted in.
            unsafe { std::ptr::write_volatile(self.ptr.add(off), 1) };
            off += 4096;
        }
    }

    /// Give pages `[from, to)` (bytes, page aligned) back to the kernel.
    fn drop_pages(&self, from: usize, to: usize) {
        let to = to.min(self.len);
        if to > from {
            // SAFETY: a page-aligned range inside the mapping; its contents are not needed.
            unsafe { libc::madvise(self.ptr.add(from).cast(), to - from, libc::MADV_DONTNEED) };
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

pub fn hold(mib: u64) {
    use std::io::{BufRead as _, Write as _};
    let mut regions: Vec<Region> = Vec::new();
    let add = |mib: u64, regions: &mut Vec<Region>| {
        if let Some(r) = Region::map(mib as usize * MIB) {
            r.touch(0, r.len);
            regions.push(r);
        }
    };
    add(mib, &mut regions);
    let mut out = std::io::stdout();
    let _ = writeln!(out, "ready");
    let _ = out.flush();
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let mut w = line.split_whitespace();
        match (w.next(), w.next().and_then(|n| n.parse::<u64>().ok())) {
            (Some("grow"), Some(n)) => add(n, &mut regions),
            (Some("map"), Some(n)) => {
                if let Some(r) = Region::map(n as usize * MIB) {
                    let _ = writeln!(out, "addr {:#x}", r.ptr as usize);
                    regions.push(r);
                }
            }
            (Some("free"), _) => regions.clear(),
            _ => die(&format!("unknown command {line:?}")),
        }
        let _ = writeln!(out, "ok");
        let _ = out.flush();
    }
}

fn mem_child(share_mib: f64, seed: u64, stop: Instant) {
    let page = 4096usize;
    let max = ((share_mib * 1.5 * MIB as f64) as usize).div_ceil(page) * page;
    let Some(r) = Region::map(max.max(page)) else {
        return;
    };
    let mut rng = Rng(seed | 1);
    let mut cur = 0usize;
    while Instant::now() < stop {
        // Between half and one and a half of the share, in pages.
        let f = 0.5 + (rng.next() % 1001) as f64 / 1000.0;
        let target = ((share_mib * f * MIB as f64) as usize / page * page).min(r.len);
        if target > cur {
            r.touch(cur, target);
        } else {
            r.drop_pages(target, cur);
        }
        cur = target;
        std::thread::sleep(Duration::from_millis(50 + rng.next() % 251));
    }
}

pub fn mem_mix(procs: u32, top_mib: f64, skew: f64, seconds: f64) {
    let stop = Instant::now() + Duration::from_secs_f64(seconds);
    let mut pids = Vec::new();
    for i in 1..=procs {
        let share = top_mib / f64::from(i).powf(skew);
        // SAFETY: fork in a single-threaded process; the child only maps, touches and sleeps,
        // then _exits.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: prctl on ourselves: die with the parent even if it is SIGKILLed.
            unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
            mem_child(share, 0x9E37_79B9_7F4A_7C15 ^ u64::from(i), stop);
            // SAFETY: leave the child without running the parent's exit handlers.
            unsafe { libc::_exit(0) };
        }
        if pid > 0 {
            pids.push(pid);
        }
    }
    // SAFETY: plain signal/wait calls; on SIGTERM the children are killed with us.
    unsafe {
        libc::signal(libc::SIGTERM, on_term as *const () as libc::sighandler_t);
        while Instant::now() < stop {
            if libc::sleep(1) != 0 {
                break; // interrupted by SIGTERM
            }
        }
        for p in &pids {
            libc::kill(*p, libc::SIGKILL);
        }
        while libc::wait(std::ptr::null_mut()) > 0 {}
    }
}
