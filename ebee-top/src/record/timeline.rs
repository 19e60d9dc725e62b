//! One timeline out of one recording or a folder of them (the flight recorder's DIR): replay
//! and export see a single run of intervals, numbered across files, ordered by time. Each file
//! is opened (and checked) as a single recording is; a file that is not a recording is
//! ignored, a damaged one is reported and skipped, and the rest plays. A stretch with no
//! intervals (the agent was down) is a gap with its length, never intervals of zeros.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use super::reader::FrameError;
use super::{Meta, Reader, RecordError};
use crate::batch::Batch;
use crate::time::TimeSpec;

/// Files of a folder kept open at once: a week of hourly files is 168, and a descriptor each
/// could pass a process's limit; the others are reopened when read.
const MAX_OPEN: usize = 8;

/// A file opened when it is read and closed when the timeline needs its descriptor back.
pub struct LazyFile {
    path: PathBuf,
    /// Through a symlink (a single file named on the command line); never in a folder.
    follow: bool,
    file: Option<File>,
    pos: u64,
    len: u64,
}

impl LazyFile {
    /// Open `path` (a regular file; through a symlink only with `follow`) to index it.
    fn open(path: &Path, follow: bool) -> Result<Self, RecordError> {
        let mut f = Self {
            path: path.into(),
            follow,
            file: None,
            pos: 0,
            len: 0,
        };
        let file = f.file().map_err(|e| RecordError::io("opening", path, e))?;
        let m = file
            .metadata()
            .map_err(|e| RecordError::io("inspecting", path, e))?;
        if !m.is_file() {
            return Err(RecordError::NotRegular(path.into()));
        }
        f.len = m.len();
        Ok(f)
    }

    fn file(&mut self) -> std::io::Result<&mut File> {
        if self.file.is_none() {
            let nofollow = if self.follow { 0 } else { libc::O_NOFOLLOW };
            let f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(nofollow | libc::O_NONBLOCK | libc::O_CLOEXEC)
                .open(&self.path)?;
            self.file = Some(f);
        }
        // Just set above when it was None.
        self.file
            .as_mut()
            .ok_or_else(|| std::io::Error::other("closed"))
    }

    fn close(&mut self) {
        self.file = None;
    }
}

