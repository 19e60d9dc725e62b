//! The machine as /proc and /etc show it: the host's totals, what is known of a process (names,
//! command lines, owners, details), the ports a process serves on. Readers only: they run on
//! the threads that produce Batches or messages, never on the render path, and trust nothing
//! they read (a missing or malformed file is an empty answer, never a panic). `act` is the
//! one writer: the signals and nice values the operator asks for.

pub mod act;
pub mod cgroup;
pub mod details;
pub mod group;
pub mod host;
pub mod ports;
pub mod procinfo;
pub mod procstat;
pub mod residency;
pub mod rss;

/// The pids in /proc now (its numeric entries), read with one directory listing: no entry is
/// opened or stat'ed, as procfs's `all_processes` does for each (an open, a stat and a close).
pub fn pids() -> Vec<u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// A small /proc file read whole into `buf`: an open, reads until its end, a close. Not
/// std's `fs::read`, which first stats the file and asks its position to size a buffer: two
/// more system calls, for a size /proc reports as 0 anyway. None if it cannot be opened or
/// read, or does not fit in `buf`.
pub fn read_small<'a>(path: &str, buf: &'a mut [u8]) -> Option<&'a [u8]> {
    use std::io::Read as _;
    let mut f = std::fs::File::open(path).ok()?;
    let mut n = 0;
    loop {
        if n == buf.len() {
            return None;
        }
        match f.read(&mut buf[n..]) {
            Ok(0) => return Some(&buf[..n]),
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_small_file_is_read_whole_and_one_too_big_is_refused() {
        let own = super::pids();
        assert!(own.contains(&std::process::id()));
        let path = format!("/proc/{}/stat", std::process::id());
        let whole = std::fs::read(&path).unwrap();
        let mut buf = [0u8; 4096];
        let got = super::read_small(&path, &mut buf).unwrap();
        // The fields up to the state are the same at any moment.
        let upto = |t: &[u8]| t[..t.iter().position(|&b| b == b')').unwrap() + 3].to_vec();
        assert_eq!(upto(got), upto(&whole));
        assert!(super::read_small(&path, &mut [0u8; 8]).is_none());
        assert!(super::read_small("/proc/nonexistent", &mut buf).is_none());
    }
}
