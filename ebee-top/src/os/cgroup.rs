//! The cgroup filesystem: which hierarchy to follow (cgroup v2, or the CPU accounting
//! controller's v1 hierarchy on a v1 or hybrid machine), the path of a kernel cgroup key (the
//! low 32 bits of the directory's inode number, see `ebee_shared::cgroup`), a cgroup's memory,
//! and a process's cgroup from /proc/PID/cgroup.
//!
//! Nothing here trusts what it reads: mount tables and cgroup files are parsed leniently, a
//! walk is bounded in depth and entries and never follows a symlink, names that are not UTF-8
//! are shown with their odd bytes escaped, and a cgroup removed under a walk is skipped.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirEntryExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

// foldhash, not SipHash: the keys are ids the kernel chose (pids, tids, cgroup ids), not a
// flood an attacker can aim, and its RandomState is still seeded per process.
use foldhash::{HashMap, HashMapExt as _};

/// Which hierarchy the user asked for (`--cgroups`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Want {
    /// cgroup v2 when it is the only hierarchy; on a v1 or hybrid machine the CPU accounting
    /// controller's hierarchy, where CPU is accounted and containers are placed.
    #[default]
    Auto,
    /// The unified (v2) hierarchy.
    V2,
    /// The v1 hierarchy of `cpuacct` (or `cpu`).
    V1,
    /// No cgroups.
    Off,
}

/// The hierarchy followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// cgroup v2 (`css_set.dfl_cgrp` in the kernel).
    V2,
    /// A v1 hierarchy; the controller whose `css_set.subsys` entry the kernel follows.
    V1 { controller: &'static str },
}

/// A mounted hierarchy ebee-top follows, and where to read memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupFs {
    pub kind: Kind,
    /// Where it is mounted.
    pub mount: PathBuf,
    /// The v1 `memory` controller's mount, when there is one (memory of a cgroup followed in
    /// another hierarchy is read at the same relative path there).
    pub memory_v1: Option<PathBuf>,
    /// The v2 mount, when there is one (for `memory.current`).
    pub unified: Option<PathBuf>,
}

impl CgroupFs {
    /// A short name of the hierarchy: `v2`, `v1 cpuacct`.
    pub fn label(&self) -> String {
        match &self.kind {
            Kind::V2 => "v2".to_owned(),
            Kind::V1 { controller } => format!("v1 {controller}"),
        }
    }
}

/// One cgroup mount from /proc/self/mountinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Mount {
    path: PathBuf,
    v2: bool,
    /// v1 controllers (super options), e.g. `["cpu", "cpuacct"]`.
    controllers: Vec<String>,
}

/// Undo mountinfo's octal escapes (`\040` for a space).
fn unescape(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// The cgroup mounts of a mountinfo text.
fn mounts(mountinfo: &str) -> Vec<Mount> {
    let mut out = Vec::new();
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else {
            continue;
        };
        let pre: Vec<&str> = pre.split(' ').collect();
        let post: Vec<&str> = post.split(' ').collect();
        if pre.len() < 5 || post.len() < 3 {
            continue;
        }
        let path = PathBuf::from(OsStr::from_bytes(&unescape(pre[4])));
        match post[0] {
            "cgroup2" => out.push(Mount {
                path,
                v2: true,
                controllers: Vec::new(),
            }),
            "cgroup" => out.push(Mount {
                path,
                v2: false,
                controllers: post[2]
                    .split(',')
                    .filter(|o| !matches!(*o, "rw" | "ro") && !o.contains('='))
                    .map(str::to_owned)
                    .collect(),
            }),
            _ => {}
        }
    }
    out
}

/// Choose the hierarchy from a mountinfo text.
pub fn choose(mountinfo: &str, want: Want) -> Option<CgroupFs> {
    if want == Want::Off {
        return None;
    }
    let ms = mounts(mountinfo);
    let v2 = ms.iter().find(|m| m.v2).map(|m| m.path.clone());
    let v1 = |ctl: &str| {
        ms.iter()
            .find(|m| !m.v2 && m.controllers.iter().any(|c| c == ctl))
            .map(|m| m.path.clone())
    };
    let memory_v1 = v1("memory");
    let acct = v1("cpuacct")
        .map(|p| (p, "cpuacct"))
        .or_else(|| v1("cpu").map(|p| (p, "cpu")));
    let pick_v2 = |mount: PathBuf| CgroupFs {
        kind: Kind::V2,
        mount: mount.clone(),
        memory_v1: memory_v1.clone(),
        unified: Some(mount),
    };
    let pick_v1 = |(mount, controller): (PathBuf, &'static str)| CgroupFs {
        kind: Kind::V1 { controller },
        mount,
        memory_v1: memory_v1.clone(),
        unified: v2.clone(),
    };
    match want {
        Want::V2 => v2.map(pick_v2),
        Want::V1 => acct.map(pick_v1),
        Want::Auto => acct.map(pick_v1).or_else(|| v2.map(pick_v2)),
        Want::Off => None,
    }
}

