//! Reading a recording, trusting nothing in it. Opening scans every record once: heads and
//! payloads are checked against their CRCs, damaged stretches are skipped up to the next head
//! that checks out, and a file that ends inside a record says where. What is left is an index
//! of good records. A record of format 1 or 2 decodes with at most one other (its key); a
//! delta of format 3 needs its key and every record between, so a format 3 delta is good only
//! when the record before it is. No length field is believed before it is checked against its
//! limit and against the bytes the file holds.

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use super::RecordError;
use super::codec::{CodecError, Decoder, KeyDict, ZSTD_MAGIC, parse, parse_chained};
use super::columns::Tables;
use super::format::{
    DELTA_MARK, HeadError, KIND_DELTA, KIND_KEY, Meta, PREAMBLE_LEN, PreambleError,
    RECORD_HEAD_LEN, RecordHead, SYNC, crc32, decode_meta, decode_preamble,
};
use crate::batch::Batch;
use crate::time::TimeSpec;

/// One good record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    pub offset: u64,
    pub head: RecordHead,
}

/// Something wrong found in the file. Each is shown as one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Damage {
    /// Bytes that hold no valid record head were skipped.
    Garbage { at: u64, len: u64 },
    /// A record whose payload fails its checksum was skipped.
    BadChecksum { at: u64, seq: u64 },
    /// A delta whose key record is missing or damaged was skipped.
    NoKey { at: u64, seq: u64 },
    /// A format 3 delta whose previous record is missing or damaged was skipped.
    NoPrevious { at: u64, seq: u64 },
    /// A record of a kind this version does not know was skipped.
    UnknownKind { at: u64, kind: u8 },
    /// The file ends inside the record starting here.
    Truncated { at: u64, len: u64 },
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Damage::Garbage { at, len } => {
                write!(f, "{len} damaged bytes at byte {at} skipped")
            }
            Damage::BadChecksum { at, seq } => {
                write!(
                    f,
                    "interval #{seq} at byte {at} fails its checksum; skipped"
                )
            }
            Damage::NoKey { at, seq } => write!(
                f,
                "interval #{seq} at byte {at} depends on a damaged key record; skipped"
            ),
            Damage::NoPrevious { at, seq } => write!(
                f,
                "interval #{seq} at byte {at} depends on a damaged interval before it; skipped"
            ),
            Damage::UnknownKind { at, kind } => {
                write!(f, "record of unknown kind {kind} at byte {at} skipped")
            }
            Damage::Truncated { at, len } => write!(
                f,
                "the file ends early: {len} bytes of an incomplete record at byte {at} (the \
                 recording was cut off; every complete interval before it is kept)"
            ),
        }
    }
}

/// Why one indexed record could not be turned back into a Batch.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("reading the recording: {0}")]
    Io(#[from] std::io::Error),
    #[error("the record at byte {0} changed since it was checked")]
    Changed(u64),
    #[error("{0}")]
    Codec(#[from] CodecError),
    #[error("its key record is not in the index")]
    NoKey,
    #[error("there is no record {0}")]
    OutOfRange(usize),
}

/// An open recording.
pub struct Reader<R> {
    src: R,
    len: u64,
    version: u16,
    meta: Meta,
    entries: Vec<Entry>,
    damage: Vec<Damage>,
    dec: Decoder,
    key: Option<KeyDict>,
    /// Formats 3 and 4: the entry last decoded, its tables (what the next delta is coded
    /// against) and, format 4, its decompressed payload (the next delta's zstd dictionary).
    chain: Option<(usize, Tables, Vec<u8>)>,
    buf: Vec<u8>,
}

/// Size of the window searched for the next record head after damage.
const SCAN_CHUNK: usize = 64 * 1024;

impl Reader<File> {
    /// Open a recording file. Refuses directories, FIFOs and devices with a clear error.
    pub fn open(path: &Path) -> Result<Self, RecordError> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            // A FIFO would block the open; it is refused below.
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)
            .map_err(|e| match e.kind() {
                std::io::ErrorKind::NotFound => RecordError::Missing(path.into()),
                std::io::ErrorKind::IsADirectory => RecordError::Directory(path.into()),
                _ => RecordError::io("opening", path, e),
            })?;
        let m = file
            .metadata()
            .map_err(|e| RecordError::io("inspecting", path, e))?;
        if m.is_dir() {
            return Err(RecordError::Directory(path.into()));
        }
        if !m.is_file() {
            return Err(RecordError::NotRegular(path.into()));
        }
        Self::new(file, path)
    }
}