impl Read for LazyFile {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let pos = self.pos;
        let f = self.file()?;
        f.seek(SeekFrom::Start(pos))?;
        let n = f.read(buf)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl Seek for LazyFile {
    fn seek(&mut self, to: SeekFrom) -> std::io::Result<u64> {
        let new = match to {
            SeekFrom::Start(p) => Some(p),
            SeekFrom::End(d) => self.len.checked_add_signed(d),
            SeekFrom::Current(d) => self.pos.checked_add_signed(d),
        };
        self.pos = new.ok_or_else(|| std::io::Error::other("seek before the start"))?;
        Ok(self.pos)
    }
}

/// One file of the timeline.
struct Part {
    path: PathBuf,
    reader: Reader<LazyFile>,
}

/// Recordings read as one run of intervals.
pub struct Timeline {
    path: PathBuf,
    dir: bool,
    parts: Vec<Part>,
    /// Index (across files) of each part's first interval.
    first: Vec<usize>,
    len: usize,
    /// What was found wrong, one line each (file named).
    notes: Vec<String>,
    /// Files in DIR that are not recordings (or not regular files), left alone.
    ignored: usize,
    /// Parts whose file is open, the most recently read last.
    open: VecDeque<usize>,
}

impl Timeline {
    /// Open a recording file, or every recording in a directory.
    pub fn open(path: &Path) -> Result<Self, RecordError> {
        let m = std::fs::metadata(path).map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => RecordError::Missing(path.into()),
            _ => RecordError::io("inspecting", path, e),
        })?;
        if m.is_dir() {
            return Self::open_dir(path);
        }
        if !m.is_file() {
            return Err(RecordError::NotRegular(path.into()));
        }
        let reader = Reader::new(LazyFile::open(path, true)?, path)?;
        let notes = reader.damage().iter().map(ToString::to_string).collect();
        let reader = reader.nonempty(path)?;
        Ok(Self::of(
            path,
            false,
            vec![Part {
                path: path.into(),
                reader,
            }],
            notes,
            0,
        ))
    }

    fn open_dir(dir: &Path) -> Result<Self, RecordError> {
        let io = |e| RecordError::io("reading", dir, e);
        let mut names: Vec<_> = std::fs::read_dir(dir)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.file_name()))
            .collect();
        names.sort();
        let mut parts = Vec::new();
        let mut notes = Vec::new();
        let mut ignored = 0;
        for name in names {
            let path = dir.join(&name);
            // Never through a symlink, never a FIFO or a device; hidden files are not ours.
            let regular = std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_file());
            if !regular || name.to_string_lossy().starts_with('.') {
                ignored += 1;
                continue;
            }
            let opened = LazyFile::open(&path, false)
                .and_then(|f| Reader::new(f, &path))
                .and_then(|r| r.nonempty(&path));
            match opened {
                Ok(mut reader) => {
                    reader.source_mut().close();
                    let file = name.to_string_lossy();
                    notes.extend(reader.damage().iter().map(|d| format!("{file}: {d}")));
                    parts.push(Part { path, reader });
                }
                Err(RecordError::NotRecording(_) | RecordError::Empty(_)) => ignored += 1,
                Err(e) => notes.push(format!("{e}; skipped")),
            }
        }
        if parts.is_empty() {
            return Err(RecordError::NoFrames {
                path: dir.into(),
                detail: match notes.last() {
                    Some(n) => format!(" (no playable recording in it; {n})"),
                    None => " (no recording in it)".into(),
                },
            });
        }
        // By their first interval; a file written while another was (two agents) is still
        // played after the one that started first.
        parts.sort_by_key(|p| (p.reader.entries()[0].head.t_ms, p.path.clone()));
        Ok(Self::of(dir, true, parts, notes, ignored))
    }

    fn of(path: &Path, dir: bool, parts: Vec<Part>, notes: Vec<String>, ignored: usize) -> Self {
        let mut first = Vec::with_capacity(parts.len());
        let mut len = 0;
        for p in &parts {
            first.push(len);
            len += p.reader.len();
        }
        Self {
            path: path.into(),
            dir,
            parts,
            first,
            len,
            notes,
            ignored,
            open: VecDeque::new(),
        }
    }

    /// The file or directory opened.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// True when a directory was opened.
    pub fn is_dir(&self) -> bool {
        self.dir
    }

    /// Recording files in the timeline.
    pub fn files(&self) -> usize {
        self.parts.len()
    }

    /// Files in the directory that are not recordings.
    pub fn ignored(&self) -> usize {
        self.ignored
    }

    /// The header of the first file (host, interval).
    pub fn meta(&self) -> &Meta {
        self.parts[0].reader.meta()
    }

    /// What was found wrong, one line each.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Intervals in all files.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The file and the index within it of interval `i`.
    fn locate(&self, i: usize) -> Option<(usize, usize)> {
        if i >= self.len {
            return None;
        }
        let p = self.first.partition_point(|&f| f <= i) - 1;
        Some((p, i - self.first[p]))
    }

    /// The file interval `i` is in.
    pub fn file_of(&self, i: usize) -> Option<&Path> {
        self.locate(i).map(|(p, _)| self.parts[p].path.as_path())
    }

    /// Where interval `i` is, for a message: `record at byte N`, with the file's name when
    /// the timeline has several.
    pub fn describe(&self, i: usize) -> String {
        let Some((p, j)) = self.locate(i) else {
            return format!("interval {i}");
        };
        let part = &self.parts[p];
        let off = part.reader.entries()[j].offset;
        if self.dir {
            let name = part.path.file_name().unwrap_or_default().to_string_lossy();
            format!("{name}: record at byte {off}")
        } else {
            format!("record at byte {off}")
        }
    }

    /// Wall-clock time of interval `i`, ms (0 past the end).
    pub fn t_ms(&self, i: usize) -> u64 {
        self.locate(i)
            .map_or(0, |(p, j)| self.parts[p].reader.entries()[j].head.t_ms)
    }

    /// Decode interval `i`.
    pub fn read(&mut self, i: usize) -> Result<Batch, FrameError> {
        let (p, j) = self.locate(i).ok_or(FrameError::OutOfRange(i))?;
        if self.open.back() != Some(&p) {
            self.open.retain(|&q| q != p);
            self.open.push_back(p);
            if self.open.len() > MAX_OPEN
                && let Some(q) = self.open.pop_front()
            {
                let r = &mut self.parts[q].reader;
                r.source_mut().close();
                r.forget_cache();
            }
        }
        self.parts[p].reader.read(j)
    }

    /// Files open now (at most `MAX_OPEN`, and one for a single file).
    pub fn open_files(&self) -> usize {
        self.parts
            .iter()
            .filter(|p| p.reader.source_ref().file.is_some())
            .count()
    }

    /// The recorded interval length around interval `i`, ms.
    fn interval_ms(&self, i: usize) -> u64 {
        self.locate(i).map_or(1000, |(p, _)| {
            (self.parts[p].reader.meta().interval_ns / 1_000_000).max(1)
        })
    }

    /// How long nothing was recorded before interval `i`, ms: 0 unless the time since the
    /// interval before is more than two intervals and a second (the agent was down, the
    /// machine slept, or the disk fell behind).
    pub fn gap_before(&self, i: usize) -> u64 {
        if i == 0 || i >= self.len {
            return 0;
        }
        let dt = self.t_ms(i).saturating_sub(self.t_ms(i - 1));
        let iv = self.interval_ms(i);
        if dt > 2 * iv + 1000 { dt - iv } else { 0 }
    }

    /// Stretches with nothing recorded: (index of the interval after, length ms).
    pub fn gaps(&self) -> Vec<(usize, u64)> {
        (1..self.len)
            .filter_map(|i| match self.gap_before(i) {
                0 => None,
                g => Some((i, g)),
            })
            .collect()
    }

    /// Index of the first interval at or after wall-clock time `t_ms` (`len()` if none).
    pub fn index_at_ms(&self, t_ms: u64) -> usize {
        let p = self.parts.partition_point(|p| {
            p.reader
                .entries()
                .last()
                .is_some_and(|e| e.head.t_ms < t_ms)
        });
        match self.parts.get(p) {
            Some(part) => self.first[p] + part.reader.index_at_ms(t_ms),
            None => self.len,
        }
    }

    /// The index range of the intervals within the requested times (`--from`, `--to`).
    pub fn range(&self, from: Option<TimeSpec>, to: Option<TimeSpec>) -> std::ops::Range<usize> {
        if self.len == 0 {
            return 0..0;
        }
        let (f, l) = (self.t_ms(0), self.t_ms(self.len - 1));
        let start = from.map_or(0, |t| self.index_at_ms(t.resolve(f, l)));
        let end = to.map_or(self.len, |t| {
            let t = t.resolve(f, l);
            // The first interval after `t`.
            self.index_at_ms(t.saturating_add(1))
        });
        start..end.max(start)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::build::plausible;
    use crate::record::codec::rounded;
    use crate::record::format::Meta;
    use crate::record::writer::{RecordOptions, Writer};

    /// Write `batches` into `path`, the first interval at `t0_ms`, 50 ms apart.
    fn write(path: &Path, t0_ms: u64, batches: &[Batch]) {
        let meta = Meta {
            host: "h".into(),
            kernel: "k".into(),
            interval_ns: 50_000_000,
            start_ms: t0_ms,
            writer: "test".into(),
            segment: 0,
        };
        let opts = RecordOptions {
            path: path.into(),
            force: false,
            max_size: None,
            rotate: None,
        };
        let mut w = Writer::create(opts, meta).unwrap();
        for (k, b) in batches.iter().enumerate() {
            let mut b = b.clone();
            b.t_ms = t0_ms + 50 * k as u64;
            w.append(&b).unwrap();
        }
    }

    fn batches(from: u64, n: u64) -> Vec<Batch> {
        (from..from + n)
            .map(|s| rounded(&plausible(s, 5)))
            .collect()
    }

    #[test]
    fn a_folder_plays_as_one_run_across_files_with_its_gap() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        let t0 = 1_796_525_225_000;
        let a = batches(1, 40);
        let b = batches(41, 30);
        // Written out of name order: the timeline orders by time, not by name.
        write(&d.join("z-first.ebr"), t0, &a);
        // The agent was down 60 s between the files.
        let t1 = t0 + 40 * 50 + 60_000;
        write(&d.join("a-second.ebr"), t1, &b);
        std::fs::write(d.join("README"), b"not a recording").unwrap();
        std::fs::write(d.join("empty.ebr"), b"").unwrap();
        let mut damaged = std::fs::read(d.join("z-first.ebr")).unwrap();
        damaged[9] ^= 0xff;
        std::fs::write(d.join("damaged.ebr"), &damaged).unwrap();
        std::os::unix::fs::symlink(d.join("z-first.ebr"), d.join("link.ebr")).unwrap();

        let mut tl = Timeline::open(d).unwrap();
        assert!(tl.is_dir());
        assert_eq!(tl.files(), 2);
        assert_eq!(tl.ignored(), 3, "README, the empty file and the symlink");
        assert_eq!(tl.notes().len(), 1, "{:?}", tl.notes());
        assert!(tl.notes()[0].contains("damaged.ebr"));
        assert_eq!(tl.len(), 70);
        let mut got = Vec::new();
        for i in 0..tl.len() {
            let mut b = tl.read(i).unwrap();
            b.t_ms = 0;
            got.push(b);
        }
        let want: Vec<Batch> = a
            .iter()
            .chain(&b)
            .map(|b| Batch {
                t_ms: 0,
                ..b.clone()
            })
            .collect();
        assert_eq!(got, want);
        assert_eq!(tl.gaps(), vec![(40, 60_000)]);
        assert_eq!(tl.gap_before(41), 0);
        assert_eq!(tl.index_at_ms(t0 + 10 * 50), 10);
        assert_eq!(
            tl.index_at_ms(t0 + 40 * 50),
            40,
            "inside the gap: the next interval"
        );
        assert_eq!(tl.index_at_ms(t1 + 50), 41);
        assert_eq!(tl.index_at_ms(t1 + 1_000_000), 70);
        assert_eq!(tl.file_of(39), Some(d.join("z-first.ebr").as_path()));
        assert_eq!(tl.file_of(40), Some(d.join("a-second.ebr").as_path()));
        assert_eq!(tl.range(Some(TimeSpec::Unix(t1)), None), 40..70);
        assert_eq!(tl.range(None, Some(TimeSpec::Unix(t0 + 50))), 0..2);
        // Going back across the boundary decodes as well as forward.
        let mut back = tl.read(39).unwrap();
        back.t_ms = 0;
        assert_eq!(back, want[39]);
    }

    #[test]
    fn a_folder_of_many_files_keeps_few_open() {
        let t = tempfile::tempdir().unwrap();
        let t0 = 1_796_525_225_000;
        let mut all = Vec::new();
        for f in 0..(MAX_OPEN as u64 * 3) {
            let b = batches(f * 10 + 1, 10);
            write(&t.path().join(format!("f{f:02}.ebr")), t0 + f * 10_000, &b);
            all.extend(b);
        }
        let mut tl = Timeline::open(t.path()).unwrap();
        assert_eq!(tl.open_files(), 0, "indexing closes every file");
        for (i, want) in all.iter().enumerate() {
            let mut got = tl.read(i).unwrap();
            got.t_ms = want.t_ms;
            assert_eq!(&got, want, "interval {i}");
            assert!(tl.open_files() <= MAX_OPEN);
        }
        // Back to a file closed long ago: reopened, decoded from its key again.
        let mut b = tl.read(3).unwrap();
        b.t_ms = all[3].t_ms;
        assert_eq!(b, all[3]);
    }

    #[test]
    fn a_folder_with_nothing_to_play_is_refused() {
        let t = tempfile::tempdir().unwrap();
        std::fs::write(t.path().join("notes"), b"x").unwrap();
        assert!(matches!(
            Timeline::open(t.path()),
            Err(RecordError::NoFrames { .. })
        ));
        assert!(matches!(
            Timeline::open(&t.path().join("missing")),
            Err(RecordError::Missing(_))
        ));
    }
}
