//! Disk I/O through the block layer, for the I/O pipeline's tests: write a file in 1 MiB
//! requests (O_DIRECT, or buffered and fsync'd), or read one (O_DIRECT, or buffered after the
//! page cache dropped it). It waits for a line on stdin before starting and after finishing
//! (printing `done`), so a test can read /proc/PID/io at both ends while the process lives.

use std::io::{BufRead as _, Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use super::die;

const CHUNK: usize = 1 << 20;
/// O_DIRECT buffers must be aligned to the device's logical block size; a page covers all.
const ALIGN: usize = 4096;

/// A heap buffer with the alignment O_DIRECT needs.
struct Aligned {
    ptr: *mut u8,
    layout: std::alloc::Layout,
}

impl Aligned {
    fn new(len: usize) -> Self {
        let layout = std::alloc::Layout::from_size_align(len, ALIGN).unwrap_or_else(|e| die(&e));
        // SAFETY: a non-zero size with a valid alignment.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            die(&"out of memory");
        }
        Self { ptr, layout }
    }

    fn bytes(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` holds `layout.size()` initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.layout.size()) }
    }
}

impl Drop for Aligned {
    fn drop(&mut self) {
        // SAFETY: allocated with this layout in `new`.
        unsafe { std::alloc::dealloc(self.ptr, self.layout) };
    }
}

fn wait_line() {
    let mut l = String::new();
    let _ = std::io::stdin().lock().read_line(&mut l);
}

pub fn run(path: &Path, mib: u64, read: bool, direct: bool, fsync: bool, fsync_each: bool) {
    wait_line();
    let flags = if direct { libc::O_DIRECT } else { 0 };
    let mut buf = Aligned::new(CHUNK);
    for (i, b) in buf.bytes().iter_mut().enumerate() {
        *b = i as u8;
    }
    if read {
        let mut f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(flags)
            .open(path)
            .unwrap_or_else(|e| die(&e));
        if !direct {
            // Drop the file from the page cache, so the reads reach the disk.
            // SAFETY: a valid descriptor; advice only.
            unsafe {
                libc::posix_fadvise(
                    std::os::fd::AsRawFd::as_raw_fd(&f),
                    0,
                    0,
                    libc::POSIX_FADV_DONTNEED,
                )
            };
        }
        loop {
            match f.read(buf.bytes()) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => die(&e),
            }
        }
    } else {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .custom_flags(flags)
            .open(path)
            .unwrap_or_else(|e| die(&e));
        for _ in 0..mib {
            f.write_all(buf.bytes()).unwrap_or_else(|e| die(&e));
            if fsync_each {
                f.sync_all().unwrap_or_else(|e| die(&e));
            }
        }
        if fsync {
            f.sync_all().unwrap_or_else(|e| die(&e));
        }
    }
    println!("done");
    let _ = std::io::stdout().flush();
    wait_line();
}

/// `procs` processes writing Zipf-skewed amounts through the page cache: process i appends
/// about `top_kib / i^skew` KiB every 50 ms to its own file in `dir` (new pages, so every byte
/// is dirtied and counted in `write_bytes`), starting afresh at 64 MiB; and every tenth also
/// reads its file back, dropped from the page cache, so reads reach the disk. For `seconds`.
pub fn io_mix(dir: &Path, procs: u32, top_kib: f64, skew: f64, seconds: f64) {
    let stop = std::time::Instant::now() + std::time::Duration::from_secs_f64(seconds);
    let mut children = Vec::new();
    for i in 1..=procs {
        let kib = (top_kib / f64::from(i).powf(skew)).max(4.0) as usize;
        let path = dir.join(format!("iomix-{i}"));
        // SAFETY: fork in a single-threaded process; the child only does I/O and exits.
        match unsafe { libc::fork() } {
            0 => {
                io_child(&path, kib, i % 10 == 0, stop);
                std::process::exit(0);
            }
            -1 => die(&std::io::Error::last_os_error()),
            pid => children.push(pid),
        }
    }
    for pid in children {
        let mut status = 0;
        // SAFETY: waiting for our own child.
        unsafe { libc::waitpid(pid, &mut status, 0) };
    }
}

fn io_child(path: &Path, kib: usize, reads: bool, stop: std::time::Instant) {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .unwrap_or_else(|e| die(&e));
    let chunk = vec![0x5au8; kib * 1024];
    let mut written = 0usize;
    let mut rbuf = vec![0u8; 1 << 20];
    while std::time::Instant::now() < stop {
        f.write_all(&chunk).unwrap_or_else(|e| die(&e));
        written += chunk.len();
        if written >= 64 << 20 {
            f.set_len(0).unwrap_or_else(|e| die(&e));
            std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(0)).unwrap_or_else(|e| die(&e));
            written = 0;
        }
        if reads {
            let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
            // SAFETY: a valid descriptor; the calls only move data and page-cache state.
            unsafe {
                libc::fdatasync(fd);
                libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED);
                libc::pread(fd, rbuf.as_mut_ptr().cast(), rbuf.len(), 0);
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = std::fs::remove_file(path);
}
