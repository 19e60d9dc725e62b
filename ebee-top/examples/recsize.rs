//! Developer tool: re-encode a recording's intervals with the current encoder and print the
//! bytes per interval (`recsize FILE`), dump its Batches as JSON lines (`recsize FILE dump`),
//! or time decoding (`recsize FILE decode`) and folding into a Model (`recsize FILE ingest`).

use std::io::Write as _;
use std::time::Instant;

use ebee_top::record::Reader;
use ebee_top::record::codec::{Encoder, rounded};
use ebee_top::record::format::KIND_KEY;

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if args[1] == "fixture" {
        // recsize fixture OUT [N]: build::plausible(1..=N, 12), rounded, as the writer writes it.
        let n: u64 = args.get(3).and_then(|v| v.parse().ok()).unwrap_or(110);
        let batches: Vec<_> = (1..=n)
            .map(|s| rounded(&ebee_top::batch::build::plausible(s, 12)))
            .collect();
        return write(&args[2], &batches);
    }
    if args.get(2).map(String::as_str) == Some("write") {
        // recsize FILE write OUT N: the first N intervals of FILE, as the writer writes them now.
        let mut r = Reader::open(std::path::Path::new(&args[1]))?;
        let n: usize = args.get(4).and_then(|v| v.parse().ok()).unwrap_or(3);
        let batches = (0..n.min(r.len()))
            .map(|i| r.read(i))
            .collect::<Result<Vec<_>, _>>()?;
        return write(&args[3], &batches);
    }
    let path = std::path::PathBuf::from(&args[1]);
    let mut r = Reader::open(&path)?;
    let mut batches = Vec::with_capacity(r.len());
    for i in 0..r.len() {
        batches.push(r.read(i)?);
    }
    if args.get(2).map(String::as_str) == Some("decode") {
        // recsize FILE decode: read every interval again, timed (the file was read once above).
        let t = Instant::now();
        let mut r = Reader::open(&path)?;
        for i in 0..r.len() {
            r.read(i)?;
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / r.len().max(1) as f64;
        println!("{} intervals, decode {us:.0} us each", r.len());
        return Ok(());
    }
    if args.get(2).map(String::as_str) == Some("ingest") {
        // recsize FILE ingest: fold every interval into a Model, timed (what a replay seek does
        // for each interval it rebuilds from), and the time of one Model clone at the end.
        let t = Instant::now();
        let mut m = ebee_top::model::Model::new();
        for b in &batches {
            m.ingest(b);
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / batches.len().max(1) as f64;
        let t = Instant::now();
        let c = m.clone();
        println!(
            "{} intervals, ingest {us:.0} us each, clone {:.0} us",
            batches.len(),
            t.elapsed().as_secs_f64() * 1e6
        );
        let rss = || {
            std::fs::read_to_string("/proc/self/status")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find(|l| l.starts_with("VmRSS:"))
                        .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                })
                .unwrap_or(0)
        };
        let before = rss();
        let more: Vec<_> = (0..10).map(|_| m.clone()).collect();
        println!("a Model clone takes about {} KiB", (rss() - before) / 10);
        drop((c, more));
        return Ok(());
    }
    if args.get(2).map(String::as_str) == Some("dump") {
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        for b in &batches {
            serde_json::to_writer(&mut out, &rounded(b))?;
            writeln!(out)?;
        }
        return Ok(());
    }
    let n = batches.len() as f64;
    ebee_top::record::columns::track_stats(std::env::var_os("STATS").is_some());
    let lvl: i32 = std::env::var("LEVEL")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ebee_top::record::codec::LEVEL);
    let every: u32 = std::env::var("EVERY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(ebee_top::record::codec::KEY_EVERY);
    let mut enc = Encoder::with_params(lvl, every)?;
    let (mut off, mut keys, mut kbytes) = (0u64, 0u64, 0u64);
    let t = Instant::now();
    for b in &batches {
        let (h, _) = enc.encode(b, off)?;
        off += h.total_len();
        if h.kind == KIND_KEY {
            keys += 1;
            kbytes += h.total_len();
        }
    }
    let enc_us = t.elapsed().as_secs_f64() * 1e6 / n;
    println!(
        "{} intervals, {:.1} bytes/interval ({:.1} MB/h at 50 ms), {keys} keys of {:.0} bytes, deltas {:.1}, encode {enc_us:.0} us",
        batches.len(),
        off as f64 / n,
        off as f64 / n * 72000.0 / 1e6,
        kbytes as f64 / keys.max(1) as f64,
        (off - kbytes) as f64 / (n - keys as f64).max(1.0),
    );
    if std::env::var_os("VERIFY").is_some() {
        // Encode again with offsets after a header, and read the file back.
        let mut enc = Encoder::new()?;
        let mut bytes = ebee_top::record::format::encode_header(r.meta());
        for b in &batches {
            let (h, p) = enc.encode(b, bytes.len() as u64)?;
            bytes.extend_from_slice(&h.encode());
            bytes.extend_from_slice(&p);
        }
        let mut rd = ebee_top::record::reader::from_bytes(&bytes)?;
        assert!(rd.damage().is_empty());
        let t = Instant::now();
        for (i, b) in batches.iter().enumerate() {
            let got = rd.read(i)?;
            assert_eq!(got, rounded(b), "interval {i}");
        }
        println!(
            "verified; decode {:.0} us",
            t.elapsed().as_secs_f64() * 1e6 / n
        );
    }
    for (k, v) in ebee_top::record::columns::stats() {
        println!("  {k:40} {:8.1}", v / n);
    }
    Ok(())
}

/// Write `batches` to a new file at `path` through the recording writer.
fn write(path: &str, batches: &[ebee_top::batch::Batch]) -> anyhow::Result<()> {
    let opts = ebee_top::record::RecordOptions {
        path: path.into(),
        force: false,
        max_size: None,
        rotate: None,
    };
    let meta = ebee_top::record::format::Meta::for_tests();
    let mut w = ebee_top::record::Writer::create(opts, meta)?;
    for b in batches {
        w.append(b)?;
    }
    w.sync()?;
    Ok(())
}
