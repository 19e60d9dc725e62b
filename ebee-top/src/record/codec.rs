//! Batches to record payloads and back: JSON (the Batch's own serde schema), compressed with
//! zstd. A key record is compressed alone; a delta record is compressed with the decompressed
//! JSON of its key record as a raw-content dictionary, so it costs little when the processes
//! and their command lines are the same, and it depends on nothing but its key.

use zstd::zstd_safe::{CCtx, CDict, CParameter, DCtx, DDict};

use super::format::{KIND_DELTA, KIND_KEY, MAX_RAW_LEN, RecordHead, crc32};
use crate::batch::Batch;

/// zstd level: 3 is zstd's default; measured in BENCHMARKS.md (record section).
pub const LEVEL: i32 = 3;
/// A key record at least every this many records: bounds what one damaged key costs.
pub const KEY_EVERY: u32 = 100;

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
}

fn zerr(code: usize) -> CodecError {
    CodecError::Zstd(zstd::zstd_safe::get_error_name(code))
}

/// The last key record the encoder wrote.
struct Key {
    offset: u64,
    dict: CDict<'static>,
    compressed: usize,
}

/// Turns Batches into records, choosing key or delta.
pub struct Encoder {
    cctx: CCtx<'static>,
    key: Option<Key>,
    since_key: u32,
    key_every: u32,
    level: i32,
}

impl Encoder {
    pub fn new() -> Result<Self, CodecError> {
        Self::with_params(LEVEL, KEY_EVERY)
    }

    /// An encoder with another level or key spacing (for the size benchmark).
    pub fn with_params(level: i32, key_every: u32) -> Result<Self, CodecError> {
        let mut cctx = CCtx::try_create().ok_or(CodecError::Zstd("out of memory"))?;
        cctx.set_parameter(CParameter::CompressionLevel(level))
            .map_err(zerr)?;
        // The record head has its own checksum of the compressed bytes; the frame's content
        // size lets a reader check the length before decompressing.
        cctx.set_parameter(CParameter::ContentSizeFlag(true))
            .map_err(zerr)?;
        Ok(Self {
            cctx,
            key: None,
            since_key: 0,
            key_every: key_every.max(1),
            level,
        })
    }

    /// Start afresh (a new file): the next record is a key.
    pub fn reset(&mut self) {
        self.key = None;
        self.since_key = 0;
    }

    /// Encode `b` as the record that will start at file offset `offset`.
    pub fn encode(&mut self, b: &Batch, offset: u64) -> Result<(RecordHead, Vec<u8>), CodecError> {
        let raw = serde_json::to_vec(b).map_err(|e| CodecError::Json(e.to_string()))?;
        if raw.len() > MAX_RAW_LEN as usize {
            return Err(CodecError::TooLarge(raw.len()));
        }
        let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(raw.len()));
        let (kind, key_offset) = match &self.key {
            Some(k) if self.since_key < self.key_every => {
                self.cctx
                    .compress_using_cdict(&mut out, &raw, &k.dict)
                    .map_err(zerr)?;
                (KIND_DELTA, k.offset)
            }
            _ => {
                self.cctx.compress2(&mut out, &raw).map_err(zerr)?;
                (KIND_KEY, offset)
            }
        };
        if kind == KIND_KEY {
            let dict =
                CDict::try_create(&raw, self.level).ok_or(CodecError::Zstd("out of memory"))?;
            self.key = Some(Key {
                offset,
                dict,
                compressed: out.len(),
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
        let head = RecordHead {
            kind,
            flags: 0,
            payload_len: out.len() as u32,
            raw_len: raw.len() as u32,
            seq: b.seq,
            t_ms: b.t_ms,
            key_offset,
            payload_crc: crc32(&out),
        };
        Ok((head, out))
    }
}

/// A key record's decompressed bytes, ready to decode its deltas.
pub struct KeyDict {
    pub offset: u64,
    dict: DDict<'static>,
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

    /// Prepare a key record's bytes as the dictionary of its deltas.
    pub fn key_dict(&self, offset: u64, raw: &[u8]) -> Result<KeyDict, CodecError> {
        let dict = DDict::try_create(raw).ok_or(CodecError::Zstd("bad dictionary"))?;
        Ok(KeyDict { offset, dict })
    }
}

/// Parse a decompressed payload.
pub fn parse_batch(raw: &[u8]) -> Result<Batch, CodecError> {
    serde_json::from_slice(raw).map_err(|e| CodecError::Json(e.to_string()))
}
