//! The recording format against bad input: every truncation, bit flips, damaged records,
//! wrong magic, newer versions, and the paths a root process must not write through.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use super::format::{self, Meta, PREAMBLE_LEN};
use super::reader::{self, Damage};
use super::writer::{RecordOptions, Writer, rotated_path};
use super::{Reader, RecordError};
use crate::batch::build;
use crate::batch::{Batch, ProcInfo};
use crate::record::codec::{Encoder, rounded, rounded_as};

/// A plausible interval as the format written now records it (times per process to the µs),
/// so what is read back must be equal to it.
fn plausible(seq: u64, n: u32) -> Batch {
    rounded(&build::plausible(seq, n))
}

fn opts(path: &Path) -> RecordOptions {
    RecordOptions {
        path: path.into(),
        force: false,
        max_size: None,
        rotate: None,
    }
}

fn meta() -> Meta {
    Meta::for_tests()
}

/// Record `batches` to a fresh file; returns the directory (kept alive) and the file bytes.
pub(crate) fn record(batches: &[Batch]) -> (tempfile::TempDir, std::path::PathBuf, Vec<u8>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec.ebr");
    let mut w = Writer::create(opts(&path), meta()).unwrap();
    for b in batches {
        w.append(b).unwrap();
    }
    w.sync().unwrap();
    drop(w);
    let bytes = std::fs::read(&path).unwrap();
    (dir, path, bytes)
}

fn all(r: &mut Reader<impl std::io::Read + std::io::Seek>) -> Vec<Batch> {
    (0..r.len()).map(|i| r.read(i).unwrap()).collect()
}

#[test]
fn round_trip_is_exact() {
    let batches: Vec<Batch> = (1..=450)
        .map(|s| plausible(s, 30 + (s % 7) as u32))
        .collect();
    let (_d, path, _) = record(&batches);
    let mut r = Reader::open(&path).unwrap();
    assert_eq!(r.meta(), &meta());
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    assert_eq!(all(&mut r), batches);
    // Random access in any order gives the same.
    for i in [449, 0, 201, 200, 199, 3] {
        assert_eq!(r.read(i).unwrap(), batches[i]);
    }
    // More than one key record, and deltas in between.
    let keys = r
        .entries()
        .iter()
        .filter(|e| e.head.kind == format::KIND_KEY)
        .count();
    assert!((3..50).contains(&keys), "{keys} key records");
}

#[test]
fn the_writer_rounds_per_process_times_and_nothing_else() {
    let raw: Vec<Batch> = (1..=5).map(|s| build::plausible(s, 9)).collect();
    let (_d, path, _) = record(&raw);
    let mut r = Reader::open(&path).unwrap();
    assert_eq!(r.version(), format::VERSION);
    let got = all(&mut r);
    for (g, b) in got.iter().zip(&raw) {
        assert_eq!(g, &rounded(b));
        // The record test and the writer both round: twice is once.
        assert_eq!(&rounded(g), g);
        // On-CPU ns to the µs, bins untouched; waits to the step; rows in their order.
        for (x, y) in g.cpu.iter().zip(&b.cpu) {
            assert!(x.pid == y.pid && x.ns.abs_diff(y.ns) <= 500 && x.bins == y.bins);
        }
        assert_ne!(g.cpu, b.cpu, "plausible batches have ns below the µs");
        let half = super::codec::wait_step_ns(b) / 2;
        for (x, y) in g.wait.iter().zip(&b.wait) {
            assert!(x.pid == y.pid && x.ns.abs_diff(y.ns) <= half);
        }
        // Everything but the rounded times as it was.
        let mut same = b.clone();
        same.cpu.clone_from(&g.cpu);
        same.wait.clone_from(&g.wait);
        same.wait_by.clone_from(&g.wait_by);
        same.caused.clone_from(&g.caused);
        same.offcpu.clone_from(&g.offcpu);
        same.exits.clone_from(&g.exits);
        assert_eq!(g, &same);
    }
}

