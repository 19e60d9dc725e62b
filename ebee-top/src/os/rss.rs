//! The resident memory of every process, read once from /proc when the memory pipeline starts:
//! its events then say only what changes.

/// (pid, resident bytes) of every process now, from /proc/PID/statm (the same counters the
/// kernel program reads: file + anon + shmem pages). Kernel threads have none.
pub fn proc_rss(page_size: u64) -> Vec<(u32, u64)> {
    let mut buf = [0u8; 256];
    super::pids()
        .into_iter()
        .filter_map(|pid| {
            let text = super::read_small(&format!("/proc/{pid}/statm"), &mut buf)?;
            Some((pid, resident_pages(text)?.saturating_mul(page_size)))
        })
        .filter(|(_, b)| *b > 0)
        .collect()
}

/// The resident pages in a /proc/PID/statm text: its second number.
fn resident_pages(text: &[u8]) -> Option<u64> {
    std::str::from_utf8(text)
        .ok()?
        .split_ascii_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn resident_pages_is_the_second_field() {
        assert_eq!(
            super::resident_pages(b"2412 612 480 46 0 264 0\n"),
            Some(612)
        );
        assert_eq!(super::resident_pages(b"2412"), None);
        assert_eq!(super::resident_pages(b"2412 x 1"), None);
        assert_eq!(super::resident_pages(b"\xff\xfe 1"), None);
    }

    #[test]
    fn our_own_resident_memory_is_found() {
        let all = super::proc_rss(4096);
        let me = all.iter().find(|(p, _)| *p == std::process::id()).unwrap();
        assert!(me.1 > 0);
    }
}
