//! Decoding a payload back into a Batch's value, trusting nothing in it.

use super::*;

pub(super) fn decode_with(
    bytes: &[u8],
    reference: Option<&Tables>,
    models: Option<Models>,
    keep: bool,
    version: u16,
) -> Result<(Value, Option<Tables>), CodecError> {
    let chain = version >= 3;
    let mut inp = Input { b: bytes, at: 0 };
    let rc_len = inp.count(0, bytes.len())?;
    let rc_bytes = inp.bytes(rc_len)?;
    let mut d = In {
        inp,
        rc: rc::Decoder::new(rc_bytes),
        ms: Models::starting(models, reference, chain),
        chain,
        sm: version >= 4,
        sparse: version >= 6,
    };
    let mut budget = Budget(0);
    let n = d.inp.count(1, MAX_TABLES)?;
    let mut tables: Vec<Table> = Vec::with_capacity(n);
    for _ in 0..n {
        let t = decode_table(&mut d, reference, &mut budget)?;
        if tables.iter().any(|x| x.name == t.name) {
            return Err(bad("a table appears twice"));
        }
        tables.push(t);
    }
    let len = d.inp.count(0, usize::MAX)?;
    let json = d.inp.bytes(len)?;
    let mut rest: Value =
        serde_json::from_slice(json).map_err(|e| CodecError::Json(e.to_string()))?;
    let nints = count_ints(&rest);
    budget.take(nints)?;
    let keyints = match d.inp.byte()? {
        0 => None,
        1 => Some(
            reference
                .filter(|r| r.skeleton == json && r.ints.len() == nints)
                .ok_or(bad("a delta without its key's fields"))?,
        ),
        _ => return Err(bad("an unknown field coding")),
    };
    let mut ints = Vec::with_capacity(nints);
    let nm = if chain {
        nints.clamp(1, SKEL_MODELS)
    } else {
        1
    };
    let ms = d.ms.ints("/skeleton".into(), nm);
    for k in 0..nints {
        let p = keyints.map_or(0, |r| r.ints[k]);
        let x = d.rc.signed(&mut ms[k.min(nm - 1)], d.sm);
        ints.push(scaled(x.ok_or(bad("an integer out of range"))?, 1, p)?);
    }
    if d.inp.left() != 0 {
        return Err(bad("bytes after the end of the payload"));
    }
    if d.rc.consumed() > rc_len + 4 {
        return Err(bad("the coded integers end early"));
    }
    let kept = keep.then(|| {
        let t = Tables {
            tables: tables.clone(),
            skeleton: json.to_vec(),
            ints: ints.clone(),
            models: if chain {
                std::mem::take(&mut d.ms)
            } else {
                Models::default()
            },
        };
        if chain { carry(reference, t) } else { t }
    });
    let values = ints
        .into_iter()
        .map(int_value)
        .collect::<Result<Vec<_>, _>>()?;
    put_ints(&mut rest, &mut values.into_iter());
    let Value::Object(mut rest) = rest else {
        return Err(bad("the payload's fields are not an object"));
    };
    for t in tables {
        let (name, rows) = rows_of(t)?;
        if rest.insert(name, Value::Array(rows)).is_some() {
            return Err(bad("a table is also a plain field"));
        }
    }
    Ok((Value::Object(rest), kept))
}