/// Write `batches` as a format 1 file, as the ebee-top before format 2 did.
fn record_v1(batches: &[Batch]) -> Vec<u8> {
    let mut bytes = format::encode_header(&meta());
    bytes[8..10].copy_from_slice(&1u16.to_le_bytes());
    let mut enc = Encoder::v1(3, 100).unwrap();
    assert_eq!(enc.version(), 1);
    for b in batches {
        let (head, payload) = enc.encode(b, bytes.len() as u64).unwrap();
        bytes.extend_from_slice(&head.encode());
        bytes.extend_from_slice(&payload);
    }
    bytes
}

#[test]
fn format_1_files_still_read_exactly() {
    // Exact ns: format 1 kept them, and reading it must too.
    let batches: Vec<Batch> = (1..=130).map(|s| build::plausible(s, 12)).collect();
    let bytes = record_v1(&batches);
    let mut r = reader::from_bytes(&bytes).unwrap();
    assert_eq!(r.version(), 1);
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    assert_eq!(all(&mut r), batches);
    for i in [129, 0, 100, 99, 5] {
        assert_eq!(r.read(i).unwrap(), batches[i]);
    }
}

#[test]
fn the_committed_format_1_file_reads() {
    // Written by the format 1 writer of ebee-top before format 2 (commit 47b6aa0):
    // build::plausible(1..=12, 6). Regenerate only if that writer changes (it must not).
    let bytes = include_bytes!("testdata/v1-plausible-12.ebr");
    let mut r = reader::from_bytes(bytes).unwrap();
    assert_eq!(r.version(), 1);
    // plausible() has gained cgroups since: the file holds the batches as they were then.
    let want: Vec<Batch> = (1..=12)
        .map(|s| {
            let mut b = build::plausible(s, 6);
            b.cgroups.clear();
            b.cgroup_stats = Default::default();
            for p in &mut b.procs {
                p.cgroup = Default::default();
            }
            before_offcpu(b)
        })
        .collect();
    assert_eq!(all(&mut r), want);
    // The kept format 1 encoder writes the Batch's JSON, which grows with the Batch (every
    // field added since writes its default), so its bytes cannot stay those of the file; what
    // it writes must still read back whole.
    let again = record_v1(&want);
    let mut r = reader::from_bytes(&again).unwrap();
    assert_eq!(all(&mut r), want);
}

#[test]
fn the_committed_format_2_file_reads() {
    // Written by the format 2 writer (before format 3): build::plausible(1..=110, 12) with
    // per-process times rounded to the µs, through `Writer` (a key at 0 and at 100, deltas
    // coded against their key). Never regenerate it: it stands for the files written then.
    committed_file_reads(include_bytes!("testdata/v2-plausible-110.ebr"), 2);
}

#[test]
fn the_committed_format_3_file_reads() {
    // The same intervals written by the format 3 writer (`recsize fixture`, before format 4):
    // deltas coded against the record before, zigzagged integers. Never regenerate it.
    committed_file_reads(include_bytes!("testdata/v3-plausible-110.ebr"), 3);
}

#[test]
fn the_committed_format_4_file_reads() {
    // The same intervals written by the format 4 writer (`recsize fixture`, before format 5):
    // full record heads, zstd frames with their magic number. Never regenerate it.
    committed_file_reads(include_bytes!("testdata/v4-plausible-110.ebr"), 4);
}

#[test]
fn the_committed_format_5_file_reads() {
    // The same intervals written by the format 5 writer (`recsize fixture`, before format 6):
    // short delta heads, exit times to the µs, tables only of rows with the same fields.
    // Never regenerate it.
    committed_file_reads(include_bytes!("testdata/v5-plausible-110.ebr"), 5);
}

#[test]
fn the_committed_format_6_file_reads() {
    // The same intervals written by the format 6 writer (`recsize fixture`, before format 7),
    // with the off-CPU split and the culprits of waits: waits to the µs, sleep to 100 µs.
    // Never regenerate it.
    let bytes = include_bytes!("testdata/v6-plausible-110.ebr");
    let mut r = reader::from_bytes(bytes).unwrap();
    assert_eq!(r.version(), 6);
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    let want: Vec<Batch> = (1..=110)
        .map(|s| rounded_as(6, &build::plausible(s, 12)))
        .collect();
    assert_eq!(all(&mut r), want);
}

