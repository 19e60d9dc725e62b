//! The flight recorder's folder: `serve --record-dir DIR` records without end into files named
//! by their start time (UTC), starts a new file every hour (or at a size), and deletes the
//! oldest whole files so that DIR never holds more than its budget on disk or files older than
//! its age limit. Only files it recognises as its own (the name and the recording magic) are
//! ever deleted; anything else in DIR is left alone. A restart continues in the same DIR with
//! a new file and touches nothing already recorded.

use std::collections::VecDeque;
use std::io::Read as _;
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::RecordError;
use super::format::{MAGIC, Meta};
use super::recorder::Sink;
use super::writer::{Appended, RecordOptions, Writer, now_ms};
use crate::batch::Batch;

/// Default budget on disk (`--retain`).
pub const DEFAULT_RETAIN: u64 = 1 << 30;
/// Default age limit (`--retain-for`): seven days.
pub const DEFAULT_RETAIN_FOR: Duration = Duration::from_secs(7 * 86_400);
/// A new file at least this often (wall clock, aligned to the hour).
pub const FILE_SPAN_MS: u64 = 3_600_000;
/// Files per budget at least: a file is closed when it reaches budget / `FILES_PER_BUDGET`,
/// so deleting the oldest one frees a small part of the budget, not most of it.
const FILES_PER_BUDGET: u64 = 8;
/// Largest file, whatever the budget.
const MAX_FILE: u64 = 256 << 20;
/// Room kept free for the next record beyond twice the last one's size.
const SLACK: u64 = 64 << 10;
/// Filesystem blocks: a file takes whole ones.
const BLOCK: u64 = 4096;

/// Why DIR cannot be recorded into (exit code 11).
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    #[error("{}: is a symbolic link; give the real directory", .0.display())]
    Symlink(PathBuf),
    #[error("{}: exists and is not a directory", .0.display())]
    NotDirectory(PathBuf),
    #[error("{}: another ebee-top is recording into it", .0.display())]
    Busy(PathBuf),
    #[error("{}: not writable ({source})", path.display())]
    NotWritable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} {}: {source}", path.display())]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
}

/// What `--record-dir` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirOptions {
    pub dir: PathBuf,
    /// Most bytes on disk the recordings in DIR may take.
    pub retain: u64,
    /// Files whose last interval is older than this are deleted.
    pub retain_for: Duration,
}

impl DirOptions {
    /// Size at which a file is closed and the next one started.
    pub fn file_max(&self) -> u64 {
        (self.retain / FILES_PER_BUDGET).clamp(SLACK, MAX_FILE)
    }
}

/// Create DIR (0700) when it is missing; refuse a symlink, a non-directory, or one we cannot
/// write into; returns the directory to write into. Called before anything is loaded, so its
/// errors are plain lines. The one symlink taken is one systemd made: the unit's
/// `StateDirectory=` with `DynamicUser=yes` is a link into /var/lib/private, and systemd names
/// it in `$STATE_DIRECTORY`.
pub fn prepare(dir: &Path) -> Result<PathBuf, DirError> {
    let mut dir = dir.to_path_buf();
    match std::fs::symlink_metadata(&dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(&dir)
                .map_err(|source| DirError::Io {
                    what: "creating",
                    path: dir.clone(),
                    source,
                })?;
        }
        Err(source) => {
            return Err(DirError::Io {
                what: "inspecting",
                path: dir,
                source,
            });
        }
        Ok(m) if m.file_type().is_symlink() => {
            let expected = std::env::var_os("STATE_DIRECTORY")
                .is_some_and(|v| std::env::split_paths(&v).any(|p| p == dir));
            let real = std::fs::canonicalize(&dir).ok();
            match real {
                Some(r) if expected && r.is_dir() => dir = r,
                _ => return Err(DirError::Symlink(dir)),
            }
        }
        Ok(m) if !m.is_dir() => return Err(DirError::NotDirectory(dir)),
        Ok(_) => {}
    }
    // Root passes access(2) checks on permissions, but not a read-only filesystem: try.
    let probe = dir.join(format!(".ebee-top-probe-{}", std::process::id()));
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&probe);
    match made {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
        }
        Err(source) => return Err(DirError::NotWritable { path: dir, source }),
    }
    // Two agents in one folder would delete each other's files to keep their budgets.
    drop(lock(&dir)?);
    Ok(dir)
}

/// An exclusive lock on DIR itself (flock on the directory), held while recording into it.
pub fn lock(dir: &Path) -> Result<std::fs::File, DirError> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|source| DirError::Io {
            what: "opening",
            path: dir.into(),
            source,
        })?;
    use std::os::fd::AsRawFd as _;
    // SAFETY: flock on a descriptor we own; no memory is passed.
    if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            DirError::Busy(dir.into())
        } else {
            DirError::Io {
                what: "locking",
                path: dir.into(),
                source: e,
            }
        });
    }
    Ok(f)
}

