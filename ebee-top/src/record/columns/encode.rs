//! Encoding a Batch's value: its tables column by column, the rest as a skeleton.

use super::*;

/// `encode_value`, starting from `models` when given instead of a copy of the reference's.
pub(super) fn encode_with(
    v: Value,
    reference: Option<&Tables>,
    models: Option<Models>,
    version: u16,
    out: &mut Vec<u8>,
) -> Result<Tables, CodecError> {
    let chain = version >= 3;
    let Value::Object(mut rest) = v else {
        return Err(CodecError::Json("a batch is not a JSON object".into()));
    };
    let names: Vec<String> = rest
        .iter()
        .filter(|(_, v)| is_table(v, version >= 6))
        .map(|(k, _)| k.clone())
        .take(MAX_TABLES)
        .collect();
    let mut o = Out {
        bytes: Vec::new(),
        rc: rc::Encoder::measured(tracking()),
        ms: Models::starting(models, reference, chain),
        chain,
        sm: version >= 4,
        sparse: version >= 6,
    };
    let mut tables = Vec::with_capacity(names.len());
    put_varint(&mut o.bytes, names.len() as u128);
    for name in names {
        let Some(Value::Array(rows)) = rest.remove(&name) else {
            return Err(bad("a table vanished"));
        };
        let reft = reference.and_then(|r| r.get(&name));
        tables.push(encode_table(name, rows, reft, &mut o)?);
    }
    // The rest: a skeleton (like the key's, so zstd takes it from the key's bytes) and its
    // integers, coded against the key's.
    let mut rest = Value::Object(rest);
    let mut ints = Vec::new();
    take_ints(&mut rest, &mut ints);
    let json = serde_json::to_vec(&rest).map_err(|e| CodecError::Json(e.to_string()))?;
    put_varint(&mut o.bytes, json.len() as u128);
    o.bytes.extend_from_slice(&json);
    let keyints = reference
        .filter(|r| r.skeleton == json && r.ints.len() == ints.len())
        .map(|r| &r.ints[..]);
    o.bytes.push(u8::from(keyints.is_some()));
    let c0 = o.cost();
    // Format 3: a model per place (the first SKEL_MODELS), each learns its own steps.
    let nm = if chain {
        ints.len().clamp(1, SKEL_MODELS)
    } else {
        1
    };
    let ms = o.ms.ints("/skeleton".into(), nm);
    for (k, x) in ints.iter().enumerate() {
        let p = keyints.map_or(0, |r| r[k]);
        o.rc.signed(&mut ms[k.min(nm - 1)], x - p, o.sm);
    }
    stat(|| "rc skeleton ints".into(), o.cost() - c0);
    stat(|| "raw skeleton json".into(), json.len() as f64);
    stat(|| "raw byte stream".into(), o.bytes.len() as f64);
    let rc = o.rc.finish();
    stat(|| "rc total".into(), rc.len() as f64);
    if reference.is_some() {
        stat(|| "rc (delta)".into(), rc.len() as f64);
        stat(|| "raw bytes (delta)".into(), o.bytes.len() as f64);
    }
    put_varint(out, rc.len() as u128);
    out.extend_from_slice(&rc);
    out.extend_from_slice(&o.bytes);
    let t = Tables {
        tables,
        skeleton: json,
        ints,
        models: if chain { o.ms } else { Models::default() },
    };
    Ok(if chain { carry(reference, t) } else { t })
}

/// An array of objects with the same fields, one of them an integer `pid` (`sparse`, format
/// 6: objects with an integer `pid`, each with some of at most `MAX_COLS` fields).
pub(super) fn is_table(v: &Value, sparse: bool) -> bool {
    let Value::Array(rows) = v else {
        return false;
    };
    let Some(Value::Object(first)) = rows.first() else {
        return false;
    };
    if sparse {
        let mut names: std::collections::BTreeSet<&str> = std::collections::BTreeSet::new();
        for r in rows {
            let Value::Object(m) = r else {
                return false;
            };
            if m.get(KEY_FIELD).and_then(Value::as_u64).is_none() {
                return false;
            }
            for k in m.keys() {
                if k.len() > MAX_NAME {
                    return false;
                }
                names.insert(k);
            }
            if names.len() > MAX_COLS + 1 {
                return false;
            }
        }
        return rows.len() <= MAX_CELLS / names.len().max(1);
    }
    if first.len() > MAX_COLS || rows.len() > MAX_CELLS / first.len().max(1) {
        return false;
    }
    rows.iter().all(|r| match r {
        Value::Object(m) => {
            m.len() == first.len()
                && m.keys()
                    .all(|k| first.contains_key(k) && k.len() <= MAX_NAME)
                && m.get(KEY_FIELD).and_then(Value::as_u64).is_some()
        }
        _ => false,
    })
}

