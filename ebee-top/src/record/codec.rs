//! Batches to record payloads and back, compressed with zstd. Formats 3 to 5 (5 written now)
//! code the per-process tables column by column against the record before (`columns`);
//! format 2 (still read) did the same against the key record; format 1 (still read) is the
//! Batch's serde JSON. A key record is compressed alone; a delta with the decompressed payload
//! of its key record (formats 1-3) or of the record before it (4 and 5) as a raw-content
//! dictionary. A delta of format 3 or later therefore needs its key and every record between
//! (see docs/recording-format.md). Format 5 frames leave out zstd's magic number and content
//! size (the record head has the length).

use zstd::zstd_safe::{CCtx, CDict, CParameter, DCtx, DDict};

use super::columns::{self, Tables};
use super::format::{KIND_DELTA, KIND_KEY, MAX_RAW_LEN, RecordHead, VERSION, crc32};
use crate::batch::Batch;

/// zstd level; measured in BENCHMARKS.md (record section).
pub const LEVEL: i32 = 9;
/// A key record at least every this many records: bounds what one damaged record costs (10 s
/// at the default 50 ms interval).
pub const KEY_EVERY: u32 = 200;
/// The first bytes of every zstd frame; format 5 payloads leave them out.
pub const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

/// Why a payload could not be produced or read back.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum CodecError {
    #[error("zstd: {0}")]
    Zstd(&'static str),
    #[error("the decompressed payload is {got} bytes, its head says {want}")]
    Length { got: usize, want: u32 },
    #[error("the payload is not a valid batch: {0}")]
    Json(String),
    #[error("the batch is larger than the format allows ({0} bytes)")]
    TooLarge(usize),
    #[error("the payload is not a valid batch: {0}")]
    Columns(&'static str),
    #[error("recording format {0} is not known")]
    Version(u16),
}

fn zerr(code: usize) -> CodecError {
    CodecError::Zstd(zstd::zstd_safe::get_error_name(code))
}

/// The last key record the encoder wrote.
struct Key {
    offset: u64,
    /// Formats 2 and 3: its payload, the zstd dictionary of its deltas.
    dict: Option<CDict<'static>>,
    compressed: usize,
    /// Format 2: its tables, what deltas are coded against.
    tables: Option<Tables>,
}

/// Turns Batches into records, choosing key or delta.
pub struct Encoder {
    cctx: CCtx<'static>,
    key: Option<Key>,
    /// Format 3: the tables of the record just encoded, what the next delta is coded against.
    prev: Option<Tables>,
    /// Format 4: that record's decompressed payload, the next delta's zstd dictionary.
    prev_raw: Vec<u8>,
    /// Format 5: that record's `seq` and `t_ms`, what a delta's short head is coded against.
    prev_head: (u64, u64),
    since_key: u32,
    key_every: u32,
    level: i32,
    version: u16,
    /// Format 2: round per-process on-CPU and wait ns to µs first (see [`rounded`]).
    round: bool,
}

impl Encoder {
    pub fn new() -> Result<Self, CodecError> {
        Self::with_params(LEVEL, KEY_EVERY)
    }

    /// An encoder with another level or key spacing (for the size benchmark).
    pub fn with_params(level: i32, key_every: u32) -> Result<Self, CodecError> {
        Self::for_version(VERSION, level, key_every)
    }

    /// An encoder of format 1 (JSON payloads): to measure against, and to test that files
    /// written before still read. The writer never uses it.
    pub fn v1(level: i32, key_every: u32) -> Result<Self, CodecError> {
        Self::for_version(1, level, key_every)
    }

    /// An encoder of format 2 (deltas against their key only): to measure against, and to
    /// test that files written before still read. The writer never uses it.
    pub fn v2(level: i32, key_every: u32) -> Result<Self, CodecError> {
        Self::for_version(2, level, key_every)
    }

    /// An encoder of format 3 (deltas against the record before, zigzagged integers, the key
    /// as every delta's zstd dictionary): to measure against and to test that files written
    /// before still read. The writer never uses it.
    pub fn v3(level: i32, key_every: u32) -> Result<Self, CodecError> {
        Self::for_version(3, level, key_every)
    }

    /// An encoder of format 4 (full record heads, zstd frames with their magic number and
    /// content size): to measure against and to test that files written before still read.
    pub fn v4(level: i32, key_every: u32) -> Result<Self, CodecError> {
        Self::for_version(4, level, key_every)
    }

    /// An encoder of format 5 (tables only of rows with the same fields): to measure against
    /// and for tests.
    pub fn v5(level: i32, key_every: u32) -> Result<Self, CodecError> {
        Self::for_version(5, level, key_every)
    }

    /// An encoder of format 6 (waits to the µs, sleep to 100 µs): to measure against and for
    /// tests.
    pub fn v6(level: i32, key_every: u32) -> Result<Self, CodecError> {
        Self::for_version(6, level, key_every)
    }

    fn for_version(version: u16, level: i32, key_every: u32) -> Result<Self, CodecError> {
        let mut cctx = CCtx::try_create().ok_or(CodecError::Zstd("out of memory"))?;
        cctx.set_parameter(CParameter::CompressionLevel(level))
            .map_err(zerr)?;
        // The record head has its own checksum of the compressed bytes. Formats 1-4 put the
        // content size in the frame too; format 5 leaves it to the head.
        cctx.set_parameter(CParameter::ContentSizeFlag(version < 5))
            .map_err(zerr)?;
        Ok(Self {
            cctx,
            key: None,
            prev: None,
            prev_raw: Vec::new(),
            prev_head: (0, 0),
            since_key: 0,
            key_every: key_every.max(1),
            level,
            version,
            round: version >= 2,
        })
    }

    /// Keep every nanosecond (format 2 without [`rounded`]): for the size benchmark.
    pub fn lossless(mut self) -> Self {
        self.round = false;
        self
    }

    /// The format version of the records this encoder makes.
    pub fn version(&self) -> u16 {
        self.version
    }

    /// Start afresh (a new file): the next record is a key.
    pub fn reset(&mut self) {
        self.key = None;
        self.prev = None;
        self.since_key = 0;
    }

    /// Encode `b` as the record that will start at file offset `offset`.
    pub fn encode(&mut self, b: &Batch, offset: u64) -> Result<(RecordHead, Vec<u8>), CodecError> {
        // Format 3: a delta only right after a record this encoder made (an error starts over).
        let delta = self.key.as_ref().filter(|_| {
            self.since_key < self.key_every && (self.version < 3 || self.prev.is_some())
        });
        let mut tables = None;
        let mut chained = None;
        let raw = if self.version == 1 {
            serde_json::to_vec(b).map_err(|e| CodecError::Json(e.to_string()))?
        } else {
            let mut raw = Vec::new();
            let reference = delta.and_then(|k| k.tables.as_ref());
            let r;
            let b = if self.round {
                r = rounded_as(self.version, b);
                &r
            } else {
                b
            };
            if self.version >= 3 {
                let prev = if delta.is_some() {
                    self.prev.take()
                } else {
                    None
                };
                // Kept only once the whole record is made: on an error `prev` stays None
                // and the next record is a key.
                chained = Some(columns::encode_chained(b, prev, self.version, &mut raw)?);
            } else {
                tables = Some(columns::encode(b, reference, &mut raw)?);
            }
            raw
        };
        if raw.len() > MAX_RAW_LEN as usize {
            return Err(CodecError::TooLarge(raw.len()));
        }
        let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(raw.len()));
        let (kind, key_offset) = match delta {
            Some(k) if self.version >= 4 => {
                // The record before as a raw-content dictionary (its first byte is the range
                // coder's first byte, always 0, so zstd never takes it for a dictionary of
                // its own format). Loaded for this frame only.
                self.cctx.load_dictionary(&self.prev_raw).map_err(zerr)?;
                let r = self.cctx.compress2(&mut out, &raw);
                self.cctx.load_dictionary(&[]).map_err(zerr)?;
                r.map_err(zerr)?;
                (KIND_DELTA, k.offset)
            }
            Some(k) => {
                let dict = k
                    .dict
                    .as_ref()
                    .ok_or(CodecError::Zstd("no key dictionary"))?;
                self.cctx
                    .compress_using_cdict(&mut out, &raw, dict)
                    .map_err(zerr)?;
                (KIND_DELTA, k.offset)
            }
            _ => {
                self.cctx.compress2(&mut out, &raw).map_err(zerr)?;
                (KIND_KEY, offset)
            }
        };
        if self.version >= 5 {
            // Every frame starts with the same four bytes: the reader puts them back.
            if out.get(..4) != Some(&ZSTD_MAGIC[..]) {
                return Err(CodecError::Zstd("a frame without zstd's magic number"));
            }
            out.drain(..4);
        }
        columns::stat(
            || {
                format!(
                    "payload ({})",
                    if kind == KIND_KEY { "key" } else { "delta" }
                )
            },
            out.len() as f64,
        );
        if kind == KIND_KEY {
            let dict = if self.version >= 4 {
                None
            } else {
                Some(CDict::try_create(&raw, self.level).ok_or(CodecError::Zstd("out of memory"))?)
            };
            self.key = Some(Key {
                offset,
                dict,
                compressed: out.len(),
                tables,
            });
            self.since_key = 1;
        } else {
            self.since_key += 1;
            // The processes changed so much that the key no longer helps: start a new one.
            if let Some(k) = &self.key
                && out.len() * 2 > k.compressed
            {
                self.since_key = self.key_every;
            }
        }
        let raw_len = raw.len() as u32;
        if chained.is_some() {
            self.prev = chained;
            if self.version >= 4 {
                self.prev_raw = raw;
            }
        }
        let head = RecordHead {
            kind,
            flags: 0,
            payload_len: out.len() as u32,
            raw_len,
            seq: b.seq,
            t_ms: b.t_ms,
            key_offset,
            payload_crc: crc32(&out),
            after: (self.version >= 5 && kind == KIND_DELTA).then_some(self.prev_head),
        };
        self.prev_head = (b.seq, b.t_ms);
        Ok((head, out))
    }
}

