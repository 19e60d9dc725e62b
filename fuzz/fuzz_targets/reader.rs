//! Any bytes, opened as a recording: the reader must never panic, never allocate beyond its
//! limits, and whatever it decodes must go through the Model and both batch outputs.
//!
//! Inputs whose first byte is odd are first "repaired": every record head found by walking
//! the file gets correct CRCs, so mutations reach the zstd decoder (with and without a key
//! dictionary), the JSON parser and the Model instead of stopping at a checksum.

#![no_main]

use ebee_top::model::Model;
use ebee_top::record::format::{self, RECORD_HEAD_LEN, SYNC, crc32};
use ebee_top::record::reader;
use libfuzzer_sys::fuzz_target;

/// Give every record head (and payload) the CRCs that make them pass.
fn repair(b: &mut [u8]) {
    let Ok(p) = format::decode_preamble(b) else {
        return;
    };
    let meta_end = format::PREAMBLE_LEN + p.meta_len as usize;
    if meta_end > b.len() {
        return;
    }
    let crc = crc32(&b[format::PREAMBLE_LEN..meta_end]);
    b[16..20].copy_from_slice(&crc.to_le_bytes());
    let mut pos = meta_end;
    while pos < b.len() {
        // Format 5: a delta's short head.
        if p.version >= 5 && b[pos] == format::DELTA_MARK {
            let Ok((at, [len, ..])) = format::short_head_fields(&b[pos..]) else {
                return;
            };
            let start = pos + at + 6;
            let Some(end) = usize::try_from(len).ok().and_then(|l| start.checked_add(l)) else {
                return;
            };
            if end > b.len() {
                return;
            }
            let pcrc = crc32(&b[start..end]);
            b[pos + at..pos + at + 4].copy_from_slice(&pcrc.to_le_bytes());
            let hcrc = crc32(&b[pos..pos + at + 4]) as u16;
            b[pos + at + 4..start].copy_from_slice(&hcrc.to_le_bytes());
            pos = end;
            continue;
        }
        if pos + RECORD_HEAD_LEN > b.len() {
            return;
        }
        b[pos..pos + 4].copy_from_slice(&SYNC);
        let mut l = [0u8; 4];
        l.copy_from_slice(&b[pos + 8..pos + 12]);
        let left = b.len() - pos - RECORD_HEAD_LEN;
        let len = (u32::from_le_bytes(l) as usize).min(left);
        b[pos + 8..pos + 12].copy_from_slice(&(len as u32).to_le_bytes());
        let start = pos + RECORD_HEAD_LEN;
        let pcrc = crc32(&b[start..start + len]);
        b[pos + 40..pos + 44].copy_from_slice(&pcrc.to_le_bytes());
        let hcrc = crc32(&b[pos..pos + 44]);
        b[pos + 44..pos + 48].copy_from_slice(&hcrc.to_le_bytes());
        pos = start + len;
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut owned;
    let bytes = if mode & 1 == 1 {
        owned = rest.to_vec();
        repair(&mut owned);
        &owned[..]
    } else {
        rest
    };
    let Ok(mut r) = reader::from_bytes(bytes) else {
        return;
    };
    for d in r.damage() {
        let _ = d.to_string();
    }
    let mut m = Model::new();
    let mut out = Vec::new();
    // Backwards too: a delta decoded before its key is the seek path.
    let n = r.len();
    let order = (0..n).chain((0..n).rev());
    for i in order.take(256) {
        if let Ok(b) = r.read(i) {
            m.ingest(&b);
            let _ = m.top_cpu(50);
            out.clear();
            let _ = ebee_top::frontend::lines::write_json(&mut out, &m, 20);
            let _ = ebee_top::frontend::lines::write_text(&mut out, &m, 20);
        }
    }
    let _ = r.index_at_ms(u64::MAX / 2);
});
