//! The bytes of a recording: the file preamble, the metadata header, and the head of every
//! record (48 bytes; from format 5 a delta's head is a short one, coded against the record
//! before it). Pure encode/decode, no I/O; docs/recording-format.md describes the same
//! layout for people writing their own reader.

use serde::{Deserialize, Serialize};

/// First bytes of every recording. Like PNG's signature: a non-ASCII first byte, CR LF and
/// ^Z catch files mangled by text-mode transfers.
pub const MAGIC: [u8; 8] = [0x89, b'E', b'B', b'R', b'\r', b'\n', 0x1a, b'\n'];
/// The format version this build writes and the newest it reads.
pub const VERSION: u16 = 7;
/// Bytes before the metadata JSON: magic, version, reserved, meta length, meta CRC.
pub const PREAMBLE_LEN: usize = 20;
/// Largest metadata JSON accepted.
pub const MAX_META_LEN: u32 = 64 * 1024;

/// Start of every record head: lets a reader find the next record after damage.
pub const SYNC: [u8; 4] = *b"EBRF";
/// Bytes of a record head (every record of formats 1-4, key records of format 5).
pub const RECORD_HEAD_LEN: usize = 48;
/// First byte of a format 5 delta's short head (a full head starts with `SYNC`'s "E").
pub const DELTA_MARK: u8 = 0xd5;
/// Most bytes of a short head: the mark, four varints of at most 10 bytes, two checksums.
pub const MAX_SHORT_HEAD_LEN: usize = 1 + 4 * 10 + 4 + 2;
/// Largest compressed payload accepted (a batch is tens of KiB compressed).
pub const MAX_PAYLOAD_LEN: u32 = 16 * 1024 * 1024;
/// Largest decompressed payload accepted.
pub const MAX_RAW_LEN: u32 = 64 * 1024 * 1024;

/// A Batch compressed on its own: decodable without any other record.
pub const KIND_KEY: u8 = 1;
/// A Batch compressed with its key record's decompressed bytes as the zstd dictionary.
pub const KIND_DELTA: u8 = 2;

impl Meta {
    /// The metadata of test recordings and committed fixtures (the unit tests, `recsize`).
    pub fn for_tests() -> Self {
        Self {
            host: "test".into(),
            kernel: "6.18".into(),
            interval_ns: 50_000_000,
            start_ms: 1_700_000_000_000,
            writer: "test".into(),
            segment: 0,
        }
    }
}

/// CRC-32 (IEEE 802.3, the zlib/PNG polynomial).
pub fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

/// What the metadata header says about the recording. Every field has a default so that
/// fields added later (or missing) do not stop a reader.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Meta {
    /// Host name (uname nodename) of the recorded machine.
    pub host: String,
    /// Kernel release (uname release).
    pub kernel: String,
    /// The tick interval when the recording started, ns (each Batch carries its own).
    pub interval_ns: u64,
    /// Wall-clock time the recording started, ms since the Unix epoch.
    pub start_ms: u64,
    /// The ebee-top version that wrote the file.
    pub writer: String,
    /// Segment number: 0 for the first file, +1 at every rotation.
    pub segment: u32,
}

/// Why the first bytes are not a recording we can read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreambleError {
    /// Fewer bytes than the preamble (0 for an empty file).
    Short(usize),
    BadMagic,
    /// Written by a newer ebee-top.
    Newer(u16),
    /// Version 0, an oversized or damaged metadata header.
    Corrupt(&'static str),
}

/// The fixed preamble, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preamble {
    pub version: u16,
    pub meta_len: u32,
    pub meta_crc: u32,
}