/// `plausible()` has gained the off-CPU split and the culprits of waits (issue 29) since the
/// committed files were written: they hold the batches without them, which read back with
/// the split and the pairs empty and marked unmeasured.
fn before_offcpu(mut b: Batch) -> Batch {
    b.offcpu.clear();
    b.wait_by.clear();
    b.caused.clear();
    b.wait_stats.offcpu_available = false;
    b
}

fn committed_file_reads(bytes: &[u8], version: u16) {
    let mut r = reader::from_bytes(bytes).unwrap();
    assert_eq!(r.version(), version);
    assert!(r.damage().is_empty(), "{:?}", r.damage());
    // Written with the rounding of its format.
    let want: Vec<Batch> = (1..=110)
        .map(|s| before_offcpu(rounded_as(version, &build::plausible(s, 12))))
        .collect();
    assert_eq!(all(&mut r), want);
    let keys = r
        .entries()
        .iter()
        .filter(|e| e.head.kind == format::KIND_KEY)
        .count();
    // A key every 100 records up to format 4, every 200 from format 5.
    assert!(
        keys >= if version >= 5 { 1 } else { 2 },
        "{keys} key records"
    );
    // Random access too (a delta read before its key).
    for i in [109, 0, 100, 99, 5] {
        assert_eq!(r.read(i).unwrap(), want[i]);
    }
}

#[test]
fn files_are_0600_and_never_overwritten_without_force() {
    let (_d, path, _) = record(&[plausible(1, 3)]);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(matches!(
        Writer::create(opts(&path), meta()),
        Err(RecordError::Exists(_))
    ));
    let mut o = opts(&path);
    o.force = true;
    let mut w = Writer::create(o, meta()).unwrap();
    w.append(&plausible(5, 1)).unwrap();
    drop(w);
    let mut r = Reader::open(&path).unwrap();
    assert_eq!(all(&mut r), vec![plausible(5, 1)]);
}

#[test]
fn symlinks_and_directories_are_refused_even_with_force() {
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("target");
    std::fs::write(&target, b"precious").unwrap();
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink(dir.path().join("nothing"), &dangling).unwrap();
    for force in [false, true] {
        for l in [&link, &dangling] {
            let mut o = opts(l);
            o.force = force;
            let e = Writer::create(o, meta()).err().unwrap();
            assert!(matches!(e, RecordError::Symlink(_)), "{e}");
            assert!(e.to_string().contains("symbolic link"));
        }
        let mut o = opts(dir.path());
        o.force = force;
        let e = Writer::create(o, meta()).err().unwrap();
        assert!(matches!(e, RecordError::Directory(_)), "{e}");
    }
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    assert!(!dir.path().join("nothing").exists());
}

#[test]
fn bad_files_give_one_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let err = |path: &Path| Reader::open(path).err().unwrap();

    assert!(matches!(err(&p("missing")), RecordError::Missing(_)));
    assert!(matches!(err(dir.path()), RecordError::Directory(_)));
    std::fs::write(p("empty"), b"").unwrap();
    assert!(matches!(err(&p("empty")), RecordError::Empty(_)));
    std::fs::write(p("json"), b"{\"t_ms\": 1}\n").unwrap();
    assert!(matches!(err(&p("json")), RecordError::NotRecording(_)));

    let (_d, _, bytes) = record(&[plausible(1, 2)]);
    let mut newer = bytes.clone();
    newer[8] = 9;
    std::fs::write(p("newer"), &newer).unwrap();
    let e = err(&p("newer"));
    assert!(matches!(e, RecordError::Newer { version: 9, .. }), "{e}");
    assert!(e.to_string().contains("newer ebee-top"));

    // The header alone: a recording that was killed before its first interval.
    std::fs::write(p("header-only"), &bytes[..header_len(&bytes)]).unwrap();
    let r = Reader::open(&p("header-only")).unwrap();
    assert!(r.is_empty());

    let fifo = p("fifo");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert!(matches!(err(&fifo), RecordError::NotRegular(_)));

    for e in [
        err(&p("missing")),
        err(dir.path()),
        err(&p("empty")),
        err(&p("json")),
    ] {
        let s = e.to_string();
        assert_eq!(s.lines().count(), 1, "{s}");
    }
}

