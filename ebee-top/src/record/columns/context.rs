//! Coding contexts and divisors shared by the encoder and the decoder.

use super::*;

/// Contexts of the present bits of a reference's rows: by age, 0 (in the record before), 1, 2,
/// 3 or more (format 2 references are all of age 0).
pub(super) const AGE_CTX: usize = 4;

pub(super) fn age_ctx(r: &Table, j: usize) -> usize {
    r.age.get(j).map_or(0, |&a| (a as usize).min(AGE_CTX - 1))
}

/// Format 3 contexts of a list element: the bit length of the element before it in the list
/// and of the element at the same place in the reference row, each in one of `LEN_GROUPS`
/// groups (`len_group`; `LEN_NONE` when there is none). Finer groups measured no better.
pub(super) const LEN_NONE: usize = 16;
pub(super) const LEN_GROUPS: usize = 7;
pub(super) const LIST_CTX: usize = LEN_GROUPS * LEN_GROUPS;

/// Bit lengths 0, 1-4, 5, 6-7, 8-9, 10 and more, none.
pub(super) fn len_group(len: usize) -> usize {
    match len {
        0 => 0,
        1..=4 => 1,
        5 => 2,
        6..=7 => 3,
        8..=9 => 4,
        LEN_NONE => 6,
        _ => 5,
    }
}

pub(super) fn len_ctx(y: i128) -> usize {
    (128 - y.unsigned_abs().leading_zeros() as usize).min(LEN_NONE - 1)
}

/// The context of element `i` of a list: format 2, whether the element before is non-zero;
/// format 3, see `LIST_CTX`.
pub(super) fn list_ctx(
    chain: bool,
    before: Option<i128>,
    refl: &Option<Vec<i128>>,
    i: usize,
) -> usize {
    if !chain {
        return before.map_or(0, |b| usize::from(b != 0));
    }
    let a = before.map_or(LEN_NONE, len_ctx);
    let b = refl
        .as_ref()
        .and_then(|l| l.get(i))
        .map_or(LEN_NONE, |&y| len_ctx(y));
    len_group(a) * LEN_GROUPS + len_group(b)
}

/// Format 3: each row's reference list, divided by `d` (None for format 2).
pub(super) fn ref_lists(
    refs: &[Option<usize>],
    refc: Option<&Column>,
    d: i128,
    chain: bool,
) -> Vec<Option<Vec<i128>>> {
    refs.iter()
        .map(|r| {
            let c = refc.filter(|_| chain)?.cells.get((*r)?)?;
            Some(int_list(c)?.into_iter().map(|x| x / d).collect())
        })
        .collect()
}

pub(super) fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The largest divisor of every value (1 when they are all zero), at most 2^64.
pub(super) fn gcd_all(xs: impl Iterator<Item = i128>) -> i128 {
    let g = xs.fold(0u128, |g, x| gcd(g, x.unsigned_abs()));
    g.clamp(1, 1 << 64) as i128
}
