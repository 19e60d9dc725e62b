//! Which pages of ebee-top's own binary stay resident. The kernel maps a file page's
//! neighbours with it (fault-around, 64 KiB at a time) and keeps every page touched once:
//! start-up and argument parsing, the eBPF loader, the 1 MB eBPF object embedded in the
//! binary. An always-on monitor should not keep those for the day, so at start the binary's
//! read-only mappings are marked for random access (no fault-around: a page comes in when it
//! runs), and once the programs are loaded the pages loading touched are handed back; the ones
//! that run again come back one by one. Both are advice: on a kernel that refuses them nothing
//! changes but the resident size. The heap's side is here too: big blocks get pages of their
//! own, and free pages go back to the kernel now and then.

/// The read-only mappings (text and constants) of our own executable: (start, length).
fn exe_ranges() -> Vec<(usize, usize)> {
    let Ok(exe) = std::fs::read_link("/proc/self/exe") else {
        return Vec::new();
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return Vec::new();
    };
    parse_ranges(&maps, &exe.to_string_lossy())
}

/// The ranges of `maps` (the format of /proc/PID/maps) that map `exe` without write access.
fn parse_ranges(maps: &str, exe: &str) -> Vec<(usize, usize)> {
    maps.lines()
        .filter_map(|l| {
            let mut f = l.splitn(6, ' ');
            let (range, perms) = (f.next()?, f.next()?);
            let path = f.nth(3)?.trim_start();
            if path != exe || perms.contains('w') {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            let a = usize::from_str_radix(a, 16).ok()?;
            let b = usize::from_str_radix(b, 16).ok()?;
            (b > a).then_some((a, b - a))
        })
        .collect()
}

fn advise(advice: libc::c_int) {
    for (start, len) in exe_ranges() {
        // SAFETY: the range is one of our own read-only file mappings, as the kernel listed it;
        // MADV_RANDOM and MADV_PAGEOUT change only how its pages are read and kept, never their
        // contents (a page handed back is read again from the file when touched).
        unsafe { libc::madvise(start as *mut libc::c_void, len, advice) };
    }
}

/// At start: bring in only the binary's pages that run, not their neighbours.
pub fn no_fault_around() {
    advise(libc::MADV_RANDOM);
}

/// After loading: hand back the binary's pages loading touched.
pub fn drop_loaded_pages() {
    advise(libc::MADV_PAGEOUT);
}

/// At start: blocks of 32 KiB and more (the minute of history of a busy process) get pages of
/// their own (mmap), so growing one moves pages (mremap) rather than leaving a hole in the
/// heap, and freeing one returns it whole. glibc's default threshold starts at 128 KiB and
/// rises as such blocks are freed, which puts them back in the heap, where the holes they leave
/// as they grow kept a busy machine's resident size creeping for minutes.
pub fn big_blocks_mapped() {
    // SAFETY: mallopt only changes the allocator's policy for later allocations.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 32 * 1024) };
}

/// Hands the heap's free memory back to the kernel now and then. glibc's malloc keeps what
/// is freed for reuse, in the main heap and in an arena per thread that allocates; with a
/// history that turns over all the time (bursts of busy processes, names of short-lived
/// ones), only `malloc_trim` returns the whole free pages left between live blocks. Every
/// 5 s, off the tick's path.
#[derive(Debug)]
pub struct HeapTrim {
    next: std::time::Instant,
}

impl HeapTrim {
    /// How often: a trim walks the free lists.
    const EVERY: std::time::Duration = std::time::Duration::from_secs(5);

    pub fn new() -> Self {
        Self {
            next: std::time::Instant::now() + Self::EVERY,
        }
    }

    /// Trim when it is time.
    pub fn tick(&mut self) {
        let now = std::time::Instant::now();
        if now < self.next {
            return;
        }
        self.next = now + Self::EVERY;
        // SAFETY: malloc_trim has no preconditions; it only returns free pages to the kernel.
        unsafe { libc::malloc_trim(0) };
    }
}

impl Default for HeapTrim {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_read_only_mappings_of_the_executable() {
        let maps = "\
55d0a0000000-55d0a0200000 r--p 00000000 fd:01 42 /usr/bin/ebee top
55d0a0200000-55d0a0700000 r-xp 00200000 fd:01 42 /usr/bin/ebee top
55d0a0700000-55d0a0710000 rw-p 00700000 fd:01 42 /usr/bin/ebee top
55d0a0710000-55d0a0720000 r--p 00000000 fd:01 43 /usr/bin/ebee top (deleted)
7f0000000000-7f0000100000 r-xp 00000000 fd:01 44 /usr/lib/libc.so.6
7f0000100000-7f0000200000 rw-p 00000000 00:00 0
garbage
";
        assert_eq!(
            parse_ranges(maps, "/usr/bin/ebee top"),
            vec![(0x55d0a0000000, 0x200000), (0x55d0a0200000, 0x500000)]
        );
        // Our own maps parse, and name at least the text of this test binary.
        assert!(!exe_ranges().is_empty());
    }
}