fn header_len(bytes: &[u8]) -> usize {
    let p = format::decode_preamble(bytes).unwrap();
    PREAMBLE_LEN + p.meta_len as usize
}

#[test]
fn truncation_at_every_byte_keeps_every_complete_record() {
    let batches: Vec<Batch> = (1..=12).map(|s| plausible(s, 4)).collect();
    let (_d, _, bytes) = record(&batches);
    let hl = header_len(&bytes);
    let r = reader::from_bytes(&bytes).unwrap();
    let ends: Vec<usize> = r
        .entries()
        .iter()
        .map(|e| (e.offset + e.head.total_len()) as usize)
        .collect();
    for cut in 0..bytes.len() {
        let b = &bytes[..cut];
        match reader::from_bytes(b) {
            Err(e) => assert!(cut < hl, "cut at {cut}: {e}"),
            Ok(mut r) => {
                assert!(cut >= hl);
                let whole = ends.iter().filter(|&&e| e <= cut).count();
                assert_eq!(r.len(), whole, "cut at {cut}");
                assert_eq!(all(&mut r), batches[..whole], "cut at {cut}");
                let partial = !ends.contains(&cut) && cut > hl;
                match r.damage() {
                    [] => assert!(!partial, "cut at {cut}: no damage reported"),
                    [Damage::Truncated { at, len }] => {
                        assert!(partial);
                        assert_eq!(*at as usize + *len as usize, cut);
                        assert!(r.damage()[0].to_string().contains("ends early"));
                    }
                    d => panic!("cut at {cut}: {d:?}"),
                }
            }
        }
    }
}

#[test]
fn a_record_with_a_bad_checksum_is_skipped_and_the_rest_replayed() {
    let batches: Vec<Batch> = (1..=10).map(|s| plausible(s, 6)).collect();
    let (_d, _, bytes) = record(&batches);
    let r = reader::from_bytes(&bytes).unwrap();
    let entries = r.entries().to_vec();
    // Damage the payload of a delta (the 4th record) and of the first key. In format 3 a
    // delta is coded against the record before it: the rest of its key group goes with it.
    for (victim, lost) in [
        (3usize, (3..10).collect::<Vec<_>>()),
        (0, (0..10).collect()),
    ] {
        let mut b = bytes.clone();
        let e = entries[victim];
        let at = (e.offset + e.head.head_len()) as usize + 5;
        b[at] ^= 0x40;
        let mut r = reader::from_bytes(&b).unwrap();
        let want: Vec<Batch> = (0..10)
            .filter(|i| !lost.contains(i))
            .map(|i| batches[i].clone())
            .collect();
        assert_eq!(all(&mut r), want);
        assert!(
            matches!(r.damage()[0], Damage::BadChecksum { seq, .. } if seq == batches[victim].seq)
        );
        // Deltas of a damaged key or after a damaged delta are named too.
        assert_eq!(r.damage().len(), lost.len());
        if victim == 3 {
            assert!(
                matches!(r.damage()[1], Damage::NoPrevious { seq, .. } if seq == batches[4].seq)
            );
            assert!(
                r.damage()[1]
                    .to_string()
                    .contains("damaged interval before it")
            );
        }
    }
}

