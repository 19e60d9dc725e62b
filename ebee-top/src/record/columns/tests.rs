//! Round trips of the columns coding, and damaged payloads.

use proptest::prelude::*;
use serde_json::json;

use super::*;
use crate::batch::build::plausible;
use crate::batch::{CpuRow, MemRow, ProcInfo};
use crate::record::codec::rounded;

fn round_trip(b: &Batch, reference: Option<&Tables>) -> (Batch, Tables) {
    let mut out = Vec::new();
    let t = encode(b, reference, &mut out).unwrap();
    let (got, kept) = decode(&out, reference, true).unwrap();
    assert_eq!(
        kept.as_ref(),
        Some(&t),
        "the decoder keeps what the encoder kept"
    );
    (got, t)
}

#[test]
fn plausible_intervals_round_trip_as_keys_and_deltas() {
    let key = plausible(1, 40);
    let (got, t) = round_trip(&key, None);
    assert_eq!(got, key);
    for s in 2..60 {
        let b = rounded(&plausible(s, 30 + (s % 17) as u32));
        assert_eq!(round_trip(&b, Some(&t)).0, b, "interval {s}");
    }
}

/// Formats 3 and 4: a chain of records, each coded against the one before.
fn chain_round_trip(batches: &[Batch]) {
    for version in [3, 4, 5, 6] {
        let mut enc: Option<Tables> = None;
        let mut dec: Option<Tables> = None;
        for (i, b) in batches.iter().enumerate() {
            let mut out = Vec::new();
            let t = encode_chained(b, enc.take(), version, &mut out).unwrap();
            let (got, kept) = decode_chained(&out, dec.take(), version).unwrap();
            assert_eq!(&got, b, "format {version}, record {i}");
            assert_eq!(
                kept.as_ref(),
                Some(&t),
                "format {version}, record {i}: the decoder keeps what the encoder kept"
            );
            enc = Some(t);
            dec = kept;
        }
    }
}

#[test]
fn plausible_intervals_round_trip_as_a_chain() {
    let batches: Vec<Batch> = (1..80)
        .map(|s| rounded(&plausible(s, 10 + (s % 23) as u32)))
        .collect();
    chain_round_trip(&batches);
}

#[test]
fn a_chain_round_trips_rows_that_skip_intervals_and_forgets_old_ones() {
    // One process runs, skips 3 intervals, comes back (matched again through the carried
    // row), then is gone for longer than MAX_AGE.
    let victim = plausible(1, 6).cpu[0].pid;
    let batches: Vec<Batch> = (1..60u64)
        .map(|s| {
            let mut b = rounded(&plausible(s, 6));
            if (3..6).contains(&s) || s >= 20 {
                b.cpu.retain(|r| r.pid != victim);
            }
            b
        })
        .collect();
    chain_round_trip(&batches);
    let mut t: Option<Tables> = None;
    for b in &batches {
        t = Some(encode_chained(b, t.take(), 4, &mut Vec::new()).unwrap());
    }
    let cpu = t.as_ref().and_then(|t| t.get("cpu")).unwrap();
    assert!(cpu.age.iter().all(|&a| a <= MAX_AGE));
    assert!(!cpu.pids.contains(&u64::from(victim)));
}

#[test]
fn processes_without_a_parent_or_cgroup_stay_a_table() {
    // A process gone before its parent was read has no ppid; one outside the followed
    // hierarchy no cgroup. Before format 6 one such row put the whole process table in
    // the skeleton (about 1.3 KB an interval more on a load of 100 execs a second).
    let mut batches: Vec<Batch> = (1..=6).map(|s| rounded(&plausible(s, 12))).collect();
    for (k, b) in batches.iter_mut().enumerate() {
        for p in &mut b.procs {
            p.ppid = Some(1);
            p.cgroup = "/system.slice/a.service".into();
        }
        b.procs[k % 3].ppid = None;
        b.procs[(k + 1) % 3].cgroup = Default::default();
    }
    assert!(
        batches
            .iter()
            .all(|b| b.procs.iter().any(|p| p.ppid.is_some()))
    );
    chain_round_trip(&batches);
    let mut t = None;
    let mut sizes = Vec::new();
    for b in &batches {
        let mut out = Vec::new();
        let tables = encode_chained(b, t.take(), 6, &mut out).unwrap();
        assert!(tables.get("procs").is_some());
        sizes.push(out.len());
        t = Some(tables);
    }
    let mut t = None;
    for (b, with) in batches.iter().zip(&sizes) {
        let mut out = Vec::new();
        t = Some(encode_chained(b, t.take(), 5, &mut out).unwrap());
        assert!(t.as_ref().is_some_and(|t| t.get("procs").is_none()));
        assert!(
            out.len() > *with,
            "format 5 {} bytes, format 6 {with}",
            out.len()
        );
    }
}