/// Choose from this process's mount table.
pub fn detect(want: Want) -> Option<CgroupFs> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    choose(&text, want)
}

/// A path made of bytes that may not be UTF-8: odd bytes shown as `\xNN`, backslashes doubled,
/// so two different names never print the same.
pub fn escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else if c.is_control() {
                out.push_str(&format!("\\x{:02x}", c as u32));
            } else {
                out.push(c);
            }
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02x}"));
        }
    }
    out
}

/// Bounds of one walk of a hierarchy.
const MAX_DEPTH: usize = 32;
const MAX_CGROUPS: usize = 100_000;
/// A key not found is looked for again no sooner than this after the last walk.
const REWALK_AFTER: Duration = Duration::from_secs(1);

/// Key -> path of every cgroup of one hierarchy, from a walk of its mount.
pub fn walk(mount: &Path) -> HashMap<u32, String> {
    let mut out = HashMap::new();
    // The root: its inode number is the kernfs root's id.
    if let Ok(md) = std::fs::symlink_metadata(mount) {
        use std::os::unix::fs::MetadataExt;
        out.insert(md.ino() as u32, "/".to_owned());
    }
    let mut stack: Vec<(PathBuf, String, usize)> = vec![(mount.to_path_buf(), String::new(), 0)];
    while let Some((dir, rel, depth)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            // Removed under the walk, or not readable: skip it.
            continue;
        };
        for e in rd.flatten() {
            // file_type() does not follow symlinks (cgroupfs has none; a bind mount might).
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let name = e.file_name();
            let path = format!("{rel}/{}", escape(name.as_bytes()));
            out.insert(e.ino() as u32, path.clone());
            if out.len() >= MAX_CGROUPS {
                return out;
            }
            if depth + 1 < MAX_DEPTH {
                stack.push((e.path(), path, depth + 1));
            }
        }
    }
    out
}

/// Paths of cgroup keys, walked again (at most once a second) when a key is not known.
pub struct Names {
    mount: PathBuf,
    paths: HashMap<u32, String>,
    walked: Option<Instant>,
}

impl Names {
    pub fn new(mount: &Path) -> Self {
        Self {
            mount: mount.to_path_buf(),
            paths: HashMap::new(),
            walked: None,
        }
    }

    /// The path of `key`, if it is (or was, at the last walk) a cgroup.
    pub fn path(&mut self, key: u32) -> Option<&str> {
        if key == 0 {
            return None;
        }
        if !self.paths.contains_key(&key) && self.walked.is_none_or(|t| t.elapsed() >= REWALK_AFTER)
        {
            self.paths = walk(&self.mount);
            self.walked = Some(Instant::now());
        }
        self.paths.get(&key).map(String::as_str)
    }

    /// Whether `path` still exists (a removed cgroup's row is marked).
    pub fn exists(&self, path: &str) -> bool {
        std::fs::symlink_metadata(self.dir(path)).is_ok_and(|m| m.is_dir())
    }

    fn dir(&self, path: &str) -> PathBuf {
        under(&self.mount, path)
    }
}

/// `path` (as shown, from a walk) under `mount`, refusing anything that climbs out.
fn under(mount: &Path, path: &str) -> PathBuf {
    let mut p = mount.to_path_buf();
    for part in path.split('/') {
        if part.is_empty() || part == "." || part == ".." {
            continue;
        }
        p.push(part);
    }
    p
}

/// Read a small file holding one decimal number.
fn read_u64(path: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(path).ok()?;
    text.trim().parse().ok()
}

/// The memory charged to the cgroup at `path`: `memory.current` (v2), or the v1 memory
/// controller's `memory.usage_in_bytes` at the same relative path. None when neither is there
/// (the v2 root has no `memory.current`; a v2 cgroup whose parent does not enable the memory
/// controller has none either).
pub fn memory_bytes(fs: &CgroupFs, path: &str) -> Option<u64> {
    if let Some(u) = &fs.unified {
        if let Some(v) = read_u64(&under(u, path).join("memory.current")) {
            return Some(v);
        }
    }
    let m = fs.memory_v1.as_ref()?;
    read_u64(&under(m, path).join("memory.usage_in_bytes"))
}