/// A key record's decompressed bytes, ready to decode its deltas.
pub struct KeyDict {
    pub offset: u64,
    dict: DDict<'static>,
    /// Format 2: the key's tables.
    tables: Option<Tables>,
}

/// Turns record payloads back into Batches.
pub struct Decoder {
    dctx: DCtx<'static>,
}

impl Decoder {
    pub fn new() -> Result<Self, CodecError> {
        let dctx = DCtx::try_create().ok_or(CodecError::Zstd("out of memory"))?;
        Ok(Self { dctx })
    }

    /// Decompress a payload into exactly `raw_len` bytes; `raw_len` was checked against
    /// `MAX_RAW_LEN`, so this never allocates more.
    pub fn decompress(
        &mut self,
        payload: &[u8],
        raw_len: u32,
        key: Option<&KeyDict>,
    ) -> Result<Vec<u8>, CodecError> {
        let want = raw_len.min(MAX_RAW_LEN);
        let mut out = Vec::with_capacity(want as usize);
        let r = match key {
            Some(k) => self.dctx.decompress_using_ddict(&mut out, payload, &k.dict),
            None => self.dctx.decompress(&mut out, payload),
        };
        let got = r.map_err(zerr)?;
        if got != raw_len as usize {
            return Err(CodecError::Length { got, want: raw_len });
        }
        Ok(out)
    }