#[test]
fn fields_it_does_not_know_round_trip() {
    // A later Batch: cgroup and tid on cpu rows, a new table, a new plain field, floats,
    // rows of one table with a field the others lack (not a table then), negative ints.
    let mut v = serde_json::to_value(plausible(3, 5)).unwrap();
    for (i, r) in v["cpu"].as_array_mut().unwrap().iter_mut().enumerate() {
        r["cgroup"] = json!(4000 + i % 2);
        r["tid"] = json!(if i == 2 { Value::Null } else { json!(7000 + i) });
    }
    v["cgroups"] = json!([{"id": 1, "path": "/a", "ns": 5}, {"id": 2, "path": "/b", "ns": 0}]);
    v["load"] = json!({"avg": [0.5, 1.25], "n": -3});
    v["mixed"] = json!([{"pid": 1, "x": 1}, {"pid": 2, "y": 2}]);
    v["dups"] = json!([{"pid": 5, "x": -1}, {"pid": 5, "x": 2}, {"pid": 1, "x": 3}]);
    // And as a delta against it, with rows gone and new ones.
    let mut w = v.clone();
    w["cpu"].as_array_mut().unwrap().remove(1);
    w["cpu"][0]["cgroup"] = json!(9);
    w["dups"] = json!([{"pid": 5, "x": 4}, {"pid": 6, "x": 2}, {"pid": 5, "x": 3}]);
    // Rows that gain and lose fields (a table from format 6), of every kind.
    w["mixed"] = json!([
        {"pid": 1, "y": 5, "s": "a"},
        {"pid": 2, "x": [1, 2], "y": 2},
        {"pid": 3},
        {"pid": 4, "x": [], "s": null}
    ]);
    for version in [2, 3, 4, 5, 6] {
        let mut out = Vec::new();
        let t = encode_value(v.clone(), None, version, &mut out).unwrap();
        let (got, kept) = decode_value(&out, None, true, version).unwrap();
        assert_eq!(got, v);
        assert_eq!(
            kept.as_ref(),
            Some(&t),
            "the decoder keeps what the encoder kept"
        );
        assert_eq!(t.get("mixed").is_some(), version >= 6);
        let mut out = Vec::new();
        let t2 = encode_value(w.clone(), Some(&t), version, &mut out).unwrap();
        let (got, kept) = decode_value(&out, Some(&t), true, version).unwrap();
        assert_eq!(got, w);
        assert_eq!(
            kept.as_ref(),
            Some(&t2),
            "the decoder keeps what the encoder kept"
        );
        // A delta needs its key.
        assert!(decode_value(&out, None, false, version).is_err());
    }
}

#[test]
fn truncated_and_flipped_payloads_fail_cleanly() {
    let key = plausible(1, 20);
    let mut kb = Vec::new();
    let t = encode(&key, None, &mut kb).unwrap();
    let mut db = Vec::new();
    encode(&rounded(&plausible(2, 25)), Some(&t), &mut db).unwrap();
    // Formats 3 and 4: a key and a delta after it.
    let mut chained = Vec::new();
    for version in [3, 4] {
        let mut k = Vec::new();
        let t = encode_chained(&key, None, version, &mut k).unwrap();
        let mut d = Vec::new();
        encode_chained(
            &rounded(&plausible(2, 25)),
            Some(t.clone()),
            version,
            &mut d,
        )
        .unwrap();
        chained.push((version, t, k, d));
    }
    let mut cases = vec![&kb, &db];
    cases.extend(chained.iter().flat_map(|(_, _, k, d)| [k, d]));
    for bytes in cases {
        for cut in 0..bytes.len() {
            let _ = decode(&bytes[..cut], Some(&t), false);
            for (v, t, _, _) in &chained {
                let _ = decode_chained(&bytes[..cut], Some(t.clone()), *v);
            }
        }
        for bit in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[bit / 8] ^= 1 << (bit % 8);
            let _ = decode(&b, Some(&t), false);
            for (v, t, _, _) in &chained {
                let _ = decode_chained(&b, Some(t.clone()), *v);
            }
        }
    }
}

fn batch_strategy() -> impl Strategy<Value = Batch> {
    let row = (
        0u32..64,
        any::<u64>(),
        prop::collection::vec(0u64..50_000_000, 0..7),
        any::<i64>(),
        prop::option::of(any::<u32>()),
        "[a-z/ ]{0,12}",
    );
    (
        prop::collection::vec(row, 0..40),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(|(rows, sorted, seq)| {
            let mut b = plausible(seq % 1000, 3);
            b.cpu = rows
                .iter()
                .map(|r| CpuRow {
                    pid: r.0,
                    ns: r.1,
                    bins: r.2.clone(),
                })
                .collect();
            if sorted {
                b.cpu
                    .sort_by(|x, y| y.ns.cmp(&x.ns).then(x.pid.cmp(&y.pid)));
            }
            b.mem = rows
                .iter()
                .map(|r| MemRow {
                    pid: r.0,
                    rss_bytes: r.1 / 4096 * 4096,
                    rss_delta_bytes: r.3,
                })
                .collect();
            b.procs = rows
                .iter()
                .map(|r| ProcInfo {
                    pid: r.0,
                    start_ticks: r.1 % 1000,
                    comm: r.5.as_str().into(),
                    cmdline: r.5.repeat(2).into(),
                    uid: r.4,
                    kthread: r.0 % 3 == 0,
                    // Left out of the JSON when empty: rows with and without it.
                    cgroup: if r.0 % 2 == 0 {
                        format!("/system.slice/{}.service", r.5).into()
                    } else {
                        Default::default()
                    },
                    tgid: None,
                    ppid: None,
                })
                .collect();
            b
        })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]
    #[test]
    fn any_batch_round_trips_as_key_and_as_delta(k in batch_strategy(), d in batch_strategy()) {
        let k = rounded(&k);
        let d = rounded(&d);
        let (got, t) = round_trip(&k, None);
        prop_assert_eq!(&got, &k);
        prop_assert_eq!(round_trip(&d, Some(&t)).0, d.clone());
        chain_round_trip(&[k.clone(), d.clone(), k, d]);
    }
}