#[test]
fn chained_formats_read_in_any_order_and_from_a_new_key_after_damage() {
    // Key spacing of 7 through the encoder: damage in the second group costs the rest of that
    // group only; the third group reads whole, in any order. Formats 7 (written now), 6, 5,
    // 4 and 3, each with its own rounding.
    let raw: Vec<Batch> = (1..=20).map(|s| build::plausible(s, 8)).collect();
    let lvl = super::codec::LEVEL;
    for mut enc in [
        Encoder::with_params(lvl, 7).unwrap(),
        Encoder::v6(lvl, 7).unwrap(),
        Encoder::v5(lvl, 7).unwrap(),
        Encoder::v4(lvl, 7).unwrap(),
        Encoder::v3(lvl, 7).unwrap(),
    ] {
        let v = enc.version();
        let batches: Vec<Batch> = raw.iter().map(|b| rounded_as(v, b)).collect();
        let (mut bytes, _) = encoded(&mut enc, &raw);
        let mut r = reader::from_bytes(&bytes).unwrap();
        assert_eq!(r.version(), v);
        for i in [19, 3, 0, 13, 14, 7, 6, 8, 2] {
            assert_eq!(r.read(i).unwrap(), batches[i], "format {v}, record {i}");
        }
        let e = r.entries()[9];
        bytes[(e.offset + e.head.head_len()) as usize + 3] ^= 0x10;
        let mut r = reader::from_bytes(&bytes).unwrap();
        let kept: Vec<usize> = (0..9).chain(14..20).collect();
        assert_eq!(r.len(), kept.len());
        for (i, &k) in kept.iter().enumerate().rev() {
            assert_eq!(r.read(i).unwrap(), batches[k], "format {v}, record {k}");
        }
    }
}

/// `batches` through `enc` into the bytes of a file of its format; also each record's offset.
fn encoded(enc: &mut Encoder, batches: &[Batch]) -> (Vec<u8>, Vec<usize>) {
    let mut bytes = format::encode_header(&meta());
    bytes[8..10].copy_from_slice(&enc.version().to_le_bytes());
    let mut offsets = Vec::new();
    for b in batches {
        let (head, payload) = enc.encode(b, bytes.len() as u64).unwrap();
        offsets.push(bytes.len());
        bytes.extend_from_slice(&head.encode());
        bytes.extend_from_slice(&payload);
    }
    (bytes, offsets)
}

#[test]
fn a_damaged_record_head_is_skipped_by_finding_the_next_key() {
    // Keys at records 0, 3 and 6. A delta's short head (format 5) and a key's full head, each
    // with a damaged length field: believed, it would swallow the rest of the file. Deltas
    // need the record before them, so the reader starts again at the next key's head.
    let batches: Vec<Batch> = (1..=9).map(|s| plausible(s, 6)).collect();
    let mut enc = Encoder::with_params(super::codec::LEVEL, 3).unwrap();
    let (bytes, offsets) = encoded(&mut enc, &batches);
    assert_eq!(reader::from_bytes(&bytes).unwrap().len(), 9);
    for (damaged, at, kept) in [
        (4, 1, [0, 1, 2, 3, 6, 7, 8].as_slice()),
        (3, 10, [0, 1, 2, 6, 7, 8].as_slice()),
    ] {
        let mut b = bytes.clone();
        b[offsets[damaged] + at] ^= 0xff;
        let mut r = reader::from_bytes(&b).unwrap();
        let want: Vec<Batch> = kept.iter().map(|&i| batches[i].clone()).collect();
        assert_eq!(all(&mut r), want, "record {damaged}");
        let garbage = Damage::Garbage {
            at: offsets[damaged] as u64,
            len: (offsets[6] - offsets[damaged]) as u64,
        };
        assert_eq!(r.damage(), [garbage], "record {damaged}");
    }
}

#[test]
fn bit_flips_never_panic_and_never_invent_data() {
    let batches: Vec<Batch> = (1..=4).map(|s| plausible(s, 3)).collect();
    let (_d, _, bytes) = record(&batches);
    for bit in 0..bytes.len() * 8 {
        let mut b = bytes.clone();
        b[bit / 8] ^= 1 << (bit % 8);
        if let Ok(mut r) = reader::from_bytes(&b) {
            for i in 0..r.len() {
                // Whatever decodes is one of the recorded batches, unchanged.
                if let Ok(got) = r.read(i) {
                    assert!(batches.contains(&got), "bit {bit}: invented {got:?}");
                }
            }
        }
    }
}