/// `ebee-top-YYYYMMDDTHHMMSSZ.ebr` for a start at `t_ms` (`-N` before the dot when that second
/// already has a file).
pub fn file_name(t_ms: u64, n: u32) -> String {
    let t = t_ms / 1000;
    let (y, mo, d) = crate::time::civil_date(t / 86_400);
    let (h, mi, s) = (t / 3600 % 24, t / 60 % 60, t % 60);
    let tail = if n == 0 {
        String::new()
    } else {
        format!("-{n}")
    };
    format!("ebee-top-{y:04}{mo:02}{d:02}T{h:02}{mi:02}{s:02}Z{tail}.ebr")
}

/// True for a name `file_name` could have made.
pub fn is_own_name(name: &str) -> bool {
    let Some(rest) = name
        .strip_prefix("ebee-top-")
        .and_then(|r| r.strip_suffix(".ebr"))
    else {
        return false;
    };
    let b = rest.as_bytes();
    if b.len() < 16 || b[8] != b'T' || b[15] != b'Z' {
        return false;
    }
    let digits = |r: &[u8]| r.iter().all(u8::is_ascii_digit);
    digits(&b[..8])
        && digits(&b[9..15])
        && (b.len() == 16 || (b[16] == b'-' && b.len() > 17 && digits(&b[17..])))
}

/// Bytes a file takes on disk.
fn on_disk(m: &std::fs::Metadata) -> u64 {
    (m.blocks() * 512).max(m.len().div_ceil(BLOCK) * BLOCK)
}

/// A finished file of ours in DIR.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Finished {
    path: PathBuf,
    bytes: u64,
    /// Last modification, ms since the epoch: when its last interval was written.
    mtime_ms: u64,
}

/// True when `path` is a regular file (not a symlink) that starts with the recording magic.
fn is_own_recording(path: &Path) -> Option<std::fs::Metadata> {
    let m = std::fs::symlink_metadata(path).ok()?;
    if !m.file_type().is_file() {
        return None;
    }
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let mut magic = [0u8; MAGIC.len()];
    f.read_exact(&mut magic).ok()?;
    (magic == MAGIC).then_some(m)
}

/// Our finished recordings in DIR, oldest first (by name: the names sort by start time).
fn scan(dir: &Path) -> Result<Vec<Finished>, DirError> {
    let io = |source| DirError::Io {
        what: "reading",
        path: dir.into(),
        source,
    };
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).map_err(io)? {
        let e = e.map_err(io)?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_own_name(name) {
            continue;
        }
        let path = dir.join(name);
        if let Some(m) = is_own_recording(&path) {
            out.push(Finished {
                bytes: on_disk(&m),
                mtime_ms: m.mtime().max(0) as u64 * 1000,
                path,
            });
        }
    }
    out.sort_by_key(|f| sort_key(&f.path));
    Ok(out)
}

/// Names sort by time, and `-N` after the plain name of the same second, by N.
fn sort_key(p: &Path) -> (String, u64) {
    let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    let stem = name.trim_end_matches(".ebr");
    match stem.split_once("Z-") {
        Some((a, n)) => (a.to_owned(), n.parse::<u64>().unwrap_or(u64::MAX)),
        None => (stem.trim_end_matches('Z').to_owned(), 0),
    }
}

/// The flight recorder's writer: the current file, and the finished ones it may delete.
pub struct DirWriter {
    opts: DirOptions,
    /// The lock on DIR, held while this writer lives.
    _lock: std::fs::File,
    meta: Meta,
    cur: Writer,
    /// Hour (wall-clock ms / FILE_SPAN_MS) the current file belongs to.
    cur_span: u64,
    finished: VecDeque<Finished>,
    /// Records written to every file this run.
    records: u64,
    last_record: u64,
    /// Files deleted by the budget or the age limit this run.
    pub deleted: u64,
    last_age_check_ms: u64,
}

impl DirWriter {
    /// Start recording into `opts.dir` (prepared by [`prepare`]) with a new file.
    pub fn create(opts: DirOptions, meta: Meta) -> Result<Self, DirError> {
        let lock = lock(&opts.dir)?;
        let finished = scan(&opts.dir)?;
        let dir = opts.dir.clone();
        let io = move |e: RecordError| DirError::Io {
            what: "recording into",
            path: dir.clone(),
            source: std::io::Error::other(e.to_string()),
        };
        let now = now_ms();
        let cur = Self::new_file(&opts.dir, &meta, now).map_err(&io)?;
        let mut w = Self {
            _lock: lock,
            cur_span: now / FILE_SPAN_MS,
            finished: finished.into(),
            records: 0,
            last_record: 0,
            deleted: 0,
            last_age_check_ms: 0,
            cur,
            meta,
            opts,
        };
        w.make_room(0).map_err(&io)?;
        Ok(w)
    }