pub(super) fn decode_table(
    d: &mut In<'_>,
    reference: Option<&Tables>,
    budget: &mut Budget,
) -> Result<Table, CodecError> {
    let name = d.inp.str()?.to_owned();
    // Format 4: the row count is in `rc`, read below.
    let mut nrows = if d.sm {
        0
    } else {
        let n = d.inp.count(0, MAX_CELLS)?;
        budget.take(n)?;
        n
    };
    let mut pids = Vec::new();
    let mut refs = Vec::new();
    let pkey = format!("{name}/pid");
    let reft = match d.inp.byte()? {
        0 => {
            if d.sm {
                let m = &mut d.ms.ints(format!("{name}/rows"), 1)[0];
                nrows = usize::try_from(d.rc.int(m).ok_or(bad("an integer out of range"))?)
                    .ok()
                    .filter(|&n| n <= MAX_CELLS)
                    .ok_or(bad("a count is larger than the payload allows"))?;
                budget.take(nrows)?;
            }
            pids.reserve(nrows);
            refs.reserve(nrows);
            let mut p = 0u64;
            for _ in 0..nrows {
                p = u64::try_from(d.int_of(pkey.clone())?)
                    .ok()
                    .and_then(|x| p.checked_add(x))
                    .ok_or(bad("a pid out of range"))?;
                pids.push(p);
                refs.push(None);
            }
            None
        }
        1 => {
            let r = reference
                .and_then(|r| r.get(&name))
                .ok_or(bad("a delta table without its key table"))?;
            let bits = d.ms.bits(format!("{name}/present"), AGE_CTX);
            let used: Vec<bool> = (0..r.pids.len())
                .map(|j| d.rc.bit(&mut bits[age_ctx(r, j)]))
                .collect();
            let nold = used.iter().filter(|&&u| u).count();
            let nnew = if d.sm {
                let m = &mut d.ms.ints(format!("{name}/new"), 1)[0];
                let n = usize::try_from(d.rc.int(m).ok_or(bad("an integer out of range"))?)
                    .ok()
                    .filter(|&n| n <= MAX_CELLS)
                    .ok_or(bad("a count is larger than the payload allows"))?;
                nrows = nold + n;
                budget.take(nrows)?;
                n
            } else {
                nrows
                    .checked_sub(nold)
                    .ok_or(bad("a table's row count does not match its rows"))?
            };
            pids.reserve(nrows);
            refs.reserve(nrows);
            let mut new = Vec::with_capacity(nnew);
            let mut p = 0u64;
            for _ in 0..nnew {
                p = u64::try_from(d.int_of(pkey.clone())?)
                    .ok()
                    .and_then(|x| p.checked_add(x))
                    .ok_or(bad("a pid out of range"))?;
                new.push(p);
            }
            // Merge the key's pids still present with the new ones, as the encoder sorted.
            let mut old = r
                .pids
                .iter()
                .enumerate()
                .filter(|(j, _)| used[*j])
                .peekable();
            let mut new = new.into_iter().peekable();
            loop {
                let take_old = match (old.peek(), new.peek()) {
                    (Some((_, o)), Some(n)) => **o <= *n,
                    (Some(_), None) => true,
                    (None, Some(_)) => false,
                    (None, None) => break,
                };
                if take_old {
                    if let Some((j, p)) = old.next() {
                        pids.push(*p);
                        refs.push(Some(j));
                    }
                } else if let Some(p) = new.next() {
                    pids.push(p);
                    refs.push(None);
                }
            }
            Some(r)
        }
        _ => return Err(bad("an unknown pid coding")),
    };
    let ncols = d.inp.count(1, MAX_COLS)?;
    budget.take(nrows.saturating_mul(ncols))?;
    let mut cols: Vec<Column> = Vec::with_capacity(ncols);
    let mut sums: Vec<Option<Vec<i128>>> = Vec::with_capacity(ncols);
    for _ in 0..ncols {
        let cname = d.inp.str()?.to_owned();
        if cname == KEY_FIELD || cols.iter().any(|c| c.name == cname) {
            return Err(bad("a column appears twice"));
        }
        let refc = reft.and_then(|r| r.cols.iter().find(|x| x.name == cname));
        let (cells, sum) = match d.inp.byte()? {
            KIND_INT_LIST => {
                let dv = divisor(&mut d.inp)?;
                let lkey = format!("{name}.{cname}/len");
                let ekey = format!("{name}.{cname}/elem");
                let nctx = if d.chain { LIST_CTX } else { 2 };
                let mut lens = d.ms.ints(lkey.clone(), 1)[0].clone();
                let mut elems = d.ms.ints(ekey.clone(), nctx).to_vec();
                let refl = ref_lists(&refs, refc, dv, d.chain);
                let mut cells = Vec::with_capacity(nrows);
                let mut sum = Vec::with_capacity(nrows);
                for rl in &refl {
                    let l = d.count(&mut lens, MAX_CELLS)?;
                    budget.take(l)?;
                    let mut list = Vec::with_capacity(l);
                    let mut s = 0i128;
                    let mut before = None;
                    for i in 0..l {
                        let ctx = list_ctx(d.chain, before, rl, i);
                        let y = elems
                            .get_mut(ctx)
                            .and_then(|m| d.rc.signed(m, d.sm))
                            .ok_or(bad("an integer out of range"))?;
                        let x = y.checked_mul(dv).ok_or(bad("an integer out of range"))?;
                        s = s.checked_add(x).ok_or(bad("an integer out of range"))?;
                        list.push(int_value(x)?);
                        before = Some(y);
                    }
                    cells.push(Value::Array(list));
                    sum.push(s);
                }
                d.ms.ints(lkey, 1)[0] = lens;
                d.ms.ints(ekey, nctx).clone_from_slice(&elems);
                (cells, Some(sum))
            }
            KIND_INT => {
                let code = d.inp.byte()?;
                let dv = divisor(&mut d.inp)?;
                if code >= PRED_SUM
                    && sums
                        .get(usize::from(code - PRED_SUM))
                        .is_none_or(|s| s.is_none())
                {
                    return Err(bad("a prediction from a column that is not a list"));
                }
                let mut vals: Vec<i128> = Vec::with_capacity(nrows);
                let mut m = d.ms.ints(format!("{name}.{cname}/{code}"), 1)[0].clone();
                for (k, r) in refs.iter().enumerate() {
                    let p = match code {
                        PRED_NONE => 0,
                        PRED_REF => match *r {
                            Some(j) => refc
                                .and_then(|c| c.cells.get(j))
                                .and_then(as_int)
                                .ok_or(bad("a prediction from a key cell that is not there"))?,
                            None => vals.last().copied().unwrap_or(0),
                        },
                        c => sums
                            .get(usize::from(c - PRED_SUM))
                            .and_then(|s| s.as_ref())
                            .and_then(|s| s.get(k).copied())
                            .ok_or(bad("a prediction from a column that is not a list"))?,
                    };
                    let p = snap(p, dv).ok_or(bad("an integer out of range"))?;
                    let x = d.rc.signed(&mut m, d.sm);
                    vals.push(scaled(x.ok_or(bad("an integer out of range"))?, dv, p)?);
                }
                d.ms.ints(format!("{name}.{cname}/{code}"), 1)[0] = m;
                let cells = vals
                    .into_iter()
                    .map(int_value)
                    .collect::<Result<Vec<_>, _>>()?;
                (cells, None)
            }
            KIND_JSON => (
                decode_json(d, &format!("{name}.{cname}"), &refs, refc)?,
                None,
            ),
            _ => return Err(bad("an unknown column kind")),
        };
        let absent = d.absent(&format!("{name}.{cname}"), nrows)?;
        cols.push(Column {
            name: cname,
            cells,
            absent,
        });
        sums.push(sum);
    }
    let order = decode_order(d, &name, &cols, nrows)?;
    let age = vec![0; pids.len()];
    Ok(Table {
        name,
        pids,
        cols,
        order,
        age,
    })
}