#[test]
fn garbage_and_huge_lengths_are_bounded() {
    let mut bytes = format::encode_header(&meta());
    let mut head = format::RecordHead {
        kind: format::KIND_KEY,
        payload_len: format::MAX_PAYLOAD_LEN,
        raw_len: format::MAX_RAW_LEN,
        key_offset: bytes.len() as u64,
        ..Default::default()
    };
    bytes.extend_from_slice(&head.encode());
    bytes.extend_from_slice(&[0u8; 100]);
    let r = reader::from_bytes(&bytes).unwrap();
    assert!(r.is_empty());
    assert!(matches!(r.damage(), [Damage::Truncated { .. }]));
    head.payload_len = u32::MAX;
    let mut b2 = format::encode_header(&meta());
    b2.extend_from_slice(&head.encode());
    let r = reader::from_bytes(&b2).unwrap();
    assert!(r.is_empty());
    assert!(matches!(r.damage(), [Damage::Garbage { .. }]));
}

#[test]
fn max_size_stops_or_rotates() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.ebr");
    let mut o = opts(&path);
    o.max_size = Some(20_000);
    let mut w = Writer::create(o.clone(), meta()).unwrap();
    let mut n = 0;
    loop {
        match w.append(&plausible(n + 1, 20)).unwrap() {
            super::writer::Appended::Written => n += 1,
            super::writer::Appended::Full => break,
            super::writer::Appended::Rotated => panic!("rotation is off"),
        }
        assert!(n < 10_000);
    }
    drop(w);
    assert!(std::fs::metadata(&path).unwrap().len() <= 20_000);
    assert_eq!(Reader::open(&path).unwrap().len() as u64, n);

    let path = dir.path().join("rot.ebr");
    let mut o = opts(&path);
    o.max_size = Some(20_000);
    o.rotate = Some(2);
    let mut w = Writer::create(o, meta()).unwrap();
    let mut rotations = 0;
    for s in 1..=(4 * n + 3) {
        if w.append(&plausible(s, 20)).unwrap() == super::writer::Appended::Rotated {
            rotations += 1;
        }
    }
    drop(w);
    assert!(rotations >= 3);
    let mut seqs = Vec::new();
    for p in [rotated_path(&path, 2), rotated_path(&path, 1), path.clone()] {
        let mut r = Reader::open(&p).unwrap();
        assert!(std::fs::metadata(&p).unwrap().len() <= 20_000);
        seqs.extend(all(&mut r).iter().map(|b| b.seq));
    }
    assert!(!rotated_path(&path, 3).exists());
    // The three files hold the newest intervals, in order, with nothing missing.
    let last = 4 * n + 3;
    let want: Vec<u64> = (last + 1 - seqs.len() as u64..=last).collect();
    assert_eq!(seqs, want);
}

#[test]
fn newer_fields_in_a_batch_are_ignored_and_missing_ones_default() {
    // A payload written by a later ebee-top with an extra field, and one without `cost`.
    let mut v = serde_json::to_value(plausible(1, 2)).unwrap();
    v["future_table"] = serde_json::json!([{"x": 1}]);
    v.as_object_mut().unwrap().remove("cost");
    let raw = serde_json::to_vec(&v).unwrap();
    let b = super::codec::parse_batch(&raw).unwrap();
    assert_eq!(b, plausible(1, 2));
}

#[test]
fn parents_and_lineage_round_trip() {
    // The process tree's data: a parent on every row, ancestors now and then.
    let batches: Vec<Batch> = (1..=250)
        .map(|s| {
            let mut b = plausible(s, 20);
            for (i, p) in b.procs.iter_mut().enumerate() {
                p.ppid = Some(if i == 0 { 900 } else { 1000 });
            }
            if s % 40 == 1 {
                b.lineage = vec![
                    ProcInfo {
                        ppid: Some(1),
                        start_ticks: 3,
                        ..ProcInfo::named(900, "bash")
                    },
                    ProcInfo {
                        ppid: Some(0),
                        ..ProcInfo::named(1, "init")
                    },
                ];
            }
            b
        })
        .collect();
    let (_d, path, _) = record(&batches);
    let mut r = Reader::open(&path).unwrap();
    assert_eq!(all(&mut r), batches);
    assert_eq!(r.read(160).unwrap().lineage.len(), 2);
}