    /// Decompress the payload of a delta of format 4 or later, whose dictionary is `prev`:
    /// the decompressed payload of the record before it.
    pub fn decompress_after(
        &mut self,
        payload: &[u8],
        raw_len: u32,
        prev: &[u8],
    ) -> Result<Vec<u8>, CodecError> {
        let want = raw_len.min(MAX_RAW_LEN);
        let mut out = Vec::with_capacity(want as usize);
        self.dctx.load_dictionary(prev).map_err(zerr)?;
        let r = self.dctx.decompress(&mut out, payload);
        self.dctx.load_dictionary(&[]).map_err(zerr)?;
        let got = r.map_err(zerr)?;
        if got != raw_len as usize {
            return Err(CodecError::Length { got, want: raw_len });
        }
        Ok(out)
    }

    /// Prepare a key record's bytes (of format `version`) as the reference of its deltas.
    pub fn key_dict(&self, offset: u64, raw: &[u8], version: u16) -> Result<KeyDict, CodecError> {
        let tables = match version {
            // Formats 3 and 4 decode a key as the first link of a chain (`parse_chained`).
            1 | 3 | 4 => None,
            2 => columns::decode(raw, None, true)?.1,
            v => return Err(CodecError::Version(v)),
        };
        let dict = DDict::try_create(raw).ok_or(CodecError::Zstd("bad dictionary"))?;
        Ok(KeyDict {
            offset,
            dict,
            tables,
        })
    }
}

