//! The version 2 payload (before zstd): a Batch as its serde values, with every top-level
//! array of per-process rows (objects of the same fields with an integer `pid`) stored column
//! by column, rows sorted by pid, each row of a delta record matched to its process's row in
//! the key record, and every integer and flag of those columns coded against a prediction by
//! an adaptive range coder (`rc`). Whatever is not such a table (and every field this module
//! does not know) stays serde JSON, so fields added to `Batch` later round-trip without a
//! change here. docs/recording-format.md has the byte layout.
//!
//! Decoding trusts nothing: every count is checked against the bytes left or the cell budget
//! before anything is allocated, and a copy from the key is possible at most once per key row.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::collections::hash_map::Entry;

use serde_json::{Map, Number, Value};

use super::codec::CodecError;
use super::rc::{self, Bit, IntModel};
use crate::batch::Batch;

/// Most table cells (and list elements) one payload may hold: about 10,000 processes in every
/// table, with room to spare. Bounds what a small corrupt payload can make the decoder build.
pub const MAX_CELLS: usize = 1 << 20;
/// Most tables, and columns per table.
const MAX_TABLES: usize = 64;
const MAX_COLS: usize = 64;
/// Longest table or column name.
const MAX_NAME: usize = 256;
/// The field that identifies a row (a process) across records.
pub const KEY_FIELD: &str = "pid";

/// Column kinds.
const KIND_INT: u8 = 0;
const KIND_INT_LIST: u8 = 1;
const KIND_JSON: u8 = 2;

/// Integer predictions: none (0), the key record's row of the same process (or, for a row
/// new since the key, the previous row's value), or `PRED_SUM + j`: the sum of the list in
/// column `j` (an earlier integer-list column).
const PRED_NONE: u8 = 0;
const PRED_REF: u8 = 1;
const PRED_SUM: u8 = 2;

/// Row orders: as stored (by pid), by weight (the sum of some integer columns, heaviest first,
/// ties by pid: the kernel's rankings), or explicit.
const ORDER_STORED: u8 = 0;
const ORDER_WEIGHT: u8 = 1;
const ORDER_EXPLICIT: u8 = 2;

fn bad(why: &'static str) -> CodecError {
    CodecError::Columns(why)
}

/// The `n` models named `key` in `map`, grown with `fresh` ones; past `MAX_MODELS` models in
/// all (`size`), a new name gets `scratch`, fresh each time and not kept.
fn named<'a, T: Clone>(
    map: &'a mut HashMap<String, Vec<T>>,
    scratch: &'a mut Vec<T>,
    size: &mut usize,
    key: String,
    n: usize,
    fresh: T,
) -> &'a mut [T] {
    let fits = *size + n <= MAX_MODELS;
    match map.entry(key) {
        Entry::Occupied(e) => {
            let v = e.into_mut();
            if v.len() < n {
                // Growth counts toward the bound like a new name.
                let more = n - v.len();
                if *size + more > MAX_MODELS {
                    *scratch = vec![fresh; n];
                    return scratch;
                }
                *size += more;
                v.resize(n, fresh);
            }
            v
        }
        Entry::Vacant(e) if fits => {
            *size += n;
            e.insert(vec![fresh; n])
        }
        Entry::Vacant(_) => {
            *scratch = vec![fresh; n];
            scratch
        }
    }
}

/// One table, rows sorted by pid (ties in their original order).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Table {
    name: String,
    pids: Vec<u64>,
    cols: Vec<Column>,
    /// Original row `k` is stored row `order[k]`.
    order: Vec<usize>,
    /// Format 3 references: records since the row was last present (0: in the record itself).
    age: Vec<u32>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct Column {
    name: String,
    cells: Vec<Value>,
    /// Format 6: the rows that have no such field (their cell holds a stand-in: 0, an empty
    /// list or null). Empty when every row has it.
    absent: Vec<bool>,
}

/// What delta records are coded against: the key record's tables, and the rest of its
/// Batch as a JSON skeleton (every integer 0) and the integers taken out of it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Tables {
    tables: Vec<Table>,
    skeleton: Vec<u8>,
    ints: Vec<i128>,
    /// Format 3: the adaptive models as they are after this record (the next delta goes on
    /// with them; format 2 starts every record afresh).
    models: Models,
}

