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

pub fn run(path: &Path, mib: u64, read: bool, direct: bool, fsync: bool) {
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
        }
        if fsync {
            f.sync_all().unwrap_or_else(|e| die(&e));
        }
    }
    println!("done");
    let _ = std::io::stdout().flush();
    wait_line();
}