/// Parse a decompressed payload of format `version`; `key` is the key record's reference for
/// a delta record (None for a key record).
pub fn parse(raw: &[u8], version: u16, key: Option<&KeyDict>) -> Result<Batch, CodecError> {
    match version {
        1 => parse_batch(raw),
        2 => {
            let reference = match key {
                Some(k) => Some(
                    k.tables
                        .as_ref()
                        .ok_or(CodecError::Columns("a delta without its key's tables"))?,
                ),
                None => None,
            };
            Ok(columns::decode(raw, reference, false)?.0)
        }
        v => Err(CodecError::Version(v)),
    }
}

/// Parse a decompressed payload of format 3 or 4 (`version`): a key record (`prev` None), or
/// a delta coded against the tables of the record before it. Returns the tables the next delta
/// needs.
pub fn parse_chained(
    raw: &[u8],
    prev: Option<Tables>,
    version: u16,
) -> Result<(Batch, Tables), CodecError> {
    match columns::decode_chained(raw, prev, version)? {
        (b, Some(t)) => Ok((b, t)),
        _ => Err(CodecError::Columns("no tables kept")),
    }
}

/// A time in ns to the nearest µs (halves up).
fn to_us(ns: u64) -> u64 {
    ns.saturating_add(500) / 1000 * 1000
}

/// To the nearest multiple of `step` ns (halves up). Format 6 kept sleep to 100 µs (0.2% of a
/// 50 ms interval): the sleep of every process that slept was the table's dearest column at
/// the µs (374 of 2,021 bytes an interval of a busy recording; 202 at 100 µs).
fn to_step(ns: u64, step: u64) -> u64 {
    ns.saturating_add(step / 2) / step * step
}

/// What format 2 to 4 record of a Batch: the same, with each process's on-CPU ns (`cpu`,
/// `cpu_exact`) and run-queue wait ns (`wait`, `wait_exact`) rounded to the nearest µs. The
/// screens show these times in units of 0.1 ms at the finest (percentages of an interval or
/// a second, milliseconds), so the rounding is below anything shown; the 10 ms burst bins keep
/// the kernel's own 1,024 ns units, unchanged.
pub fn rounded_v4(b: &Batch) -> Batch {
    let mut b = b.clone();
    for r in b.cpu.iter_mut().chain(b.cpu_exact.iter_mut().flatten()) {
        r.ns = to_us(r.ns);
    }
    for r in b.wait.iter_mut().chain(b.wait_exact.iter_mut().flatten()) {
        r.ns = to_us(r.ns);
    }
    b
}

