//! Which pages of ebee-top's own binary stay resident. The kernel maps a file page's
//! neighbours with it (fault-around, 64 KiB at a time) and keeps every page touched once:
//! start-up and argument parsing, the eBPF loader, the 1 MB eBPF object embedded in the
//! binary. An always-on monitor should not keep those for the day, so at start the binary's
//! read-only mappings are marked for random access (no fault-around: a page comes in when it
//! runs), and once the programs are loaded the pages loading touched are handed back; the ones
//! that run again come back one by one. Both are advice: on a kernel that refuses them nothing
//! changes but the resident size.

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
