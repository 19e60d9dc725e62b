//! Row orders: stored, by weight (the kernel's rankings) or explicit, both ways.

use super::*;

/// Stored rows by weight (the sum of some integer columns), heaviest first, ties by pid
/// (stored order).
pub(super) fn weight_order(cols: &[&[i128]], n: usize) -> (Vec<usize>, Vec<i128>) {
    let w: Vec<i128> = (0..n).map(|s| cols.iter().map(|c| c[s]).sum()).collect();
    let mut o: Vec<usize> = (0..n).collect();
    o.sort_by_key(|&s| std::cmp::Reverse(w[s]));
    (o, w)
}

/// Runs of equal weight in a weight order, as ranges of positions (two or more rows).
pub(super) fn tie_groups(o: &[usize], w: &[i128]) -> Vec<std::ops::Range<usize>> {
    let mut g = Vec::new();
    let mut start = 0;
    for i in 1..=o.len() {
        if i == o.len() || w[o[i]] != w[o[start]] {
            if i - start > 1 {
                g.push(start..i);
            }
            start = i;
        }
    }
    g
}

pub(super) fn encode_order(o: &mut Out, name: &str, order: &[usize], cols: &[Column]) {
    if order.iter().enumerate().all(|(k, &s)| k == s) {
        o.bytes.push(ORDER_STORED);
        return;
    }
    // The kernel's rankings: heaviest first by one column or the sum of two, ties by pid;
    // rows whose weights became equal by rounding are put back in their order explicitly.
    let ints: Vec<(usize, Vec<i128>)> = cols
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let v: Option<Vec<i128>> = c.cells.iter().map(as_int).collect();
            v.map(|v| (i, v))
        })
        .take(8)
        .collect();
    let mut sets: Vec<Vec<usize>> = (0..ints.len()).map(|i| vec![i]).collect();
    for i in 0..ints.len() {
        for j in i + 1..ints.len() {
            sets.push(vec![i, j]);
        }
    }
    for set in sets {
        let cs: Vec<&[i128]> = set.iter().map(|&i| &ints[i].1[..]).collect();
        let (base, w) = weight_order(&cs, order.len());
        if !order.windows(2).all(|p| w[p[0]] >= w[p[1]]) {
            continue;
        }
        o.bytes.push(ORDER_WEIGHT);
        put_varint(&mut o.bytes, set.len() as u128);
        for i in set {
            put_varint(&mut o.bytes, ints[i].0 as u128);
        }
        let m = &mut o.ms.ints(format!("{name}/order"), 1)[0];
        for g in tie_groups(&base, &w) {
            let mut left: Vec<usize> = base[g.clone()].to_vec();
            for &s in &order[g.start..g.end - 1] {
                let i = left.iter().position(|&x| x == s).unwrap_or(0);
                o.rc.int(m, i as u128);
                left.remove(i);
            }
        }
        return;
    }
    o.bytes.push(ORDER_EXPLICIT);
    let m = &mut o.ms.ints(format!("{name}/order-x"), 1)[0];
    for &s in order {
        o.rc.int(m, s as u128);
    }
}

pub(super) fn decode_order(
    d: &mut In<'_>,
    name: &str,
    cols: &[Column],
    n: usize,
) -> Result<Vec<usize>, CodecError> {
    match d.inp.byte()? {
        ORDER_STORED => Ok((0..n).collect()),
        ORDER_WEIGHT => {
            let k = d.inp.count(1, MAX_COLS)?;
            let mut ints = Vec::with_capacity(k);
            for _ in 0..k {
                let i = d.inp.count(0, MAX_COLS)?;
                let c = cols
                    .get(i)
                    .ok_or(bad("a ranking by a column that is not there"))?;
                let v: Option<Vec<i128>> = c.cells.iter().map(as_int).collect();
                ints.push(v.ok_or(bad("a ranking by a column that is not integers"))?);
            }
            let cs: Vec<&[i128]> = ints.iter().map(|v| &v[..]).collect();
            let (mut o, w) = weight_order(&cs, n);
            let mut m = d.ms.ints(format!("{name}/order"), 1)[0].clone();
            for g in tie_groups(&o, &w) {
                let mut left: Vec<usize> = o[g.clone()].to_vec();
                for slot in &mut o[g.start..g.end - 1] {
                    let i = d.count(&mut m, left.len() - 1)?;
                    *slot = left.remove(i);
                }
                o[g.end - 1] = left.pop().ok_or(bad("a bad row order"))?;
            }
            d.ms.ints(format!("{name}/order"), 1)[0] = m;
            Ok(o)
        }
        ORDER_EXPLICIT => {
            let mut seen = vec![false; n];
            let mut o = Vec::with_capacity(n);
            let mut m = d.ms.ints(format!("{name}/order-x"), 1)[0].clone();
            for _ in 0..n {
                let s = d.count(&mut m, n)?;
                match seen.get_mut(s) {
                    Some(x) if !*x => *x = true,
                    _ => return Err(bad("a row order that is not a permutation")),
                }
                o.push(s);
            }
            d.ms.ints(format!("{name}/order-x"), 1)[0] = m;
            Ok(o)
        }
        _ => Err(bad("an unknown row order")),
    }
}
