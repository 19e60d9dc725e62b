//! `record-stats`: size and cost of a recording. Reads a file back and reports bytes per
//! interval (key and delta records), raw payload bytes, decode and encode time per interval,
//! the same intervals re-encoded in formats 1 (JSON), 2, 3, 4 and 5, losslessly and without the
//! wait table,
//! and a sweep of zstd levels and key spacing re-encoding the same intervals.

use std::time::Instant;

use serde_json::json;

pub fn record_stats(path: &std::path::Path, quick: bool) -> anyhow::Result<serde_json::Value> {
    use ebee_top::batch::Batch;
    use ebee_top::record::Reader;
    use ebee_top::record::codec::Encoder;
    use ebee_top::record::format::KIND_KEY;

    let file_bytes = std::fs::metadata(path)?.len();
    let mut r = Reader::open(path)?;
    anyhow::ensure!(!r.is_empty(), "no intervals in {}", path.display());
    let entries = r.entries().to_vec();
    let t0 = Instant::now();
    let mut batches = Vec::with_capacity(r.len());
    for i in 0..r.len() {
        batches.push(r.read(i)?);
    }
    let decode_us = t0.elapsed().as_secs_f64() * 1e6 / batches.len() as f64;
    let n = batches.len() as f64;
    let interval_ns: u64 = batches.iter().map(|b| b.interval_ns()).sum();
    let procs: usize = batches.iter().map(|b| b.cpu.len()).sum();
    let raw: u64 = entries.iter().map(|e| u64::from(e.head.raw_len)).sum();
    let (keys, deltas): (Vec<_>, Vec<_>) = entries.iter().partition(|e| e.head.kind == KIND_KEY);
    let mean = |v: &[&ebee_top::record::reader::Entry]| {
        if v.is_empty() {
            0.0
        } else {
            v.iter().map(|e| e.head.total_len() as f64).sum::<f64>() / v.len() as f64
        }
    };
    if quick {
        return Ok(json!({
            "intervals": batches.len(),
            "file_bytes": file_bytes,
            "seconds": interval_ns as f64 / 1e9,
            "mean_interval_ms": interval_ns as f64 / n / 1e6,
            "processes_per_interval": procs as f64 / n,
            "version": r.version(),
            "key_records": keys.len(),
            "key_bytes": mean(&keys),
            "delta_bytes": mean(&deltas),
            "decode_us": decode_us,
        }));
    }
    // Re-encode the same intervals: default parameters (timed), then the sweep.
    let encode = |level: i32, every: u32| -> anyhow::Result<(f64, f64)> {
        let mut enc = Encoder::with_params(level, every)?;
        let mut off = 0u64;
        let t = Instant::now();
        for b in &batches {
            let (h, _) = enc.encode(b, off)?;
            off += h.total_len();
        }
        Ok((off as f64 / n, t.elapsed().as_secs_f64() * 1e6 / n))
    };
    let (default_bytes, encode_us) = encode(
        ebee_top::record::codec::LEVEL,
        ebee_top::record::codec::KEY_EVERY,
    )?;
    let mut sweep = Vec::new();
    let encode_with = |mut enc: Encoder, batches: &[Batch]| -> anyhow::Result<(f64, f64)> {
        let mut off = 0u64;
        let t = Instant::now();
        for b in batches {
            let (h, _) = enc.encode(b, off)?;
            off += h.total_len();
        }
        Ok((off as f64 / n, t.elapsed().as_secs_f64() * 1e6 / n))
    };
    // The same intervals in format 1 (JSON), in format 2 keeping every ns, and in format 2
    // without the run-queue wait table (the Batch as it was when format 1 was measured first).
    let (v1_bytes, v1_us) = encode_with(Encoder::v1(3, 100)?, &batches)?;
    // And in format 2 (deltas against their key only, zstd level 3), as written before format 3.
    let (v2_bytes, v2_us) = encode_with(Encoder::v2(3, 100)?, &batches)?;
    // And in format 3 (deltas against the record before, the key as zstd dictionary), as
    // written before format 4.
    let (v3_bytes, v3_us) =
        encode_with(Encoder::v3(ebee_top::record::codec::LEVEL, 100)?, &batches)?;
    // And in format 4 (full record heads, whole zstd frames, a key every 100), as written
    // before format 5.
    let (v4_bytes, v4_us) =
        encode_with(Encoder::v4(ebee_top::record::codec::LEVEL, 100)?, &batches)?;
    // And in format 5 (a table only of rows with the same fields, times to the µs), as
    // written before format 6.
    let (v5_bytes, v5_us) =
        encode_with(Encoder::v5(ebee_top::record::codec::LEVEL, 200)?, &batches)?;
    let (lossless_bytes, _) = encode_with(Encoder::new()?.lossless(), &batches)?;
    let no_wait: Vec<_> = batches
        .iter()
        .map(|b| {
            let mut b = b.clone();
            b.wait.clear();
            b.wait_exact = None;
            b
        })
        .collect();
    let (no_wait_bytes, _) = encode_with(Encoder::new()?, &no_wait)?;
    let (v1_no_wait_bytes, _) = encode_with(Encoder::v1(3, 100)?, &no_wait)?;
    let mut rekeys = 0usize;
    let mut enc = Encoder::new()?;
    let mut off = 0u64;
    for b in &batches {
        let (h, _) = enc.encode(b, off)?;
        off += h.total_len();
        rekeys += usize::from(h.kind == KIND_KEY);
    }
    for level in [1, 3, 9] {
        for every in [1, 20, 100, 200, 500] {
            let (bytes, us) = encode(level, every)?;
            sweep.push(json!({"level": level, "key_every": every, "bytes_per_interval": bytes, "encode_us": us}));
        }
    }
    Ok(json!({
        "intervals": batches.len(),
        "file_bytes": file_bytes,
        "seconds": interval_ns as f64 / 1e9,
        "mean_interval_ms": interval_ns as f64 / n / 1e6,
        "processes_per_interval": procs as f64 / n,
        "version": r.version(),
        "raw_bytes_per_interval": raw as f64 / n,
        "key_records": keys.len(),
        "key_bytes": mean(&keys),
        "delta_bytes": mean(&deltas),
        "encode_us": encode_us,
        "bytes_per_interval_default": default_bytes,
        "reencoded_key_records": rekeys,
        "v1_bytes_per_interval": v1_bytes,
        "v1_encode_us": v1_us,
        "v2_bytes_per_interval": v2_bytes,
        "v2_encode_us": v2_us,
        "v3_bytes_per_interval": v3_bytes,
        "v3_encode_us": v3_us,
        "v4_bytes_per_interval": v4_bytes,
        "v4_encode_us": v4_us,
        "v5_bytes_per_interval": v5_bytes,
        "v5_encode_us": v5_us,
        "lossless_bytes_per_interval": lossless_bytes,
        "no_wait_bytes_per_interval": no_wait_bytes,
        "v1_no_wait_bytes_per_interval": v1_no_wait_bytes,
        "decode_us": decode_us,
        "sweep": sweep,
    }))
}