/// Match sorted `pids` against the sorted pids of the reference: for each row, the index of
/// its reference row (the k-th occurrence of a pid matches the k-th).
pub(super) fn match_rows(pids: &[u64], refp: &[u64]) -> (Vec<Option<usize>>, Vec<bool>) {
    let mut rows = vec![None; pids.len()];
    let mut used = vec![false; refp.len()];
    let (mut i, mut j) = (0, 0);
    while i < pids.len() && j < refp.len() {
        match pids[i].cmp(&refp[j]) {
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
            Ordering::Equal => {
                rows[i] = Some(j);
                used[j] = true;
                i += 1;
                j += 1;
            }
        }
    }
    (rows, used)
}

pub(super) fn kind_of(c: &Column) -> u8 {
    if c.cells.iter().all(|v| as_int(v).is_some()) {
        KIND_INT
    } else if c.cells.iter().all(|v| int_list(v).is_some()) {
        KIND_INT_LIST
    } else {
        KIND_JSON
    }
}

pub(super) fn encode_table(
    name: String,
    rows: Vec<Value>,
    reft: Option<&Table>,
    o: &mut Out,
) -> Result<Table, CodecError> {
    let mut objs: Vec<Map<String, Value>> = rows
        .into_iter()
        .filter_map(|r| match r {
            Value::Object(m) => Some(m),
            _ => None,
        })
        .collect();
    let pid_of = |m: &Map<String, Value>| m.get(KEY_FIELD).and_then(Value::as_u64).unwrap_or(0);
    // Stored order: by pid, ties in their original order (a stable sort).
    let mut stored: Vec<usize> = (0..objs.len()).collect();
    stored.sort_by_key(|&i| pid_of(&objs[i]));
    let pids: Vec<u64> = stored.iter().map(|&i| pid_of(&objs[i])).collect();
    let fields: Vec<String> = if o.sparse {
        // Every field any row has, in name order.
        let mut names = std::collections::BTreeSet::new();
        for m in &objs {
            names.extend(m.keys().filter(|k| *k != KEY_FIELD));
        }
        names.into_iter().cloned().collect()
    } else {
        objs.first()
            .map(|m| m.keys().filter(|k| *k != KEY_FIELD).cloned().collect())
            .unwrap_or_default()
    };
    let mut cols: Vec<Column> = fields
        .iter()
        .map(|f| {
            let cells: Vec<Option<Value>> = stored.iter().map(|&i| objs[i].remove(f)).collect();
            if !o.sparse || cells.iter().all(Option::is_some) {
                return Column {
                    name: f.clone(),
                    cells: cells
                        .into_iter()
                        .map(|c| c.unwrap_or(Value::Null))
                        .collect(),
                    absent: Vec::new(),
                };
            }
            // The kind of the cells that are there; the rest get a stand-in of that kind.
            let present = Column {
                name: String::new(),
                cells: cells.iter().flatten().cloned().collect(),
                absent: Vec::new(),
            };
            let stand_in = match kind_of(&present) {
                KIND_INT => Value::from(0),
                KIND_INT_LIST => Value::Array(Vec::new()),
                _ => Value::Null,
            };
            Column {
                name: f.clone(),
                absent: cells.iter().map(Option::is_none).collect(),
                cells: cells
                    .into_iter()
                    .map(|c| c.unwrap_or_else(|| stand_in.clone()))
                    .collect(),
            }
        })
        .collect();
    // Integer lists first (other columns may be predicted from their sums), then integers.
    cols.sort_by_key(|c| match kind_of(c) {
        KIND_INT_LIST => 0,
        KIND_INT => 1,
        _ => 2,
    });

    put_str(&mut o.bytes, &name);
    // Format 4 codes the row count in `rc` (below), where it costs bits, not a byte that
    // breaks zstd's match with the record before.
    if !o.sm {
        put_varint(&mut o.bytes, pids.len() as u128);
    }
    let c0 = o.cost();
    let refs = match reft {
        Some(r) => {
            o.bytes.push(1);
            let (refs, used) = match_rows(&pids, &r.pids);
            let p = o.ms.bits(format!("{name}/present"), AGE_CTX);
            for (j, u) in used.into_iter().enumerate() {
                o.rc.bit(&mut p[age_ctx(r, j)], u);
            }
            if o.sm {
                let new = refs.iter().filter(|r| r.is_none()).count();
                o.rc.int(&mut o.ms.ints(format!("{name}/new"), 1)[0], new as u128);
            }
            let m = &mut o.ms.ints(format!("{name}/pid"), 1)[0];
            let mut prev = 0;
            for (&pid, r) in pids.iter().zip(&refs) {
                if r.is_none() {
                    o.rc.int(m, u128::from(pid - prev));
                    prev = pid;
                }
            }
            refs
        }
        None => {
            o.bytes.push(0);
            if o.sm {
                o.rc.int(
                    &mut o.ms.ints(format!("{name}/rows"), 1)[0],
                    pids.len() as u128,
                );
            }
            let m = &mut o.ms.ints(format!("{name}/pid"), 1)[0];
            let mut prev = 0;
            for &pid in &pids {
                o.rc.int(m, u128::from(pid - prev));
                prev = pid;
            }
            vec![None; pids.len()]
        }
    };
    stat(|| format!("{name}.pid"), o.cost() - c0);
    stat(|| format!("{name} rows"), pids.len() as f64);
    put_varint(&mut o.bytes, cols.len() as u128);
    let mut sums: Vec<Option<Vec<i128>>> = Vec::new();
    for c in &cols {
        let c0 = o.cost();
        put_str(&mut o.bytes, &c.name);
        let refc = reft.and_then(|r| r.cols.iter().find(|x| x.name == c.name));
        let kind = kind_of(c);
        o.bytes.push(kind);
        match kind {
            KIND_INT_LIST => {
                let vals: Vec<Vec<i128>> = c
                    .cells
                    .iter()
                    .map(|v| int_list(v).unwrap_or_default())
                    .collect();
                let d = gcd_all(vals.iter().flatten().copied());
                put_varint(&mut o.bytes, d as u128);
                let lkey = format!("{name}.{}/len", c.name);
                let ekey = format!("{name}.{}/elem", c.name);
                let nctx = if o.chain { LIST_CTX } else { 2 };
                let mut lens = o.ms.ints(lkey.clone(), 1)[0].clone();
                let mut elems = o.ms.ints(ekey.clone(), nctx).to_vec();
                let refl = ref_lists(&refs, refc, d, o.chain);
                for (v, rl) in vals.iter().zip(&refl) {
                    o.rc.int(&mut lens, v.len() as u128);
                    let mut before = None;
                    for (i, x) in v.iter().enumerate() {
                        let y = x / d;
                        let ctx = list_ctx(o.chain, before, rl, i);
                        o.rc.signed(&mut elems[ctx], y, o.sm);
                        before = Some(y);
                    }
                }
                o.ms.ints(lkey, 1)[0] = lens;
                o.ms.ints(ekey, nctx).clone_from_slice(&elems);
                sums.push(Some(vals.iter().map(|v| v.iter().sum()).collect()));
            }
            KIND_INT => {
                let vals: Vec<i128> = c.cells.iter().map(|v| as_int(v).unwrap_or(0)).collect();
                encode_ints(o, &format!("{name}.{}", c.name), &vals, &refs, refc, &sums)?;
                sums.push(None);
            }
            _ => {
                encode_json(o, &format!("{name}.{}", c.name), &c.cells, &refs, refc)?;
                sums.push(None);
            }
        }
        o.absent(&format!("{name}.{}", c.name), &c.absent);
        stat(|| format!("{name}.{}", c.name), o.cost() - c0);
    }
    let c0 = o.cost();
    // Row order: the original row k is stored row order[k].
    let mut order = vec![0usize; stored.len()];
    for (s, &orig) in stored.iter().enumerate() {
        order[orig] = s;
    }
    encode_order(o, &name, &order, &cols);
    stat(|| format!("{name} order"), o.cost() - c0);
    let age = vec![0; pids.len()];
    Ok(Table {
        name,
        pids,
        cols,
        order,
        age,
    })
}

