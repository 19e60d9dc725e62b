//! Writing a recording: the file is created 0600 with O_CREAT|O_EXCL|O_NOFOLLOW (an existing
//! path is replaced only with --force, a symlink or directory never), every record goes to
//! the kernel in one write(2) as soon as it is encoded, and a failed write is cut back off, so
//! a kill -9, a crash or a full disk loses at most the record being written.

use std::fs::File;
use std::io::Write as _;
use std::os::unix::fs::{FileTypeExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use super::RecordError;
use super::codec::Encoder;
use super::format::{KIND_KEY, Meta, encode_header};
use crate::batch::Batch;

/// Where and how to record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordOptions {
    pub path: PathBuf,
    /// Replace an existing regular file.
    pub force: bool,
    /// Stop (or rotate) before the file grows past this many bytes.
    pub max_size: Option<u64>,
    /// With `max_size`: rotate, keeping this many finished files (`FILE.1` newest).
    pub rotate: Option<u32>,
}

/// What became of one appended batch.
#[derive(Debug, PartialEq, Eq)]
pub enum Appended {
    Written,
    /// The file was full; it is now `FILE.1` and the batch opened a new `FILE`.
    Rotated,
    /// The file is full and rotation is off: nothing was written, recording must stop.
    Full,
}

/// Refuse what we must never write through; `Ok(true)` when a regular file is there.
fn check_target(path: &Path, force: bool) -> Result<bool, RecordError> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(RecordError::io("inspecting", path, e)),
        Ok(m) => {
            let t = m.file_type();
            if t.is_symlink() {
                Err(RecordError::Symlink(path.into()))
            } else if t.is_dir() {
                Err(RecordError::Directory(path.into()))
            } else if !t.is_file() || t.is_fifo() {
                Err(RecordError::NotRegular(path.into()))
            } else if !force {
                Err(RecordError::Exists(path.into()))
            } else {
                Ok(true)
            }
        }
    }
}

/// Create `path` for writing: 0600, never through a symlink, never over an existing file
/// unless `force` (which unlinks it first, so a hard link elsewhere is not written to).
pub fn create_file(path: &Path, force: bool) -> Result<File, RecordError> {
    if check_target(path, force)? {
        std::fs::remove_file(path).map_err(|e| RecordError::io("replacing", path, e))?;
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true) // O_CREAT | O_EXCL: fails on anything that appeared meanwhile
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::AlreadyExists => RecordError::Exists(path.into()),
            _ => RecordError::io("creating", path, e),
        })
}

/// `FILE.n`, the n-th newest rotated file.
pub fn rotated_path(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// One recording file (and its rotations) being written.
pub struct Writer {
    opts: RecordOptions,
    file: File,
    offset: u64,
    enc: Encoder,
    meta: Meta,
    records: u64,
    /// Records in the current file.
    in_file: u64,
}

impl Writer {
    /// Create the file and write its header. Every path problem is found here, before the
    /// terminal is touched.
    pub fn create(opts: RecordOptions, meta: Meta) -> Result<Self, RecordError> {
        if let Some(keep) = opts.rotate {
            // Rotation renames over FILE.1..FILE.keep: refuse what we must not touch now.
            for n in 1..=keep {
                let p = rotated_path(&opts.path, n);
                check_target(&p, opts.force)?;
            }
        }
        let file = create_file(&opts.path, opts.force)?;
        let mut w = Self {
            file,
            offset: 0,
            enc: Encoder::new().map_err(|e| RecordError::io_other("starting the encoder", e))?,
            meta,
            records: 0,
            in_file: 0,
            opts,
        };
        w.write_header()?;
        Ok(w)
    }

    fn write_header(&mut self) -> Result<(), RecordError> {
        let h = encode_header(&self.meta);
        self.write_at_end(&h)?;
        Ok(())
    }

    /// One write(2) of `bytes` at the end; on failure, cut the file back to where it was.
    fn write_at_end(&mut self, bytes: &[u8]) -> Result<(), RecordError> {
        if let Err(e) = self.file.write_all(bytes) {
            // Best effort: leave no torn record behind (a reader would skip it anyway).
            let _ = self.file.set_len(self.offset);
            return Err(RecordError::io("writing", &self.opts.path, e));
        }
        self.offset += bytes.len() as u64;
        Ok(())
    }

    pub fn path(&self) -> &Path {
        &self.opts.path
    }

    /// Bytes in the current file.
    pub fn len(&self) -> u64 {
        self.offset
    }

    pub fn is_empty(&self) -> bool {
        self.offset == 0
    }

    /// Records written to all files.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// Append one batch.
    pub fn append(&mut self, b: &Batch) -> Result<Appended, RecordError> {
        let enc_err = |e| RecordError::io_other("encoding a batch", e);
        let (mut head, mut payload) = self.enc.encode(b, self.offset).map_err(enc_err)?;
        let mut result = Appended::Written;
        if let Some(max) = self.opts.max_size
            && self.offset + head.total_len() > max
            // A file always takes at least one record, or a tiny limit would loop.
            && self.in_file > 0
        {
            if self.opts.rotate.is_none() {
                return Ok(Appended::Full);
            }
            self.rotate()?;
            (head, payload) = self.enc.encode(b, self.offset).map_err(enc_err)?;
            result = Appended::Rotated;
        }
        let mut rec = Vec::with_capacity(head.total_len() as usize);
        rec.extend_from_slice(&head.encode());
        rec.extend_from_slice(&payload);
        self.write_at_end(&rec)?;
        self.records += 1;
        self.in_file += 1;
        if head.kind == KIND_KEY {
            // Key records are where a reader can start over: make them durable past a power
            // loss too (the others are safe from kill -9 and crashes once written).
            let _ = self.file.sync_data();
        }
        Ok(result)
    }

    /// Close the full file as FILE.1 (shifting older ones up, dropping the oldest) and start
    /// a new FILE with its own header.
    fn rotate(&mut self) -> Result<(), RecordError> {
        let keep = self.opts.rotate.unwrap_or(1).max(1);
        let _ = self.file.sync_all();
        let path = self.opts.path.clone();
        let oldest = rotated_path(&path, keep);
        match std::fs::remove_file(&oldest) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(RecordError::io("removing", &oldest, e));
            }
            _ => {}
        }
        for n in (1..keep).rev() {
            let from = rotated_path(&path, n);
            if std::fs::symlink_metadata(&from).is_ok() {
                let to = rotated_path(&path, n + 1);
                std::fs::rename(&from, &to).map_err(|e| RecordError::io("renaming", &from, e))?;
            }
        }
        let first = rotated_path(&path, 1);
        std::fs::rename(&path, &first).map_err(|e| RecordError::io("renaming", &path, e))?;
        self.file = create_file(&path, false)?;
        self.offset = 0;
        self.in_file = 0;
        self.enc.reset();
        self.meta.segment += 1;
        self.meta.start_ms = now_ms();
        self.write_header()
    }

    /// Flush everything to the disk (at the end of a recording).
    pub fn sync(&mut self) -> Result<(), RecordError> {
        self.file
            .sync_all()
            .map_err(|e| RecordError::io("syncing", &self.opts.path, e))
    }
}

/// Wall-clock ms since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Metadata for a recording of this machine starting now.
pub fn local_meta(interval: std::time::Duration) -> Meta {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    Meta {
        host: read("/proc/sys/kernel/hostname"),
        kernel: read("/proc/sys/kernel/osrelease"),
        interval_ns: interval.as_nanos() as u64,
        start_ms: now_ms(),
        writer: format!("ebee-top {}", env!("CARGO_PKG_VERSION")),
        segment: 0,
    }
}