/// Encode the preamble and metadata header.
pub fn encode_header(meta: &Meta) -> Vec<u8> {
    // Serializing plain strings and integers cannot fail.
    let json = serde_json::to_vec(meta).unwrap_or_default();
    let mut out = Vec::with_capacity(PREAMBLE_LEN + json.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&0u16.to_le_bytes());
    out.extend_from_slice(&(json.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32(&json).to_le_bytes());
    out.extend_from_slice(&json);
    out
}

fn le16(b: &[u8], at: usize) -> u16 {
    let mut a = [0u8; 2];
    a.copy_from_slice(&b[at..at + 2]);
    u16::from_le_bytes(a)
}

fn le32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn le64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

/// Decode the preamble from the first bytes of a file (as many as are available).
pub fn decode_preamble(b: &[u8]) -> Result<Preamble, PreambleError> {
    // Check the magic on what we have first, so a short non-recording says "not a recording".
    let n = b.len().min(MAGIC.len());
    if b[..n] != MAGIC[..n] {
        return Err(PreambleError::BadMagic);
    }
    if b.len() < PREAMBLE_LEN {
        return Err(PreambleError::Short(b.len()));
    }
    let version = le16(b, 8);
    if version == 0 {
        return Err(PreambleError::Corrupt("format version 0"));
    }
    if version > VERSION {
        return Err(PreambleError::Newer(version));
    }
    let meta_len = le32(b, 12);
    if meta_len > MAX_META_LEN {
        return Err(PreambleError::Corrupt("metadata header longer than 64 KiB"));
    }
    Ok(Preamble {
        version,
        meta_len,
        meta_crc: le32(b, 16),
    })
}

/// Decode the metadata JSON that follows the preamble.
pub fn decode_meta(p: &Preamble, json: &[u8]) -> Result<Meta, PreambleError> {
    if crc32(json) != p.meta_crc {
        return Err(PreambleError::Corrupt("metadata header checksum mismatch"));
    }
    serde_json::from_slice(json).map_err(|_| PreambleError::Corrupt("metadata header is not JSON"))
}

/// The fixed head of a record; the payload follows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecordHead {
    pub kind: u8,
    pub flags: u8,
    /// Compressed payload bytes.
    pub payload_len: u32,
    /// Decompressed payload bytes.
    pub raw_len: u32,
    /// `Batch::seq` of the payload.
    pub seq: u64,
    /// `Batch::t_ms` of the payload.
    pub t_ms: u64,
    /// File offset of the key record whose payload is this record's dictionary (a key
    /// record: its own offset).
    pub key_offset: u64,
    /// CRC-32 of the compressed payload.
    pub payload_crc: u32,
    /// Format 5 delta: the `seq` and `t_ms` of the record before it, which its short head is
    /// coded against (None: the full 48-byte head).
    pub after: Option<(u64, u64)>,
}

/// Why bytes are not a valid record head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeadError {
    NoSync,
    BadChecksum,
    /// The checksum matched but a length is beyond the limits: written by something else.
    TooLong,
    /// A short head that the bytes given end inside of.
    Short,
}

