//! The memory report of our maps, as the kernel accounts it (`memlock` in
//! /proc/self/fdinfo): what `--maps` shows, so the footprint is measured, not guessed.

use std::collections::BTreeSet;
use std::os::fd::{AsFd as _, AsRawFd as _};

use super::{ProbeError, classify};

/// One map's footprint as the kernel accounts it.
#[derive(Clone, Debug, serde::Serialize)]
pub struct MapMem {
    pub name: String,
    pub kind: String,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    /// Bytes charged for the map (`memlock` in /proc/self/fdinfo), as the kernel reports it.
    pub memlock: u64,
}

/// Every BPF map this process holds open, by name.
pub(super) fn report() -> Result<Vec<MapMem>, ProbeError> {
    // Every map of the object is created at load, whether or not a program using it is
    // loaded yet (the syscall programs load only when something is pinned), so walk our own
    // map file descriptors rather than the loaded programs' map ids.
    let mut ids = BTreeSet::new();
    let fds = std::fs::read_dir("/proc/self/fd")
        .map_err(|e| ProbeError::Other(format!("listing /proc/self/fd: {e}")))?;
    for fd in fds.flatten() {
        let is_map =
            std::fs::read_link(fd.path()).is_ok_and(|t| t.as_os_str() == "anon_inode:bpf-map");
        let fd: Option<i32> = fd.file_name().to_str().and_then(|n| n.parse().ok());
        if let (true, Some(fd)) = (is_map, fd) {
            if let Some(id) = fdinfo_field(fd, "map_id") {
                ids.insert(id as u32);
            }
        }
    }
    let mut out = Vec::new();
    for id in ids {
        let info = aya::maps::MapInfo::from_id(id).map_err(classify("map info"))?;
        let fd = info.fd().map_err(classify("map fd"))?;
        let memlock = fdinfo_field(fd.as_fd().as_raw_fd(), "memlock").unwrap_or(0);
        out.push(MapMem {
            name: info.name_as_str().unwrap_or("?").to_owned(),
            kind: info
                .map_type()
                .map(|t| format!("{t:?}"))
                .unwrap_or_else(|_| "?".into()),
            key_size: info.key_size(),
            value_size: info.value_size(),
            max_entries: info.max_entries(),
            memlock,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// A numeric field of /proc/self/fdinfo/<fd>.
fn fdinfo_field(fd: i32, field: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    parse_field(&text, field)
}

/// The value of `field` in the `key:\tvalue` lines of an fdinfo file.
fn parse_field(text: &str, field: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k.trim() == field).then(|| v.trim().parse().ok())?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fdinfo_fields_are_found_by_exact_name() {
        let text = "pos:\t0\nflags:\t02000002\nmap_type:\t2\nmap_id:\t17\nmemlock:\t4096\n";
        assert_eq!(parse_field(text, "map_id"), Some(17));
        assert_eq!(parse_field(text, "memlock"), Some(4096));
        assert_eq!(parse_field(text, "map"), None);
        assert_eq!(parse_field("memlock:\tlots\n", "memlock"), None);
    }
}