pub(super) fn divisor(inp: &mut Input<'_>) -> Result<i128, CodecError> {
    let d = inp.varint()?;
    if d == 0 || d > 1 << 64 {
        return Err(bad("a bad divisor"));
    }
    Ok(d as i128)
}

/// `pred + d * x`, checked.
pub(super) fn scaled(x: i128, d: i128, pred: i128) -> Result<i128, CodecError> {
    x.checked_mul(d)
        .and_then(|y| y.checked_add(pred))
        .ok_or(bad("an integer out of range"))
}

pub(super) fn decode_json(
    d: &mut In<'_>,
    key: &str,
    refs: &[Option<usize>],
    refc: Option<&Column>,
) -> Result<Vec<Value>, CodecError> {
    let use_ref = match d.inp.byte()? {
        0 => false,
        1 => true,
        _ => return Err(bad("an unknown cell coding")),
    };
    let n = d.inp.count(1, MAX_CELLS)?;
    let mut list = Vec::with_capacity(n);
    for _ in 0..n {
        let len = d.inp.count(0, usize::MAX)?;
        let v: Value = serde_json::from_slice(d.inp.bytes(len)?)
            .map_err(|e| CodecError::Json(e.to_string()))?;
        list.push(v);
    }
    let mut p = d.ms.bits(format!("{key}/same"), 1)[0];
    let mut m = d.ms.ints(format!("{key}/index"), 1)[0].clone();
    let mut cells = Vec::with_capacity(refs.len());
    for r in refs {
        if use_ref
            && let Some(j) = r
            && d.rc.bit(&mut p)
        {
            // Each key row is matched at most once: copies never exceed the key's size.
            let v = refc
                .and_then(|c| c.cells.get(*j))
                .ok_or(bad("a copy of a key cell that is not there"))?;
            cells.push(v.clone());
            continue;
        }
        let i = if list.len() > 1 {
            d.count(&mut m, list.len())?
        } else {
            0
        };
        cells.push(
            list.get(i)
                .cloned()
                .ok_or(bad("a cell refers to a value that is not there"))?,
        );
    }
    d.ms.bits(format!("{key}/same"), 1)[0] = p;
    d.ms.ints(format!("{key}/index"), 1)[0] = m;
    Ok(cells)
}

/// The table as the array of objects it was, in its original order.
pub(super) fn rows_of(t: Table) -> Result<(String, Vec<Value>), CodecError> {
    let mut stored: Vec<Option<Map<String, Value>>> = t
        .pids
        .iter()
        .map(|&p| {
            let mut m = Map::new();
            m.insert(KEY_FIELD.into(), Value::from(p));
            Some(m)
        })
        .collect();
    for c in t.cols {
        for (s, v) in c.cells.into_iter().enumerate() {
            if c.absent.get(s).copied().unwrap_or(false) {
                continue;
            }
            if let Some(Some(m)) = stored.get_mut(s) {
                m.insert(c.name.clone(), v);
            }
        }
    }
    let rows = t
        .order
        .iter()
        .map(|&s| {
            stored
                .get_mut(s)
                .and_then(Option::take)
                .map(Value::Object)
                .ok_or(bad("a bad row order"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((t.name, rows))
}