/// Predictions of every row of an integer column.
pub(super) fn predict(
    code: u8,
    n: usize,
    refs: &[Option<usize>],
    refc: Option<&Column>,
    sums: &[Option<Vec<i128>>],
    prev_vals: Option<&[i128]>,
) -> Option<Vec<i128>> {
    match code {
        PRED_NONE => Some(vec![0; n]),
        PRED_REF => {
            let rc = refc?;
            let mut p = Vec::with_capacity(n);
            for (k, r) in refs.iter().enumerate() {
                p.push(match r {
                    Some(j) => as_int(rc.cells.get(*j)?)?,
                    None => match (k, prev_vals) {
                        (0, _) => 0,
                        (_, Some(v)) => *v.get(k - 1)?,
                        (_, None) => return None,
                    },
                });
            }
            Some(p)
        }
        c => sums.get(usize::from(c - PRED_SUM))?.clone(),
    }
}

pub(super) fn encode_ints(
    o: &mut Out,
    key: &str,
    vals: &[i128],
    refs: &[Option<usize>],
    refc: Option<&Column>,
    sums: &[Option<Vec<i128>>],
) -> Result<(), CodecError> {
    let d = gcd_all(vals.iter().copied());
    let mut codes = vec![PRED_NONE, PRED_REF];
    codes.extend(
        (0..sums.len().min(usize::from(u8::MAX - PRED_SUM)))
            .filter(|&j| sums[j].is_some())
            .map(|j| PRED_SUM + j as u8),
    );
    // The prediction that leaves the fewest bits wins.
    let mut best: Option<(u64, u8, Vec<i128>)> = None;
    for code in codes {
        let Some(pred) = predict(code, vals.len(), refs, refc, sums, Some(vals)) else {
            continue;
        };
        let Some(diffs) = vals
            .iter()
            .zip(&pred)
            .map(|(v, p)| Some((v - snap(*p, d)?) / d))
            .collect::<Option<Vec<i128>>>()
        else {
            continue;
        };
        let cost = if o.sm {
            // Magnitudes, and the signs at about their entropy.
            let (mut bits, mut nz, mut neg) = (0u64, 0u64, 0u64);
            for x in &diffs {
                bits += u64::from(128 - x.unsigned_abs().leading_zeros()) + 2;
                nz += u64::from(*x != 0);
                neg += u64::from(*x < 0);
            }
            let p = neg as f64 / nz.max(1) as f64;
            let h = if p <= 0.0 || p >= 1.0 {
                0.0
            } else {
                -(p * p.log2() + (1.0 - p) * (1.0 - p).log2())
            };
            bits + (h * nz as f64).ceil() as u64
        } else {
            diffs
                .iter()
                .map(|x| u64::from(128 - rc::zigzag(*x).leading_zeros()) + 2)
                .sum()
        };
        if best.as_ref().is_none_or(|b| cost < b.0) {
            best = Some((cost, code, diffs));
        }
    }
    let (_, code, diffs) = best.ok_or(bad("no prediction fits"))?;
    o.bytes.push(code);
    put_varint(&mut o.bytes, d as u128);
    let m = &mut o.ms.ints(format!("{key}/{code}"), 1)[0];
    for x in diffs {
        o.rc.signed(m, x, o.sm);
    }
    Ok(())
}