impl<R: Read + Seek> Reader<R> {
    /// Read the header and index every good record. `path` only names the file in errors.
    pub fn new(mut src: R, path: &Path) -> Result<Self, RecordError> {
        let io = |e| RecordError::io("reading", path, e);
        let len = src.seek(SeekFrom::End(0)).map_err(io)?;
        src.seek(SeekFrom::Start(0)).map_err(io)?;
        let mut pre = [0u8; PREAMBLE_LEN];
        let n = read_up_to(&mut src, &mut pre).map_err(io)?;
        let bad = |why: String| RecordError::Corrupt {
            path: path.into(),
            why,
        };
        let p = match decode_preamble(&pre[..n]) {
            Ok(p) => p,
            Err(PreambleError::Short(0)) => return Err(RecordError::Empty(path.into())),
            Err(PreambleError::Short(n)) => {
                return Err(bad(format!("it ends after {n} bytes, inside its header")));
            }
            Err(PreambleError::BadMagic) => return Err(RecordError::NotRecording(path.into())),
            Err(PreambleError::Newer(v)) => {
                return Err(RecordError::Newer {
                    path: path.into(),
                    version: v,
                });
            }
            Err(PreambleError::Corrupt(why)) => return Err(bad(why.into())),
        };
        let meta_end = PREAMBLE_LEN as u64 + u64::from(p.meta_len);
        if meta_end > len {
            return Err(bad(format!(
                "it ends after {len} bytes, inside its {meta_end}-byte header"
            )));
        }
        let mut json = vec![0u8; p.meta_len as usize];
        src.read_exact(&mut json).map_err(io)?;
        let meta = decode_meta(&p, &json).map_err(|e| match e {
            PreambleError::Corrupt(why) => bad(why.into()),
            other => bad(format!("{other:?}")),
        })?;
        let mut r = Self {
            src,
            len,
            version: p.version,
            meta,
            entries: Vec::new(),
            damage: Vec::new(),
            dec: Decoder::new().map_err(|e| RecordError::io_other("starting the decoder", e))?,
            key: None,
            chain: None,
            buf: Vec::new(),
        };
        r.index(meta_end).map_err(io)?;
        Ok(r)
    }

    /// Walk the records from `start` to the end of the file.
    fn index(&mut self, start: u64) -> std::io::Result<()> {
        let mut pos = start;
        // Key records indexed so far, by offset: a delta needs its key to be good.
        let mut keys: HashMap<u64, ()> = HashMap::new();
        let mut head_buf = [0u8; RECORD_HEAD_LEN];
        // Format 5: the head of the record just walked (good or not), what a short head is
        // coded against; None after garbage, where only a key's full head can follow.
        let mut before: Option<RecordHead> = None;
        while pos < self.len {
            let left = self.len - pos;
            self.src.seek(SeekFrom::Start(pos))?;
            let n = read_up_to(&mut self.src, &mut head_buf)?;
            let b = &head_buf[..n];
            let decoded = if self.version >= 5 && b.first() == Some(&DELTA_MARK) {
                match &before {
                    Some(h) => RecordHead::decode_short(b, h),
                    None => Err(HeadError::NoSync),
                }
            } else if n < RECORD_HEAD_LEN {
                self.tail_damage(pos)?;
                break;
            } else {
                RecordHead::decode(b)
            };
            let head = match decoded {
                Ok(h) => h,
                Err(HeadError::Short) => {
                    self.damage.push(Damage::Truncated { at: pos, len: left });
                    break;
                }
                Err(HeadError::NoSync | HeadError::BadChecksum | HeadError::TooLong) => {
                    before = None;
                    match self.find_sync(pos + 1)? {
                        Some(next) => {
                            self.damage.push(Damage::Garbage {
                                at: pos,
                                len: next - pos,
                            });
                            pos = next;
                            continue;
                        }
                        None => {
                            self.tail_damage(pos)?;
                            break;
                        }
                    }
                }
            };
            if head.total_len() > left {
                // A head that checks out but a payload the file does not hold: cut off.
                self.damage.push(Damage::Truncated { at: pos, len: left });
                break;
            }
            let next = pos + head.total_len();
            self.src.seek(SeekFrom::Start(pos + head.head_len()))?;
            self.buf.resize(head.payload_len as usize, 0);
            self.src.read_exact(&mut self.buf)?;
            before = Some(head);
            if crc32(&self.buf) != head.payload_crc {
                self.damage.push(Damage::BadChecksum {
                    at: pos,
                    seq: head.seq,
                });
            } else {
                match head.kind {
                    KIND_KEY if head.key_offset == pos => {
                        keys.insert(pos, ());
                        self.entries.push(Entry { offset: pos, head });
                    }
                    // Format 3: the record before must be good and of the same key.
                    KIND_DELTA
                        if self.version >= 3
                            && keys.contains_key(&head.key_offset)
                            && !self.entries.last().is_some_and(|p| {
                                p.offset + p.head.total_len() == pos
                                    && p.head.key_offset == head.key_offset
                            }) =>
                    {
                        self.damage.push(Damage::NoPrevious {
                            at: pos,
                            seq: head.seq,
                        });
                    }
                    KIND_DELTA if keys.contains_key(&head.key_offset) => {
                        self.entries.push(Entry { offset: pos, head });
                    }
                    KIND_KEY | KIND_DELTA => self.damage.push(Damage::NoKey {
                        at: pos,
                        seq: head.seq,
                    }),
                    kind => self.damage.push(Damage::UnknownKind { at: pos, kind }),
                }
            }
            pos = next;
        }
        self.buf = Vec::new();
        Ok(())
    }

