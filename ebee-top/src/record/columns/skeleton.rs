//! A Batch's JSON without its tables: the integers taken out, and put back.

use super::*;

/// Take every integer out of `v` (depth first, fields in name order), leaving 0 in its place.
pub(super) fn take_ints(v: &mut Value, out: &mut Vec<i128>) {
    match v {
        Value::Number(_) => {
            if let Some(x) = as_int(v) {
                out.push(x);
                *v = Value::from(0u64);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| take_ints(x, out)),
        Value::Object(m) => m.values_mut().for_each(|x| take_ints(x, out)),
        _ => {}
    }
}

/// Integers in a skeleton (where `take_ints` took them).
pub(super) fn count_ints(v: &Value) -> usize {
    match v {
        Value::Number(_) => usize::from(as_int(v).is_some()),
        Value::Array(a) => a.iter().map(count_ints).sum(),
        Value::Object(m) => m.values().map(count_ints).sum(),
        _ => 0,
    }
}

/// Put integers back where `take_ints` took them.
pub(super) fn put_ints(v: &mut Value, ints: &mut std::vec::IntoIter<Value>) {
    match v {
        Value::Number(_) => {
            if as_int(v).is_some()
                && let Some(x) = ints.next()
            {
                *v = x;
            }
        }
        Value::Array(a) => a.iter_mut().for_each(|x| put_ints(x, ints)),
        Value::Object(m) => m.values_mut().for_each(|x| put_ints(x, ints)),
        _ => {}
    }
}