/// The cgroup path of the followed hierarchy in a /proc/PID/cgroup text.
pub fn parse_proc_cgroup(text: &str, kind: &Kind) -> Option<String> {
    for line in text.lines() {
        let mut f = line.splitn(3, ':');
        let (Some(id), Some(ctls), Some(path)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let hit = match kind {
            Kind::V2 => id == "0" && ctls.is_empty(),
            Kind::V1 { controller } => ctls.split(',').any(|c| c == *controller),
        };
        if hit {
            return Some(escape(path.as_bytes()));
        }
    }
    None
}

/// The cgroup of process `pid` from /proc.
pub fn proc_cgroup(pid: u32, kind: &Kind) -> Option<String> {
    let text = std::fs::read(format!("/proc/{pid}/cgroup")).ok()?;
    parse_proc_cgroup(&String::from_utf8_lossy(&text), kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID: &str = "\
24 30 0:22 / /sys/fs/cgroup rw,nosuid - tmpfs tmpfs rw,mode=755
25 24 0:23 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
26 24 0:24 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
27 24 0:25 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
28 24 0:26 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,xattr,name=systemd
29 24 0:27 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    const PURE_V2: &str = "\
30 25 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";
    const JOINED: &str = "\
25 24 0:23 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:7 - cgroup cgroup rw,cpu,cpuacct
27 24 0:25 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
";

    #[test]
    fn hybrid_follows_cpuacct_unless_v2_is_asked_for() {
        let fs = choose(HYBRID, Want::Auto).unwrap();
        assert_eq!(
            fs.kind,
            Kind::V1 {
                controller: "cpuacct"
            }
        );
        assert_eq!(fs.mount, Path::new("/sys/fs/cgroup/cpuacct"));
        assert_eq!(
            fs.memory_v1.as_deref(),
            Some(Path::new("/sys/fs/cgroup/memory"))
        );
        let v2 = choose(HYBRID, Want::V2).unwrap();
        assert_eq!(v2.kind, Kind::V2);
        assert_eq!(v2.mount, Path::new("/sys/fs/cgroup/unified"));
        assert_eq!(fs.label(), "v1 cpuacct");
        assert!(choose(HYBRID, Want::Off).is_none());
    }

    #[test]
    fn pure_v2_and_joined_v1_and_none() {
        let fs = choose(PURE_V2, Want::Auto).unwrap();
        assert_eq!(fs.kind, Kind::V2);
        assert!(fs.memory_v1.is_none());
        assert!(choose(PURE_V2, Want::V1).is_none());
        let j = choose(JOINED, Want::Auto).unwrap();
        assert_eq!(j.mount, Path::new("/sys/fs/cgroup/cpu,cpuacct"));
        assert!(choose(JOINED, Want::V2).is_none());
        assert!(choose("", Want::Auto).is_none());
        assert!(choose("garbage\n - \n1 2 3", Want::Auto).is_none());
    }

    #[test]
    fn mount_paths_are_unescaped() {
        let t = "1 2 0:1 / /mnt/my\\040cg rw - cgroup2 none rw\n";
        assert_eq!(
            choose(t, Want::Auto).unwrap().mount,
            Path::new("/mnt/my cg")
        );
    }

    #[test]
    fn proc_cgroup_lines() {
        let t = "9:name=systemd:/\n2:cpuacct:/docker/abc\n1:cpu:/\n0::/system.slice/x.service\n";
        assert_eq!(
            parse_proc_cgroup(
                t,
                &Kind::V1 {
                    controller: "cpuacct"
                }
            )
            .as_deref(),
            Some("/docker/abc")
        );
        assert_eq!(
            parse_proc_cgroup(t, &Kind::V2).as_deref(),
            Some("/system.slice/x.service")
        );
        assert_eq!(parse_proc_cgroup("nonsense", &Kind::V2), None);
    }

    #[test]
    fn odd_names_are_escaped_and_paths_stay_under_the_mount() {
        assert_eq!(escape(b"a\xffb\\c\n"), "a\\xffb\\\\c\\x0a");
        assert_eq!(under(Path::new("/m"), "/../../etc"), Path::new("/m/etc"));
        assert_eq!(under(Path::new("/m"), "/"), Path::new("/m"));
    }

    #[test]
    fn walk_finds_dirs_with_their_inode_keys() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("a/b")).unwrap();
        std::fs::write(d.path().join("a/file"), "x").unwrap();
        std::os::unix::fs::symlink(d.path().join("a"), d.path().join("link")).unwrap();
        let m = walk(d.path());
        let mut paths: Vec<&String> = m.values().collect();
        paths.sort();
        assert_eq!(paths, ["/", "/a", "/a/b"]);
        use std::os::unix::fs::MetadataExt;
        let ino = std::fs::metadata(d.path().join("a/b")).unwrap().ino() as u32;
        assert_eq!(m[&ino], "/a/b");
    }
}