    /// The bytes from `pos` to the end hold no whole record: a cut-off record head if they
    /// are fewer than a head and start like one, else garbage.
    fn tail_damage(&mut self, pos: u64) -> std::io::Result<()> {
        let left = self.len - pos;
        let mut b = [0u8; 4];
        self.src.seek(SeekFrom::Start(pos))?;
        let n = read_up_to(&mut self.src, &mut b)?;
        let d = if left < RECORD_HEAD_LEN as u64 && b[..n] == SYNC[..n] {
            Damage::Truncated { at: pos, len: left }
        } else {
            Damage::Garbage { at: pos, len: left }
        };
        self.damage.push(d);
        Ok(())
    }

    /// The offset of the next valid record head at or after `from`, if any.
    fn find_sync(&mut self, from: u64) -> std::io::Result<Option<u64>> {
        let mut chunk = vec![0u8; SCAN_CHUNK + RECORD_HEAD_LEN];
        let mut at = from;
        while at + RECORD_HEAD_LEN as u64 <= self.len {
            self.src.seek(SeekFrom::Start(at))?;
            let n = read_up_to(&mut self.src, &mut chunk)?;
            if n < RECORD_HEAD_LEN {
                break;
            }
            // Candidates whose whole head is in this chunk; the rest come in the next one.
            let last = n - RECORD_HEAD_LEN;
            for i in 0..=last {
                if chunk[i..i + 4] == SYNC && RecordHead::decode(&chunk[i..]).is_ok() {
                    return Ok(Some(at + i as u64));
                }
            }
            at += last as u64 + 1;
        }
        Ok(None)
    }

    pub fn meta(&self) -> &Meta {
        &self.meta
    }

    pub fn version(&self) -> u16 {
        self.version
    }

    /// Bytes in the file.
    pub fn file_len(&self) -> u64 {
        self.len
    }

    /// The good records, in file order.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// Number of good records.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The source the records are read from (a timeline closes and reopens its files).
    pub fn source_mut(&mut self) -> &mut R {
        &mut self.src
    }

    pub fn source_ref(&self) -> &R {
        &self.src
    }

    /// Drop what decoding keeps between reads (the last record's tables and payload, the
    /// key's dictionary); the next read starts again from its key record.
    pub fn forget_cache(&mut self) {
        self.chain = None;
        self.key = None;
    }

    /// What was found wrong while indexing, in file order.
    pub fn damage(&self) -> &[Damage] {
        &self.damage
    }

    /// The checked compressed payload of `e`, as a whole zstd frame.
    fn payload(&mut self, e: &Entry) -> Result<Vec<u8>, FrameError> {
        self.src
            .seek(SeekFrom::Start(e.offset + e.head.head_len()))?;
        let mut p = vec![0u8; e.head.payload_len as usize];
        self.src.read_exact(&mut p)?;
        if crc32(&p) != e.head.payload_crc {
            return Err(FrameError::Changed(e.offset));
        }
        if self.version >= 5 {
            // Format 5 leaves out the magic number every zstd frame starts with.
            p.splice(0..0, ZSTD_MAGIC);
        }
        Ok(p)
    }