    fn new_file(dir: &Path, meta: &Meta, now: u64) -> Result<Writer, RecordError> {
        let mut m = meta.clone();
        m.start_ms = now;
        for n in 0..1000 {
            let path = dir.join(file_name(now, n));
            let opts = RecordOptions {
                path,
                force: false,
                max_size: None,
                rotate: None,
            };
            match Writer::create(opts, m.clone()) {
                Err(RecordError::Exists(_)) => continue,
                other => return other,
            }
        }
        Err(RecordError::io(
            "creating a file in",
            dir,
            std::io::Error::other("a thousand files start in this second"),
        ))
    }

    /// Bytes the recordings take on disk now (the current file counted by what was written).
    pub fn used(&self) -> u64 {
        self.finished.iter().map(|f| f.bytes).sum::<u64>() + self.cur.len().div_ceil(BLOCK) * BLOCK
    }

    pub fn dir(&self) -> &Path {
        &self.opts.dir
    }

    /// Close the current file and start the next.
    fn roll(&mut self, now: u64) -> Result<(), RecordError> {
        let _ = self.cur.sync();
        let path = self.cur.path().to_path_buf();
        let mut next_meta = self.meta.clone();
        next_meta.segment = self.meta.segment + 1;
        let next = Self::new_file(&self.opts.dir, &next_meta, now)?;
        self.meta = next_meta;
        let old = std::mem::replace(&mut self.cur, next);
        drop(old);
        let bytes = std::fs::symlink_metadata(&path).map_or(0, |m| on_disk(&m));
        self.finished.push_back(Finished {
            path,
            bytes,
            mtime_ms: now,
        });
        self.cur_span = now / FILE_SPAN_MS;
        Ok(())
    }

    fn delete_oldest(&mut self) -> bool {
        let Some(f) = self.finished.pop_front() else {
            return false;
        };
        // Gone already (someone removed it) is as good as deleted.
        let _ = std::fs::remove_file(&f.path);
        self.deleted += 1;
        true
    }

    /// Delete the oldest whole files until `incoming` more bytes fit in the budget, and those
    /// past the age limit.
    fn make_room(&mut self, incoming: u64) -> Result<(), RecordError> {
        let now = now_ms();
        if now.saturating_sub(self.last_age_check_ms) >= 10_000 {
            self.last_age_check_ms = now;
            let limit = now.saturating_sub(self.opts.retain_for.as_millis() as u64);
            while self.finished.front().is_some_and(|f| f.mtime_ms < limit) {
                self.delete_oldest();
            }
        }
        while self.used() + incoming > self.opts.retain {
            if !self.delete_oldest() {
                if self.cur.records() == 0 {
                    // The budget cannot hold even a fresh file and one record: keep going
                    // with the one file; `--retain` has a floor that makes this unreachable.
                    break;
                }
                // The current file alone is too big: close it, and delete it next round.
                self.roll(now)?;
            }
        }
        Ok(())
    }
}

impl Sink for DirWriter {
    fn append(&mut self, b: &Batch) -> Result<Appended, RecordError> {
        let now = now_ms();
        let mut result = Appended::Written;
        if self.cur.records() > 0
            && (now / FILE_SPAN_MS != self.cur_span || self.cur.len() >= self.opts.file_max())
        {
            self.roll(now)?;
            result = Appended::Rotated;
        }
        self.make_room(self.last_record.saturating_mul(2) + SLACK)?;
        let before = self.cur.len();
        self.cur.append(b)?;
        self.last_record = self.cur.len().saturating_sub(before);
        self.records += 1;
        Ok(result)
    }

    fn path(&self) -> &Path {
        self.cur.path()
    }

    fn bytes(&self) -> u64 {
        self.cur.len()
    }

    fn records(&self) -> u64 {
        self.records
    }

    fn sync(&mut self) -> Result<(), RecordError> {
        self.cur.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::build::plausible;
    use crate::record::writer::local_meta;

    fn opts(dir: &Path, retain: u64) -> DirOptions {
        DirOptions {
            dir: dir.into(),
            retain,
            retain_for: DEFAULT_RETAIN_FOR,
        }
    }

    fn du(dir: &Path) -> u64 {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| on_disk(&e.unwrap().metadata().unwrap()))
            .sum()
    }

