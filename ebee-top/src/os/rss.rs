//! The resident memory of every process, read once from /proc when the memory pipeline starts:
//! its events then say only what changes.

/// (pid, resident bytes) of every process now, from /proc/PID/statm (the same counters the
/// kernel program reads: file + anon + shmem pages). Kernel threads have none.
pub fn proc_rss(page_size: u64) -> Vec<(u32, u64)> {
    let Ok(all) = procfs::process::all_processes() else {
        return Vec::new();
    };
    all.filter_map(Result::ok)
        .filter_map(|p| {
            let pid = u32::try_from(p.pid()).ok()?;
            let m = p.statm().ok()?;
            Some((pid, m.resident.saturating_mul(page_size)))
        })
        .filter(|(_, b)| *b > 0)
        .collect()
}