    /// The decompressed payload of record `i`. A delta of format 4 or later has the record
    /// before's decompressed payload (`before`) as its dictionary; older deltas their key's.
    fn raw(&mut self, i: usize, before: Option<&[u8]>) -> Result<Vec<u8>, FrameError> {
        let e = self.entries[i];
        let p = self.payload(&e)?;
        if e.head.kind == KIND_KEY {
            return Ok(self.dec.decompress(&p, e.head.raw_len, None)?);
        }
        if self.version >= 4 {
            let before = before.ok_or(FrameError::NoKey)?;
            return Ok(self.dec.decompress_after(&p, e.head.raw_len, before)?);
        }
        if self.key.as_ref().map(|k| k.offset) != Some(e.head.key_offset) {
            let k = self
                .entries
                .binary_search_by_key(&e.head.key_offset, |x| x.offset)
                .map_err(|_| FrameError::NoKey)?;
            let kraw = self.raw(k, None)?;
            self.key = Some(self.dec.key_dict(e.head.key_offset, &kraw, self.version)?);
        }
        let key = self.key.as_ref().ok_or(FrameError::NoKey)?;
        Ok(self.dec.decompress(&p, e.head.raw_len, Some(key))?)
    }

    /// Decode the `i`-th good record. `i` must be below `len()`.
    pub fn read(&mut self, i: usize) -> Result<Batch, FrameError> {
        if i >= self.entries.len() {
            return Err(FrameError::OutOfRange(i));
        }
        if self.version >= 3 {
            return self.read_chained(i);
        }
        let raw = self.raw(i, None)?;
        let key = match self.entries[i].head.kind {
            KIND_KEY => None,
            _ => Some(self.key.as_ref().ok_or(FrameError::NoKey)?),
        };
        Ok(parse(&raw, self.version, key)?)
    }

    /// Format 3: decode record `i` from the nearest record before it whose tables are held
    /// (the one decoded last, when it is of the same key and before `i`), else from its key.
    /// Reading forwards decodes each record once.
    fn read_chained(&mut self, i: usize) -> Result<Batch, FrameError> {
        let e = self.entries[i];
        let key_ix = if e.head.kind == KIND_KEY {
            i
        } else {
            self.entries
                .binary_search_by_key(&e.head.key_offset, |x| x.offset)
                .map_err(|_| FrameError::NoKey)?
        };
        // Indexing kept a delta only after the record before it: key_ix..=i are one chain.
        let start = match &self.chain {
            Some((j, _, _)) if *j >= key_ix && *j < i => *j + 1,
            _ => {
                self.chain = None;
                key_ix
            }
        };
        let mut last = None;
        for j in start..=i {
            // The record before (taken: on an error nothing is held and the next read starts
            // again from the key).
            let held = match (j == key_ix, self.chain.take()) {
                (true, _) => None,
                (false, Some((_, t, raw))) => Some((t, raw)),
                (false, None) => return Err(FrameError::NoKey),
            };
            let before = held.as_ref().map(|(_, raw)| raw.as_slice());
            let raw = self.raw(j, before)?;
            let (b, t) = parse_chained(&raw, held.map(|(t, _)| t), self.version)?;
            self.chain = Some((j, t, if self.version >= 4 { raw } else { Vec::new() }));
            last = Some(b);
        }
        last.ok_or(FrameError::OutOfRange(i))
    }

    /// Index of the first record at or after wall-clock time `t_ms` (`len()` if none).
    pub fn index_at_ms(&self, t_ms: u64) -> usize {
        self.entries.partition_point(|e| e.head.t_ms < t_ms)
    }

    /// The index range of the records within the requested times (`--from`, `--to`).
    pub fn range(&self, from: Option<TimeSpec>, to: Option<TimeSpec>) -> std::ops::Range<usize> {
        let e = &self.entries;
        let (Some(first), Some(last)) = (e.first(), e.last()) else {
            return 0..0;
        };
        let (f, l) = (first.head.t_ms, last.head.t_ms);
        let start = from.map_or(0, |t| self.index_at_ms(t.resolve(f, l)));
        let end = to.map_or(e.len(), |t| {
            let t = t.resolve(f, l);
            e.partition_point(|x| x.head.t_ms <= t)
        });
        start..end.max(start)
    }

    /// The recording, refused when it holds no complete interval to play or export (the last
    /// damage found says why). `path` only names the file in the error.
    pub fn nonempty(self, path: &Path) -> Result<Self, RecordError> {
        if !self.is_empty() {
            return Ok(self);
        }
        let detail = match self.damage.last() {
            Some(d) => format!(" ({d})"),
            None => " (it ends after its header)".into(),
        };
        Err(RecordError::NoFrames {
            path: path.into(),
            detail,
        })
    }
}

/// Read until `buf` is full or the end; returns the bytes read.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

/// A recording opened from memory (tests and the fuzz target).
pub fn from_bytes(bytes: &[u8]) -> Result<Reader<std::io::Cursor<&[u8]>>, RecordError> {
    Reader::new(std::io::Cursor::new(bytes), &PathBuf::from("<memory>"))
}