pub(super) fn encode_json(
    o: &mut Out,
    key: &str,
    cells: &[Value],
    refs: &[Option<usize>],
    refc: Option<&Column>,
) -> Result<(), CodecError> {
    let same: Vec<bool> = cells
        .iter()
        .zip(refs)
        .map(|(v, r)| matches!((r, refc), (Some(j), Some(rc)) if rc.cells.get(*j) == Some(v)))
        .collect();
    let use_ref = same.iter().any(|&s| s);
    o.bytes.push(u8::from(use_ref));
    // The other cells: a list of distinct values, and an index per cell.
    let mut distinct: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut list: Vec<Vec<u8>> = Vec::new();
    let mut idx = Vec::new();
    for (v, s) in cells.iter().zip(&same) {
        if !(use_ref && *s) {
            let j = serde_json::to_vec(v).map_err(|e| CodecError::Json(e.to_string()))?;
            let n = distinct.len();
            let i = *distinct.entry(j.clone()).or_insert_with(|| {
                list.push(j);
                n
            });
            idx.push(i);
        }
    }
    put_varint(&mut o.bytes, list.len() as u128);
    for j in &list {
        put_varint(&mut o.bytes, j.len() as u128);
        o.bytes.extend_from_slice(j);
    }
    let mut p = o.ms.bits(format!("{key}/same"), 1)[0];
    let mut m = o.ms.ints(format!("{key}/index"), 1)[0].clone();
    let mut next = idx.into_iter();
    for (r, s) in refs.iter().zip(&same) {
        if use_ref && r.is_some() {
            o.rc.bit(&mut p, *s);
            if *s {
                continue;
            }
        }
        if list.len() > 1 {
            o.rc.int(&mut m, next.next().unwrap_or(0) as u128);
        }
    }
    o.ms.bits(format!("{key}/same"), 1)[0] = p;
    o.ms.ints(format!("{key}/index"), 1)[0] = m;
    Ok(())
}