/// Most integer models (and bit probabilities) a format 3 chain keeps: far more than the
/// Batch has columns and contexts; past it a model is fresh each time it is used (bounds what
/// corrupt input can make a reader hold).
const MAX_MODELS: usize = 4096;

/// The adaptive models of one payload (format 2) or of a chain of records (format 3), by name
/// (`table.column/what`), each a small array of contexts.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Models {
    /// Format 3: models that learn fast, then hold still (`rc::Bit::counting`).
    counting: bool,
    ints: HashMap<String, Vec<IntModel>>,
    bits: HashMap<String, Vec<Bit>>,
    size: usize,
    scratch: Vec<IntModel>,
    scratch_bits: Vec<Bit>,
}

impl Models {
    fn new(chain: bool) -> Self {
        Self {
            counting: chain,
            ..Self::default()
        }
    }

    fn int_model(&self) -> IntModel {
        if self.counting {
            IntModel::counting()
        } else {
            IntModel::default()
        }
    }

    fn bit_model(&self) -> Bit {
        if self.counting {
            Bit::counting()
        } else {
            Bit::default()
        }
    }

    /// The `n` integer models named `key` (fresh ones past `MAX_MODELS`).
    fn ints(&mut self, key: String, n: usize) -> &mut [IntModel] {
        let fresh = self.int_model();
        named(
            &mut self.ints,
            &mut self.scratch,
            &mut self.size,
            key,
            n,
            fresh,
        )
    }

    /// The `n` bit probabilities named `key`.
    fn bits(&mut self, key: String, n: usize) -> &mut [Bit] {
        let fresh = self.bit_model();
        named(
            &mut self.bits,
            &mut self.scratch_bits,
            &mut self.size,
            key,
            n,
            fresh,
        )
    }
}

impl Tables {
    fn get(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.name == name)
    }
}