/// What formats 5 and 6 record of a Batch: as [`rounded_v4`], and the times processes exited
/// to the nearest µs too (no screen shows them; a replay's exports give them to the µs), and
/// so the off-CPU split (`offcpu`, shown as shares like the wait; its sleep to the nearest
/// 100 µs) and the culprits of waits (`wait_by`, `caused`).
pub fn rounded_v6(b: &Batch) -> Batch {
    let mut b = rounded_v4(b);
    for e in &mut b.exits {
        e.ts_ns = to_us(e.ts_ns);
    }
    for r in &mut b.offcpu {
        r.io_ns = to_us(r.io_ns);
        r.blocked_ns = to_us(r.blocked_ns);
        r.sleep_ns = to_step(r.sleep_ns, 100_000);
    }
    for r in &mut b.wait_by {
        r.ns = to_us(r.ns);
    }
    for r in &mut b.caused {
        r.ns = to_us(r.ns);
    }
    b
}

/// The step format 7 keeps run-queue waits to: 0.01% of the interval at most, the finest any
/// output prints them (JSON's `wait_pct`, two decimals of a percent of the interval; the
/// screens show a tenth of a percent). 4 µs from 40 ms intervals (the default 50 ms jitters
/// by a few ms either side, and one step for all of them keeps each column's divisor), 2 µs
/// from 20 ms, else 1 µs.
pub fn wait_step_ns(b: &Batch) -> u64 {
    match b.end_ns.saturating_sub(b.start_ns) {
        40_000_000.. => 4_000,
        20_000_000.. => 2_000,
        _ => 1_000,
    }
}

/// What format 7 records of a Batch (written now): as [`rounded_v6`], with
/// - run-queue waits (`wait`, `wait_exact`, `wait_by`, `caused`) to [`wait_step_ns`] (4 µs at
///   50 ms) instead of 1 µs, the rows in their order. (On-CPU ns stay at the µs: at 4 µs the
///   order of the rows the step made equal, which exports show, cost what the step saved.)
/// - sleep (`offcpu[].sleep_ns`) to 500 µs instead of 100 µs: no screen shows it but the
///   run/wait/I/O/blocked/sleep split, in whole percents of the last second or minute.
///
/// Each was measured in bytes on two busy recordings (BENCHMARKS.md, recording size). The
/// interval's own nanosecond totals (`wait_stats`) stay exact: the skeleton codes them with no
/// divisor, so a multiple of 1,000 ns costs as much as any other number.
pub fn rounded(b: &Batch) -> Batch {
    let mut r = rounded_v6(b);
    // From the exact times (rounding the µs again would err by up to 2.5 µs), in the rows'
    // order, which `rounded_v6` keeps.
    let step = wait_step_ns(b);
    let again = |x: &mut u64, exact: u64, step: u64| *x = to_step(exact, step);
    for (x, y) in r.wait.iter_mut().zip(&b.wait) {
        again(&mut x.ns, y.ns, step);
    }
    for (x, y) in r.wait_by.iter_mut().zip(&b.wait_by) {
        again(&mut x.ns, y.ns, step);
    }
    for (x, y) in r.caused.iter_mut().zip(&b.caused) {
        again(&mut x.ns, y.ns, step);
    }
    for (x, y) in r.offcpu.iter_mut().zip(&b.offcpu) {
        again(&mut x.sleep_ns, y.sleep_ns, 500_000);
    }
    if let (Some(xs), Some(ys)) = (r.wait_exact.as_mut(), b.wait_exact.as_ref()) {
        for (x, y) in xs.iter_mut().zip(ys) {
            again(&mut x.ns, y.ns, step);
        }
    }
    r
}

/// What a file of `version` records of a Batch (formats 2 on; format 1 keeps it whole).
pub fn rounded_as(version: u16, b: &Batch) -> Batch {
    match version {
        0 | 1 => b.clone(),
        2..=4 => rounded_v4(b),
        5 | 6 => rounded_v6(b),
        _ => rounded(b),
    }
}

/// Parse a decompressed payload of format 1 (JSON).
pub fn parse_batch(raw: &[u8]) -> Result<Batch, CodecError> {
    serde_json::from_slice(raw).map_err(|e| CodecError::Json(e.to_string()))
}
