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

mod bytes;
mod carry;
mod context;
mod decode;
mod encode;
mod models;
mod order;
mod skeleton;
mod stats;
#[cfg(test)]
mod tests;

use bytes::*;
use carry::*;
use context::*;
use decode::*;
use encode::*;
use models::*;
use order::*;
use skeleton::*;
pub(crate) use stats::stat;
use stats::tracking;
pub use stats::{stats, track_stats};

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
impl Tables {
    fn get(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.name == name)
    }
}

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