fn put_varint(out: &mut Vec<u8>, mut u: u64) {
    while u >= 0x80 {
        out.push(u as u8 | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

/// A LEB128 varint at `*at`, moving `*at` past it; None when `b` ends inside it or it does
/// not fit in 64 bits.
fn get_varint(b: &[u8], at: &mut usize) -> Result<u64, HeadError> {
    let mut u = 0u64;
    for shift in (0..64).step_by(7) {
        let x = *b.get(*at).ok_or(HeadError::Short)?;
        *at += 1;
        if shift == 63 && x > 1 {
            return Err(HeadError::TooLong);
        }
        u |= u64::from(x & 0x7f) << shift;
        if x & 0x80 == 0 {
            return Ok(u);
        }
    }
    Err(HeadError::TooLong)
}

fn zigzag(x: i64) -> u64 {
    ((x << 1) ^ (x >> 63)) as u64
}

fn unzigzag(u: u64) -> i64 {
    ((u >> 1) as i64) ^ -((u & 1) as i64)
}

/// The four varints of a short head at the start of `b` (unchecked), and where its payload
/// CRC starts; the two checksums must follow within `b`.
pub fn short_head_fields(b: &[u8]) -> Result<(usize, [u64; 4]), HeadError> {
    if b.first() != Some(&DELTA_MARK) {
        return Err(HeadError::NoSync);
    }
    let mut at = 1;
    let mut v = [0u64; 4];
    for x in &mut v {
        *x = get_varint(b, &mut at)?;
    }
    if b.len() < at + 6 {
        return Err(HeadError::Short);
    }
    Ok((at, v))
}

impl RecordHead {
    /// The head's bytes: the full 48 bytes, or a format 5 delta's short head (`after`).
    pub fn encode(&self) -> Vec<u8> {
        match self.after {
            Some((seq, t_ms)) => self.encode_short(seq, t_ms),
            None => self.encode_full().to_vec(),
        }
    }

    /// A format 5 delta's head: `DELTA_MARK`, then LEB128 varints of the payload's compressed
    /// and decompressed lengths, of `seq` less the record before's and of `t_ms` less the
    /// record before's (zigzagged: a wall clock may step back), then the payload's CRC-32 and
    /// the low 16 bits of the CRC-32 of the head's bytes before it. The kind is delta, the key
    /// the record before's; a delta is read only after the record before it anyway.
    fn encode_short(&self, seq: u64, t_ms: u64) -> Vec<u8> {
        let mut b = Vec::with_capacity(MAX_SHORT_HEAD_LEN);
        b.push(DELTA_MARK);
        put_varint(&mut b, u64::from(self.payload_len));
        put_varint(&mut b, u64::from(self.raw_len));
        put_varint(&mut b, self.seq.wrapping_sub(seq));
        put_varint(&mut b, zigzag(self.t_ms.wrapping_sub(t_ms) as i64));
        b.extend_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32(&b) as u16;
        b.extend_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode and check a format 5 delta's short head at the start of `b`, coded against
    /// `before`, the head of the record before it.
    pub fn decode_short(b: &[u8], before: &RecordHead) -> Result<Self, HeadError> {
        let (at, [payload_len, raw_len, seq_step, t_step]) = short_head_fields(b)?;
        let t_step = unzigzag(t_step);
        if crc32(&b[..at + 4]) as u16 != le16(b, at + 4) {
            return Err(HeadError::BadChecksum);
        }
        if payload_len > u64::from(MAX_PAYLOAD_LEN) || raw_len > u64::from(MAX_RAW_LEN) {
            return Err(HeadError::TooLong);
        }
        Ok(Self {
            kind: KIND_DELTA,
            flags: 0,
            payload_len: payload_len as u32,
            raw_len: raw_len as u32,
            seq: before.seq.wrapping_add(seq_step),
            t_ms: before.t_ms.wrapping_add(t_step as u64),
            key_offset: before.key_offset,
            payload_crc: le32(b, at),
            after: Some((before.seq, before.t_ms)),
        })
    }

    /// Bytes of the head itself.
    pub fn head_len(&self) -> u64 {
        match self.after {
            Some((seq, t_ms)) => self.encode_short(seq, t_ms).len() as u64,
            None => RECORD_HEAD_LEN as u64,
        }
    }

    fn encode_full(&self) -> [u8; RECORD_HEAD_LEN] {
        let mut b = [0u8; RECORD_HEAD_LEN];
        b[0..4].copy_from_slice(&SYNC);
        b[4] = self.kind;
        b[5] = self.flags;
        // 6..8 reserved, zero.
        b[8..12].copy_from_slice(&self.payload_len.to_le_bytes());
        b[12..16].copy_from_slice(&self.raw_len.to_le_bytes());
        b[16..24].copy_from_slice(&self.seq.to_le_bytes());
        b[24..32].copy_from_slice(&self.t_ms.to_le_bytes());
        b[32..40].copy_from_slice(&self.key_offset.to_le_bytes());
        b[40..44].copy_from_slice(&self.payload_crc.to_le_bytes());
        let crc = crc32(&b[..44]);
        b[44..48].copy_from_slice(&crc.to_le_bytes());
        b
    }

    /// Decode and check a head. `b` must hold at least `RECORD_HEAD_LEN` bytes.
    pub fn decode(b: &[u8]) -> Result<Self, HeadError> {
        if b.len() < RECORD_HEAD_LEN || b[0..4] != SYNC {
            return Err(HeadError::NoSync);
        }
        if crc32(&b[..44]) != le32(b, 44) {
            return Err(HeadError::BadChecksum);
        }
        let h = Self {
            kind: b[4],
            flags: b[5],
            payload_len: le32(b, 8),
            raw_len: le32(b, 12),
            seq: le64(b, 16),
            t_ms: le64(b, 24),
            key_offset: le64(b, 32),
            payload_crc: le32(b, 40),
            after: None,
        };
        if h.payload_len > MAX_PAYLOAD_LEN || h.raw_len > MAX_RAW_LEN {
            return Err(HeadError::TooLong);
        }
        Ok(h)
    }

    /// Bytes of the whole record.
    pub fn total_len(&self) -> u64 {
        self.head_len() + u64::from(self.payload_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trips() {
        let meta = Meta {
            host: "box".into(),
            kernel: "6.18".into(),
            interval_ns: 50_000_000,
            start_ms: 1,
            writer: "ebee-top 0.1.0".into(),
            segment: 2,
        };
        let b = encode_header(&meta);
        let p = decode_preamble(&b).unwrap();
        assert_eq!(p.version, VERSION);
        assert_eq!(decode_meta(&p, &b[PREAMBLE_LEN..]).unwrap(), meta);
    }

    #[test]
    fn preamble_errors() {
        assert_eq!(decode_preamble(b""), Err(PreambleError::Short(0)));
        assert_eq!(decode_preamble(&MAGIC[..3]), Err(PreambleError::Short(3)));
        assert_eq!(decode_preamble(b"{\"t_ms\":"), Err(PreambleError::BadMagic));
        let mut b = encode_header(&Meta::default());
        b[8] = VERSION as u8 + 1;
        assert_eq!(decode_preamble(&b), Err(PreambleError::Newer(VERSION + 1)));
        b[8] = 0;
        assert!(matches!(
            decode_preamble(&b),
            Err(PreambleError::Corrupt(_))
        ));
        let mut b = encode_header(&Meta::default());
        let last = b.len() - 2;
        b[last] ^= 1;
        let p = decode_preamble(&b).unwrap();
        assert!(decode_meta(&p, &b[PREAMBLE_LEN..]).is_err());
    }

    #[test]
    fn unknown_meta_fields_are_ignored() {
        let json = br#"{"host":"h","future":[1,2]}"#;
        let p = Preamble {
            version: 1,
            meta_len: json.len() as u32,
            meta_crc: crc32(json),
        };
        assert_eq!(decode_meta(&p, json).unwrap().host, "h");
    }

    #[test]
    fn record_head_round_trips_and_detects_damage() {
        let h = RecordHead {
            kind: KIND_DELTA,
            flags: 0,
            payload_len: 1234,
            raw_len: 99999,
            seq: 7,
            t_ms: 1_700_000_000_000,
            key_offset: 4096,
            payload_crc: 0xdead_beef,
            after: None,
        };
        let b = h.encode();
        assert_eq!(RecordHead::decode(&b), Ok(h));
        for i in 0..RECORD_HEAD_LEN * 8 {
            let mut d = b.clone();
            d[i / 8] ^= 1 << (i % 8);
            assert!(RecordHead::decode(&d).is_err(), "bit {i} flipped unnoticed");
        }
        let big = RecordHead {
            payload_len: MAX_PAYLOAD_LEN + 1,
            ..h
        };
        assert_eq!(RecordHead::decode(&big.encode()), Err(HeadError::TooLong));
    }

    #[test]
    fn short_heads_round_trip_and_catch_every_bit_flip() {
        let before = RecordHead {
            kind: KIND_KEY,
            payload_len: 5000,
            raw_len: 9000,
            seq: 41,
            t_ms: 1_700_000_000_000,
            key_offset: 4096,
            ..Default::default()
        };
        for (seq, t_ms) in [(42, before.t_ms + 50), (u64::MAX, 3), (41, before.t_ms - 7)] {
            let h = RecordHead {
                kind: KIND_DELTA,
                flags: 0,
                payload_len: 1234,
                raw_len: 99_999,
                seq,
                t_ms,
                key_offset: 4096,
                payload_crc: 0xdead_beef,
                after: Some((before.seq, before.t_ms)),
            };
            let b = h.encode();
            assert_eq!(b.len() as u64, h.head_len());
            assert!(b.len() <= MAX_SHORT_HEAD_LEN);
            assert_eq!(RecordHead::decode_short(&b, &before), Ok(h));
            for cut in 0..b.len() {
                assert!(RecordHead::decode_short(&b[..cut], &before).is_err());
            }
            for i in 0..b.len() * 8 {
                let mut d = b.clone();
                d[i / 8] ^= 1 << (i % 8);
                assert_ne!(
                    RecordHead::decode_short(&d, &before).ok(),
                    Some(h),
                    "bit {i} flipped unnoticed"
                );
            }
        }
        // A step of seq 1 and of 50 ms: 13 bytes where the full head takes 48.
        let h = RecordHead {
            kind: KIND_DELTA,
            payload_len: 1300,
            raw_len: 1700,
            seq: 42,
            t_ms: before.t_ms + 50,
            after: Some((before.seq, before.t_ms)),
            ..Default::default()
        };
        assert_eq!(h.head_len(), 13);
        let huge = RecordHead {
            payload_len: MAX_PAYLOAD_LEN + 1,
            ..h
        };
        assert_eq!(
            RecordHead::decode_short(&huge.encode(), &before),
            Err(HeadError::TooLong)
        );
    }
}