    #[test]
    fn names_sort_by_time_and_only_ours_are_recognised() {
        // 2026-12-06 02:47:05 UTC.
        let t = 1_796_525_225_000;
        assert_eq!(file_name(t, 0), "ebee-top-20261206T024705Z.ebr");
        assert_eq!(file_name(t, 3), "ebee-top-20261206T024705Z-3.ebr");
        assert_eq!(file_name(0, 0), "ebee-top-19700101T000000Z.ebr");
        for ok in [file_name(t, 0), file_name(t, 12)] {
            assert!(is_own_name(&ok), "{ok}");
        }
        for bad in [
            "ebee-top-20261206T024705Z.ebr.bak",
            "notes.txt",
            "ebee-top-2026120T024705Z.ebr",
            "ebee-top-20261206T024705Z-.ebr",
            "ebee-top-20261206T024705Z-x.ebr",
            "ebee-top-20261206X024705Z.ebr",
        ] {
            assert!(!is_own_name(bad), "{bad}");
        }
        let a = PathBuf::from(file_name(t, 0));
        let b = PathBuf::from(file_name(t, 2));
        let c = PathBuf::from(file_name(t, 10));
        let d = PathBuf::from(file_name(t + 1000, 0));
        let mut v = vec![d.clone(), c.clone(), a.clone(), b.clone()];
        v.sort_by_key(|p| sort_key(p));
        assert_eq!(v, vec![a, b, c, d]);
    }

    #[test]
    fn prepare_makes_a_private_dir_and_refuses_what_it_must_not_use() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("rec");
        assert_eq!(prepare(&d).unwrap(), d);
        let m = std::fs::metadata(&d).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.mode() & 0o777, 0o700);
        prepare(&d).unwrap();
        assert_eq!(
            std::fs::read_dir(&d).unwrap().count(),
            0,
            "probe left behind"
        );
        let link = t.path().join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(matches!(prepare(&link), Err(DirError::Symlink(_))));
        let file = t.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        assert!(matches!(prepare(&file), Err(DirError::NotDirectory(_))));
        assert!(matches!(
            prepare(&t.path().join("no/such/parent")),
            Err(DirError::Io { .. })
        ));
        // A folder another writer holds.
        let held = lock(&d).unwrap();
        assert!(matches!(prepare(&d), Err(DirError::Busy(_))));
        drop(held);
        prepare(&d).unwrap();
    }

    #[test]
    fn the_budget_holds_and_only_our_oldest_files_go() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        // Files that are not ours: a look-alike name without the magic, a note, a symlink.
        let fake = dir.join(file_name(1000, 0));
        std::fs::write(&fake, vec![7u8; 10_000]).unwrap();
        std::fs::write(dir.join("notes.txt"), b"keep me").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.join(file_name(2000, 0))).unwrap();
        let foreign = du(dir);
        let budget = 1 << 20; // the smallest --retain
        let mut w =
            DirWriter::create(opts(dir, budget), local_meta(Duration::from_millis(50))).unwrap();
        let mut rotations = 0;
        for s in 1..=5000 {
            if w.append(&plausible(s, 40)).unwrap() == Appended::Rotated {
                rotations += 1;
            }
            assert!(w.used() <= budget, "{} > {budget} at {s}", w.used());
            assert!(du(dir) - foreign <= budget + BLOCK, "du {} at {s}", du(dir));
        }
        assert!(rotations > 8, "{rotations} rotations");
        assert!(w.deleted > 0);
        assert_eq!(std::fs::read(&fake).unwrap(), vec![7u8; 10_000]);
        assert_eq!(std::fs::read(dir.join("notes.txt")).unwrap(), b"keep me");
        assert!(
            std::fs::symlink_metadata(dir.join(file_name(2000, 0)))
                .unwrap()
                .file_type()
                .is_symlink()
        );
        // A restart: a new file beside the old ones, which stay as they are.
        let before: Vec<_> = scan(dir).unwrap();
        let cur = w.path().to_path_buf();
        drop(w);
        let mut w2 =
            DirWriter::create(opts(dir, budget), local_meta(Duration::from_millis(50))).unwrap();
        assert_ne!(w2.path(), cur);
        w2.append(&plausible(1, 40)).unwrap();
        let after = scan(dir).unwrap();
        for f in &before {
            assert!(
                after.iter().any(|g| g.path == f.path),
                "{:?} was deleted by a restart within budget",
                f.path
            );
        }
    }

    #[test]
    fn files_past_the_age_limit_go() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path();
        let mut o = opts(dir, DEFAULT_RETAIN);
        let mut w = DirWriter::create(o.clone(), local_meta(Duration::from_secs(1))).unwrap();
        w.append(&plausible(1, 5)).unwrap();
        let first = w.path().to_path_buf();
        drop(w);
        o.retain_for = Duration::ZERO;
        std::thread::sleep(Duration::from_millis(1100));
        let mut w = DirWriter::create(o, local_meta(Duration::from_secs(1))).unwrap();
        w.append(&plausible(2, 5)).unwrap();
        assert!(!first.exists(), "a file older than --retain-for was kept");
        assert!(w.path().exists());
    }
}