/// Take every integer out of `v` (depth first, fields in name order), leaving 0 in its place.
fn take_ints(v: &mut Value, out: &mut Vec<i128>) {
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
fn count_ints(v: &Value) -> usize {
    match v {
        Value::Number(_) => usize::from(as_int(v).is_some()),
        Value::Array(a) => a.iter().map(count_ints).sum(),
        Value::Object(m) => m.values().map(count_ints).sum(),
        _ => 0,
    }
}

/// Put integers back where `take_ints` took them.
fn put_ints(v: &mut Value, ints: &mut std::vec::IntoIter<Value>) {
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

// ---------------------------------------------------------------------------------------------
// Where the bytes go (a developer's measure, off unless `track_stats(true)`).

static TRACK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
thread_local! {
    static STATS: std::cell::RefCell<std::collections::BTreeMap<String, f64>> =
        const { std::cell::RefCell::new(std::collections::BTreeMap::new()) };
}

/// Start (or stop) measuring where the encoder's bytes go, on this thread.
pub fn track_stats(on: bool) {
    TRACK.store(on, std::sync::atomic::Ordering::Relaxed);
}

fn tracking() -> bool {
    TRACK.load(std::sync::atomic::Ordering::Relaxed)
}

/// Add `bytes` to the measure `what`.
pub(crate) fn stat(what: impl FnOnce() -> String, bytes: f64) {
    if tracking() {
        STATS.with(|s| *s.borrow_mut().entry(what()).or_default() += bytes);
    }
}

/// The measures so far, bytes summed over every payload encoded on this thread.
pub fn stats() -> Vec<(String, f64)> {
    STATS.with(|s| s.borrow().iter().map(|(k, v)| (k.clone(), *v)).collect())
}

// ---------------------------------------------------------------------------------------------
// Integers and the byte stream.

fn as_int(v: &Value) -> Option<i128> {
    match v {
        Value::Number(n) => n
            .as_u64()
            .map(i128::from)
            .or_else(|| n.as_i64().map(i128::from)),
        _ => None,
    }
}

fn int_value(x: i128) -> Result<Value, CodecError> {
    if let Ok(u) = u64::try_from(x) {
        Ok(Value::Number(Number::from(u)))
    } else if let Ok(i) = i64::try_from(x) {
        Ok(Value::Number(Number::from(i)))
    } else {
        Err(bad("an integer out of range"))
    }
}

fn int_list(v: &Value) -> Option<Vec<i128>> {
    match v {
        Value::Array(a) => a.iter().map(as_int).collect(),
        _ => None,
    }
}

/// `p` rounded to the nearest multiple of `d` (halves up); None on overflow.
fn snap(p: i128, d: i128) -> Option<i128> {
    if d == 1 {
        return Some(p);
    }
    p.checked_add(d / 2)?.div_euclid(d).checked_mul(d)
}

fn put_varint(out: &mut Vec<u8>, mut u: u128) {
    while u >= 0x80 {
        out.push((u as u8) | 0x80);
        u >>= 7;
    }
    out.push(u as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u128);
    out.extend_from_slice(s.as_bytes());
}

/// Reads the byte part of the payload, every step checked.
struct Input<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Input<'a> {
    fn left(&self) -> usize {
        self.b.len() - self.at
    }

    fn byte(&mut self) -> Result<u8, CodecError> {
        let x = *self.b.get(self.at).ok_or(bad("the payload ends early"))?;
        self.at += 1;
        Ok(x)
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        if n > self.left() {
            return Err(bad("the payload ends early"));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn varint(&mut self) -> Result<u128, CodecError> {
        let mut u = 0u128;
        for shift in (0..128).step_by(7) {
            let x = self.byte()?;
            let part = u128::from(x & 0x7f);
            if shift == 126 && part > 3 {
                return Err(bad("a varint overflows"));
            }
            u |= part << shift;
            if x & 0x80 == 0 {
                return Ok(u);
            }
        }
        Err(bad("a varint overflows"))
    }

    /// A count of at most `cap`, and of items that each take at least `min_bytes` of what
    /// is left (0: no bound from the bytes).
    fn count(&mut self, min_bytes: usize, cap: usize) -> Result<usize, CodecError> {
        let n = usize::try_from(self.varint()?).map_err(|_| bad("a count is too large"))?;
        if n > cap || (min_bytes > 0 && n > self.left() / min_bytes) {
            return Err(bad("a count is larger than the payload allows"));
        }
        Ok(n)
    }

    fn str(&mut self) -> Result<&'a str, CodecError> {
        let n = self.count(1, MAX_NAME)?;
        std::str::from_utf8(self.bytes(n)?).map_err(|_| bad("a name is not UTF-8"))
    }
}

/// Counts cells against `MAX_CELLS`.
struct Budget(usize);

impl Budget {
    fn take(&mut self, n: usize) -> Result<(), CodecError> {
        self.0 = self
            .0
            .checked_add(n)
            .filter(|&c| c <= MAX_CELLS)
            .ok_or(bad("more cells than a payload may hold"))?;
        Ok(())
    }
}

/// The two streams a payload is written to.
struct Out {
    bytes: Vec<u8>,
    rc: rc::Encoder,
    ms: Models,
    /// Format 3 and later (models carried from record to record, richer contexts).
    chain: bool,
    /// Format 4: signed integers as magnitude and adaptive sign (`rc::Encoder::signed`).
    sm: bool,
    /// Format 6: rows of a table may lack fields (each column says which rows do).
    sparse: bool,
}

impl Out {
    /// Bytes the range coder spent so far (when measured).
    fn cost(&self) -> f64 {
        self.rc.cost.unwrap_or(0.0) / 8.0
    }

    /// Format 6: which rows lack column `key`: one bit, then (when some do) a bit per row.
    fn absent(&mut self, key: &str, absent: &[bool]) {
        if !self.sparse {
            return;
        }
        let any = absent.contains(&true);
        self.rc
            .bit(&mut self.ms.bits(format!("{key}/sparse"), 1)[0], any);
        if any {
            let bits = self.ms.bits(format!("{key}/absent"), 1);
            for &a in absent {
                self.rc.bit(&mut bits[0], a);
            }
        }
    }
}

/// And read from.
struct In<'a> {
    inp: Input<'a>,
    rc: rc::Decoder<'a>,
    ms: Models,
    chain: bool,
    sm: bool,
    sparse: bool,
}

impl In<'_> {
    /// Format 6: which of `nrows` rows lack column `key` (empty: none), as `Out::absent`
    /// wrote it.
    fn absent(&mut self, key: &str, nrows: usize) -> Result<Vec<bool>, CodecError> {
        if !self.sparse {
            return Ok(Vec::new());
        }
        let any = self.ms.bits(format!("{key}/sparse"), 1);
        if !self.rc.bit(&mut any[0]) {
            return Ok(Vec::new());
        }
        let bits = self.ms.bits(format!("{key}/absent"), 1);
        let absent: Vec<bool> = (0..nrows).map(|_| self.rc.bit(&mut bits[0])).collect();
        if !absent.contains(&true) {
            return Err(bad("a sparse column with every row present"));
        }
        Ok(absent)
    }

    fn int(&mut self, m: &mut IntModel) -> Result<u128, CodecError> {
        self.rc.int(m).ok_or(bad("an integer out of range"))
    }

    /// The next integer with the first of the models named `key`.
    fn int_of(&mut self, key: String) -> Result<u128, CodecError> {
        let m = &mut self.ms.ints(key, 1)[0];
        self.rc.int(m).ok_or(bad("an integer out of range"))
    }

    fn count(&mut self, m: &mut IntModel, cap: usize) -> Result<usize, CodecError> {
        usize::try_from(self.int(m)?)
            .ok()
            .filter(|&n| n <= cap)
            .ok_or(bad("a count is larger than the payload allows"))
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding.

/// Encode `b` (a delta against `reference` when given) into `out` in format 2; returns the
/// tables, kept when this is a key record.
pub fn encode(
    b: &Batch,
    reference: Option<&Tables>,
    out: &mut Vec<u8>,
) -> Result<Tables, CodecError> {
    let v = serde_json::to_value(b).map_err(|e| CodecError::Json(e.to_string()))?;
    encode_value(v, reference, 2, out)
}

/// Encode `b` in format 3 or 4 (`version`): a key record (`prev` None) or a delta against the
/// record before (its returned tables). Returns what the next delta is coded against.
pub fn encode_chained(
    b: &Batch,
    prev: Option<Tables>,
    version: u16,
    out: &mut Vec<u8>,
) -> Result<Tables, CodecError> {
    let v = serde_json::to_value(b).map_err(|e| CodecError::Json(e.to_string()))?;
    let (prev, models) = split_models(prev);
    encode_with(v, prev.as_ref(), models, version, out)
}

/// The reference of the next record and its models, taken out (not copied: they are what the
/// next record starts from and change as it is coded).
fn split_models(prev: Option<Tables>) -> (Option<Tables>, Option<Models>) {
    match prev {
        Some(mut t) => {
            let m = std::mem::take(&mut t.models);
            (Some(t), Some(m))
        }
        None => (None, None),
    }
}

/// Encode a Batch's serde value (any JSON object) in format `version` (2, 3 or 4).
pub fn encode_value(
    v: Value,
    reference: Option<&Tables>,
    version: u16,
    out: &mut Vec<u8>,
) -> Result<Tables, CodecError> {
    encode_with(v, reference, None, version, out)
}

/// `encode_value`, starting from `models` when given instead of a copy of the reference's.
fn encode_with(
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
        ms: match (models, reference) {
            (Some(m), Some(_)) if chain => m,
            (None, Some(r)) if chain => r.models.clone(),
            _ => Models::new(chain),
        },
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

/// Integers of the skeleton with a model of their own (format 3).
const SKEL_MODELS: usize = 256;
/// Format 3: a row absent from a record stays in the reference this many records more, so a
/// process that skips an interval or a few is matched again, not coded as new.
const MAX_AGE: u32 = 16;

/// Format 3: what the next delta is coded against. The record's own tables, plus the rows of
/// the previous reference (and its tables) absent from it for at most `MAX_AGE` records, all
/// within `MAX_CELLS`. Encoder and decoder both build it from the same values.
fn carry(prev: Option<&Tables>, mut cur: Tables) -> Tables {
    let Some(prev) = prev else {
        return cur;
    };
    let mut cells: usize = cur
        .tables
        .iter()
        .map(|t| t.pids.len() * (t.cols.len() + 1))
        .sum();
    for pt in &prev.tables {
        let ti = match cur.tables.iter().position(|t| t.name == pt.name) {
            Some(i) => i,
            None => {
                if cur.tables.len() >= MAX_TABLES {
                    continue;
                }
                cur.tables.push(Table {
                    name: pt.name.clone(),
                    cols: pt
                        .cols
                        .iter()
                        .map(|c| Column {
                            name: c.name.clone(),
                            ..Column::default()
                        })
                        .collect(),
                    ..Table::default()
                });
                cur.tables.len() - 1
            }
        };
        let t = &mut cur.tables[ti];
        let per_row = t.cols.len() + 1;
        let keep: Vec<usize> = (0..pt.pids.len())
            .filter(|&j| {
                pt.age.get(j).is_some_and(|a| *a < MAX_AGE)
                    && t.pids.binary_search(&pt.pids[j]).is_err()
            })
            .collect();
        if keep.is_empty() {
            continue;
        }
        if cells + keep.len() * per_row > MAX_CELLS {
            continue;
        }
        cells += keep.len() * per_row;
        // Merge by pid (a present row first on a tie: carried pids are never present).
        let n = t.pids.len() + keep.len();
        let mut from: Vec<(u64, Option<usize>, Option<usize>)> = Vec::with_capacity(n);
        from.extend(t.pids.iter().enumerate().map(|(i, &p)| (p, Some(i), None)));
        from.extend(keep.iter().map(|&j| (pt.pids[j], None, Some(j))));
        from.sort_by_key(|x| (x.0, x.1.is_none()));
        let pcols: Vec<Option<&Column>> = t
            .cols
            .iter()
            .map(|c| pt.cols.iter().find(|x| x.name == c.name))
            .collect();
        let mut cols: Vec<Column> = t
            .cols
            .iter()
            .map(|c| Column {
                name: c.name.clone(),
                cells: Vec::with_capacity(n),
                absent: Vec::new(),
            })
            .collect();
        let mut pids = Vec::with_capacity(n);
        let mut age = Vec::with_capacity(n);
        for (pid, i, j) in from {
            pids.push(pid);
            match (i, j) {
                (Some(i), _) => {
                    age.push(0);
                    for (c, col) in cols.iter_mut().zip(&t.cols) {
                        c.cells
                            .push(col.cells.get(i).cloned().unwrap_or(Value::Null));
                    }
                }
                (None, Some(j)) => {
                    age.push(pt.age.get(j).map_or(MAX_AGE, |a| a + 1));
                    for (c, pc) in cols.iter_mut().zip(&pcols) {
                        c.cells.push(
                            pc.and_then(|pc| pc.cells.get(j))
                                .cloned()
                                .unwrap_or(Value::Null),
                        );
                    }
                }
                (None, None) => {}
            }
        }
        t.pids = pids;
        t.cols = cols;
        t.age = age;
        t.order = Vec::new();
    }
    cur
}

/// An array of objects with the same fields, one of them an integer `pid` (`sparse`, format
/// 6: objects with an integer `pid`, each with some of at most `MAX_COLS` fields).
fn is_table(v: &Value, sparse: bool) -> bool {
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
fn match_rows(pids: &[u64], refp: &[u64]) -> (Vec<Option<usize>>, Vec<bool>) {
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

fn kind_of(c: &Column) -> u8 {
    if c.cells.iter().all(|v| as_int(v).is_some()) {
        KIND_INT
    } else if c.cells.iter().all(|v| int_list(v).is_some()) {
        KIND_INT_LIST
    } else {
        KIND_JSON
    }
}

fn encode_table(
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

/// Contexts of the present bits of a reference's rows: by age, 0 (in the record before), 1, 2,
/// 3 or more (format 2 references are all of age 0).
const AGE_CTX: usize = 4;

fn age_ctx(r: &Table, j: usize) -> usize {
    r.age.get(j).map_or(0, |&a| (a as usize).min(AGE_CTX - 1))
}

/// Format 3 contexts of a list element: the bit length of the element before it in the list
/// and of the element at the same place in the reference row, each in one of `LEN_GROUPS`
/// groups (`len_group`; `LEN_NONE` when there is none). Finer groups measured no better.
const LEN_NONE: usize = 16;
const LEN_GROUPS: usize = 7;
const LIST_CTX: usize = LEN_GROUPS * LEN_GROUPS;

/// Bit lengths 0, 1-4, 5, 6-7, 8-9, 10 and more, none.
fn len_group(len: usize) -> usize {
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

fn len_ctx(y: i128) -> usize {
    (128 - y.unsigned_abs().leading_zeros() as usize).min(LEN_NONE - 1)
}

/// The context of element `i` of a list: format 2, whether the element before is non-zero;
/// format 3, see `LIST_CTX`.
fn list_ctx(chain: bool, before: Option<i128>, refl: &Option<Vec<i128>>, i: usize) -> usize {
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
fn ref_lists(
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

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The largest divisor of every value (1 when they are all zero), at most 2^64.
fn gcd_all(xs: impl Iterator<Item = i128>) -> i128 {
    let g = xs.fold(0u128, |g, x| gcd(g, x.unsigned_abs()));
    g.clamp(1, 1 << 64) as i128
}

/// Predictions of every row of an integer column.
fn predict(
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

fn encode_ints(
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

fn encode_json(
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

/// Stored rows by weight (the sum of some integer columns), heaviest first, ties by pid
/// (stored order).
fn weight_order(cols: &[&[i128]], n: usize) -> (Vec<usize>, Vec<i128>) {
    let w: Vec<i128> = (0..n).map(|s| cols.iter().map(|c| c[s]).sum()).collect();
    let mut o: Vec<usize> = (0..n).collect();
    o.sort_by_key(|&s| std::cmp::Reverse(w[s]));
    (o, w)
}

/// Runs of equal weight in a weight order, as ranges of positions (two or more rows).
fn tie_groups(o: &[usize], w: &[i128]) -> Vec<std::ops::Range<usize>> {
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

fn encode_order(o: &mut Out, name: &str, order: &[usize], cols: &[Column]) {
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

// ---------------------------------------------------------------------------------------------
// Decoding.

/// Decode a payload (a delta against `reference` when given). With `keep`, also returns the
/// tables (a key record's, for its deltas).
pub fn decode(
    bytes: &[u8],
    reference: Option<&Tables>,
    keep: bool,
) -> Result<(Batch, Option<Tables>), CodecError> {
    let (v, t) = decode_value(bytes, reference, keep, 2)?;
    let b = serde_json::from_value(v).map_err(|e| CodecError::Json(e.to_string()))?;
    Ok((b, t))
}

/// Decode a format 3 payload: a key record (`prev` None) or a delta against the tables of the
/// record before it. Returns what the next delta is coded against.
pub fn decode_chained(
    bytes: &[u8],
    prev: Option<Tables>,
    version: u16,
) -> Result<(Batch, Option<Tables>), CodecError> {
    let (prev, models) = split_models(prev);
    let (v, t) = decode_with(bytes, prev.as_ref(), models, true, version)?;
    let b = serde_json::from_value(v).map_err(|e| CodecError::Json(e.to_string()))?;
    Ok((b, t))
}

/// Decode a payload into the serde value of its Batch.
pub fn decode_value(
    bytes: &[u8],
    reference: Option<&Tables>,
    keep: bool,
    version: u16,
) -> Result<(Value, Option<Tables>), CodecError> {
    decode_with(bytes, reference, None, keep, version)
}

/// `decode_value`, starting from `models` when given instead of a copy of the reference's.
fn decode_with(
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
        ms: match (models, reference) {
            (Some(m), Some(_)) if chain => m,
            (None, Some(r)) if chain => r.models.clone(),
            _ => Models::new(chain),
        },
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

fn decode_table(
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

fn divisor(inp: &mut Input<'_>) -> Result<i128, CodecError> {
    let d = inp.varint()?;
    if d == 0 || d > 1 << 64 {
        return Err(bad("a bad divisor"));
    }
    Ok(d as i128)
}

/// `pred + d * x`, checked.
fn scaled(x: i128, d: i128, pred: i128) -> Result<i128, CodecError> {
    x.checked_mul(d)
        .and_then(|y| y.checked_add(pred))
        .ok_or(bad("an integer out of range"))
}

fn decode_json(
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

fn decode_order(
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

/// The table as the array of objects it was, in its original order.
fn rows_of(t: Table) -> Result<(String, Vec<Value>), CodecError> {
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

#[cfg(test)]
mod tests {
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
            b.procs[(k + 1) % 3].cgroup = String::new();
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
                        comm: r.5.clone(),
                        cmdline: r.5.repeat(2),
                        uid: r.4,
                        kthread: r.0 % 3 == 0,
                        // Left out of the JSON when empty: rows with and without it.
                        cgroup: if r.0 % 2 == 0 {
                            format!("/system.slice/{}.service", r.5)
                        } else {
                            String::new()
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
}
